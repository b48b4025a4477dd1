"""UpdateClusterSoftware on the engine: a rolling replacement of nodes with another box, batch by batch.
`Rollout`, a part of lab.engine.engine.Engine; quick store writes on the engine's loop, once a pass.

The operation's details (written by lab/control/software.py, then here) carry the plan: `Image` (the
box), `BatchSize`, `Wait` (s between batches), `Groups`, and the run's state: `Batch` (the nodes of
the batch in flight), `Targets` (node -> the box it goes to in this batch), `Previous` (node -> the
box it had), `Checks` / `Checked` (the health check of a replaced batch), `Failed`, `RollingBack`,
`DoneAt`, `Batches`. A batch:
1. its nodes are marked `pending = update` (status SystemUpdating); the planner drains them out of
   Slurm in one `detach` task (running jobs end first: the leave playbook waits for them);
2. each VM is replaced with the box (`pending = replace`, `nodes.image`), launched, configured and
   joined as any node (new InstanceId);
3. once all run, an InstanceStress check runs on them (the deep health check machinery);
4. passed: the batch is done; the next one starts `Wait` seconds later. Failed: the batch rolls back
   to the boxes it had (the same steps) and the operation ends Failed; the cluster is InService again.
The first batch is one node whatever the batch size: it brings the new box into the storage pool
(vagrant-libvirt uploads a box on its first `vagrant up`; later launches clone it, never racing it).
The controller goes last, alone, once every other node is done: it is no Slurm node, so step 1 is a
clean shutdown instead of a drain, and its state disk (/home, /fsx, slurmctld's state, the accounting
database) moves to the new VM (docs/adr/0007). Running jobs go on meanwhile; Slurm's commands wait.
"""

from __future__ import annotations

import math

from lab.engine.plan import HEALTH_ASKED, HEALTH_CHECKING, UPDATE_DRAIN, failed_for_good, leaving
from lab.engine.bookkeeping import Records
from lab.errors import UsageError
from lab.engine.states import Phase, Status
from lab.store.db import ClusterRow, GroupRow, NodeRow

UPDATE = "UpdateClusterSoftware"
AUTOPATCH = "AutoPatch"  # lab/engine/patching.py: its nodes take the same node step


def cluster_box(c: ClusterRow) -> str:
    from lab.box import DEFAULT_BOX

    return (c.spec.get("Lab") or {}).get("Box") or DEFAULT_BOX


def on_target(n, base: str, box: str, version: str | None) -> bool:
    """The node already runs the update's target: the same release when both are known, else the same box."""
    if version and n.release:
        return n.release == version
    return (n.image or base) == box


def target_of(d: dict, group: str) -> tuple[str, str | None]:
    """(box, release) an update's details send the group's nodes to (per group since issue 32)."""
    return (d.get("Images") or {}).get(group, d["Image"]), (d.get("Releases") or {}).get(group)


