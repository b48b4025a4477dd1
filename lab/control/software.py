"""UpdateClusterSoftware: the request checked whole (nothing changed on a bad one) and recorded; the
engine rolls it out batch by batch (lab/engine/rolling.py).

The lab's "platform software" is the box: `ImageId` names one (lab/box/images.py; `default` or none:
the default box built from the current inputs). `InstanceGroups` names the groups (none: every group,
the controller's too if it has a state disk); the controller is replaced last (lab/engine/rolling.py);
`DeploymentConfig.RollingUpdatePolicy.MaximumBatchSize` is INSTANCE_COUNT or
CAPACITY_PERCENTAGE of the nodes to update (default: one at a time), `WaitIntervalInSeconds` the pause
between batches. The cluster is SystemUpdating until the update completes or is rolled back.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from lab.engine import daemon
from lab.control.operations import new_op
from lab.engine.plan import leaving
from lab.engine.rolling import UPDATE, cluster_box
from lab.control.views import get, named_group
from lab.errors import Conflict, UsageError
from lab.providers import registry
from lab.store.db import ClusterRow, Store


def update_software(st: Store, name: str, groups: list[str] | None = None, deployment: dict | None = None,
                    image_id: str | None = None, *, resolve: Callable[[str | None], str] | None = None,
                    keeps_state: Callable[[ClusterRow, str], bool] | None = None, start_engine: bool = False) -> str:
    """Record the update; returns its operation id. `resolve`: ImageId -> box name (lab.box.images);
    `keeps_state`: (cluster, controller) -> whether the controller has a state disk (the provider's answer)."""
    if resolve is None:
        from lab.box.images import resolve
    c = get(st, name)
    if any(op.kind == UPDATE for op in st.operations(name, "InProgress")):
        raise Conflict(f"cluster '{name}' is already SystemUpdating", "wait until that update ends")
    if c.status != "InService":
        raise UsageError(f"cluster '{name}' is {c.status}: a software update needs an InService cluster",
                         "wait until describe-cluster says InService")
    rows = {g.name: g for g in st.groups(name) if g.status != "Deleting"}
    controller = next((n.name for n in st.nodes(name) if rows.get(n.grp) and rows[n.grp].node_type == "Controller"), None)

    def keeps() -> bool:  # a new controller VM finds its data (docs/adr/0007)
        return controller is not None and (keeps_state or _keeps_state)(c, controller)

    if groups:
        for i, g in enumerate(groups):
            if named_group(rows, f"InstanceGroups[{i}].InstanceGroupName", g, name).node_type == "Controller" and not keeps():
                raise UsageError(f"InstanceGroups[{i}].InstanceGroupName: '{g}' is the controller's group, and "
                                 f"{controller} has no state disk (the cluster was made before slurmlab gave the "
                                 "controller one): a new controller VM would come up without /home, the accounting "
                                 "database and Slurm's state", "update the login and compute groups, or make the "
                                 "cluster again (its controller then gets a state disk)")
        chosen = list(dict.fromkeys(groups))
    else:  # every group; the controller's only if its data outlives its VM
        chosen = [g for g in rows if rows[g].node_type != "Controller" or keeps()]
    box = resolve(image_id)
    base = cluster_box(c)
    todo = [n.name for n in st.nodes(name) if n.grp in chosen and not leaving(n) and (n.image or base) != box]
    policy = ((deployment or {}).get("RollingUpdatePolicy") or {}).get("MaximumBatchSize") or {}
    size = _batch_size(policy, len(todo))
    wait = int((deployment or {}).get("WaitIntervalInSeconds") or 0)
    with st.tx():
        if any(op.kind == UPDATE for op in st.operations(name, "InProgress")):
            raise Conflict(f"cluster '{name}' is already SystemUpdating", "wait until that update ends")
        op = new_op(name, UPDATE, chosen, todo, details={
            "Image": box, "ImageId": image_id or "default", "Groups": chosen, "BatchSize": size, "Wait": wait,
            "Batch": [], "Batches": 0})
        st.add_operation(op)
        st.update_cluster(name, status="SystemUpdating")
        st.add_event(name, "Cluster", "Info", f"UpdateClusterSoftware: {len(todo)} node(s) of {', '.join(chosen)} to box "
                     f"{box}, {size} at a time (the first batch: one), {wait} s between batches"
                     + (f"; the controller {controller} last, alone" if controller in todo else ""), operation_id=op.id)
    if start_engine:
        daemon.ensure_running()
    return op.id


def _keeps_state(c: ClusterRow, node: str) -> bool:
    return registry.make(c.provider).keeps_state(c.name, node)


def _batch_size(policy: dict, nodes: int) -> int:
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
