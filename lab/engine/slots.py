"""Launch slots: how many VMs of a cluster come up at once, and in which order, counted per host.

Boot slots: at most `boot_slots` VMs of a cluster boot at once (phase `launching`), the rest wait for
a slot in this order: the controller (it gates everything), login nodes (they gate InService),
compute nodes. One slot per core of the cluster's host under software emulation (InService 100 s
earlier on 2 cores, docs/adr/0002); None: no limit (KVM).

Fork slots: a node the provider forks from a template (its group in `fork_groups`, Provider.forks)
takes a fork slot instead: a fork restores a saved VM in seconds, so the compute nodes of a scale-out
are forked several at once (issue 42, docs/adr/0022). A compute node's fork still waits while a node
that gates InService (the controller, a login node) is coming up: four forks at once on 2 cores made
the login node's fork 23 s instead of 9 and the first job 6 s later (bench/results/cluster_timeline-20261206-081556.json).

Per host (issue 47): the counts come from the cores and memory of the host the cluster lives on, as
its libvirt reports them (`conn.getInfo()`), and from the domain type the lab's VMs get there
(lab.host.caps.domain_type: a remote host's own libvirt, never this machine's /dev/kvm). `HostSlots`
asks each host once per engine and keeps the answer; the engine asks it per cluster
(Tuning.host_slots, lab/engine/daemon.py make_engine).
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from lab import settings
from lab.engine.states import Phase
from lab.host.registry import LOCAL
from lab.store.db import NodeRow

log = logging.getLogger(__name__)
LAUNCH_PRIORITY = {"Controller": 0, "Login": 1, "Compute": 2}


class Slots:
    """The free slots of one cluster in one pass: cold boots and forks apart (None: no limit)."""

    def __init__(self, nodes: Iterable[NodeRow], boot_slots: int | None, fork_slots: int | None,
                 fork_groups: frozenset[str] | set[str], gating: frozenset[str] | set[str] = frozenset()) -> None:
        """`gating`: the groups whose nodes gate InService (controller, login)."""
        self.fork_groups, self.gating = fork_groups, gating
        launching = [n for n in nodes if n.phase == Phase.LAUNCHING]
        booting = Counter(n.grp in fork_groups for n in launching)
        self.free = {fork: None if slots is None else max(0, slots - booting[fork])
                     for fork, slots in ((False, boot_slots), (True, fork_slots))}
        self.gate_launching = any(n.grp in gating for n in launching)

    def forked(self, n: NodeRow) -> bool:
        return n.grp in self.fork_groups

    def full(self, n: NodeRow) -> bool:
        free = self.free[self.forked(n)]
        if self.forked(n) and n.grp not in self.gating and self.gate_launching:
            return True  # a compute node's fork waits for the nodes that gate InService
        return free is not None and free <= 0

    def take(self, n: NodeRow) -> None:
        if self.free[self.forked(n)] is not None:
            self.free[self.forked(n)] -= 1
        self.gate_launching |= n.grp in self.gating


@dataclass(frozen=True)
class HostSize:
    """What a host's slots are counted from: its cores, its memory (MiB), whether its VMs run with KVM."""

    cpus: int
    memory_mib: int
    kvm: bool


