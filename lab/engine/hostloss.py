"""A host that disappears: its clusters' nodes become Failure and NodeRecovery rebuilds them on
another host with room (docs/adr/0010-hosts.md).

A cluster whose VMs cannot be observed is first only stale (lab/engine/sight.py): a libvirtd
restarted within a minute loses nothing. When the cluster lives on another host than this machine
and that host has not answered for `host_lost_s`, the engine gives the host up for that cluster:
the provider places the cluster on another host (`Placement.rehome`), every node gets a fresh
instance shown as Failure with the reason for `FAILURE_SHOWN_S`, then launched on the new host in
the usual order (controller first; its state disk is new there, so /home starts empty). With
NodeRecovery None the cluster stays where it is and its nodes become Failure (not replaced). With no other host that has room, the nodes stay Failure
and the engine asks again on its next tries;
a host that answers again meanwhile gets its nodes configured again. The local host is never given up: `slurmlab host up`
brings it back, and the VMs it still runs with it.
"""

from __future__ import annotations

import logging

from lab import settings
from lab.engine.bookkeeping import Records
from lab.engine.sight import Sight
from lab.engine.states import Phase, Status
from lab.engine.tasks import Tasks
from lab.providers.base import Placement, Provider, ProviderUnreachable, in_thread
from lab.store.db import ClusterRow, GroupRow, NodeRow

log = logging.getLogger(__name__)

HOST_LOST_S = settings.HOST_LOST_S.default  # the daemon's engine reads the setting (daemon.make_engine)
FAILURE_SHOWN_S = 5.0


class HostLoss:
    """Gives up a cluster's lost host (`check`, each pass the cluster cannot be observed)."""

    def __init__(self, rec: Records, sight: Sight, tasks: Tasks, host_lost_s: float = HOST_LOST_S):
        self.rec, self.sight, self.tasks = rec, sight, tasks
        self.store, self.clock = rec.store, rec.clock
        self.host_lost_s = host_lost_s  # a cluster's host silent this long is given up

    async def check(self, c: ClusterRow, prov: Provider, groups: list[GroupRow], nodes: list[NodeRow],
                               e: Exception) -> None:
        if not isinstance(e, ProviderUnreachable) or c.status == Status.DELETING:
            return
        old = prov.host_of(c.name) if isinstance(prov, Placement) else None
        if old is None or old == "local":
            return
        since = self.sight.blind_since(c.name)
        if since is None or self.clock() - since < self.host_lost_s or self.tasks.any_of(c.name):
            return
        reason = f"host {old} lost ({e})"
        if (c.spec.get("NodeRecovery") or "Automatic") != "Automatic":
            msg = f"{reason}; not replaced because NodeRecovery is None (BatchReplaceClusterNodes replaces it)"
            if any(n.phase != Phase.LOST for n in nodes if n.phase not in (Phase.REMOVING, Phase.REMOVED)):
                for n in nodes:
                    if n.phase not in (Phase.REMOVING, Phase.REMOVED):
                        self.store.update_node(c.name, n.name, phase=Phase.LOST, message=msg)
                self.store.add_event(c.name, "Cluster", "Error", f"{msg}: cluster {c.name}'s nodes stay Failure")
            return
        mem = sum(g.target_count * g.memory_mib for g in groups)
        cpus = sum(g.target_count * g.cpus for g in groups)
        new = await in_thread(c.name, prov.rehome, c.name, mem, cpus)
        if new is None:
            self._fail_in_place(c, nodes, f"{reason}; no other host has room for the cluster ({mem} MiB): "
                                          "it waits for one (slurmlab host list)")
            return
        now = self.clock()
        for n in nodes:
            if n.phase in (Phase.REMOVING, Phase.REMOVED):
                continue
            self.rec.new_instance(c.name, n, prov, f"{reason}: replaced on host {new} (NodeRecovery Automatic)")
            # a new address on the new host's network (its subnet may differ): _fill_addresses
            self.store.update_node(c.name, n.name, phase=Phase.FAILED, retry_at=now + FAILURE_SHOWN_S, address="")
            self.store.add_event(c.name, "Instance", "Error", f"{n.name}: Failure: {reason}; a new instance is "
                                 f"launched on host {new} (NodeRecovery Automatic)", grp=n.grp, node=n.name)
        self.store.update_cluster(c.name, host=new)
        self.rec.forget(c.name)  # the provider layout is written afresh on the new host
        self.store.add_event(c.name, "Cluster", "Error",
                             f"{reason}: cluster {c.name} now lives on host {new}; its nodes are launched again there")
        log.warning("cluster %s: %s; moved to host %s", c.name, reason, new)
        self.sight.forget(c)

    def _fail_in_place(self, c: ClusterRow, nodes: list[NodeRow], message: str) -> None:
        """Failure with the reason; each retry finds the host back (the VMs are configured again) or
        asks for another host again."""
        if not any(n.message == message for n in nodes):
            self.store.add_event(c.name, "Cluster", "Error", message)
        for n in nodes:
            if n.phase not in (Phase.REMOVING, Phase.REMOVED, Phase.LOST):
                self.store.update_node(c.name, n.name, phase=Phase.FAILED, retry_at=self.clock() + 30, message=message)
