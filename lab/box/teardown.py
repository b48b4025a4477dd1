"""Tearing a build's work directory down: unmount what is mounted below it, detach its loop
devices, stop what a killed build left running, delete it. Parsers apart, tested on recorded text."""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

from lab.errors import HostError
from lab.osutil import kill_group, live_processes

from .cache import WORK_PREFIX, boxes_dir
from .preflight import is_root
from .process import env

Progress = Callable[[str], None]


def parse_mountinfo(text: str, under: Path) -> list[str]:
    """Mount points at or below `under` in /proc/self/mountinfo text, deepest first."""
    prefix = str(under).rstrip("/")
    found = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 5:
            continue
        mp = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
        if mp == prefix or mp.startswith(prefix + "/"):
            found.add(mp)
    return sorted(found, key=lambda p: (p.count("/"), p), reverse=True)


def parse_losetup_json(text: str, under: Path) -> list[str]:
    """Loop devices in `losetup --json --list` output whose backing file lies below `under`."""
    try:
        devices = json.loads(text or "{}").get("loopdevices", [])
    except ValueError:
        return []
    prefix = str(under).rstrip("/") + "/"
    return [
        dev["name"] for dev in devices if str(dev.get("back-file") or "").removesuffix(" (deleted)").startswith(prefix)
    ]


def _mounts_under(d: Path) -> list[str]:
    try:
        return parse_mountinfo(Path("/proc/self/mountinfo").read_text(), d)
    except OSError:
        return []


def _loops_under(d: Path) -> list[str]:
    try:
        r = subprocess.run(
            ["losetup", "--json", "--list"], capture_output=True, text=True, env=env(), timeout=30, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return parse_losetup_json(r.stdout, d)


def teardown(work: Path) -> None:
    """Unmount everything under `work`, detach its loop devices, delete it. Signals wait."""
    blockable = threading.current_thread() is threading.main_thread()
    if blockable:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        for attempt in ("umount", "umount -l"):
            for mp in _mounts_under(work):
                subprocess.run([*attempt.split(), mp], capture_output=True, env=env(), check=False)
            if not _mounts_under(work):
                break
        for dev in _loops_under(work):
            subprocess.run(["losetup", "-d", dev], capture_output=True, env=env(), check=False)
        left = _mounts_under(work)
        if left:
            # Never delete across a mount point (a bind-mounted /dev would go with it).
            raise HostError(
                f"could not unmount {', '.join(left)} after a failed box build",
                f"unmount them by hand (umount -R), then delete {work}",
            )
        shutil.rmtree(work, ignore_errors=True)
    finally:
        if blockable:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _session_members(sid: int) -> list[int]:
    """PIDs of the live (not zombie) processes in session `sid`."""
    return live_processes(sid=sid)


def _stop_orphans(work: Path, progress: Progress, grace: float = 60.0) -> None:
    """Stop what a killed build left running: its child's session, if it still works in `work`.

    A SIGKILLed builder cannot kill its children; mmdebstrap then carries on (it ignores the
    SIGTERM of PR_SET_PDEATHSIG while its workers run). The session id is checked against the
    work dir in a member's command line, so a reused id never kills an unrelated process.
    """
    try:
        sid = int((work / "session").read_text().strip())
    except (OSError, ValueError):
        return
    members = _session_members(sid)
    ours = False
    for pid in members:
        with contextlib.suppress(OSError):
            if str(work).encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                ours = True
    if not ours:
        return
    progress(f"stopping {len(members)} processes left running by a killed build")
    kill_group(sid, grace=grace, alive=lambda: bool(_session_members(sid)))


def cleanup_stale(progress: Progress) -> None:
    """Tear down work directories left by killed builds. Call with the build lock held."""
    for work in sorted(boxes_dir().glob(WORK_PREFIX + "*")):
        if work.is_dir():
            progress(f"cleaning up a stale build directory {work}")
            _stop_orphans(work, progress)
            teardown(work)


def cleanup_stale_if_idle(progress: Progress) -> None:
    """Tear down leftovers of killed builds, unless a build is running (then it is its job)."""
    d = boxes_dir()
    if not is_root() or not d.is_dir() or not any(p.is_dir() for p in d.glob(WORK_PREFIX + "*")):
        return
    lock = FileLock(str(d / ".build.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return
    try:
        cleanup_stale(progress)
    finally:
        lock.release()
