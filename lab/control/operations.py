"""Cluster operations: how a request that changes a cluster is recorded (`new_op`, with a scaling
operation's groups before and after), and how ListClusterOperations and DescribeClusterOperation show
them (`list_operations`, `describe_operation`).

The engine finishes an operation when its groups (or nodes) settle: Completed, or Failed (a legacy
rollback). HyperPod's statuses are InProgress, Superseded and Done: Completed and Failed are both
Done; the lab never supersedes an operation (a newer UpdateCluster adds its own). HyperPod's types are
Scaling (CreateCluster, UpdateCluster, BatchAddClusterNodes, BatchDeleteClusterNodes) and DeepHealthCheck
(StartClusterHealthCheck, lab/control/health.py); reboots and replacements are operations of the lab only
(their events carry their id), not listed.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

from lab.engine.bookkeeping import HEALTH_CHECK, SCALING
from lab.control.views import get
from lab.errors import NotFound, UsageError
from lab.osutil import iso, ms
from lab.store.db import OperationRow, Store

STATUS = {"InProgress": "InProgress", "Superseded": "Superseded", "Completed": "Done", "Failed": "Done"}


def new_op(cluster: str, kind: str, groups, nodes=(), undo: dict | None = None,
           scaling: dict | None = None, details: dict | None = None) -> OperationRow:
    return OperationRow(id=str(uuid.uuid4()), cluster=cluster, kind=kind, groups=sorted(set(groups)),
                        nodes=list(nodes), status="InProgress", created_at=time.time(), undo=undo, scaling=scaling,
                        details=details)


LISTED = {**{k: "Scaling" for k in SCALING}, HEALTH_CHECK: "DeepHealthCheck"}  # the lab's kind -> HyperPod's Type


def scaling_of(st: Store, cluster: str, targets: dict[str, tuple[int, int]], spec_before: dict | None,
             spec_after: dict) -> dict:
    """A scaling operation's groups (DescribeClusterOperation's ScalingDetails): running and target counts
    before, target after (MinCount on both sides when the spec has one). targets: group -> (before, after)."""
    running = Counter(n.grp for n in st.nodes(cluster) if n.phase == "running")

    def mins(spec: dict | None) -> dict:
        return {g["InstanceGroupName"]: g["MinInstanceCount"] for g in (spec or {}).get("InstanceGroups", [])
                if g.get("MinInstanceCount") is not None}

    lo, hi = mins(spec_before), mins(spec_after)
    return {g: {"Original": {"CurrentCount": running[g], "TargetCount": old, **({"MinCount": lo[g]} if g in lo else {})},
                "Desired": {"TargetCount": new, **({"MinCount": hi[g]} if g in hi else {})}}
            for g, (old, new) in targets.items()}


def _summary(arn: str, op: OperationRow) -> dict:
    return {"OperationId": op.id, "ClusterArn": arn, "Type": LISTED[op.kind], "Status": STATUS.get(op.status, "Done"),
            "CreationTime": iso(op.created_at)}


def list_operations(st: Store, name: str, Status: str | None = None, Type: str | None = None,  # noqa: N803
                    CreationTimeAfter: float | None = None, CreationTimeBefore: float | None = None,  # noqa: N803
                    SortOrder: str = "Descending") -> list[dict]:  # noqa: N803 - the request's member names
    """ListClusterOperations' summaries, newest first unless SortOrder="Ascending" (sorted by
    CreationTime, the only SortBy); the filters as the request names them (times in epoch seconds)."""
    for key, value, allowed in (("SortOrder", SortOrder, ("Ascending", "Descending")),
                                ("Status", Status, (None, "InProgress", "Superseded", "Done")),
                                ("Type", Type, (None, "Scaling", "DeepHealthCheck"))):
        if value not in allowed:
            raise UsageError(f"{key}: '{value}' is not one of {', '.join(a for a in allowed if a)}")
    c = get(st, name)
    out = []
    for op in st.operations(name):
        if op.kind not in LISTED or Type not in (None, LISTED[op.kind]):
            continue
        s = _summary(c.arn, op)
        if Status is not None and s["Status"] != Status:
            continue
        t = ms(op.created_at)
        if (CreationTimeAfter is not None and t <= ms(CreationTimeAfter)) or \
                (CreationTimeBefore is not None and t >= ms(CreationTimeBefore)):
            continue
        out.append(s)
    return out[::-1] if SortOrder == "Descending" else out


def describe_operation(st: Store, name: str, operation_id: str) -> dict:
    """DescribeClusterOperation's answer: the summary plus ScalingDetails (per group: Status, Original
    and Desired counts) or, for a deep health check, DeepHealthCheckDetails (the request's configurations)."""
    c = get(st, name)
    op = next((o for o in st.operations(name) if o.id == operation_id and o.kind in LISTED), None)
    if op is None:
        raise NotFound(f"no operation '{operation_id}' in cluster '{name}'", "ListClusterOperations lists them")
    out = _summary(c.arn, op)
    if op.kind == HEALTH_CHECK:
        out["DeepHealthCheckDetails"] = (op.details or {}).get("Configurations", [])
        return out
    details = []
    for g, counts in (op.scaling or {g: {} for g in op.groups}).items():
        details.append({"InstanceGroupName": g, "Status": out["Status"], **counts})
    out["ScalingDetails"] = details
    return out
