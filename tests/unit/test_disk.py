"""The storage pool's disk (lab.providers.disk): a new VM refused while the pool is short, a domain
that qemu paused on ENOSPC reported as disk-full and resumed once there is room."""

from __future__ import annotations

import libvirt
import pytest

from lab.providers import disk
from lab.providers.base import DISK_FULL


class Dom:
    def __init__(self, state, reason, errors=None):
        self._state, self._reason = state, reason
        self.errors = errors if errors is not None else {"vda": libvirt.VIR_DOMAIN_DISK_ERROR_NO_SPACE}
        self.resumed = 0

    def state(self):
        return [self._state, self._reason]

    def diskErrors(self):  # noqa: N802 - libvirt's name
        return self.errors

    def resume(self):
        self.resumed += 1
        self._state = libvirt.VIR_DOMAIN_RUNNING

    def name(self):
        return "demo-compute-1"


PAUSED = (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_IOERROR)


@pytest.mark.parametrize("free,refused", [(disk.VM_DISK_MIB + disk.RESERVE_MIB, False),
                                          (disk.VM_DISK_MIB + disk.RESERVE_MIB - 1, True), (0, True)])
def test_a_new_vm_needs_its_disk_plus_the_reserve(free, refused):
    why = disk.refusal("demo-compute-3", free=lambda: free)
    assert bool(why) == refused
    if refused:
        assert why.startswith("InsufficientCapacity: the storage pool's disk has") and "fix:" in why


def test_paused_on_a_full_disk_waits_while_the_pool_is_short():
    d = Dom(*PAUSED)
    assert disk.observe(d, *d.state(), free=lambda: disk.RESERVE_MIB - 1) == DISK_FULL
    assert d.resumed == 0


def test_paused_on_a_full_disk_is_resumed_once_there_is_room():
    d = Dom(*PAUSED)
    assert disk.observe(d, *d.state(), free=lambda: disk.RESERVE_MIB) == "running"
    assert d.resumed == 1


@pytest.mark.parametrize("state,reason,errors", [
    (libvirt.VIR_DOMAIN_RUNNING, 1, None),
    (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_USER, None),  # `virsh suspend`: not ours to resume
    (libvirt.VIR_DOMAIN_PAUSED, libvirt.VIR_DOMAIN_PAUSED_IOERROR, {"vda": libvirt.VIR_DOMAIN_DISK_ERROR_UNSPEC}),
    (libvirt.VIR_DOMAIN_SHUTOFF, 1, None),
])
def test_other_states_are_not_the_disks_business(state, reason, errors):
    d = Dom(state, reason, errors)
    assert disk.observe(d, *d.state(), free=lambda: 0) is None
    assert d.resumed == 0


def test_free_space_is_read_from_the_pools_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMLAB_POOL_DIR", str(tmp_path))
    assert disk.free_mib() > 0
    assert str(tmp_path) in disk.refusal("x", free=lambda: 1)
