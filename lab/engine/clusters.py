"""The operations the CLI and the API call: create, update, describe, list nodes, batch node
operations, events, delete, wait.

They write desired state into the store (each request one transaction, recorded as an operation
that DescribeCluster's ActiveOperations shows until the engine sees it done) and, when asked, make
sure the engine process runs; the engine does the work. Shapes follow HyperPod's responses
(botocore's SageMaker service model): DescribeCluster, ListClusterNodes, DescribeClusterNode,
BatchAdd/Delete/Reboot/ReplaceClusterNodes, ListClusterEvents, DescribeClusterEvent.

Node references (`node_ids`) may be instance ids (`InstanceId` of list_nodes: `i-...`, `i-sim-...`
for simulated nodes) or logical ids (`NodeLogicalId`, the node's name); a batch answers each in the
list its kind belongs to (Successful / SuccessfulNodeLogicalIds, Failed / FailedNodeLogicalIds).
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import time
import uuid
import zlib
from collections.abc import Callable
from dataclasses import asdict

from lab.engine import daemon
from lab.engine.engine import SCALING, id_prefix, instance_id
from lab.engine.plan import VM_UP_PHASES, group_settled, leaving, node_status
from lab.errors import Conflict, NotFound, UsageError
from lab.store.db import ClusterRow, EventRow, GroupRow, NodeRow, OperationRow, Store

REGION = "us-east-1"
ACCOUNT = "000000000000"
LEVELS = {"Info": "Info", "Warning": "Warn", "Warn": "Warn", "Error": "Error"}
SIM_LABEL = "simulated instance (provider sim: no VM, no Slurm inside)"


def arn(name: str) -> str:
    """cluster/<12 hex> as the model's ClusterArn pattern wants (cluster/[a-z0-9]{12})."""
    import hashlib

    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{hashlib.sha256(name.encode()).hexdigest()[:12]}"


def _ts(t: float | None):
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat() if t else None


def _epoch(v) -> float | None:
    if v is None or isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, dt.datetime):
        return (v if v.tzinfo else v.replace(tzinfo=dt.timezone.utc)).timestamp()
    try:
        return float(v)
    except (TypeError, ValueError):
        pass
    t = dt.datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


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


def _new_op(cluster: str, kind: str, groups, nodes=(), undo: dict | None = None) -> OperationRow:
    return OperationRow(id=str(uuid.uuid4()), cluster=cluster, kind=kind, groups=sorted(set(groups)),
                        nodes=list(nodes), status="InProgress", created_at=time.time(), undo=undo)


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


# ------------------------------------------------------------------------------------ clusters
def create(st: Store, spec, provider: str = "vagrant", start_engine: bool = True) -> ClusterRow:
    """Record a new cluster (status Creating) from a validated ClusterSpec; the engine builds it with
    `provider` ("vagrant": real VMs; "sim": simulated ones)."""
    if provider not in ("vagrant", "sim"):
        raise UsageError(f"unknown provider '{provider}'", "use vagrant (real VMs) or sim (simulated VMs)")
    if st.cluster(spec.name):
        raise Conflict(f"a cluster named '{spec.name}' already exists",
                       f"pick another ClusterName, or delete it first: slurmlab delete-cluster {spec.name}")
    stored, groups = _group_rows(spec.name, spec)
    users = (stored.get("Lab") or {}).get("Users")
    if users and "Password" in users:  # it goes to the accounts file (0600), not into the store
        stored["Lab"]["Users"] = {k: v for k, v in users.items() if k != "Password"}
    with st.tx():
        used = {c.net_index for c in st.clusters()}
        net_index = next(i for i in range(1, 250) if i not in used)
        row = ClusterRow(name=spec.name, arn=arn(spec.name), status="Creating", failure_message=None, spec=stored,
                         provider=provider, net_index=net_index, created_at=time.time())
        st.add_cluster(row, groups)
        if spec.users:  # in the transaction: written only for a cluster that is recorded, before the engine sees it
            from lab import users as accounts

            accounts.create(spec.name, spec.users)
        op = _new_op(spec.name, "CreateCluster", [g.name for g in groups])
        st.add_operation(op)
        st.add_event(spec.name, "Cluster", "Info", f"cluster {spec.name} requested"
                     + (" (simulated: provider sim)" if provider == "sim" else "") + ": "
                     + ", ".join(f"{g.name} {g.target_count}x {g.instance_type}" for g in groups), operation_id=op.id)
    if start_engine:
        daemon.ensure_running()
    return row


def get(st: Store, name: str) -> ClusterRow:
    c = st.cluster(name)
    if c is None:
        raise NotFound(f"no cluster named '{name}'", "list them with: slurmlab list-clusters")
    return c


