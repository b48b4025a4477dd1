"""The box build's processes: each command in its own process group (killed with it on any
exception, Ctrl-C included; SIGTERM'd if the builder dies), its output in build.log, and SIGTERM
during a build turned into an exception so that the work directory is torn down."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from lab.errors import CommandFailed
from lab.osutil import kill_group

class BuildLog:
    """Everything the build's commands print, kept in cache()/boxes/build.log."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        # Where run() records the session id of the running child, for cleanup_stale().
        self.session_file: Path | None = None
        self._f = open(path, "w", buffering=1)  # noqa: SIM115 (closed by close())

    def write(self, s: str) -> None:
        self._f.write(s)

    def close(self) -> None:
        self._f.close()


def env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = env.get("PATH", "/usr/bin:/bin") + ":/usr/local/sbin:/usr/sbin:/sbin"
    env["LC_ALL"] = "C.UTF-8"
    env["DEBIAN_FRONTEND"] = "noninteractive"
    return env


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the builder dies (even of SIGKILL)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run(
    cmd: list[str],
    *,
    log: BuildLog | None = None,
    input: str | None = None,
    on_line: Callable[[str], None] | None = None,
    check: bool = True,
) -> str:
    """Run a command in its own process group; on any exception (Ctrl-C too) kill the group."""
    if log:
        log.write(f"$ {' '.join(cmd)}\n")
    proc = subprocess.Popen(
        cmd,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        errors="replace",
        env=env(),
        start_new_session=True,
        preexec_fn=_die_with_parent,  # noqa: PLW1509 (only calls prctl)
    )
    lines: list[str] = []
    try:
        if log and log.session_file:
            log.session_file.write_text(f"{proc.pid}\n")
        if input is not None:
            assert proc.stdin
            proc.stdin.write(input)
            proc.stdin.close()
        assert proc.stdout
        for line in proc.stdout:
            lines.append(line)
            if log:
                log.write(line)
            if on_line:
                on_line(line.rstrip("\n"))
        code = proc.wait()
    except BaseException:
        kill_group(proc.pid, grace=20.0, wait=proc)
        raise
    out = "".join(lines)
    if check and code != 0:
        fix = f"full log: {log.path}" if log else None
        raise CommandFailed(cmd, code, out, fix)
    return out


class _Terminated(BaseException):
    """SIGTERM arrived during the build: clean up, then die of SIGTERM."""


@contextlib.contextmanager
def sigterm_raises() -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise _Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, old)
        os.kill(os.getpid(), signal.SIGTERM)  # the caller's own handler (or the default) decides
        raise KeyboardInterrupt("terminated") from None  # if that handler returned
    finally:
        signal.signal(signal.SIGTERM, old)
