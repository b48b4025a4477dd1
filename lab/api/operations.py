"""The SageMaker operations of a HyperPod Slurm cluster (lab.spec.servicemodel.OPERATIONS), on the lab's engine.

Each handler takes the checked request body and returns a dict that `model.shape_output` cuts to
the operation's output shape. The work is the engine's (`lab.control.clusters`); this module maps
names (ARNs, node ids), filters, sorts and pages, and turns the lab's errors into SageMaker's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lab.api import model, tenancy
from lab.api.common import CALLER, REGION, Lab, cluster_name, lab_error, not_found, spec_error, visible
from lab.api.model import ApiError
from lab.api.extops import EXTENSION_HANDLERS
from lab.api.paging import between, paged
from lab.api.tokens import CLIENT_TOKEN_TTL
from lab.api.tokens import fingerprint as _fingerprint
from lab.api.tokens import keep as _token_keep
from lab.api.tokens import seen as _token_seen
from lab.control import clusters, health, moves, software
from lab.control.operations import describe_operation, list_operations
from lab.errors import LabError, NotFound
from lab.spec.problems import Problem, SpecInvalid
from lab.students import Student

MAX_CLUSTERS = clusters.MAX_CLUSTERS  # the engine's limit, named in the error message


# ------------------------------------------------------------------------------------ clusters
def create_cluster(lab: Lab, body: dict) -> dict:
    from lab.spec import spec_from_request

    try:
        spec = spec_from_request(body, base_dir=lab.base_dir)
    except SpecInvalid as e:
        raise spec_error(e) from None
    try:  # the CLI's create too: the name, the caller's quota, the provider's host set-up, the records
        row = clusters.create(lab.store, spec, provider=lab.provider, start_engine=False,
                              cluster_arn=clusters.arn(spec.name, REGION.get() or lab.region, lab.account),
                              admit=lambda s: tenancy.check_create(lab, s))
    except clusters.NameTaken:
        raise ApiError("ResourceInUse", f"ClusterName: a cluster named '{spec.name}' already exists "
                       "(pick another name, or DeleteCluster it first)") from None
    except clusters.ClusterLimit:
        raise ApiError("ResourceLimitExceeded", f"ClusterName: the lab holds at most {MAX_CLUSTERS} clusters; "
                       "delete one first") from None
    tenancy.record_owner(lab, row)
    lab.engine()
    return {"ClusterArn": row.arn}


def describe_cluster(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    out = dict(clusters.describe(lab.store, name))
    c = lab.store.cluster(name)
    # Fields of the request with no meaning in a lab come back as they were given.
    if c is not None:
        for k, v in c.spec.items():
            out.setdefault(k, v)
    return out


def list_clusters(lab: Lab, body: dict) -> dict:
    rows = [c for c in lab.store.clusters() if visible(lab, c)]
    items = []
    for c in rows:
        if body.get("NameContains") and body["NameContains"] not in c.name:
            continue
        if not between(c.created_at, body, "CreationTimeAfter", "CreationTimeBefore"):
            continue
        if body.get("TrainingPlanArn"):
            plans = {g.get("TrainingPlanArn") for g in c.spec.get("InstanceGroups", [])}
            if body["TrainingPlanArn"] not in plans:
                continue
        items.append(c)
    if body.get("SortBy") == "NAME":
        items.sort(key=lambda c: c.name)
    else:
        items.sort(key=lambda c: (c.created_at, c.name))
    if body.get("SortOrder") == "Descending":
        items.reverse()
    out = paged(items, body, "clusters", "ClusterSummaries")
    summaries = []
    for c in out["ClusterSummaries"]:
        s = {"ClusterArn": c.arn, "ClusterName": c.name, "CreationTime": c.created_at, "ClusterStatus": c.status}
        plans = sorted({g["TrainingPlanArn"] for g in c.spec.get("InstanceGroups", []) if g.get("TrainingPlanArn")})
        if plans:
            s["TrainingPlanArns"] = plans
        if (image := clusters.image_version_status(lab.store, c.name)) is not None:
            s["ImageVersionStatus"] = image
        summaries.append(s)
    out["ClusterSummaries"] = summaries
    return out


def delete_cluster(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    c = lab.store.cluster(name)
    try:
        clusters.delete(lab.store, name, start_engine=False)
    except NotFound:  # the engine finished deleting it between our look-up and now
        pass
    lab.engine()
    return {"ClusterArn": c.arn if c else clusters.arn(name, REGION.get() or lab.region, lab.account)}


def update_cluster(lab: Lab, body: dict) -> dict:
    """The request is checked once, by the engine's update (lab.spec.apply_update: the request, then
    the cluster it makes). Only a request for a cluster that is not there is checked here, so that
    a bad request is a ValidationException before it is a ResourceNotFound, as for every operation."""
    from lab.spec import check_update

    ref = body.get("ClusterName")
    try:
        name = cluster_name(lab, ref if isinstance(ref, str) else "")
    except ApiError:
        problems = check_update(body)
        if problems:
            raise model.validation_error(problems) from None
        raise
    tenancy.check_update(lab, name, body)
    req = {**body, "ClusterName": name}
    clusters.update(lab.store, name, req, base_dir=lab.base_dir)  # one store transaction: safe against any other writer
    lab.engine()
    return {"ClusterArn": lab.store.cluster(name).arn}


# ------------------------------------------------------------------------------------ nodes
def _nodes(lab: Lab, name: str) -> list[dict]:
    return clusters.list_nodes(lab.store, name)


def list_cluster_nodes(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    include_logical = bool(body.get("IncludeNodeLogicalIds"))
    items = []
    for n in _nodes(lab, name):
        launched = model.timestamp(n.get("LaunchTime"))
        # Without IncludeNodeLogicalIds only nodes that got an instance are listed (as in HyperPod).
        if not include_logical and launched is None:
            continue
        if body.get("InstanceGroupNameContains") and body["InstanceGroupNameContains"] not in n.get("InstanceGroupName", ""):
            continue
        if not between(launched, body, "CreationTimeAfter", "CreationTimeBefore"):
            continue
        n = dict(n)
        if not include_logical:
            n.pop("NodeLogicalId", None)
        items.append((launched, n))
    if body.get("SortBy") == "NAME":
        items.sort(key=lambda x: (x[1].get("NodeLogicalId") or x[1].get("InstanceId") or ""))
    else:
        items.sort(key=lambda x: (x[0] is None, x[0] or 0, x[1].get("NodeLogicalId") or x[1].get("InstanceId") or ""))
    if body.get("SortOrder") == "Descending":
        items.reverse()
    return paged([n for _, n in items], body, "nodes", "ClusterNodeSummaries")


def describe_cluster_node(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    node_id, logical = body.get("NodeId"), body.get("NodeLogicalId")
    if bool(node_id) == bool(logical):
        raise ApiError("ValidationException", "NodeId, NodeLogicalId: give exactly one of them")
    try:
        details = clusters.describe_node(lab.store, name, node_id or logical)
    except NotFound as e:
        raise not_found("NodeId" if node_id else "NodeLogicalId", e) from None
    return {"NodeDetails": details}


def _id_lists(body: dict) -> tuple[list[str], list[str]]:
    ids, logical = list(body.get("NodeIds") or []), list(body.get("NodeLogicalIds") or [])
    if not ids and not logical:
        raise ApiError("ValidationException", "NodeIds, NodeLogicalIds: give at least one node (either list, or both)")
    return ids, logical


def batch_add_cluster_nodes(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    token, fingerprint = body.get("ClientToken"), _fingerprint(name, body.get("NodesToAdd"))
    seen = _token_seen(lab, token, fingerprint)
    if seen is not None:
        return _refresh_added(lab, name, seen)
    seen_names: set[str] = set()
    for i, spec in enumerate(body["NodesToAdd"]):
        g = spec["InstanceGroupName"]
        if g in seen_names:
            raise ApiError("ValidationException", f"NodesToAdd[{i}].InstanceGroupName: '{g}' is named twice; "
                           "give each group once with the whole increment")
        seen_names.add(g)
    tenancy.check_add(lab, name, body["NodesToAdd"])
    result = clusters.add_nodes(lab.store, name, body["NodesToAdd"])
    lab.engine()
    result = {"Successful": list(result.get("Successful", [])), "Failed": list(result.get("Failed", []))}
    _token_keep(lab, token, fingerprint, result)
    return result


def _refresh_added(lab: Lab, name: str, result: dict) -> dict:
    """A retried ClientToken: the same NodeLogicalIds, each with its latest status."""
    status = {n.get("NodeLogicalId"): n.get("InstanceStatus", {}).get("Status") for n in _nodes(lab, name)}
    ok = [{**s, "Status": status.get(s.get("NodeLogicalId"), "NotFound") or s.get("Status")} for s in result["Successful"]]
    return {"Successful": ok, "Failed": result["Failed"]}


def _batch(lab: Lab, body: dict, fn: Callable[..., dict]) -> dict:
    """Delete / reboot / replace: the engine answers per node, in the lists of the model's response
    (Successful / Failed by instance id, SuccessfulNodeLogicalIds / FailedNodeLogicalIds by logical id)."""
    name = cluster_name(lab, body["ClusterName"])
    ids, logical = _id_lists(body)
    result = fn(lab.store, name, ids + logical) or {}
    lab.engine()
    return result


def batch_delete_cluster_nodes(lab: Lab, body: dict) -> dict:
    return _batch(lab, body, clusters.delete_nodes)


def batch_reboot_cluster_nodes(lab: Lab, body: dict) -> dict:
    return _batch(lab, body, clusters.reboot_nodes)


def batch_replace_cluster_nodes(lab: Lab, body: dict) -> dict:
    return _batch(lab, body, clusters.replace_nodes)


# ------------------------------------------------------------------------------------ events
EVENT_FILTERS = ("InstanceGroupName", "NodeId", "ResourceType", "OperationId", "EventTimeAfter", "EventTimeBefore")


def events_of(lab: Lab, name: str, **filters) -> list[dict]:
    """The cluster's events (ClusterEventSummary), oldest first."""
    return clusters.list_events(lab.store, name, **filters)


