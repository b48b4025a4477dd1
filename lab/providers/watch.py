"""Watching a `vagrant up`: return when the VM answers (vagrant goes on with its bookkeeping), end
it when it takes too long, or when the VM it waits for was stopped under it (vagrant-libvirt would
wait for an IP address until its boot_timeout)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from pathlib import Path

from lab.host import libvirtd
from lab.osutil import kill_group
from lab.providers.base import LaunchError

STATE_NAMES = {0: "nostate", 1: "running", 2: "blocked", 3: "paused", 4: "shutdown", 5: "shutoff", 6: "crashed", 7: "pmsuspended"}


def wait_or_ready(proc, timeout: float, ready: Callable[[], bool] | None, poll: float = 2.0,
                  clock: Callable[[], float] = time.monotonic,
                  abort: Callable[[], str | None] | None = None) -> int | None:
    """Wait for `proc`: its exit code; None as soon as `ready()` says yes while it still runs; -1 (after
    ending its process group) when `timeout` passes. When `abort()` gives a reason (the VM it waits
    for is gone), its process group is ended and LaunchError(reason) raised (transient)."""
    import subprocess

    t0 = clock()
    while True:
        try:
            return proc.wait(timeout=poll if (ready or abort) else max(0.0, timeout - (clock() - t0)))
        except subprocess.TimeoutExpired:
            pass
        if clock() - t0 >= timeout:
            end_group(proc)
            return proc.returncode if proc.returncode is not None else -1
        if ready is not None and ready():
            return None
        why = abort() if abort is not None else None
        if why:
            end_group(proc)
            raise LaunchError(why)


def domain_state(name: str, connect: Callable[[], object] | None = None) -> str | None:
    """The libvirt state of a domain ("missing" when there is none; None when libvirt cannot be asked),
    on the host `connect` opens (default: the local one)."""
    import libvirt

    try:
        conn = (connect or libvirtd.connect)()
    except libvirt.libvirtError:
        return None
    try:
        return STATE_NAMES.get(conn.lookupByName(name).state()[0], "other")
    except libvirt.libvirtError:
        return "missing"
    finally:
        with contextlib.suppress(Exception):
            conn.close()


def stopped_while_booting(name: str, state: Callable[[str], str | None] = domain_state) -> Callable[[], str | None]:
    """For `vagrant up`: a reason once the VM, seen running, is shut off, crashed or gone (destroyed
    under a boot). vagrant-libvirt would wait for its IP address until boot_timeout (600 s)."""
    seen = False

    def check() -> str | None:
        nonlocal seen
        now = state(name)
        if now == "running":
            seen = True
        elif seen and now in ("shutoff", "crashed", "missing"):
            return f"{name}: the VM stopped while it booted (domain {now}); it is launched again"
        return None

    return check


def end_group(proc) -> None:
    """SIGTERM a vagrant process group we started; SIGKILL it if it lingers."""
    kill_group(proc.pid, grace=20.0, wait=proc)


def stale_vagrants(root: Path, machine: str) -> list[int]:
    """PIDs of vagrant commands on `machine` still running in the cluster's folder `root` (each is the
    leader of its own process group: `_vagrant` starts them in a new session)."""
    want, found = str(Path(root).resolve()), []
    for d in Path("/proc").glob("[0-9]*"):
        try:
            args = (d / "cmdline").read_bytes().split(b"\0")
            if len(args) < 3 or not any(a.endswith(b"/vagrant") for a in args[:2]) or machine.encode() not in args:
                continue
            if os.readlink(d / "cwd") == want and os.getpgid(int(d.name)) == int(d.name):
                found.append(int(d.name))
        except (OSError, ValueError):
            continue
    return found