def delete(st: Store, name: str, start_engine: bool = True) -> None:
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

    c = get(st, name)
    _check_open(c, "UpdateCluster")
    old_spec = spec_from_request(c.spec, check_files=False)
    new_spec = apply_update(old_spec, request, base_dir=base_dir, check_files=check_files)
    stored, new_rows = _group_rows(name, new_spec)
    deletes = list(request.get("InstanceGroupsToDelete") or [])
    with st.tx():
        c = get(st, name)
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
            op = _new_op(name, "UpdateCluster", touched,
                         undo={"spec": c.spec, "groups": [asdict(g) for g in old.values()]})
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


def describe(st: Store, name: str) -> dict:
    c, groups_rows, nodes = st.snapshot(name)
    if c is None:
        get(st, name)
    ops = [op for op in st.operations(name, "InProgress") if op.kind in SCALING]
    spec_groups = {g["InstanceGroupName"]: g for g in c.spec.get("InstanceGroups", [])}
    by_group: dict[str, list[NodeRow]] = {}
    for n in nodes:
        by_group.setdefault(n.grp, []).append(n)
    groups = []
    for g in groups_rows:
        sg = spec_groups.get(g.name, {})
        members = by_group.get(g.name, [])
        settled = group_settled(g, members)
        scaling = 0 if settled else sum(1 for op in ops if g.name in op.groups)
        d = {
            **{k: v for k, v in sg.items() if k not in ("InstanceCount", "MinInstanceCount")},
            "InstanceGroupName": g.name,
            "InstanceType": g.instance_type,
            "CurrentCount": sum(1 for n in members if n.phase == "running"),
            "TargetCount": g.target_count,
            "Status": g.status,
            "ActiveOperations": {"Scaling": scaling} if scaling else {},
        }
        if sg.get("MinInstanceCount") is not None:
            d["MinCount"] = sg["MinInstanceCount"]
        if not sg:  # a group being deleted (gone from the spec)
            d["SlurmConfig"] = {"NodeType": g.node_type}
        groups.append(d)
    out = {
        "ClusterArn": c.arn,
        "ClusterName": c.name,
        "ClusterStatus": c.status,
        "CreationTime": _ts(c.created_at),
        "InstanceGroups": groups,
        "NodeRecovery": c.spec.get("NodeRecovery", "Automatic"),
        "Orchestrator": c.spec.get("Orchestrator", {"Slurm": {"SlurmConfigStrategy": "Managed"}}),
    }
    if c.spec.get("NodeProvisioningMode"):
        out["NodeProvisioningMode"] = c.spec["NodeProvisioningMode"]
    if c.failure_message:
        out["FailureMessage"] = c.failure_message
    out["Lab"] = {"Provider": c.provider, "Simulated": c.provider == "sim",
                  "InServiceTime": _ts(c.in_service_at), "FullSizeTime": _ts(c.full_size_at)}
    return out


# ------------------------------------------------------------------------------------ nodes
def _status(c: ClusterRow, n: NodeRow) -> dict:
    status = {"Status": node_status(n.phase)}
    if n.message:
        status["Message"] = n.message
    elif c.provider == "sim":
        status["Message"] = SIM_LABEL
    return status


def list_nodes(st: Store, name: str) -> list[dict]:
    c, groups, nodes = st.snapshot(name)
    if c is None:
        get(st, name)
    types = {g.name: g.instance_type for g in groups}
    out = []
    for n in nodes:
        out.append({
            "InstanceGroupName": n.grp,
            "InstanceId": n.instance_id,
            "NodeLogicalId": n.name,
            "InstanceType": types.get(n.grp),
            "LaunchTime": _ts(n.launched_at),
            "InstanceStatus": _status(c, n),
            "PrivatePrimaryIp": n.address,
            "PrivateDnsHostname": n.name,
        })
    return out


def gpus(st: Store, name: str) -> dict[str, int]:
    """Emulated GPUs per node of each instance group (Lab.Gpus, else the instance type's real
    count for Compute groups). Lab-only: not part of any HyperPod response."""
    from lab.spec import group_gpus

    c = get(st, name)
    return group_gpus(c.spec, [(g.name, g.node_type, g.instance_type) for g in st.groups(name)])


def _find(nodes: list[NodeRow], ref: str) -> NodeRow | None:
    for n in nodes:
        if n.instance_id == ref:
            return n
    for n in nodes:
        if n.name == ref:
            return n
    return None


