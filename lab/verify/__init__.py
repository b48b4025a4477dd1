"""`slurmlab verify`: the testinfra suite in lab/verify/suite, run with pytest against an inventory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab import settings

SUITE = Path(__file__).resolve().parent / "suite"
FIXTURES = "lab.verify.suite.fixtures"  # the suite's fixtures as a plugin: they serve --tests folders too
TEST_FILES = ("test_*.py", "*_test.py")  # pytest's default python_files
_SKIPPED = {"venv", "node_modules", "build", "dist", "__pycache__"}  # most of pytest's norecursedirs


def _test_files(folder: Path) -> list[str]:
    """The test files pytest would collect in `folder`, as paths relative to it (their node ids)."""
    names = set()
    for pattern in TEST_FILES:
        for f in folder.rglob(pattern):
            rel = f.relative_to(folder)
            if f.is_file() and not any(d.startswith(".") or d in _SKIPPED for d in rel.parts[:-1]):
                names.add(rel.as_posix())
    return sorted(names)


def user_tests(paths) -> list[Path]:
    """The folders of a user's own checks (`--tests`), resolved. UsageError, before anything runs,
    for a path that is not a folder, a folder without test files, or a test file whose node id
    (its path inside the folder: pytest's for a path outside the suite's rootdir) is the suite's
    or another folder's."""
    from lab.errors import UsageError

    example = "e.g. --tests examples/verify-tests (docs/verify.md, 'Your own checks')"
    seen = {name: f"the built-in suite's {SUITE / name}" for name in _test_files(SUITE)}
    found = []
    for raw in paths:
        p = Path(raw).expanduser()
        if not p.exists():
            raise UsageError(f"--tests {raw}: no such folder ({p.absolute()})",
                             f"give the folder of your test_*.py files, {example}")
        if not p.is_dir():
            raise UsageError(f"--tests {raw}: not a folder", f"give the folder that holds it, {example}")
        p = p.resolve()
        names = _test_files(p)
        if not names:
            raise UsageError(f"--tests {raw}: no test_*.py or *_test.py file in {p}",
                             f"write your checks there as test_*.py files of test_* functions, {example}")
        for name in names:
            if name in seen:
                raise UsageError(f"--tests {raw}: {p / name} would be reported as {name}, like {seen[name]}",
                                 "rename your file (e.g. test_site.py), so that each check keeps its own name")
            seen[name] = str(p / name)
        found.append(p)
    return found


def command(inventory: Path, junit: Path | None = None, extra_args=(), tests=()) -> list[str]:
    """The pytest command line for `inventory`: the suite, then the folders of `tests` (a user's own
    checks, `user_tests`), all with the suite's fixtures (the plugin FIXTURES; docs/verify.md)."""
    cmd = [
        sys.executable, "-m", "pytest", str(SUITE), *(str(Path(t).resolve()) for t in tests),
        "-p", FIXTURES,
        f"--ansible-inventory={Path(inventory).resolve()}",
        "--hosts=ansible://all",
        "--force-ansible",
        "-p", "no:cacheprovider",
        "-o", "addopts=",
        f"--rootdir={SUITE}",
        "-v", "-rfE", "--tb=short",
    ]
    if junit is not None:
        cmd.append(f"--junitxml={Path(junit).resolve()}")
    return cmd + list(extra_args)


def ssh_environment(ssh_executable: str) -> dict[str, str]:
    """The environment that makes the suite run its commands over plain ssh (testinfra's ssh
    backend) instead of one Ansible module per command: `ssh_executable` (slurmlab's wrapper that
    enters the lab's network namespace) first on PATH as `ssh`, one multiplexed connection per
    node. Under emulation a check then costs ~0.3 s instead of ~5 s."""
    import os
    import tempfile

    exe = Path(ssh_executable)
    folder = exe.parent
    if exe.name != "ssh":  # the wrapper must be found as `ssh`: a folder with a link of that name
        folder = Path(tempfile.mkdtemp(prefix="slurmlab-verify-ssh-"))
        (folder / "ssh").symlink_to(exe)
    env = dict(os.environ)
    env["PATH"] = f"{folder}:{env.get('PATH', '/usr/bin:/bin')}"
    env[settings.VERIFY_BACKEND.name] = "ssh"
    env["ANSIBLE_SSH_EXTRA_ARGS"] = (
        "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR -o BatchMode=yes "
        f"-o ControlMaster=auto -o ControlPersist=120s -o ControlPath=/tmp/slurmlab-verify-{os.getuid()}-{exe.name}-%C"
    )
    return env


def run(inventory: Path, junit: Path | None = None, extra_args=(), ssh_executable: str | None = None,
        tests=()) -> int:
    """Run the suite (and the checks in `tests`); pytest's exit code (0: every check passed, 1: some
    failed, 5: none collected). With `ssh_executable` the commands go over ssh (`ssh_environment`),
    else through Ansible."""
    env = ssh_environment(ssh_executable) if ssh_executable else None
    return subprocess.run(command(inventory, junit, extra_args, tests), check=False, env=env).returncode
