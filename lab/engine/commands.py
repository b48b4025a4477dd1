"""The requests that change a cluster: create, update, delete, and the batch node operations
(BatchAdd/Delete/Reboot/ReplaceClusterNodes).

Each writes desired state into the store in one transaction, recorded as an operation that
DescribeCluster's ActiveOperations shows until the engine sees it done, and, when asked, makes sure
the engine process runs; the engine does the work.

Node references (`node_ids`) may be instance ids (`InstanceId` of list_nodes: `i-...`)
or logical ids (`NodeLogicalId`, the node's name); a batch answers each in the
list its kind belongs to (Successful / SuccessfulNodeLogicalIds, Failed / FailedNodeLogicalIds).
"""

from __future__ import annotations

import copy
import json
import time
from dataclasses import asdict

from lab.engine import daemon
from lab.engine.bookkeeping import instance_id
from lab.engine.operations import new_op, scaling_of
from lab.engine.plan import VM_UP_PHASES, leaving, node_status
from lab.engine.views import arn, get, resolve
from lab.errors import Conflict, UsageError
from lab.store.db import ClusterRow, GroupRow, NodeRow, OperationRow, Store

MAX_CLUSTERS = 249  # the lab gives each cluster its own /24 network: 10.x.<1..249>
PROVIDERS = ("vagrant", "sim")


class NameTaken(Conflict):
    """CreateCluster: a cluster of that name exists."""


class ClusterLimit(Conflict):
    """CreateCluster: the lab holds MAX_CLUSTERS clusters already (one network index each)."""


def _continuous(c: ClusterRow) -> bool:
    return c.spec.get("NodeProvisioningMode") == "Continuous"


def _check_open(c: ClusterRow, op: str) -> None:
    """Continuous mode: operations overlap (Creating, InService or Updating). Legacy: one at a time."""
    allowed = ("Creating", "InService", "Updating") if _continuous(c) else ("InService",)
    if c.status not in allowed:
        if _continuous(c) or c.status in ("Deleting", "Failed", "RollingBack"):
            fix = "wait for it" if c.status in ("RollingBack",) else "create a new cluster"
        else:
            fix = ("without NodeProvisioningMode Continuous (the legacy mode) one operation runs at a time: wait until "
                   "the cluster is InService, or UpdateCluster with NodeProvisioningMode: Continuous first")
        raise Conflict(f"{op}: cluster '{c.name}' is {c.status}", fix)


def _sync_counts(spec: dict, targets: dict[str, int]) -> dict:
    """The stored spec with InstanceCount following the groups' targets (batch operations change them)."""
    spec = copy.deepcopy(spec)
    for g in spec.get("InstanceGroups", []):
        if g.get("InstanceGroupName") in targets:
            g["InstanceCount"] = targets[g["InstanceGroupName"]]
            if g.get("MinInstanceCount", 0) > g["InstanceCount"]:
                g["MinInstanceCount"] = g["InstanceCount"]
    return spec


def _group_rows(cluster: str, spec) -> tuple[dict, list[GroupRow]]:
    """The stored spec (lifecycle folders absolute) and a GroupRow per instance group."""
    from lab.spec.catalog import load_catalog

    catalog = load_catalog()
    stored = spec.to_dict()
    rows = []
    for g, raw in zip(spec.InstanceGroups, stored["InstanceGroups"]):
        size = catalog.size(g.instance_type)
        if g.lifecycle_dir:  # resolved against the spec's folder at load time: keep the absolute path
            raw["LifeCycleConfig"]["SourceS3Uri"] = str(g.lifecycle_dir)
        rows.append(GroupRow(cluster=cluster, name=g.name, instance_type=g.instance_type,
                             node_type=g.node_type, target_count=g.InstanceCount,
                             partitions=[g.partition_name] if g.partition_name else [],
                             cpus=size.vcpus, memory_mib=size.memory_mib, status="Creating"))
    return stored, rows


