"""HyperPod-shaped views of the store: DescribeCluster, ListClusterNodes, DescribeClusterNode,
ListClusterEvents, DescribeClusterEvent (the shapes of botocore's SageMaker service model), and
the lab-only GPU counts. Read-only: nothing here writes the store."""

from __future__ import annotations

import hashlib

from lab import settings
from lab.engine.bookkeeping import SCALING
from lab.control.events import event_id, event_number
from lab.control.imageversions import Versions, auto_patch_details
from lab.engine.plan import group_settled, node_status
from lab.engine.rolling import cluster_box
from lab.engine.sight import stale_note
from lab.engine.watching import ENGINE_STALE_S
from lab.control.lookup import get
from lab.errors import NotFound, UsageError
from lab.osutil import epoch, iso, iso_seconds, ms
from lab.providers import registry
from lab.store.db import ClusterRow, EventRow, NodeRow, Store

REGION = settings.REGION.default  # defaults: $SLURMLAB_REGION and $SLURMLAB_ACCOUNT_ID (or `serve --region/--account-id`)
ACCOUNT = settings.ACCOUNT_ID.default
LEVELS = {"Info": "Info", "Warning": "Warn", "Warn": "Warn", "Error": "Error"}
SIM_LABEL = "simulated instance (provider sim: no VM, no Slurm inside)"


def default_region() -> str:
    return settings.REGION.get()


def default_account() -> str:
    return settings.ACCOUNT_ID.get()


def arn(name: str, region: str | None = None, account: str | None = None) -> str:
    """cluster/<12 hex> as the model's ClusterArn pattern wants (cluster/[a-z0-9]{12}), in `region` (the
    one the client signed its request for) and `account`, else the lab's defaults."""
    return (f"arn:aws:sagemaker:{region or default_region()}:{account or default_account()}:cluster/"
            f"{hashlib.sha256(name.encode()).hexdigest()[:12]}")


# ------------------------------------------------------------------------------------ clusters
def engine_note(seen_at: float | None, status: str, now: float | None = None) -> str | None:
    """What DescribeCluster says when the engine has not run for ENGINE_STALE_S (None: it runs, or
    the cluster needs nothing of it)."""
    import time

    if seen_at is None or status in ("Failed",):
        return None
    gap = (now if now is not None else time.time()) - float(seen_at)
    if gap < ENGINE_STALE_S:
        return None
    return (f"the engine has not run for {gap:.0f} s (last seen {iso(float(seen_at))}): nothing is provisioned, "
            "watched or recovered. Fix: slurmlab engine start (slurmlab engine status, engine.log)")


def room_of(c: ClusterRow) -> dict | None:
    """Lab.Room: the students' ssh port of a real cluster with student accounts (lab/room)."""
    from lab.errors import LabError
    from lab.room import ports

    try:
        return None if ports.no_room(c) else ports.status(c.name)
    except LabError:  # a damaged accounts file: `slurmlab users show` names it and its fix
        return None


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
    versions = Versions(st, c, groups_rows, nodes)
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
        d.update(versions.group(g.name))
        d.pop("AutoPatchConfig", None)
        if (patch := auto_patch_details(st, c, g.name)) is not None:
            d["AutoPatchConfig"] = patch
        if not sg:  # a group being deleted (gone from the spec)
            d["SlurmConfig"] = {"NodeType": g.node_type}
        groups.append(d)
    out = {
        "ClusterArn": c.arn,
        "ClusterName": c.name,
        "ClusterStatus": c.status,
        "CreationTime": iso(c.created_at),
        "InstanceGroups": groups,
        "NodeRecovery": c.spec.get("NodeRecovery", "Automatic"),
        "Orchestrator": c.spec.get("Orchestrator", {"Slurm": {"SlurmConfigStrategy": "Managed"}}),
    }
    if c.spec.get("NodeProvisioningMode"):
        out["NodeProvisioningMode"] = c.spec["NodeProvisioningMode"]
    stale = stale_note(c)
    seen_at = st.meta("engine_seen_at")
    gone = engine_note(seen_at, c.status)
    if c.failure_message or stale or gone:  # a client that reads only the model's fields sees these marks here
        out["FailureMessage"] = "; ".join(m for m in (c.failure_message, stale, gone) if m)
    out["Lab"] = {"Provider": c.provider, "Simulated": registry.info(c.provider).simulated,
                  "InServiceTime": iso(c.in_service_at), "FullSizeTime": iso(c.full_size_at)}
    if c.host:
        out["Lab"]["Host"] = c.host
    if (room := room_of(c)) is not None:
        out["Lab"]["Room"] = room
    if seen_at is not None:
        out["Lab"]["EngineSeenAt"] = iso(float(seen_at))
    if stale:
        out["Lab"]["Stale"] = {"Since": iso(c.unobserved_since), "Reason": c.unobserved_reason}
    if c.slurm_problem:  # slurmctld does not answer the engine (lab/engine/watching.py)
        out["Lab"]["SlurmProblem"] = {"Since": iso(c.slurm_problem_since), "Reason": c.slurm_problem}
    protected = {g.name: g.protected for g in groups_rows if g.protected}
    if protected:  # groups that stopped retrying (slurmlab resume-group)
        out["Lab"]["ProtectedGroups"] = protected
    return out


