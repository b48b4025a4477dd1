"""The batch node operations: BatchAddClusterNodes, BatchDeleteClusterNodes, BatchRebootClusterNodes,
BatchReplaceClusterNodes. Each writes desired state in one transaction, recorded as an operation
(lab/control/commands.py says how); the engine does the work.

Node references (`node_ids`) may be instance ids (`InstanceId` of list_nodes: `i-...`)
or logical ids (`NodeLogicalId`, the node's name); a batch answers each in the
list its kind belongs to (Successful / SuccessfulNodeLogicalIds, Failed / FailedNodeLogicalIds).
"""

from __future__ import annotations

from lab.box.releases import pinned_box
from lab.control.commands import check_open, record_targets
from lab.control.operations import new_op
from lab.control.views import get, resolve
from lab.engine import daemon
from lab.engine.bookkeeping import instance_id
from lab.engine.plan import VM_UP_PHASES, leaving, node_status
from lab.errors import Conflict
from lab.providers import registry
from lab.store.db import NodeRow, Store
class Batch:
    """Per-node outcomes of a batch request, answered in the lists of the model's response shape."""

    def __init__(self, code_key: str):
        self.code_key = code_key
        self.out: dict[str, list] = {"Successful": [], "Failed": [], "SuccessfulNodeLogicalIds": [],
                                     "FailedNodeLogicalIds": []}

    def ok(self, ref: str, logical: bool) -> None:
        self.out["SuccessfulNodeLogicalIds" if logical else "Successful"].append(ref)

    def fail(self, ref: str, logical: bool, code: str, message: str) -> None:
        if logical:
            self.out["FailedNodeLogicalIds"].append({"NodeLogicalId": ref, self.code_key: code, "Message": message})
        else:
            self.out["Failed"].append({"NodeId": ref, self.code_key: code, "Message": message})

    def result(self) -> dict:
        return {k: v for k, v in self.out.items() if v}


def add_nodes(st: Store, name: str, groups: list[dict], *, start_engine: bool = False) -> dict:
    """BatchAddClusterNodes: `groups` is NodesToAdd ({InstanceGroupName, IncrementTargetCountBy,
    InstanceTypes?, AvailabilityZones?}). Each group's target grows; the new nodes get their logical
    ids at once (Status Pending). Returns {"Successful": [NodeAdditionResult], "Failed":
    [BatchAddClusterNodesError]} (lists may be empty)."""
    from lab.spec.rules import MAX_NODES_ENV, max_nodes_per_group

    c = get(st, name)
    check_open(c, "BatchAddClusterNodes")
    cap = max_nodes_per_group()
    ok, failed, touched, added = [], [], [], []
    with st.tx():
        c = get(st, name)
        check_open(c, "BatchAddClusterNodes")
        gmap = {g.name: g for g in st.groups(name)}
        taken: dict[str, set[int]] = {}
        names = set()  # a node moved to another group keeps its name: no new node takes it
        for n in st.nodes(name):
            taken.setdefault(n.grp, set()).add(n.ordinal)
            names.add(n.name)
        targets = {}
        pins: dict[str, str | None] = {}

        def pinned(group: str) -> str | None:  # a pinned group's new nodes are made from its release's box
            if group not in pins:
                version = c.group_spec(group).get("ImageReleaseVersion")
                pins[group] = pinned_box(version, registry.releases(c.provider)) if version else None
            return pins[group]

        for item in groups:
            gname = item.get("InstanceGroupName")
            inc = item.get("IncrementTargetCountBy")
            g = gmap.get(gname)

            def fail(code: str, msg: str) -> None:
                failed.append({"InstanceGroupName": gname, "ErrorCode": code,
                               "FailedCount": inc if isinstance(inc, int) and inc > 0 else 1, "Message": msg})

            if g is None or g.status == "Deleting":
                fail("InstanceGroupNotFound", f"no instance group named '{gname}' in cluster '{name}'"
                     + (" (it is being deleted)" if g else f"; the groups are {', '.join(gmap)}"))
                continue
            if not isinstance(inc, int) or isinstance(inc, bool) or inc < 1:
                fail("InvalidInstanceGroupStatus", f"IncrementTargetCountBy must be a whole number >= 1, not {inc!r}")
                continue
            types = item.get("InstanceTypes")
            if types and g.instance_type not in types:
                fail("IncompatibleInstanceTypes", f"group '{gname}' runs {g.instance_type}, which InstanceTypes "
                     f"({', '.join(types)}) does not name")
                continue
            if g.node_type == "Controller":
                fail("InvalidInstanceGroupStatus", f"'{gname}' is the Controller group: a cluster has one controller")
                continue
            new_target = targets.get(gname, g.target_count) + inc
            if new_target > cap:
                fail("InvalidInstanceGroupStatus", f"group '{gname}' would have {new_target} nodes; the lab allows "
                     f"{cap} per group (set {MAX_NODES_ENV} to change it)")
                continue
            have = taken.setdefault(gname, set())
            o = 1
            for _ in range(inc):
                while o in have or f"{name}-{gname}-{o}" in names:
                    o += 1
                have.add(o)
                node = f"{name}-{gname}-{o}"
                st.add_node(NodeRow(cluster=name, name=node, grp=gname, ordinal=o,
                                    instance_id=instance_id(name, node), address="", mac="",
                                    phase="planned", message="added (BatchAddClusterNodes)",
                                    image=pinned(gname)))
                ok.append({"NodeLogicalId": node, "InstanceGroupName": gname, "Status": "Pending"})
                added.append(node)
            targets[gname] = new_target
            touched.append(gname)
        if touched:
            record_targets(st, c, "BatchAddClusterNodes", targets, touched, added, "BatchAddClusterNodes: " + ", ".join(
                f"{g} +{sum(1 for x in ok if x['InstanceGroupName'] == g)} (target {t})" for g, t in targets.items()))
    if start_engine:
        daemon.ensure_running()
    return {"Successful": ok, "Failed": failed}


