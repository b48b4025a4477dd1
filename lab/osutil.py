"""Small operating-system helpers the whole lab shares: atomic writes, process-group ends,
host memory, timestamps. One copy each; nothing here imports the rest of `lab`."""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import signal
import subprocess
import tempfile
import time
from pathlib import Path


def atomic_write(path: Path, data: str | bytes, mode: int = 0o644, *, owner: tuple[int, int] | None = None) -> None:
    """Write `data` to `path` so that a reader (or a crash) sees the old file or the new one,
    never a part: a unique temp file in the same folder, fsync, chmod (and chown), rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def kill_group(pgid: int, *, grace: float = 20.0, alive=None, wait: subprocess.Popen | None = None) -> None:
    """SIGTERM a process group we started, give it `grace` seconds, then SIGKILL it.

    `wait` is the group leader's Popen (its exit ends the wait); otherwise `alive()` says
    whether any member is left (polled). Missing or foreign groups are left alone."""

    def gone(deadline: float) -> bool:
        if wait is not None:
            try:
                wait.wait(timeout=max(0.0, deadline - time.monotonic()))
                return True
            except subprocess.TimeoutExpired:
                return False
        while time.monotonic() < deadline:
            if alive is None or not alive():
                return alive is not None
            time.sleep(0.2)
        return False

    for sig, seconds in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            return
        if gone(time.monotonic() + seconds):
            return


def _stat(path: Path) -> list[str]:
    """/proc/PID/stat's fields after the command name: state, ppid, pgrp, session, ..."""
    return path.read_text().rsplit(")", 1)[1].split()


def running(pid: int) -> bool:
    """True while process `pid` runs. A zombie (ended, not yet reaped: the orphan of a SIGKILLed
    parent, where PID 1 does not reap) is not running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return _stat(Path(f"/proc/{pid}/stat"))[0] != "Z"
    except (OSError, IndexError):
        return False


def live_processes(*, pgid: int | None = None, sid: int | None = None) -> list[int]:
    """PIDs of the live (not zombie) processes of process group `pgid`, or of session `sid`."""
    index, want = (2, pgid) if pgid is not None else (3, sid)
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = _stat(stat)
            if int(fields[index]) == want and fields[0] != "Z":
                pids.append(int(stat.parent.name))
    return pids


def meminfo_mib(field: str = "MemAvailable") -> int:
    """One /proc/meminfo field in MiB (0 when absent)."""
    with contextlib.suppress(OSError), open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) // 1024
    return 0


def iso(t: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC (`+00:00`), None for None/0."""
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat() if t else None


def iso_seconds(t: float | None) -> str | None:
    """As iso(), to the second: for times in sentences a person reads."""
    return iso(int(t)) if t else None


def ms(t: float) -> int:
    """Epoch seconds in whole milliseconds, as the API writes times: filters compare these, so a time a
    client got and sends back (EventTimeAfter=an event's EventTime) is that item's time exactly."""
    return round(t * 1000)


def now_z() -> str:
    """Now, to the second, ISO 8601 with a `Z`."""
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def epoch(v) -> float | None:
    """A timestamp as epoch seconds, from what boto3, the AWS CLI and our own API send:
    a number, a numeric string, an aware or naive datetime (naive = UTC), or ISO 8601
    text with or without `Z`. None when it is none of these."""
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).timestamp()
    s = str(v).strip()
    if len(s) > 64:
        return None
    try:
        f = float(s)
        return f if math.isfinite(f) else None
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()
