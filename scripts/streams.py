"""Run pytest in parallel streams, each in its own process: `make test`'s way to fit CI's time (issue 43).

    python scripts/streams.py PYTEST --junit-dir artifacts [--phases FILE] NAME='ARGS' [NAME='ARGS' ...]

Each stream is `PYTEST ARGS --junitxml=<junit-dir>/junit-NAME.xml`, its output lines prefixed with
`[NAME]`. The class cluster's tests (hours of VM time in one module, one test after the other) run in one
stream, everything else in another: the VMs of one stream mostly wait on Slurm, boots and timeouts while
the other's work. Exit code: 0 when every stream passed, else the first failing stream's (pytest's 5, no
test collected, is a failure too). With --phases, a line "stream:NAME SECONDS" per stream goes there for
scripts/ci_times.py. Standard library only.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path


def _pump(name: str, proc: subprocess.Popen, lock: threading.Lock, ended: dict[str, float]) -> None:
    """Copy the stream's lines, prefixed; note when it ended (its own end, not when main() waits for it)."""
    assert proc.stdout is not None
    for line in proc.stdout:
        with lock:
            sys.stdout.write(f"[{name}] {line}")
            sys.stdout.flush()
    proc.wait()
    ended[name] = time.monotonic()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pytest", help="the pytest executable")
    ap.add_argument("--junit-dir", type=Path, required=True)
    ap.add_argument("--phases", type=Path, help="append 'stream:NAME SECONDS' lines here")
    ap.add_argument("streams", nargs="+", metavar="NAME='ARGS'")
    args = ap.parse_args(argv)
    streams = []
    for s in args.streams:
        name, sep, rest = s.partition("=")
        if not sep or not name.isidentifier():
            ap.error(f"{s!r}: give each stream as NAME='pytest arguments'")
        streams.append((name, shlex.split(rest)))
    args.junit_dir.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    ended: dict[str, float] = {}
    running = []
    for name, pargs in streams:
        cmd = [args.pytest, *pargs, f"--junitxml={args.junit_dir / f'junit-{name}.xml'}"]
        print(f"streams: [{name}] {shlex.join(cmd)}", flush=True)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                text=True, bufsize=1)
        pump = threading.Thread(target=_pump, args=(name, proc, lock, ended), daemon=True)
        pump.start()
        running.append((name, proc, pump, time.monotonic()))
    rc = 0
    for name, proc, pump, t0 in running:
        pump.join()  # it waited for the stream's process and noted its end
        code = proc.returncode
        seconds = ended[name] - t0
        print(f"streams: [{name}] exited {code} after {seconds:.0f} s", flush=True)
        if args.phases:
            with args.phases.open("a") as f:
                f.write(f"stream:{name} {seconds:.0f}\n")
        if code and not rc:
            rc = code
    return rc


if __name__ == "__main__":
    sys.exit(main())