class Rollout:
    def __init__(self, rec: Records):
        self.rec = rec
        self.store, self.clock = rec.store, rec.clock

    def op(self, cluster: str):
        return next((op for op in self.store.operations(cluster, "InProgress") if op.kind == UPDATE), None)

    def targets(self, cluster: str) -> dict[str, str]:
        """node -> the box it goes to, for the nodes an update or an auto-patch (lab/engine/patching.py) takes."""
        out: dict[str, str] = {}
        for op in self.store.operations(cluster, "InProgress"):
            if op.kind in (UPDATE, AUTOPATCH):
                out.update((op.details or {}).get("Targets") or {})
        return out

    def checked(self, cluster: str, op_id: str, node: str, failures: list[str]) -> None:
        """The health check of a replaced node (step 3): the result goes into the operation."""
        op = self.op(cluster)
        n = self.store.node(cluster, node)
        if op is None or op.id != op_id or n is None or n.pending != HEALTH_CHECKING:
            return  # something else took the node over meanwhile (a delete, a reboot): as _health_result
        d = dict(op.details)
        if failures:
            d["Failed"] = {**(d.get("Failed") or {}), node: "; ".join(failures)[:300]}
            self.store.add_event(cluster, "Instance", "Error", f"{node}: failed its health check on box "
                                 f"{d['Image']}: {d['Failed'][node]}", grp=n.grp, node=node, operation_id=op_id)
        else:
            self.store.add_event(cluster, "Instance", "Info", f"{node}: passed its health check on box {n.image}",
                                 grp=n.grp, node=node, operation_id=op_id)
        self.store.set_operation_details(op_id, d)
        self.store.update_node(cluster, node, pending=None, message="")

    def step(self, c: ClusterRow, gmap: dict[str, GroupRow], nodes: list[NodeRow]) -> None:
        if not any(o.kind == UPDATE for o in self.rec.ops.get(c.name) or ()):  # this pass's InProgress operations
            return
        op = self.op(c.name)  # read again: the health-check task may have written its details
        if op is None or c.status == Status.DELETING:
            return
        d, now, name = dict(op.details), self.clock(), c.name
        by = {n.name: n for n in nodes}
        batch = [x for x in d.get("Batch") or [] if x in by]
        if batch:
            targets = d.get("Targets") or {}
            stuck = [x for x in batch if failed_for_good(by[x])]
            if stuck:  # a launch that cannot succeed (the box is gone?): no rollback possible, stop here
                self._software_done(c, op.id, "Failed", f"{', '.join(stuck)} could not be replaced: {by[stuck[0]].message}")
                return
            if not all(by[x].phase == Phase.RUNNING and not by[x].pending and by[x].image == targets.get(x) for x in batch):
                return  # drained, replaced, launched, configured, joined: not yet
            if not d.get("RollingBack") and not d.get("Checked"):
                d["Checks"], d["Checked"] = {x: ["InstanceStress"] for x in batch}, True
                self.store.set_operation_details(op.id, d)
                for x in batch:
                    self.store.update_node(name, x, pending=HEALTH_ASKED, message=f"checking the node on box {d['Image']}")
                return
            if d.get("Failed") and not d.get("RollingBack"):
                d.update(RollingBack=True, Targets={x: (d.get("Previous") or {}).get(x) for x in batch})
                self.store.set_operation_details(op.id, d)
                self._mark(name, list(batch), "SystemUpdating: rolling back to box {} (a node failed its check)",
                           d["Targets"])
                self.store.add_event(name, "Cluster", "Error", f"UpdateClusterSoftware: {', '.join(sorted(d['Failed']))} "
                                     f"failed the health check on {d['Image']}; rolling the batch back and stopping",
                                     operation_id=op.id)
                return
            d.update(Batch=[], Checks={}, Checked=False, DoneAt=now, Batches=d.get("Batches", 0) + 1)
            self.store.set_operation_details(op.id, d)
            if d.get("RollingBack"):
                self._software_done(c, op.id, "Failed", f"rolled back: {', '.join(sorted(d['Failed']))} failed the "
                                    f"health check on box {d['Image']}")
                return
            self.store.add_event(name, "Cluster", "Info", f"UpdateClusterSoftware: batch {d['Batches']} done on box "
                                 f"{d['Image']}: {', '.join(batch)}", operation_id=op.id)
            return
        base = cluster_box(c)
        todo, last = [], []  # the controller is replaced last, alone
        for n in sorted(nodes, key=lambda n: (d["Groups"].index(n.grp) if n.grp in d["Groups"] else 99, n.ordinal)):
            if (n.grp in d["Groups"] and gmap.get(n.grp) and not leaving(n)
                    and not on_target(n, base, *target_of(d, n.grp))):
                (last if gmap[n.grp].node_type == "Controller" else todo).append(n)
        if not todo and not last:
            self._software_done(c, op.id, "Completed", "")
            return
        if now < (d.get("DoneAt") or 0) + (d.get("Wait") or 0):
            return  # WaitIntervalInSeconds after the last batch
        ready = [n for n in todo or last if n.phase == Phase.RUNNING and not n.pending]
        if not ready:
            return  # the nodes left to update are busy (a reboot, a failure): wait for them
        take = ready[: (d["BatchSize"] if d.get("Batches") and todo else 1)]
        d.update(Batch=[n.name for n in take], Targets={n.name: target_of(d, n.grp)[0] for n in take}, Failed={},
                 Previous={**(d.get("Previous") or {}), **{n.name: n.image or base for n in take}})
        self.store.set_operation_details(op.id, d)
        self._mark(name, d["Batch"], "SystemUpdating: draining before its VM is replaced with box {}", d["Targets"])
        self.store.add_event(name, "Cluster", "Info", f"UpdateClusterSoftware: batch {d.get('Batches', 0) + 1}: "
                             f"{', '.join(d['Batch'])} to box {d['Image']}" + ("" if todo else
                             " (the controller, last: Slurm's commands wait until it is back; running jobs go on)"),
                             operation_id=op.id)

    def _mark(self, cluster: str, names: list[str], message: str, targets: dict[str, str]) -> None:
        """Other nodes leave Slurm first (UPDATE_DRAIN); the controller is no Slurm node: its VM is replaced
        at once (a clean shutdown first; its state disk goes to the new VM: docs/adr/0007)."""
        with self.store.tx():
            for x in names:
                n = self.store.node(cluster, x)
                if n is not None and self.rec.group(cluster, n.grp).node_type == "Controller":
                    self.store.update_node(cluster, x, pending="replace", image=targets.get(x),
                                           message=f"SystemUpdating: its VM is replaced with box {targets.get(x)}; "
                                                   "/home, /fsx, Slurm's state and accounting stay on its state disk")
                    self.rec.dirty.add(cluster)  # its new box goes into the Vagrantfile before the launch
                else:
                    self.store.update_node(cluster, x, pending=UPDATE_DRAIN, message=message.format(targets.get(x)))

    def _software_done(self, c: ClusterRow, op_id: str, status: str, message: str) -> None:
        self.store.finish_operation(op_id, status, message, when=self.clock())
        self.store.update_cluster(c.name, status=Status.IN_SERVICE)
        level = "Info" if status == "Completed" else "Error"
        self.store.add_event(c.name, "Cluster", level, f"UpdateClusterSoftware {status.lower()}"
                             + (f": {message}" if message else "") + f"; cluster {c.name} is InService", operation_id=op_id)


