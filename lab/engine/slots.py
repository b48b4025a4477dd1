"""Launch slots: how many VMs of a cluster come up at once, and in which order.

Boot slots: at most `boot_slots` VMs of a cluster boot at once (phase `launching`), the rest wait for
a slot in this order: the controller (it gates everything), login nodes (they gate InService),
compute nodes. One slot per host core under software emulation (InService 100 s earlier on 2 cores,
docs/adr/0002); None: no limit (KVM).

Fork slots: a node the provider forks from a template (its group in `fork_groups`, Provider.forks)
takes a fork slot instead: a fork restores a saved VM in seconds, so the compute nodes of a scale-out
are forked several at once (issue 42, docs/adr/0022). A compute node's fork still waits while a node
that gates InService (the controller, a login node) is coming up: four forks at once on 2 cores made
the login node's fork 23 s instead of 9 and the first job 6 s later (bench/results/cluster_timeline-20261206-081556.json).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable

from lab import settings
from lab.engine.states import Phase
from lab.store.db import NodeRow

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


def boot_slots() -> dict[str, int]:
    """How many VMs of a cluster boot at once, per provider (LAUNCH_PRIORITY): under software emulation
    one per host core, so that the controller and the login node (they gate InService) get the CPU
    before the compute nodes; with KVM no limit. Measured on 2 cores (docs/adr/0002): with 2 slots
    InService came at 158 s and the first job at 277.5 s, with every VM booting at once at 258 s and
    291.2 s; full size 287.5 s either way. settings.BOOT_SLOTS overrides it (0: no limit)."""
    return _per_provider(settings.BOOT_SLOTS, lambda: max(1, os.cpu_count() or 1))


def fork_slots() -> dict[str, int]:
    """How many VMs of a cluster are forked at once, per provider. A fork restores a saved VM: seconds
    of disk reads, little CPU, so under emulation two per host core, and at most one per GiB of the
    host's memory (its reserve kept); with KVM no limit. settings.FORK_SLOTS overrides it (0: no
    limit). A fork that finds no room for its memory still waits for room as a capacity shortage does
    (lab/providers/vagrant.py ensure)."""
    from lab.host.registry import HOST_RESERVE_MIB
    from lab.osutil import meminfo_mib

    def detected() -> int:
        return max(1, min(2 * (os.cpu_count() or 1), (meminfo_mib("MemTotal") - HOST_RESERVE_MIB) // 1024))

    return _per_provider(settings.FORK_SLOTS, detected)


def _per_provider(given: settings.Setting, emulated: Callable[[], int]) -> dict[str, int]:
    """The setting's count for every real provider (a simulated VM costs no CPU); unset: no limit with
    KVM, `emulated()` without; 0: no limit."""
    from lab.host import kvm
    from lab.providers import registry

    real = [n for n in registry.names() if not registry.info(n).simulated]
    count = given.get()
    if count is None:
        count = 0 if kvm.detect().usable else emulated()
    return {n: count for n in real} if count > 0 else {}
