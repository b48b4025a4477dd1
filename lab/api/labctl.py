"""The lab's own controls, under /_lab/ (never inside SageMaker's operations): simulated capacity,
and the state the console shows.

    GET  /_lab/health     {"Ok": true, ...}
    GET  /_lab/state      clusters, groups, nodes, recent events, capacity: what the console polls
    GET  /_lab/capacity   limits per instance type, what is in use, arrivals to come
    POST /_lab/capacity   {"InstanceType": "ml.c5.large", "Available": 2}      (null or "unlimited": no limit)
                          {"instance_types": {...}, "faults": {...}}  a capacity document (the YAML of
                                                     `--capacity`, as JSON or YAML)
                          {"Reset": true}            every type unlimited again, no injected faults
    GET  /_lab/checkpoints?ClusterName=NAME   the cluster's checkpoints (slurmlab checkpoint list)
    GET  /_lab/metrics?ClusterName=NAME[&Last=N]   its sagemaker-observability extension (null when it has
                          none) and the metrics samples the engine kept (docs/adr/0017's shape), oldest
                          first: {"ClusterName", "Extension", "Samples"} (what the console's charts draw)
    POST /_lab/checkpoints {"ClusterName": "demo", "Tag": "step-3", "Action": "Create" | "Restore" | "Delete"}
                          Create and Restore answer {"OperationId"} at once (the engine does the work;
                          the cluster's events say when it is done); Delete answers when it is gone
    POST /_lab/groups     {"ClusterName": "demo", "InstanceGroupName": "compute", "Action": "Resume"}
                          a protected group (its nodes failed 5 times in a row) tries again
"""

from __future__ import annotations

import json
import time
from typing import Any

from lab import __version__, capacity
from lab.api import model, operations
from lab.api.model import ApiError
from lab.spec.problems import Problem, SpecInvalid

EVENTS_IN_STATE = 100
SAMPLES_KEPT = 120  # the store's ring of metrics samples per cluster (docs/adr/0017)


def get(lab: operations.Lab, path: str, query: str) -> dict:
    """The JSON GETs under /_lab/ (the server answers /_lab/health and /_lab/assets/ itself)."""
    from urllib.parse import parse_qs

    q = {k: v[0] for k, v in parse_qs(query).items()}
    if path == "/_lab/state":
        return state(lab)
    if path == "/_lab/capacity":
        return capacity_state(lab.store)
    if path == "/_lab/checkpoints":
        return {"Checkpoints": checkpoints_of(lab, q.get("ClusterName", ""))}
    if path == "/_lab/metrics":
        return metrics(lab, q.get("ClusterName", ""), q.get("Last"))
    raise ApiError("ResourceNotFound", f"path {path[:100]!r}: nothing here; GET / (console), /_lab/state, /_lab/capacity, "
                   "/_lab/checkpoints, /_lab/metrics, /_lab/health, /_lab/assets/chart.min.js; SageMaker's API is POST /", 404)


def apply_capacity(st, cap: capacity.CapacityFile, now: float | None = None) -> None:
    """Limits now, arrivals counted from now, faults if given (lab.capacity.apply does it all)."""
    capacity.apply(st, cap, now)


def capacity_state(st) -> dict:
    from lab import capacity

    return capacity.state(st)


def set_capacity(st, raw: bytes, content_type: str = "") -> dict:
    text = raw.decode("utf-8", errors="replace")
    body: Any = None
    try:
        body = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError:
        if "json" in content_type:
            raise ApiError("SerializationException", "the body is not valid JSON") from None
    if isinstance(body, dict) and ("InstanceType" in body or "Available" in body):
        problems = []
        t, a = body.get("InstanceType"), body.get("Available")
        extra = set(body) - {"InstanceType", "Available"}
        for k in sorted(extra):
            problems.append(Problem((k,), "unknown field", "give InstanceType and Available"))
        if not isinstance(t, str):
            problems.append(Problem(("InstanceType",), "missing (required)" if t is None else "expected a string"))
        else:
            from lab.spec.catalog import check_instance_type

            try:
                check_instance_type(t)
            except Exception as e:  # noqa: BLE001 - the catalog's message names the close valid types
                problems.append(Problem(("InstanceType",), str(getattr(e, "message", e)).splitlines()[0]))
        if a == "unlimited":
            a = None
        if a is not None and (not isinstance(a, int) or isinstance(a, bool) or a < 0):
            problems.append(Problem(("Available",), f"expected a whole number >= 0, null or \"unlimited\", got {a!r}"[:200]))
        if problems:
            raise model.validation_error(problems)
        st.set_capacity(t, a)
        st.retry_now(t)
        return capacity_state(st)
    if isinstance(body, dict) and body.get("Reset") is True and len(body) == 1:
        for t in list(st.capacity()):
            st.set_capacity(t, None)
            st.retry_now(t)
        if hasattr(st, "set_faults"):
            st.set_faults(0, 0)
        return capacity_state(st)
    try:
        cap = capacity.parse(text, "<request body>")
    except SpecInvalid as e:
        raise model.validation_error(e.problems) from None
    except Exception as e:  # noqa: BLE001 - YAML errors and the like: a bad document, never a crash
        raise ApiError("ValidationException", f"not a capacity document: {str(e).splitlines()[0][:300]}") from None
    apply_capacity(st, cap)
    return capacity_state(st)


