"""CPU priority for a VM's qemu process: the controller boots first when every VM boots at once.

Continuous provisioning launches every VM of a cluster together, but the cluster is InService only
once the controller serves, so the controller's qemu gets a higher CPU weight (a lower nice value:
-5 is about three times the weight of 0 under Linux's scheduler) while the others compete. Nice
values work with or without libvirt's cgroup support; qemu's threads are reniced one by one (Linux
keeps a nice value per thread, and threads qemu starts later inherit it from their creator).
docs/adr/0002-provisioning-pipeline.md has the measurements.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

from lab import settings

log = logging.getLogger(__name__)

# $SLURMLAB_CONTROLLER_NICE overrides it (0: no priority; bench/cluster_timeline.py compares both).
CONTROLLER_NICE = settings.CONTROLLER_NICE.default


def controller_nice() -> int:
    return settings.CONTROLLER_NICE.get()
PID_DIR = Path("/run/libvirt/qemu")


def qemu_pid(domain: str, pid_dir: Path = PID_DIR) -> int | None:
    """The pid of the domain's running qemu (libvirt's pid file), or None."""
    try:
        pid = int((pid_dir / f"{domain}.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if Path(f"/proc/{pid}").exists() else None


def renice(pid: int, nice: int) -> int:
    """Set `nice` on every thread of `pid`; returns how many threads took it."""
    done = 0
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return 0
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, nice)
            done += 1
        except OSError:
            pass
    # With the kernel's autogroup scheduling (sched_autogroup_enabled=1, Debian's default) a nice
    # value only weighs inside the process's session; each qemu has a session of its own, so the
    # weight between VMs is the autogroup's nice (measured: without it the controller kept 47 %
    # of a core like the three other booting VMs; with it, 106 %).
    try:
        Path(f"/proc/{pid}/autogroup").write_text(f"{nice}\n")
    except OSError:
        pass
    return done


def favor_when_started(domain: str, nice: int | None = None, timeout: float = 600, poll: float = 0.5,
                       pid_dir: Path = PID_DIR) -> threading.Thread:
    """In a daemon thread: wait for the domain's qemu to start, renice it, and renice it again a
    few seconds later (threads started while booting)."""

    nice = controller_nice() if nice is None else nice

    def run() -> None:
        if nice == 0:
            return
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            pid = qemu_pid(domain, pid_dir)
            if pid:
                n = renice(pid, nice)
                time.sleep(5)
                n = max(n, renice(pid, nice))
                log.info("qemu of %s (pid %d): nice %d on %d thread(s)", domain, pid, nice, n)
                return
            time.sleep(poll)

    t = threading.Thread(target=run, name=f"favor-{domain}", daemon=True)
    t.start()
    return t
