"""scripts/streams.py (issue 43): pytest in parallel streams, each line prefixed, each stream's JUnit file,
and a failure (pytest's 5, no test collected, included) fails the whole run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE = """import sys, time
args = sys.argv[1:]
junit = next(a.split("=", 1)[1] for a in args if a.startswith("--junitxml="))
open(junit + ".start", "w").write(repr(time.time()))
open(junit, "w").write("<testsuites/>")
time.sleep(float(args[1]))
open(junit + ".end", "w").write(repr(time.time()))
print("ran", args[0])
sys.exit(int(args[0]))
"""


def _run(tmp_path: Path, *streams: str) -> subprocess.CompletedProcess:
    fake = tmp_path / "fake-pytest"
    fake.write_text(f"#!{sys.executable}\n{FAKE}")
    fake.chmod(0o755)
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "streams.py"), str(fake), "--junit-dir",
                           str(tmp_path / "out"), "--phases", str(tmp_path / "phases"), *streams],
                          capture_output=True, text=True, timeout=60)


def test_streams_run_at_once_each_with_its_junit_and_its_wall_time(tmp_path):
    p = _run(tmp_path, "a=0 3", "b=0 0.2")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "[a] ran 0" in p.stdout and "[b] ran 0" in p.stdout
    assert (tmp_path / "out" / "junit-a.xml").exists() and (tmp_path / "out" / "junit-b.xml").exists()
    noted = dict(line.split() for line in (tmp_path / "phases").read_text().splitlines())
    assert set(noted) == {"stream:a", "stream:b"}
    assert int(noted["stream:b"]) < int(noted["stream:a"]), f"b's time is its own end, not a's: {noted}"
    # at once: b ran while a slept (read from the clock, not a bound in seconds: the machine may be busy)
    when = {f"{x}.{e}": float((tmp_path / "out" / f"junit-{x}.xml.{e}").read_text()) for x in "ab" for e in ("start", "end")}
    assert when["b.start"] < when["a.end"] and when["a.start"] < when["b.end"], f"the streams ran one after the other: {when}"


def test_a_failing_stream_fails_the_run_and_no_test_collected_is_a_failure(tmp_path):
    p = _run(tmp_path, "a=0 0", "b=5 0")
    assert p.returncode == 5 and "streams: [b] exited 5" in p.stdout
    assert _run(tmp_path, "a=1 0", "b=0 0").returncode == 1


def test_a_stream_without_a_name_is_refused(tmp_path):
    p = _run(tmp_path, "tests/unit")
    assert p.returncode == 2 and "NAME='pytest arguments'" in p.stderr


def test_every_test_module_is_in_exactly_one_stream_of_make_test():
    """A module left out of every stream would never run in CI, and one in two would run twice at once."""
    import re

    text = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    streams = {m.group(1): m.group(2).split() for m in re.finditer(r"^STREAM_(\w+)\s*=\s*(.*)$", text, re.M)}
    assert set(streams) == {"CLASS", "REST", "API"}, streams
    paths = [p for ps in streams.values() for p in ps]
    assert len(paths) == len(set(paths)), paths
    covered = set()
    for p in paths:
        target = ROOT / p
        assert target.exists(), f"{p} is in a stream and does not exist"
        covered |= {target} if target.is_file() else set(target.glob("test_*.py"))
    modules = set((ROOT / "tests").glob("*/test_*.py"))
    assert modules - covered == set(), f"in no stream of make test: {sorted(str(m) for m in modules - covered)}"


def test_a_test_that_stops_libvirtd_waits_for_the_other_e2e_session(tmp_path, monkeypatch):
    """tests/e2e/lock.py: alone() waits while another session holds its share, and gets it once that ends."""
    import pytest

    from tests.e2e import lock

    monkeypatch.setattr(lock, "LOCK_FILE", str(tmp_path / "e2e.lock"))
    other = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                              f"fd = os.open({str(tmp_path / 'e2e.lock')!r}, os.O_RDWR | os.O_CREAT)\n"
                              "fcntl.flock(fd, fcntl.LOCK_SH); print('held', flush=True); time.sleep(4)"],
                             stdout=subprocess.PIPE, text=True)
    assert other.stdout.readline().strip() == "held"
    with lock.shared() as fd:
        with pytest.raises(AssertionError, match="another e2e session still runs"):
            with lock.alone(fd, timeout=0.5):
                pass
        with lock.alone(fd, timeout=30) as waited:
            assert other.poll() is not None and waited > 0
    other.wait()


def test_the_e2e_lock_is_let_go_when_the_e2e_package_ends_not_the_session(tmp_path):
    """A stream runs its e2e modules, then the unit tests (the Makefile's STREAM_REST): the other stream's
    tests that must run alone wait for its e2e tests only (tests/e2e/conftest.py's `e2e_session`, ADR 0029).
    A real pytest run of a package using that fixture, then a test outside it that takes the lock alone."""
    lockfile = tmp_path / "e2e.lock"
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "conftest.py").write_text(
        f"from tests.e2e import lock\nlock.LOCK_FILE = {str(lockfile)!r}\n"
        "from tests.e2e.conftest import e2e_session  # noqa: F401\n")
    (tmp_path / "pkg" / "test_vm.py").write_text(
        "import fcntl, os\n"
        "def test_holds_its_share(e2e_session):\n"
        f"    fd = os.open({str(lockfile)!r}, os.O_RDWR)\n"
        "    try:\n"
        "        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "        raise AssertionError('the share was not held')\n"
        "    except BlockingIOError:\n"
        "        pass\n")
    (tmp_path / "unit").mkdir()
    (tmp_path / "unit" / "test_after.py").write_text(
        "import fcntl, os\n"
        "def test_the_lock_is_free_again():\n"
        f"    fd = os.open({str(lockfile)!r}, os.O_RDWR)\n"
        "    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if the e2e share is still held\n")
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                        "pkg", "unit"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0 and "2 passed" in p.stdout, p.stdout + p.stderr
