"""The storage pool's disk: refuse a VM that would not fit, and resume VMs that qemu paused when it filled.

A VM's disk is a qcow2 overlay on the box's volume; it grows in the pool's folder as the guest writes.
When that filesystem is full, qemu pauses the guest (its default `werror=enospc`) instead of failing its
writes: nothing is lost, and `virsh resume` goes on where it stopped once there is room again. So:

- a new VM is refused while the pool has less than `VM_DISK_MIB + RESERVE_MIB` free, with
  InsufficientCapacity and the fix; the engine retries it like any capacity shortage;
- a domain paused on "no space" is reported as `disk-full` (never as lost: replacing it would throw
  its work away) until the pool has `RESERVE_MIB` free, then resumed.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from lab import paths
from lab.host import pools
from lab.providers.base import DISK_FULL

log = logging.getLogger(__name__)

VM_DISK_MIB = 1024  # room for a new VM: its overlay is ~20-30 MiB once joined; the rest is for logs and job files
RESERVE_MIB = 512  # kept free for the VMs that run already


def free_mib(path=None) -> int:
    st = os.statvfs(path or paths.pool_dir())
    return st.f_bavail * st.f_frsize >> 20


def pool_free_mib(host) -> int:
    """What the host's pool has free, as its libvirt says (a remote host's disk is not this machine's)."""
    conn = host.connect()
    try:
        pool = conn.storagePoolLookupByName(host.pool)
        pools.refresh(pool)
        return pool.info()[3] >> 20
    finally:
        conn.close()


def refusal(name: str, free: Callable[[], int] = free_mib, host=None) -> str | None:
    """Why a new VM `name` may not be created now (None: it fits). On a remote `host`, its pool is asked."""
    remote = host is not None and host.remote
    have = pool_free_mib(host) if remote else free()
    if have >= VM_DISK_MIB + RESERVE_MIB:
        return None
    where = f"pool {host.pool} on host {host.name}" if remote else paths.pool_dir()
    return (f"InsufficientCapacity: the storage pool's disk has {have} MiB free ({where}); {name} needs "
            f"{VM_DISK_MIB} MiB plus {RESERVE_MIB} MiB kept for the running VMs; fix: free space on that disk "
            "(the lab retries by itself)")


def paused_for_space(dom, state: int, reason: int) -> bool:
    """qemu paused this domain (its `dom.state()` is state, reason) because a disk write found no space."""
    import libvirt

    if state != libvirt.VIR_DOMAIN_PAUSED or reason != libvirt.VIR_DOMAIN_PAUSED_IOERROR:
        return False
    try:
        return libvirt.VIR_DOMAIN_DISK_ERROR_NO_SPACE in dom.diskErrors().values()
    except libvirt.libvirtError:
        return True  # paused on an I/O error; the pool's space decides below all the same


def observe(dom, state: int, reason: int, free: Callable[[], int] = free_mib) -> str | None:
    """`disk-full` for a domain paused on ENOSPC while the pool is short; "running" once it was resumed;
    None when the domain was not paused for space. `state, reason`: its `dom.state()`, read once."""
    import libvirt

    if not paused_for_space(dom, state, reason):
        return None
    have = free()
    if have < RESERVE_MIB:
        return DISK_FULL
    try:
        dom.resume()
    except libvirt.libvirtError as e:
        log.warning("%s: paused on a full disk; resuming it failed: %s", dom.name(), e.get_error_message())
        return DISK_FULL
    log.info("%s: resumed (qemu had paused it on a full disk; the pool has %d MiB free now)", dom.name(), have)
    return "running"


def message(free: Callable[[], int] = free_mib) -> str:
    return (f"the storage pool's disk has {free()} MiB free ({paths.pool_dir()}); the VM resumes by itself "
            f"once {RESERVE_MIB} MiB are free; fix: free space on that disk")