def delete_nodes(st: Store, name: str, node_ids: list[str], *, start_engine: bool = False) -> dict:
    """BatchDeleteClusterNodes: scale-in of these nodes. Each is drained (Slurm), taken out of
    slurm.conf (one reconfigure per batch), its VM destroyed; its group's target drops by one.
    Returns Successful / Failed (instance ids) and SuccessfulNodeLogicalIds / FailedNodeLogicalIds
    ({Code: NodeIdNotFound | InvalidNodeStatus, Message, NodeId | NodeLogicalId}); empty lists left out."""
    c = get(st, name)
    check_open(c, "BatchDeleteClusterNodes")
    b = Batch("Code")
    with st.tx():
        c = get(st, name)
        check_open(c, "BatchDeleteClusterNodes")
        gmap = {g.name: g for g in st.groups(name)}
        nodes = st.nodes(name)
        targets: dict[str, int] = {}
        gone = []
        for ref in dict.fromkeys(node_ids):
            n, logical = resolve(nodes, ref)
            if n is None:
                b.fail(ref, logical, "NodeIdNotFound", f"no node '{ref}' in cluster '{name}'")
                continue
            g = gmap.get(n.grp)
            if g is not None and g.node_type == "Controller":
                b.fail(ref, logical, "InvalidNodeStatus", f"{n.name} is the Slurm controller: a cluster cannot lose "
                       "it (DeleteCluster removes everything)")
            elif leaving(n):
                b.fail(ref, logical, "InvalidNodeStatus", f"{n.name} is already being deleted")
            else:
                st.update_node(name, n.name, pending="delete")
                n.pending = "delete"
                if g is not None:
                    targets[g.name] = max(0, targets.get(g.name, g.target_count) - 1)
                gone.append(n.name)
                b.ok(ref, logical)
        if gone:
            record_targets(st, c, "BatchDeleteClusterNodes", targets, targets, gone,
                            f"BatchDeleteClusterNodes: {', '.join(gone)}")
    if start_engine:
        daemon.ensure_running()
    return b.result()


def _reboot_or_replace(st: Store, name: str, node_ids: list[str], kind: str, start_engine: bool) -> dict:
    op_name = "BatchRebootClusterNodes" if kind == "reboot" else "BatchReplaceClusterNodes"
    c = get(st, name)
    if c.status in ("Deleting", "Failed", "RollingBack"):
        raise Conflict(f"{op_name}: cluster '{name}' is {c.status}")
    b = Batch("ErrorCode")
    with st.tx():
        nodes = st.nodes(name)
        chosen = []
        for ref in dict.fromkeys(node_ids):
            n, logical = resolve(nodes, ref)
            if n is None:
                b.fail(ref, logical, "InstanceIdNotFound", f"no node '{ref}' in cluster '{name}'")
            elif leaving(n):
                b.fail(ref, logical, "InvalidInstanceStatus", f"{n.name} is being deleted")
            elif n.pending in ("reboot", "replace") or n.phase in ("rebooting", "replacing"):
                b.fail(ref, logical, "InstanceIdInUse", f"{n.name}: a reboot or replacement is already under way")
            elif not (n.phase in VM_UP_PHASES or n.phase == "lost" or (n.phase == "failed" and n.booted_at)):
                b.fail(ref, logical, "InvalidInstanceStatus", f"{n.name} has no instance yet ({node_status(n.phase)}: "
                       f"{n.message or n.phase}); the engine is still launching it")
            else:
                st.update_node(name, n.name, pending=kind)
                chosen.append(n)
                b.ok(ref, logical)
        if chosen:
            op = new_op(name, op_name, {n.grp for n in chosen}, [n.name for n in chosen])
            st.add_operation(op)
            st.add_event(name, "Cluster", "Info", f"{op_name}: {', '.join(n.name for n in chosen)}", operation_id=op.id)
    if start_engine:
        daemon.ensure_running()
    return b.result()


def reboot_nodes(st: Store, name: str, node_ids: list[str], *, start_engine: bool = False) -> dict:
    """BatchRebootClusterNodes: the VM restarts (a stopped one starts), the node is configured and
    joins again. Returns Successful / Failed ({NodeId, ErrorCode, Message}) and the logical-id lists."""
    return _reboot_or_replace(st, name, node_ids, "reboot", start_engine)


def replace_nodes(st: Store, name: str, node_ids: list[str], *, start_engine: bool = False) -> dict:
    """BatchReplaceClusterNodes: the VM is destroyed and a fresh one (new InstanceId) is created under
    the same logical name, configured and joined. Same response shape as reboot_nodes."""
    return _reboot_or_replace(st, name, node_ids, "replace", start_engine)