def describe_node(st: Store, name: str, node_id: str) -> dict:
    """DescribeClusterNode's NodeDetails (the inner structure) for an instance id or a logical id."""
    c, groups, nodes = st.snapshot(name)
    if c is None:
        get(st, name)
    n = _find(nodes, node_id)
    if n is None:
        raise NotFound(f"no node '{node_id}' in cluster '{name}'", "ListClusterNodes shows the node ids")
    g = next((g for g in groups if g.name == n.grp), None)
    sg = next((x for x in c.spec.get("InstanceGroups", []) if x.get("InstanceGroupName") == n.grp), {})
    out = {
        "InstanceGroupName": n.grp,
        "InstanceId": n.instance_id,
        "NodeLogicalId": n.name,
        "InstanceStatus": _status(c, n),
        "InstanceType": g.instance_type if g else sg.get("InstanceType"),
        "LaunchTime": _ts(n.launched_at),
        "PrivatePrimaryIp": n.address,
        "PrivateDnsHostname": n.name,
    }
    for k in ("LifeCycleConfig", "ThreadsPerCore", "InstanceStorageConfigs", "OverrideVpcConfig"):
        if k in sg:
            out[k] = sg[k]
    out["Lab"] = {"Provider": c.provider, "Simulated": c.provider == "sim", "Phase": n.phase,
                  "Attempts": n.attempts, "Pending": n.pending}
    return out


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


def _resolve(nodes: list[NodeRow], ref: str) -> tuple[NodeRow | None, bool]:
    """The node a reference names, and whether the reference is a logical id."""
    for n in nodes:
        if n.instance_id == ref:
            return n, False
    for n in nodes:
        if n.name == ref:
            return n, True
    return None, not ref.startswith("i-")


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
        for n in st.nodes(name):
            taken.setdefault(n.grp, set()).add(n.ordinal)
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
            prefix = id_prefix(c.provider)
            o = 1
            for _ in range(inc):
                while o in have:
                    o += 1
                have.add(o)
                node = f"{name}-{gname}-{o}"
                st.add_node(NodeRow(cluster=name, name=node, grp=gname, ordinal=o,
                                    instance_id=instance_id(name, node, prefix), address="", mac="",
                                    phase="planned", message="added (BatchAddClusterNodes)"))
                ok.append({"NodeLogicalId": node, "InstanceGroupName": gname, "Status": "Pending"})
                added.append(node)
            targets[gname] = new_target
            touched.append(gname)
        if touched:
            for gname, t in targets.items():
                st.update_group(name, gname, target_count=t)
            st.update_cluster(name, spec=_sync_counts(c.spec, targets))
            op = _new_op(name, "BatchAddClusterNodes", touched, added)
            st.add_operation(op)
            st.add_event(name, "Cluster", "Info", "BatchAddClusterNodes: " + ", ".join(
                f"{g} +{sum(1 for x in ok if x['InstanceGroupName'] == g)} (target {t})" for g, t in targets.items()),
                operation_id=op.id)
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
            n, logical = _resolve(nodes, ref)
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
            for gname, t in targets.items():
                st.update_group(name, gname, target_count=t)
            st.update_cluster(name, spec=_sync_counts(c.spec, targets))
            op = _new_op(name, "BatchDeleteClusterNodes", targets, gone)
            st.add_operation(op)
            st.add_event(name, "Cluster", "Info", f"BatchDeleteClusterNodes: {', '.join(gone)}", operation_id=op.id)
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
            n, logical = _resolve(nodes, ref)
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
            op = _new_op(name, op_name, {n.grp for n in chosen}, [n.name for n in chosen])
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


# ------------------------------------------------------------------------------------ events
def event_id(cluster: str, ident: int) -> str:
    """A store event id as the model's UUID-shaped EventId (the API server uses the same form)."""
    return f"{zlib.crc32(cluster.encode()):08x}-0000-4000-8000-{ident:012x}"


def _event_number(cluster: str, eid: str) -> int | None:
    try:
        head, _, tail = eid.partition("-0000-4000-8000-")
        if head != f"{zlib.crc32(cluster.encode()):08x}" or not tail:
            return None
        return int(tail, 16)
    except (ValueError, AttributeError):
        return None


def _event(c: ClusterRow, e: EventRow) -> dict:
    ev = {"EventId": event_id(c.name, e.id), "ClusterArn": c.arn, "ClusterName": c.name,
          "ResourceType": e.resource_type, "EventTime": _ts(e.time), "Description": e.description,
          "EventLevel": LEVELS.get(e.level, "Info")}
    if e.grp:
        ev["InstanceGroupName"] = e.grp
    if e.instance_id:
        ev["InstanceId"] = e.instance_id
    if e.operation_id:
        ev["OperationId"] = e.operation_id
    return ev


