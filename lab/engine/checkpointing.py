"""Checkpoints and restores on the engine (`CheckpointRunner`, a part of lab.engine.engine.Engine; the requests:
lab/control/checkpoints.py). A checkpoint or restore asked for has the cluster: the engine plans nothing
else for it (the VMs vanish for seconds while libvirt saves them, which the planner would take for
lost VMs) and starts it once no other task of the cluster is in flight.

A checkpoint keeps the engine's record of the cluster (its row, groups and nodes) with the provider's
VMs, so that after a restore the engine, the VMs and Slurm agree; every guest's clock is then set to
now, by the provider through the guest agents (`clocks_missed` empty), else by the configurer over ssh.
"""

from __future__ import annotations

import dataclasses
import logging

from lab.engine.backends import Backends
from lab.engine.bookkeeping import Records
from lab.engine.tasks import Tasks
from lab.providers.base import CheckpointError, Checkpoints
from lab.store.db import ClusterRow, GroupRow, NodeRow, Store

log = logging.getLogger(__name__)

CHECKPOINT, RESTORE = "Checkpoint", "RestoreCheckpoint"
KINDS = (CHECKPOINT, RESTORE)


def record_of(st: Store, name: str) -> dict:
    """The engine's rows of the cluster, as a checkpoint keeps them."""
    c, groups, nodes = st.snapshot(name)
    return {"cluster": {"status": c.status, "spec": c.spec, "in_service_at": c.in_service_at,
                        "full_size_at": c.full_size_at},
            "groups": [dataclasses.asdict(g) for g in groups], "nodes": [dataclasses.asdict(n) for n in nodes]}


def put_record(st: Store, name: str, record: dict) -> None:
    """The cluster's groups and nodes as the checkpoint has them (one transaction)."""
    with st.tx():
        st.update_cluster(name, **record["cluster"])
        keep = {g["name"] for g in record["groups"]}
        for g in st.groups(name):
            if g.name not in keep:
                st.delete_group(name, g.name)
        for g in record["groups"]:
            st.put_group(GroupRow(**g))
        st.delete_nodes(name)
        for n in record["nodes"]:
            st.add_node(NodeRow(**n))


class CheckpointRunner:
    def __init__(self, rec: Records, io: Backends, tasks: Tasks):
        self.rec, self.io, self.tasks = rec, io, tasks
        self.store, self.clock = rec.store, rec.clock

    def pending(self, c: ClusterRow) -> bool:
        """A checkpoint or restore of the cluster is asked for or under way: the engine plans nothing
        else for it this pass; it starts the task once no other task of the cluster is in flight."""
        op = next((o for o in self.rec.ops.get(c.name) or () if o.kind in KINDS), None)
        if op is None:
            return False
        if not self.tasks.keys(c.name) - {"io"}:
            self.tasks.start(c.name, "checkpoint", self._checkpoint_task(c, op))
        return True

    async def _checkpoint_task(self, c: ClusterRow, op) -> None:
        name, tag, prov = c.name, op.details["Tag"], self.io.provider_for(c)
        try:
            if not isinstance(prov, Checkpoints):
                raise CheckpointError(f"provider {c.provider} keeps no checkpoints")
            if op.kind == CHECKPOINT:
                out = await prov.checkpoint_async(name, tag, record_of(self.store, name))
                msg = (f"checkpoint {tag} taken in {out['timings'].get('total', 0)} s: {len(out['nodes'])} VM(s), "
                       f"{out['size'] / (1 << 20):.0f} MiB" + (" (simulated)" if out.get("simulated") else ""))
            else:
                out = await prov.restore_async(name, tag)
                put_record(self.store, name, out["record"])
                self.rec.dirty.add(name)  # the Vagrantfile follows the restored nodes
                conf, off = self.io.configurer_for(c), {}
                by_agents = out.get("clocks_missed") == []  # every guest agent set its clock (the provider's)
                if conf is not None and not by_agents:
                    cc, groups, nodes = self.store.snapshot(name)
                    off = await conf.set_clocks_async(conf.context(cc, groups, nodes)) or {}
                msg = (f"checkpoint {tag} restored in {out['timings'].get('total', 0)} s; clocks set"
                       + (" by the guest agents" if by_agents else "")
                       + (f" except on {', '.join(f'{k} ({v})' for k, v in sorted(off.items()))}" if off else "")
                       + (" (simulated)" if out.get("simulated") else ""))
        except Exception as e:  # noqa: BLE001 - CheckpointError and the provider's others: the operation says why
            log.exception("checkpoint %s %s", name, tag)
            self.store.finish_operation(op.id, "Failed", str(e)[:500], when=self.clock())
            self.store.add_event(name, "Cluster", "Error", f"{op.kind} {tag} failed: {e}"[:500], operation_id=op.id)
            return
        self.store.finish_operation(op.id, "Completed", msg, when=self.clock())
        self.store.add_event(name, "Cluster", "Info", msg, operation_id=op.id)