def state(lab: operations.Lab) -> dict:
    """Everything the console shows, in one answer."""
    from lab.control import clusters
    from lab.engine.hubwatch import enabled

    out = []
    for c in lab.store.clusters():
        try:
            d = clusters.describe(lab.store, c.name)
            described = operations.describe_cluster(lab, {"ClusterName": c.name})
            nodes = clusters.list_nodes(lab.store, c.name)
            events = operations.events_of(lab, c.name)
        except (ApiError, Exception):  # noqa: BLE001 - deleted meanwhile
            continue
        shaped = model.shape_named("DescribeClusterResponse", described)
        kinds = {g.name: g.node_type for g in lab.store.groups(c.name)}
        for g in shaped.get("InstanceGroups", []):
            g["NodeType"] = kinds.get(g.get("InstanceGroupName"))
        shaped["Lab"] = {k: (model.timestamp(v) if k.endswith("Time") and v else v) for k, v in (d.get("Lab") or {}).items()}
        if lab.students is not None:  # `serve --auth`: whose cluster it is (None: made without a student's key)
            shaped["Lab"]["Student"] = lab.students.owner(c.name, c.created_at)
        shaped["Nodes"] = [model.shape_named("ClusterNodeSummary", n) | {"NodeLogicalId": n.get("NodeLogicalId"),
                                                                          "PrivatePrimaryIp": n.get("PrivatePrimaryIp")}
                           for n in nodes]
        events = sorted(events, key=lambda e: model.timestamp(e.get("EventTime")) or 0)[-EVENTS_IN_STATE:]
        shaped["Events"] = [model.shape_named("ClusterEventSummary", e) for e in reversed(events)]
        if lab.hubs is not None and enabled(c.spec):  # Lab.Jupyter: the console's link (lab/api/hubs.py)
            shaped["Lab"]["Jupyter"] = lab.hubs.link(lab.store, c.name)
        shaped["Extensions"] = [{"ExtensionName": e.name, "ExtensionVersion": e.version, "Status": e.status}
                                for e in lab.store.extensions(c.name)]
        try:
            shaped["Checkpoints"] = checkpoints_of(lab, c.name)
        except Exception:  # noqa: BLE001 - the console shows the rest
            shaped["Checkpoints"] = []
        out.append(shaped)
    return {"Time": round(time.time(), 3), "Server": {"Version": __version__, "Provider": lab.provider,
                                                      "StateDir": str(lab.store.path.parent)},
            "Clusters": out, **capacity_state(lab.store)}


def checkpoints_of(lab: operations.Lab, name: str) -> list[dict]:
    from lab.control import checkpoints
    from lab.errors import LabError

    try:
        rows = checkpoints.listing(lab.store, name)
    except LabError as e:
        raise ApiError("ResourceNotFound", f"ClusterName: {e.message}") from None
    return [checkpoints.as_json(r) for r in rows]


def extension_of(lab: operations.Lab, name: str) -> dict | None:
    """The cluster's sagemaker-observability extension as the console shows it (None: not installed)."""
    from lab.control import extensions
    from lab.spec.extensions import OBSERVABILITY

    from lab.errors import LabError

    if lab.store.extension(name, OBSERVABILITY) is None:
        return None
    try:
        d = extensions.describe(lab.store, name, OBSERVABILITY)
    except LabError:  # deleted meanwhile
        return None
    x = d["ExtensionDetails"]
    return {"ExtensionName": x["ExtensionName"], "ExtensionVersion": x["ExtensionVersion"], "Status": x["Status"],
            "NodeSummary": d["NodeSummary"], **({"Health": d["Health"]} if "Health" in d else {})}