# ------------------------------------------------------------------------------------ nodes
def _status(c: ClusterRow, n: NodeRow) -> dict:
    status = {"Status": node_status(n.phase, n.pending)}
    if n.message:
        status["Message"] = n.message
    elif registry.info(c.provider).simulated:
        status["Message"] = SIM_LABEL
    if c.unobserved_since is not None:  # never a Running from old data without saying so
        note = f"stale: not observed since {iso_seconds(c.unobserved_since)} ({c.unobserved_reason}); last seen {status['Status']}"
        status["Message"] = f"{note}; {status['Message']}" if "Message" in status else note
    return status


def list_nodes(st: Store, name: str) -> list[dict]:
    c, groups, nodes = st.snapshot(name)
    if c is None:
        get(st, name)
    types = {g.name: g.instance_type for g in groups}
    versions = Versions(st, c, groups, nodes)
    out = []
    for n in nodes:
        out.append({
            **versions.node(n),
            "InstanceGroupName": n.grp,
            "InstanceId": n.instance_id,
            "NodeLogicalId": n.name,
            "InstanceType": types.get(n.grp),
            "LaunchTime": iso(n.launched_at),
            "InstanceStatus": _status(c, n),
            "PrivatePrimaryIp": n.address,
            "PrivateDnsHostname": n.name,
        })
    return out


def image_version_status(st: Store, name: str) -> str | None:
    """ClusterSummary.ImageVersionStatus: the most urgent of the cluster's groups' (None: not known)."""
    c, groups, nodes = st.snapshot(name)
    return Versions(st, c, groups, nodes).cluster() if c is not None else None


def gpus(st: Store, name: str) -> dict[str, int]:
    """Emulated GPUs per node of each instance group (Lab.Gpus, else the instance type's real
    count for Compute groups). Lab-only: not part of any HyperPod response."""
    from lab.spec import group_gpus

    c = get(st, name)
    return group_gpus(c.spec, [(g.name, g.node_type, g.instance_type) for g in st.groups(name)])


def named_group(groups: dict, field: str, g, cluster: str):
    """The instance group a request's field names, from `groups` (name -> row, those not being
    deleted); else a UsageError naming the field and the groups there are."""
    if g not in groups:
        raise UsageError(f"{field}: no instance group '{g}' in cluster '{cluster}'",
                         f"the groups are {', '.join(sorted(groups))}")
    return groups[g]


def resolve(nodes: list[NodeRow], ref: str) -> tuple[NodeRow | None, bool]:
    """The node a reference names (an instance id first, else a logical id), and whether the
    reference is a logical id."""
    for n in nodes:
        if n.instance_id == ref:
            return n, False
    for n in nodes:
        if n.name == ref:
            return n, True
    return None, not ref.startswith("i-")


def describe_node(st: Store, name: str, node_id: str) -> dict:
    """DescribeClusterNode's NodeDetails (the inner structure) for an instance id or a logical id."""
    c, groups, nodes = st.snapshot(name)
    if c is None:
        get(st, name)
    n, _ = resolve(nodes, node_id)
    if n is None:
        raise NotFound(f"no node '{node_id}' in cluster '{name}'", "ListClusterNodes shows the node ids")
    g = next((g for g in groups if g.name == n.grp), None)
    sg = c.group_spec(n.grp)
    out = {
        "InstanceGroupName": n.grp,
        "InstanceId": n.instance_id,
        "NodeLogicalId": n.name,
        "InstanceStatus": _status(c, n),
        "InstanceType": g.instance_type if g else sg.get("InstanceType"),
        "LaunchTime": iso(n.launched_at),
        "PrivatePrimaryIp": n.address,
        "PrivateDnsHostname": n.name,
        **Versions(st, c, groups, nodes).node(n),
    }
    for k in ("LifeCycleConfig", "ThreadsPerCore", "InstanceStorageConfigs", "OverrideVpcConfig"):
        if k in sg:
            out[k] = sg[k]
    out["Lab"] = {"Provider": c.provider, "Simulated": registry.info(c.provider).simulated, "Phase": n.phase,
                  "Attempts": n.attempts, "Pending": n.pending,
                  "Box": n.image or cluster_box(c)}
    if c.host:
        out["Lab"]["Host"] = c.host
    if n.slurm:  # Slurm's view of the node (lab/engine/recovery.py) and the recovery steps taken
        out["Lab"]["Slurm"] = {"State": n.slurm, "Since": iso(n.slurm_since), "RecoverySteps": n.repairs}
    return out


# ------------------------------------------------------------------------------------ events
def _event(c: ClusterRow, e: EventRow) -> dict:
    ev = {"EventId": event_id(c.name, e.id), "ClusterArn": c.arn, "ClusterName": c.name,
          "ResourceType": e.resource_type, "EventTime": iso(e.time), "Description": e.description,
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


def _time_filter(f: dict, key: str) -> float | None:
    if key not in f:
        return None
    t = epoch(f[key])
    if t is None:
        raise UsageError(f"ListClusterEvents {key}: {f[key]!r} is not a time",
                         "give epoch seconds, a datetime or ISO 8601 text")
    return t


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
    lo, hi = _time_filter(f, "EventTimeAfter"), _time_filter(f, "EventTimeBefore")
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
            if (lo is not None and ms(e.time) <= ms(lo)) or (hi is not None and ms(e.time) >= ms(hi)):
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
    num = event_number(name, event_id)
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