_FILTERS = {"InstanceGroupName", "NodeId", "EventTimeAfter", "EventTimeBefore", "SortOrder", "ResourceType",
            "OperationId", "MaxResults", "SortBy"}


def list_events(st: Store, name: str, **filters) -> list[dict]:
    """ListClusterEvents' summaries (ClusterEventSummary), oldest first unless SortOrder="Descending".
    Filters (the request's member names; None means unset): InstanceGroupName, NodeId (an instance
    id or a logical id), ResourceType, OperationId, EventTimeAfter / EventTimeBefore (epoch seconds,
    datetime or ISO 8601), SortOrder, MaxResults (the first N after sorting)."""
    bad = set(filters) - _FILTERS
    if bad:
        raise UsageError(f"unknown ListClusterEvents filter(s): {', '.join(sorted(bad))}",
                         f"use {', '.join(sorted(_FILTERS))}")
    c = get(st, name)
    f = {k: v for k, v in filters.items() if v is not None}
    lo, hi = _epoch(f.get("EventTimeAfter")), _epoch(f.get("EventTimeBefore"))
    node = f.get("NodeId")
    out, after = [], 0
    while True:
        rows = st.events(name, after_id=after, limit=1000)
        for e in rows:
            if "InstanceGroupName" in f and e.grp != f["InstanceGroupName"]:
                continue
            if node and node not in (e.instance_id, e.node):
                continue
            if "ResourceType" in f and e.resource_type != f["ResourceType"]:
                continue
            if "OperationId" in f and e.operation_id != f["OperationId"]:
                continue
            if (lo is not None and e.time <= lo) or (hi is not None and e.time >= hi):
                continue
            out.append(_event(c, e))
        if len(rows) < 1000:
            break
        after = rows[-1].id
    if f.get("SortOrder") == "Descending":
        out.reverse()
    if f.get("MaxResults"):
        out = out[: int(f["MaxResults"])]
    return out


def describe_event(st: Store, name: str, event_id: str) -> dict:
    """DescribeClusterEvent's EventDetails (ClusterEventDetail, the inner structure)."""
    c = get(st, name)
    num = _event_number(name, event_id)
    e = st.event(name, num) if num is not None else None
    if e is None:
        raise NotFound(f"no event '{event_id}' in cluster '{name}'", "ListClusterEvents shows its events")
    ev = _event(c, e)
    meta: dict = {}
    failure = e.description if e.level in ("Warning", "Warn", "Error") else None
    if e.resource_type == "Instance":
        inst = {}
        if failure:
            inst["FailureMessage"] = failure
        if e.node:
            inst["NodeLogicalId"] = e.node
        if inst:
            meta["Instance"] = inst
    elif failure and e.resource_type == "InstanceGroup":
        meta["InstanceGroup"] = {"FailureMessage": failure}
    elif failure:
        meta["Cluster"] = {"FailureMessage": failure}
    if meta:
        ev["EventDetails"] = {"EventMetadata": meta}
    return ev


# ------------------------------------------------------------------------------------ waiting
def _at_target(st: Store, name: str, d: dict) -> bool:
    """Every group at its target and no node with work still to do (after a scale-out, a scale-in,
    a reboot or a replacement, not just once after the create)."""
    return (all(g["CurrentCount"] == g["TargetCount"] and not g.get("ActiveOperations") for g in d["InstanceGroups"])
            and all(n.phase == "running" and not n.pending for n in st.nodes(name)))


def wait(st: Store, name: str, until: str, on_change: Callable[[dict, list[dict]], None] | None = None,
         timeout: float = 3600, poll: float = 1.0) -> dict:
    """Poll until `until` (InService | FullSize | Deleted | Failed) holds; raise TimeoutError else."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        c = st.cluster(name)
        if c is None:
            if until == "Deleted":
                return {}
            raise NotFound(f"cluster '{name}' disappeared")
        d, nodes = describe(st, name), list_nodes(st, name)
        snap = (d["ClusterStatus"], [(g["InstanceGroupName"], g["CurrentCount"], g["Status"]) for g in d["InstanceGroups"]],
                [(n["NodeLogicalId"], n["InstanceStatus"].get("Status"), n["InstanceStatus"].get("Message")) for n in nodes])
        if snap != last and on_change:
            on_change(d, nodes)
        last = snap
        if d["ClusterStatus"] == "Failed":
            return d
        if until == "InService" and d["ClusterStatus"] == "InService":
            return d
        if until == "FullSize" and c.full_size_at and _at_target(st, name, d):
            return d
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster {name} did not reach {until} in {timeout:.0f} s")
        if not daemon.running_pid():
            daemon.ensure_running()
        time.sleep(poll)