def metrics(lab: operations.Lab, name: str, last: str | None = None) -> dict:
    """GET /_lab/metrics: the cluster's observability extension and its newest `last` samples, oldest first."""
    problems = []
    if not name:
        problems.append(Problem(("ClusterName",), "missing (required)", "GET /_lab/metrics?ClusterName=NAME"))
    limit = SAMPLES_KEPT
    if last is not None:
        if last.isdigit() and 1 <= int(last) <= SAMPLES_KEPT:
            limit = int(last)
        else:
            problems.append(Problem(("Last",), f"{last[:40]!r} is not a whole number from 1 to {SAMPLES_KEPT}"))
    if problems:
        raise model.validation_error(problems)
    if lab.store.cluster(name) is None:
        raise ApiError("ResourceNotFound", f"ClusterName: no cluster named {name[:100]!r} (GET /_lab/state lists them)")
    return {"ClusterName": name, "Extension": extension_of(lab, name),
            "Samples": lab.store.extension_samples(name, limit)}


def _json_object(raw: bytes) -> dict:
    """A POST body that must be one JSON object (SerializationException otherwise)."""
    try:
        body = json.loads(raw.decode("utf-8", errors="replace") or "{}")
    except json.JSONDecodeError:
        raise ApiError("SerializationException", "the body is not valid JSON") from None
    if not isinstance(body, dict):
        raise ApiError("SerializationException", "the body must be a JSON object")
    return body


def checkpoint_action(lab: operations.Lab, raw: bytes) -> dict:
    """POST /_lab/checkpoints: Create, Restore or Delete one checkpoint of a cluster."""
    from lab.control import checkpoints
    from lab.errors import LabError

    body = _json_object(raw)
    problems = []
    for k in sorted(set(body) - {"ClusterName", "Tag", "Action"}):
        problems.append(Problem((k,), "unknown field", "give ClusterName, Tag and Action"))
    for k in ("ClusterName", "Tag"):
        if not isinstance(body.get(k), str):
            problems.append(Problem((k,), "missing (required)" if body.get(k) is None else "expected a string"))
    if body.get("Action") not in ("Create", "Restore", "Delete"):
        problems.append(Problem(("Action",), f"{body.get('Action')!r} is not Create, Restore or Delete"[:200]))
    if problems:
        raise model.validation_error(problems)
    name, tag, action = body["ClusterName"], body["Tag"], body["Action"]
    try:
        if action == "Delete":
            checkpoints.delete(lab.store, name, tag)
            return {"ClusterName": name, "Tag": tag, "Deleted": True}
        kind = checkpoints.CHECKPOINT if action == "Create" else checkpoints.RESTORE
        op = checkpoints.request(lab.store, name, tag, kind)
    except LabError as e:
        from lab.api.common import lab_error

        raise lab_error(e, "UpdateCluster") from None
    lab.engine()
    return {"ClusterName": name, "Tag": tag, "OperationId": op}



def group_action(lab: operations.Lab, raw: bytes) -> dict:
    """POST /_lab/groups {"ClusterName", "InstanceGroupName", "Action": "Resume"}: a protected group
    (lab/engine/watching.py) tries again."""
    from lab.control.commands import resume_group
    from lab.errors import LabError

    body = _json_object(raw)
    problems = [Problem((k,), "unknown field", "give ClusterName, InstanceGroupName and Action")
                for k in sorted(set(body) - {"ClusterName", "InstanceGroupName", "Action"})]
    for k in ("ClusterName", "InstanceGroupName"):
        if not isinstance(body.get(k), str):
            problems.append(Problem((k,), "missing (required)" if body.get(k) is None else "expected a string"))
    if body.get("Action") != "Resume":
        problems.append(Problem(("Action",), f"{body.get('Action')!r} is not Resume"[:200]))
    if problems:
        raise model.validation_error(problems)
    try:
        out = resume_group(lab.store, body["ClusterName"], body["InstanceGroupName"])
    except LabError as e:
        raise ApiError("ResourceNotFound", e.message) from None
    lab.engine()
    return out
