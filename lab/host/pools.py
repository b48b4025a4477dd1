"""A storage pool's refresh that waits out the pool's own jobs.

libvirt refuses `virStoragePoolRefresh` while the pool runs an asynchronous job ("pool 'slurmlab' has
asynchronous jobs running"): a volume being made from another (`createXMLFrom`, a fork's save image
copy on a remote host: a few hundred MiB) or built (a qcow2 overlay). Two nodes forked at once on one
host hit it: the second fork's template check failed and it booted cold (the rehearsal of
docs/workshop.md §10, 2026-12-07). A refresh is tried again for as long as such a job may take; any
other error is raised at once.
"""

from __future__ import annotations

import time

BUSY = "asynchronous jobs running"
WAIT_S = 60.0


def refresh(pool, wait_s: float = WAIT_S, pause: float = 0.5, sleep=time.sleep, clock=time.monotonic) -> None:
    """`pool.refresh(0)`, tried again while the pool is busy with its own jobs (at most `wait_s`)."""
    import libvirt

    end = clock() + wait_s
    while True:
        try:
            pool.refresh(0)
            return
        except libvirt.libvirtError as e:
            if BUSY not in str(e.get_error_message() or e) or clock() >= end:
                raise
        sleep(pause)
