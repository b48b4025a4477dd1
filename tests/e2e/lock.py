"""`make test` runs the e2e modules in two pytest processes at once (scripts/streams.py): their clusters,
lab homes and engines are their own, but libvirtd is the machine's. Every e2e session holds a shared lock
on LOCK_FILE while it runs; a test that must run alone (it stops libvirtd, or load breaks it: the `alone`
fixture in tests/e2e/conftest.py) takes the lock exclusively, which waits until no other session runs (in
CI: until the other stream is over)."""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

LOCK_FILE = f"/tmp/slurmlab-e2e-{os.getuid()}.lock"


@contextmanager
def shared() -> Iterator[int]:
    fd = os.open(LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        yield fd
    finally:
        os.close(fd)


@contextmanager
def alone(fd: int, timeout: float) -> Iterator[float]:
    """The lock held by this session (`fd`, from shared()) made exclusive, waiting up to `timeout` s for
    the other sessions to end; yields the seconds waited. Shared again afterwards."""
    t0 = time.monotonic()
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() - t0 >= timeout:
                fcntl.flock(fd, fcntl.LOCK_SH)
                raise AssertionError(f"another e2e session still runs after {timeout:.0f} s ({LOCK_FILE} is "
                                     "held): this test stops libvirtd, which every session's VMs need") from None
            time.sleep(min(5.0, max(0.05, timeout - (time.monotonic() - t0))))
    try:
        yield time.monotonic() - t0
    finally:
        fcntl.flock(fd, fcntl.LOCK_SH)