def slots_of(size: HostSize) -> tuple[int | None, int | None]:
    """(boot, fork) slots of a host of this size (None: no limit). Boots: under software emulation one
    per host core, so that the controller and the login node (they gate InService) get the CPU before
    the compute nodes; measured on 2 cores (docs/adr/0002): with 2 slots InService came at 158 s and
    the first job at 277.5 s, with every VM booting at once at 258 s and 291.2 s; full size 287.5 s
    either way. Forks restore a saved VM: seconds of disk reads, little CPU, so two per host core, and
    at most one per GiB of the host's memory (its reserve kept). With KVM no limit to either. A fork
    that finds no room for its memory still waits for room as a capacity shortage does
    (lab/providers/vagrant.py ensure). settings.BOOT_SLOTS and FORK_SLOTS override each (0: no limit)."""
    from lab.host.registry import HOST_RESERVE_MIB

    boot = None if size.kvm else max(1, size.cpus)
    fork = None if size.kvm else max(1, min(2 * size.cpus, (size.memory_mib - HOST_RESERVE_MIB) // 1024))
    return _given(settings.BOOT_SLOTS, boot), _given(settings.FORK_SLOTS, fork)


def _given(setting: settings.Setting, detected: int | None) -> int | None:
    count = setting.get()
    return detected if count is None else (count or None)


def this_machine() -> HostSize:
    """This machine's cores, memory and /dev/kvm."""
    from lab.host import kvm
    from lab.osutil import meminfo_mib

    return HostSize(max(1, os.cpu_count() or 1), meminfo_mib("MemTotal"), kvm.detect().usable)


def probe(name: str) -> HostSize:
    """Host `name`'s cores and memory from its libvirt ([model, memory MiB, cpus, ...] of getInfo) and
    the domain type its VMs get (lab.host.caps.domain_type, as lab/providers/hostside.py)."""
    from lab.host import registry
    from lab.host.caps import domain_type

    host = registry.get(name)
    conn = host.connect()
    try:
        info = conn.getInfo()
        return HostSize(max(1, int(info[2])), int(info[1]), domain_type(host, conn) == "kvm")
    finally:
        conn.close()


class HostSlots:
    """`(provider name, host name or None for local) -> (boot slots, fork slots)` of a cluster, None: no
    limit (Tuning.host_slots). Both settings given: theirs, no host asked. A simulated provider's VMs
    cost no CPU: (None, None). Otherwise the host's own size (`probe`), asked once and kept for the
    engine's life; a host that does not answer counts as this machine (said once) and is asked again
    the next time: a failure is never kept."""

    def __init__(self, ask: Callable[[str], HostSize] = probe, here: Callable[[], HostSize] = this_machine) -> None:
        """`ask`: a host's size by its name (`probe`); `here`: this machine's (`this_machine`)."""
        self._ask, self._here = ask, here
        self._known: dict[str, HostSize] = {}
        self._silent: set[str] = set()  # hosts whose silence was logged (until they answer)

    def __call__(self, provider: str, host: str | None) -> tuple[int | None, int | None]:
        from lab.providers import registry

        if registry.info(provider).simulated:
            return None, None
        given = settings.BOOT_SLOTS.get(), settings.FORK_SLOTS.get()
        if None not in given:
            return given[0] or None, given[1] or None
        return slots_of(self.size(host or LOCAL))

    def size(self, name: str) -> HostSize:
        """Host `name`'s size: kept, else asked now (kept when it answers), else this machine's."""
        if name in self._known:
            return self._known[name]
        try:
            got = self._ask(name)
        except Exception as e:  # noqa: BLE001 - a silent host: this machine's numbers until it answers
            if name not in self._silent:
                self._silent.add(name)
                log.warning("host %s did not say its cores and memory (%s): its boot and fork slots are this "
                            "machine's until it does", name, e)
            return self._fallback(name)
        self._silent.discard(name)
        self._known[name] = got
        return got

    def _fallback(self, name: str) -> HostSize:
        """This machine's cores and memory; for a remote host KVM only when its entry or SLURMLAB_DRIVER
        says so (this machine's /dev/kvm says nothing of it)."""
        here = self._here()
        if name == LOCAL:
            return here
        from lab.host import registry

        try:
            host = registry.get(name)
        except Exception:  # noqa: BLE001 - a host gone from the list: nothing says KVM
            host = None
        if host is not None and not host.remote:
            return here  # its VMs run on this machine (a simulated host)
        return replace(here, kvm=((host.driver if host else None) or settings.DRIVER.get()) == "kvm")


def boot_slots() -> dict[str, int]:
    """This machine's boot slots (`slots_of(this_machine())`) per real provider; absent: no limit
    (bench/cluster_timeline.py, whose clusters live here)."""
    return _per_provider(slots_of(this_machine())[0])


def fork_slots() -> dict[str, int]:
    """This machine's fork slots per real provider, as `boot_slots`."""
    return _per_provider(slots_of(this_machine())[1])


def _per_provider(count: int | None) -> dict[str, int]:
    """The count for every real provider (a simulated VM costs no CPU); None: no limit."""
    from lab.providers import registry

    return {n: count for n in registry.names() if not registry.info(n).simulated} if count else {}