def _record_targets(st: Store, c: ClusterRow, kind: str, targets: dict[str, int], groups, nodes,
                    description: str) -> None:
    """A batch that moved group targets: the groups' and the spec's counts, its operation, its event."""
    before = {g.name: g.target_count for g in st.groups(c.name)}
    for gname, t in targets.items():
        st.update_group(c.name, gname, target_count=t)
    spec = _sync_counts(c.spec, targets)
    st.update_cluster(c.name, spec=spec)
    op = new_op(c.name, kind, groups, nodes,
                 scaling=scaling_of(st, c.name, {g: (before.get(g, 0), t) for g, t in targets.items()}, c.spec, spec))
    st.add_operation(op)
    st.add_event(c.name, "Cluster", "Info", description, operation_id=op.id)


# ------------------------------------------------------------------------------------ clusters
def check_new(st: Store, name: str) -> None:
    """A cluster named `name` may be created now: raises NameTaken or ClusterLimit (both Conflict)."""
    if st.cluster(name):
        raise NameTaken(f"a cluster named '{name}' already exists",
                        f"pick another ClusterName, or delete it first: slurmlab delete-cluster {name}")
    if len(st.clusters()) >= MAX_CLUSTERS:
        raise ClusterLimit(f"the lab holds at most {MAX_CLUSTERS} clusters", "delete one first")


def create(st: Store, spec, provider: str = "vagrant", start_engine: bool = True, cluster_arn: str | None = None) -> ClusterRow:
    """Record a new cluster (status Creating) from a validated ClusterSpec; the engine builds it with
    `provider` ("vagrant": real VMs; "sim": simulated ones). Raises UsageError (provider),
    NameTaken or ClusterLimit."""
    if provider not in PROVIDERS:
        raise UsageError(f"unknown provider '{provider}'", "use vagrant (real VMs) or sim (simulated VMs)")
    check_new(st, spec.name)
    stored, groups = _group_rows(spec.name, spec)
    users = (stored.get("Lab") or {}).get("Users")
    if users and "Password" in users:  # it goes to the accounts file (0600), not into the store
        stored["Lab"]["Users"] = {k: v for k, v in users.items() if k != "Password"}
    with st.tx():
        check_new(st, spec.name)  # again inside the transaction: another process may have won the race
        used = {c.net_index for c in st.clusters()}
        net_index = next(i for i in range(1, MAX_CLUSTERS + 1) if i not in used)
        row = ClusterRow(name=spec.name, arn=cluster_arn or arn(spec.name), status="Creating", failure_message=None, spec=stored,
                         provider=provider, net_index=net_index, created_at=time.time())
        st.add_cluster(row, groups)
        if spec.users:  # in the transaction: written only for a cluster that is recorded, before the engine sees it
            from lab import users as accounts

            accounts.create(spec.name, spec.users)
        op = new_op(spec.name, "CreateCluster", [g.name for g in groups],
                     scaling=scaling_of(st, spec.name, {g.name: (0, g.target_count) for g in groups}, None, stored))
        st.add_operation(op)
        st.add_event(spec.name, "Cluster", "Info", f"cluster {spec.name} requested"
                     + (" (simulated: provider sim)" if provider == "sim" else "") + ": "
                     + ", ".join(f"{g.name} {g.target_count}x {g.instance_type}" for g in groups), operation_id=op.id)
    if start_engine:
        daemon.ensure_running()
    return row


def delete(st: Store, name: str, start_engine: bool = True) -> None:
    with st.tx():
        c = get(st, name)
        if c.status != "Deleting":
            st.update_cluster(name, status="Deleting")
            st.add_event(name, "Cluster", "Info", f"cluster {name} is Deleting")
    if start_engine:
        daemon.ensure_running()