def list_cluster_events(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    items = events_of(lab, name, SortOrder=body.get("SortOrder", "Descending"),  # the model's default
                      **{k: body[k] for k in EVENT_FILTERS if body.get(k) is not None})
    return paged(items, body, "events", "Events")


def describe_cluster_event(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    try:
        ev = clusters.describe_event(lab.store, name, body["EventId"])
    except NotFound as e:
        raise not_found("EventId", e) from None
    return {"EventDetails": ev}


# ------------------------------------------------------------------------------------ operations
def list_cluster_operations(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    times = {k: model.timestamp(body.get(k)) for k in ("CreationTimeAfter", "CreationTimeBefore")}
    items = list_operations(lab.store, name, Status=body.get("Status"), Type=body.get("Type"),
                            SortOrder=body.get("SortOrder", "Descending"), **times)  # the model's default order
    return paged(items, body, "operations", "ClusterOperationSummaries")


def move_cluster_nodes(lab: Lab, body: dict) -> dict:
    """Within one cluster (lab/control/moves.py); the answer's lists follow how the nodes were named."""
    name = cluster_name(lab, body["SourceClusterArn"], "SourceClusterArn")
    target = cluster_name(lab, body["TargetClusterArn"], "TargetClusterArn")
    token, fingerprint = body.get("ClientToken"), _fingerprint({k: v for k, v in body.items() if k != "ClientToken"})
    seen = _token_seen(lab, token, fingerprint)
    if seen is not None:
        return seen
    result = moves.move_nodes(lab.store, name, body["SourceInstanceGroupName"], body["TargetInstanceGroupName"],
                              target_cluster=target, node_ids=body.get("NodeIds") or [],
                              logical_ids=body.get("NodeLogicalIds") or [], count=body.get("InstanceCount"))
    lab.engine()
    _token_keep(lab, token, fingerprint, result)
    return result


def update_cluster_software(lab: Lab, body: dict) -> dict:
    """A rolling replacement with the box ImageId names (lab/control/software.py, lab/engine/rolling.py)."""
    name = cluster_name(lab, body["ClusterName"])
    asked = body.get("InstanceGroups") or []
    groups = [g["InstanceGroupName"] for g in asked]
    versions = {g["InstanceGroupName"]: g["ImageReleaseVersion"] for g in asked if g.get("ImageReleaseVersion")}
    software.update_software(lab.store, name, groups or None, body.get("DeploymentConfig"), body.get("ImageId"),
                             versions=versions, resolve=lab.resolve_image)
    lab.engine()
    return {"ClusterArn": clusters.get(lab.store, name).arn}


def start_cluster_health_check(lab: Lab, body: dict) -> dict:
    """The engine checks the request whole (lab/control/health.py) and changes nothing on a bad one."""
    name = cluster_name(lab, body["ClusterName"])
    health.start(lab.store, name, body["DeepHealthCheckConfigurations"])
    lab.engine()
    return {"ClusterArn": clusters.get(lab.store, name).arn}


def describe_cluster_operation(lab: Lab, body: dict) -> dict:
    name = cluster_name(lab, body["ClusterName"])
    try:
        return describe_operation(lab.store, name, body["OperationId"])
    except NotFound as e:
        raise not_found("OperationId", e) from None


HANDLERS: dict[str, Callable[[Lab, dict], dict]] = {
    "CreateCluster": create_cluster,
    "UpdateCluster": update_cluster,
    "DescribeCluster": describe_cluster,
    "ListClusters": list_clusters,
    "DeleteCluster": delete_cluster,
    "ListClusterNodes": list_cluster_nodes,
    "DescribeClusterNode": describe_cluster_node,
    "BatchAddClusterNodes": batch_add_cluster_nodes,
    "BatchDeleteClusterNodes": batch_delete_cluster_nodes,
    "BatchRebootClusterNodes": batch_reboot_cluster_nodes,
    "BatchReplaceClusterNodes": batch_replace_cluster_nodes,
    "ListClusterEvents": list_cluster_events,
    "DescribeClusterEvent": describe_cluster_event,
    "ListClusterOperations": list_cluster_operations,
    "DescribeClusterOperation": describe_cluster_operation,
    "StartClusterHealthCheck": start_cluster_health_check,
    "MoveClusterNodes": move_cluster_nodes,
    "UpdateClusterSoftware": update_cluster_software,
    **EXTENSION_HANDLERS,  # the six ClusterExtension operations: lab/api/extops.py
}
assert set(HANDLERS) == set(model.OPERATIONS)


def call(lab: Lab, op: str, body: Any, region: str | None = None, caller: Student | None = None) -> dict:
    """Check `body` against the model, run the operation, shape the answer. Raises ApiError.
    `region`: the one the client signed for (SigV4's credential scope); a new cluster's ARN names it.
    `caller`: the student who signed it (`serve --auth`): they see and change only their own clusters."""
    REGION.set(region)
    token = CALLER.set(caller)
    try:
        return _call(lab, op, body)
    finally:
        CALLER.reset(token)


def _call(lab: Lab, op: str, body: Any) -> dict:
    if op not in ("CreateCluster", "UpdateCluster"):  # these two: lab.spec checks them (with the lab's rules)
        problems = model.check_input(op, body)
        if problems:
            raise model.validation_error(problems)
    elif not isinstance(body, dict):
        raise ApiError("SerializationException", f"the request body must be a JSON object, got {type(body).__name__}")
    try:
        with tenancy.quota_guard(lab, op):
            result = HANDLERS[op](lab, body)
    except ApiError:
        raise
    except SpecInvalid as e:
        raise spec_error(e) from None
    except LabError as e:
        raise lab_error(e, op) from None
    return model.shape_output(op, result)


__all__ = ["CLIENT_TOKEN_TTL", "HANDLERS", "Lab", "Problem", "call", "events_of"]
