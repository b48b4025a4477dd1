"""`slurmlab verify`: the testinfra suite in lab/verify/suite, run with pytest against an inventory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from lab import settings

SUITE = Path(__file__).resolve().parent / "suite"


def command(inventory: Path, junit: Path | None = None, extra_args=()) -> list[str]:
    """The pytest command line for `inventory` (see docs/verify.md)."""
    cmd = [
        sys.executable, "-m", "pytest", str(SUITE),
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


def run(inventory: Path, junit: Path | None = None, extra_args=(), ssh_executable: str | None = None) -> int:
    """Run the suite; pytest's exit code (0: every check passed, 1: some failed, 5: none collected).
    With `ssh_executable` the commands go over ssh (`ssh_environment`), else through Ansible."""
    env = ssh_environment(ssh_executable) if ssh_executable else None
    return subprocess.run(command(inventory, junit, extra_args), check=False, env=env).returncode