def update(st: Store, name: str, request: dict, *, base_dir=None, check_files: bool = True,
           start_engine: bool = False) -> dict:
    """UpdateCluster: `request` is the body as boto3 sends it (InstanceGroups with full specs: changed
    counts or new groups; InstanceGroupsToDelete; NodeRecovery; NodeProvisioningMode; ...).
    Returns {"ClusterArn"}. Raises SpecError (bad request), Conflict (cluster busy or in the wrong
    status, group still being deleted), NotFound."""
    from lab.spec import apply_update, spec_from_request

    deletes = list(request.get("InstanceGroupsToDelete") or [])
    # Read, check and write in one transaction: a change made by another process between the read
    # and the write (a CLI batch-add-cluster-nodes while the API updates) would otherwise be undone.
    with st.tx():
        c = get(st, name)  # the request is checked first (ValidationException before ConflictException)
        old_spec = spec_from_request(c.spec, check_files=False)
        new_spec = apply_update(old_spec, request, base_dir=base_dir, check_files=check_files)
        stored, new_rows = _group_rows(name, new_spec)
        _check_open(c, "UpdateCluster")
        old = {g.name: g for g in st.groups(name)}
        changes, touched = [], []
        for row in new_rows:
            prev = old.get(row.name)
            if prev is None:
                st.put_group(row)
                changes.append(f"group {row.name} added ({row.target_count}x {row.instance_type})")
                touched.append(row.name)
            elif prev.status == "Deleting":
                raise Conflict(f"UpdateCluster: instance group '{row.name}' is still being deleted",
                               "wait until DescribeCluster no longer lists it, or use another name")
            else:
                vals = {}
                if prev.target_count != row.target_count:
                    vals["target_count"] = row.target_count
                    changes.append(f"group {row.name} {prev.target_count} -> {row.target_count}")
                    touched.append(row.name)
                if prev.partitions != row.partitions:
                    vals["partitions"] = json.dumps(row.partitions)
                if vals:
                    st.update_group(name, row.name, **vals)
        for gname in deletes:
            st.update_group(name, gname, status="Deleting", target_count=0)
            changes.append(f"group {gname} deleted")
            touched.append(gname)
        vals = {"spec": stored}
        op = None
        if touched:
            if c.status != "Creating":
                vals["status"] = "Updating"
            vals["failure_message"] = None
            new_targets = {r.name: r.target_count for r in new_rows}
            now = {g: (old[g].target_count if g in old else 0, 0 if g in deletes else new_targets[g]) for g in touched}
            op = new_op(name, "UpdateCluster", touched,
                         undo={"spec": c.spec, "groups": [asdict(g) for g in old.values()]},
                         scaling=scaling_of(st, name, now, c.spec, stored))
            st.add_operation(op)
        st.update_cluster(name, **vals)
        for k in ("NodeRecovery", "NodeProvisioningMode"):
            if k in request and request[k] != c.spec.get(k):
                changes.append(f"{k} {c.spec.get(k) or '(absent)'} -> {request[k]}")
        st.add_event(name, "Cluster", "Info", f"UpdateCluster: {'; '.join(changes) or 'no change'}",
                     operation_id=op.id if op else None)
    if start_engine:
        daemon.ensure_running()
    return {"ClusterArn": c.arn}


# ------------------------------------------------------------------------------------ nodes
class _Batch:
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
    _check_open(c, "BatchAddClusterNodes")
    cap = max_nodes_per_group()
    ok, failed, touched, added = [], [], [], []
    with st.tx():
        c = get(st, name)
        _check_open(c, "BatchAddClusterNodes")
        gmap = {g.name: g for g in st.groups(name)}
        taken: dict[str, set[int]] = {}
        names = set()  # a node moved to another group keeps its name: no new node takes it
        for n in st.nodes(name):
            taken.setdefault(n.grp, set()).add(n.ordinal)
            names.add(n.name)
        targets = {}
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
                                    phase="planned", message="added (BatchAddClusterNodes)"))
                ok.append({"NodeLogicalId": node, "InstanceGroupName": gname, "Status": "Pending"})
                added.append(node)
            targets[gname] = new_target
            touched.append(gname)
        if touched:
            _record_targets(st, c, "BatchAddClusterNodes", targets, touched, added, "BatchAddClusterNodes: " + ", ".join(
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
    _check_open(c, "BatchDeleteClusterNodes")
    b = _Batch("Code")
    with st.tx():
        c = get(st, name)
        _check_open(c, "BatchDeleteClusterNodes")
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
            _record_targets(st, c, "BatchDeleteClusterNodes", targets, targets, gone,
                            f"BatchDeleteClusterNodes: {', '.join(gone)}")
    if start_engine:
        daemon.ensure_running()
    return b.result()


def _reboot_or_replace(st: Store, name: str, node_ids: list[str], kind: str, start_engine: bool) -> dict:
    op_name = "BatchRebootClusterNodes" if kind == "reboot" else "BatchReplaceClusterNodes"
    c = get(st, name)
    if c.status in ("Deleting", "Failed", "RollingBack"):
        raise Conflict(f"{op_name}: cluster '{name}' is {c.status}")
    b = _Batch("ErrorCode")
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
