"""MoveClusterNodes within one cluster: a Running node goes to another instance group of the same
node type and instance type, and keeps its VM (name, InstanceId, address).

`move_nodes` checks the request and, for each node it accepts, writes the node into the target
group at once (`grp`) with the mark `pending = detach`, and moves one from the source group's target
count to the target group's (an operation of the lab, not listed: HyperPod's operation types are
Scaling and DeepHealthCheck). The engine then
1. detaches (status DetachInProgress): the node is drained, its jobs end, slurmd stops, it leaves
   slurm.conf (leave.yml, one reconfigure), the same batch rule as a scale-in;
2. attaches (status AttachInProgress, `pending = attach`): the node is configured again as a member
   of its new group (nodes.yml: its partitions, its lifecycle script) and joins Slurm with the new
   group's partitions (join.yml, one reconfigure). No other node restarts.

HyperPod also moves nodes between clusters; in the lab each cluster has its own network (a VM
cannot keep its address in another one), so a target cluster other than the source is refused.
"""

from __future__ import annotations

from lab.engine import daemon
from lab.control.batches import Batch
from lab.control.commands import record_targets
from lab.engine.plan import is_continuous, node_status
from lab.control.views import get, named_group, resolve
from lab.errors import UsageError
from lab.store.db import Store

DETACH, ATTACH = "detach", "attach"


def move_nodes(st: Store, name: str, source_group: str, target_group: str, *, target_cluster: str | None = None,
               node_ids: list[str] = (), logical_ids: list[str] = (), count: int | None = None,
               start_engine: bool = False) -> dict:
    """Returns Successful / Failed (instance ids) or SuccessfulNodeLogicalIds / FailedNodeLogicalIds
    ({Code: NodeIdNotFound | InvalidNodeStatus | NodeIdInUse | NodeInstanceTypeMismatch, Message})."""
    if target_cluster not in (None, name):
        raise UsageError(f"TargetClusterArn: the lab moves nodes within one cluster ('{name}'), not to "
                         f"'{target_cluster}': each cluster has its own network and a moved VM keeps its address",
                         "name the source cluster as the target too")
    if sum(1 for x in (node_ids, logical_ids, count) if x) != 1:
        raise UsageError("give exactly one of NodeIds, NodeLogicalIds or InstanceCount", "e.g. NodeLogicalIds: [NAME-compute-2]")
    if target_group == source_group:
        raise UsageError(f"TargetInstanceGroupName: '{target_group}' is the source group itself",
                         "name another instance group of the cluster")
    b = Batch("Code")
    with st.tx():
        c = get(st, name)
        if c.status != "InService" or not is_continuous(c):
            raise UsageError(f"cluster '{name}' is {c.status}{'' if is_continuous(c) else ' in the legacy mode'}: "
                             "a node moves only in an InService cluster with NodeProvisioningMode Continuous",
                             "wait until it is InService (UpdateCluster sets NodeProvisioningMode)")
        groups = {g.name: g for g in st.groups(name) if g.status != "Deleting"}
        src = named_group(groups, "SourceInstanceGroupName", source_group, name)
        dst = named_group(groups, "TargetInstanceGroupName", target_group, name)
        if src.node_type == "Controller" or src.node_type != dst.node_type:
            raise UsageError(f"TargetInstanceGroupName: a {src.node_type} node cannot move to '{target_group}' "
                             f"({dst.node_type} nodes)", "move compute nodes between compute groups, login between login")
        nodes = st.nodes(name)

        def movable(n) -> str | None:
            if n.phase != "running" or n.pending:
                return f"{n.name} is {node_status(n.phase, n.pending)} ({n.pending or n.message or n.phase}): only a Running node moves"
            return None

        chosen = []
        if count:
            if src.instance_type != dst.instance_type:
                raise UsageError(f"TargetInstanceGroupName: '{target_group}' runs {dst.instance_type}, '{source_group}' "
                                 f"{src.instance_type}: a node keeps its instance (NodeInstanceTypeMismatch)",
                                 "move to a group of the same instance type")
            ok = sorted((n for n in nodes if n.grp == source_group and movable(n) is None), key=lambda n: -n.ordinal)
            if len(ok) < count:
                raise UsageError(f"InstanceCount: {count} asked, {len(ok)} node(s) of '{source_group}' can move "
                                 "(Running, nothing else under way); nothing moved", "ask for fewer")
            chosen = ok[:count]
            for n in chosen:
                b.ok(n.instance_id, False)
        for ref, logical in [(x, False) for x in dict.fromkeys(node_ids)] + [(x, True) for x in dict.fromkeys(logical_ids)]:
            n, _ = resolve(nodes, ref)
            why = movable(n) if n is not None else None
            if n is None or (n.grp != source_group and n.pending not in (DETACH, ATTACH)):
                b.fail(ref, logical, "NodeIdNotFound", f"no node '{ref}' in instance group '{source_group}' of cluster '{name}'")
            elif src.instance_type != dst.instance_type:
                b.fail(ref, logical, "NodeInstanceTypeMismatch", f"{n.name} is a {src.instance_type}; instance group "
                       f"'{target_group}' runs {dst.instance_type}")
            elif n.pending in (DETACH, ATTACH):
                b.fail(ref, logical, "NodeIdInUse", f"{n.name} is already moving")
            elif why:
                b.fail(ref, logical, "InvalidNodeStatus", why)
            elif n not in chosen:
                chosen.append(n)
                b.ok(ref, logical)
        floor = src.target_count - len(chosen)
        low = next((g.get("MinInstanceCount") for g in c.spec.get("InstanceGroups", [])
                    if g.get("InstanceGroupName") == source_group), None) or 0
        if chosen and floor < low:
            raise UsageError(f"moving {len(chosen)} node(s) would leave '{source_group}' with {floor}, under its "
                             f"MinInstanceCount {low}; nothing moved", "move fewer, or lower MinInstanceCount first")
        for n in chosen:
            st.update_node(name, n.name, grp=target_group, pending=DETACH, message=f"DetachInProgress: moving from "
                           f"{source_group} to {target_group}")
        if chosen:
            record_targets(st, c, "MoveClusterNodes", {source_group: floor, target_group: dst.target_count + len(chosen)},
                            [source_group, target_group], [n.name for n in chosen],
                            f"MoveClusterNodes: {', '.join(n.name for n in chosen)} from {source_group} to {target_group}")
    if start_engine:
        daemon.ensure_running()
    return b.result()