def deployment_batch(deployment: dict | None, nodes: int) -> int:
    """The batch a DeploymentConfig gives `nodes` nodes where no request is there to refuse (a schedule, an
    auto-patch): batch_size, an INSTANCE_COUNT above the nodes (or a bad policy) meaning all of them."""
    policy = (((deployment or {}).get("RollingUpdatePolicy") or {}).get("MaximumBatchSize")) or {}
    try:
        return batch_size(policy, nodes)
    except UsageError:
        return nodes


def update_details(images: dict[str, str], versions: dict[str, str], node_groups: dict[str, str], size: int,
                   wait: int, trigger: str, image_id: str = "default", base: str | None = None) -> dict:
    """An UpdateClusterSoftware operation's details as the Rollout reads them: `images` / `versions` per
    group, `node_groups` the nodes to update (node -> group), `base` the box when no group is updated."""
    return {"Image": next(iter(images.values()), base), "Images": images, "ImageId": image_id, "Groups": list(images),
            "BatchSize": size, "Wait": wait, "Batch": [], "Batches": 0, "Trigger": trigger, "Releases": versions,
            "NodeReleases": {x: versions[g] for x, g in node_groups.items() if g in versions}}


def batch_size(policy: dict, nodes: int) -> int:
    if not policy:
        return 1
    kind, value = policy.get("Type"), policy.get("Value")
    where = "DeploymentConfig.RollingUpdatePolicy.MaximumBatchSize"
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"{where}.Value: {value!r} must be a whole number >= 1", "e.g. {Type: INSTANCE_COUNT, Value: 1}")
    if kind == "CAPACITY_PERCENTAGE":
        if value > 100:
            raise UsageError(f"{where}.Value: {value}% is above 100%", "give a percentage from 1 to 100")
        return max(1, math.ceil(nodes * value / 100))
    if kind != "INSTANCE_COUNT":
        raise UsageError(f"{where}.Type: {kind!r} is not INSTANCE_COUNT or CAPACITY_PERCENTAGE", "use one of them")
    if nodes and value > nodes:
        raise UsageError(f"{where}.Value: {value} is above the {nodes} node(s) to update", f"give 1 to {nodes}")
    return value
