"""Cluster extensions (Create/Describe/List/Update/DeleteClusterExtension, ListClusterExtensionVersions):
the request side (docs/adr/0017-cluster-extensions.md).

Each change checks the whole request before it writes anything (a cluster that is not there or is
not Continuous, an unknown name or version, a bad setting: an error naming the field, nothing
changed), then writes the extension's row and one event (ResourceType Cluster, the model has no
other for an extension) in one transaction. It never touches a node: the engine makes every running
node match the row (lab/engine/extensions.py) and writes what it found (status, nodes, health).
"""

from __future__ import annotations

import time
import uuid

from lab.control.views import get
from lab.engine import daemon
from lab.engine.plan import is_continuous
from lab.errors import Conflict, NotFound, UsageError
from lab.spec import extensions as catalogue
from lab.store.db import ExtensionRow, Store

REFUSED = ("Deleting", "Failed")  # cluster statuses that take no new extension


class NameTaken(Conflict):
    """The cluster has an extension of that name already (CreateClusterExtension: ResourceInUse)."""


def find(st: Store, cluster: str, ref: str, field: str = "ExtensionArn") -> ExtensionRow:
    """The cluster's extension that `ref` names (its ARN, or its name: the CLI's form)."""
    get(st, cluster)
    for e in st.extensions(cluster):
        if ref in (e.arn, e.name):
            return e
    raise NotFound(f"{field}: cluster '{cluster}' has no extension {ref!r}",
                   f"ListClusterExtensions shows its extensions (slurmlab list-cluster-extensions {cluster})")


def create(st: Store, cluster: str, name: str, version: str | None = None, configuration: str | None = None,
           tags: list[dict] | None = None, *, start_engine: bool = False) -> ExtensionRow:
    """Record an extension to install on every running node of the cluster (status Creating)."""
    c = get(st, cluster)
    if c.status in REFUSED or not is_continuous(c):
        legacy = "" if is_continuous(c) else " in the legacy mode (NodeProvisioningMode is not Continuous)"
        raise UsageError(f"ClusterArn: cluster '{cluster}' is {c.status}{legacy}: an extension goes on a cluster "
                         "with NodeProvisioningMode Continuous that is not Deleting or Failed",
                         "create the cluster with NodeProvisioningMode: Continuous (UpdateCluster can set it)")
    version = catalogue.pick_version(name, version)
    config = catalogue.parse(configuration)
    catalogue.check(config, version)
    config = catalogue.merge({}, config)  # nulls (defaults) out
    now = time.time()
    row = ExtensionRow(cluster=cluster, name=name, arn=catalogue.arn(c.arn, name, uuid.uuid4().hex[:12]),
                       version=version, config=config, settings=catalogue.settings(config), status="Creating",
                       created_at=now, modified_at=now, tags=list(tags or []))
    with st.tx():
        if not st.add_extension(row):
            raise NameTaken(f"ExtensionName: cluster '{cluster}' has the extension {name} already (one per name)",
                            "UpdateClusterExtension changes its version or configuration")
        st.add_event(cluster, "Cluster", "Info", f"CreateClusterExtension: {name} {version} "
                     f"(configuration {catalogue.shown(row.settings)})"[:500], when=now)
    if start_engine:
        daemon.ensure_running()
    return row


def _changeable(st: Store, cluster: str, ref: str, op: str) -> ExtensionRow:
    c = get(st, cluster)
    e = find(st, cluster, ref)
    if e.status == "Deleting" or c.status == "Deleting":
        what = f"cluster '{cluster}'" if c.status == "Deleting" else f"extension {e.name}"
        raise Conflict(f"ExtensionArn: {what} is Deleting: no {op} now", "wait until it is gone")
    return e


def update(st: Store, cluster: str, ref: str, version: str | None = None, configuration: str | None = None, *,
           start_engine: bool = False) -> ExtensionRow:
    """A later version and/or settings (merged into the ones given before, RFC 7386: null = the
    default); the engine applies it to every running node again (status Updating)."""
    e = _changeable(st, cluster, ref, "UpdateClusterExtension")
    new = e.version if version is None else catalogue.pick_version(e.name, version)
    if catalogue.later(e.version, new):
        raise UsageError(f"ExtensionVersion: {new} is older than the installed {e.version}: an extension only "
                         "moves to a later version", f"give {e.version} or later (ListClusterExtensionVersions)")
    patch = catalogue.parse(configuration)
    catalogue.check(patch, new)
    config = catalogue.merge(e.config, patch)
    catalogue.check(config, new)  # the settings kept must suit the version too
    values, now = catalogue.settings(config), time.time()
    with st.tx():
        if find(st, cluster, ref).modified_at != e.modified_at:
            raise Conflict(f"ExtensionArn: extension {e.name} changed while this request was checked",
                           "send it again")
        st.update_extension(cluster, e.name, version=new, config=config, settings=values, modified_at=now,
                            status="Creating" if e.status in ("Creating", "CreateFailed") else "Updating", message="")
        st.add_event(cluster, "Cluster", "Info", f"UpdateClusterExtension: {e.name} {e.version} -> {new} "
                     f"(configuration {catalogue.shown(values)})"[:500], when=now)
    if start_engine:
        daemon.ensure_running()
    return find(st, cluster, ref)


def delete(st: Store, cluster: str, ref: str, *, start_engine: bool = False) -> ExtensionRow:
    """Mark the extension Deleting: the engine removes it from every node, then the row goes."""
    e = _changeable(st, cluster, ref, "DeleteClusterExtension")
    now = time.time()
    with st.tx():
        st.update_extension(cluster, e.name, status="Deleting", modified_at=now, message="", failed={}, probed_at=None)
        st.add_event(cluster, "Cluster", "Info", f"DeleteClusterExtension: {e.name} {e.version}", when=now)
    if start_engine:
        daemon.ensure_running()
    return e


# ------------------------------------------------------------------------------------ views
def node_summary(st: Store, e: ExtensionRow) -> dict:
    """TotalCount: the cluster's running nodes; ActiveCount: those it is installed on that answer."""
    running = {n.name for n in st.nodes(e.cluster) if n.phase == "running"}
    active = running.intersection(e.installed) - set(e.unhealthy)
    return {"TotalCount": len(running), "ActiveCount": len(active)}


def describe(st: Store, cluster: str, ref: str) -> dict:
    """DescribeClusterExtension's answer: the details (every setting, defaults filled in), the node
    counts, and Health only when there is an issue."""
    e = find(st, cluster, ref)
    c = get(st, cluster)
    out = {"ExtensionDetails": {
        "ClusterArn": c.arn, "ExtensionArn": e.arn, "ExtensionName": e.name, "ExtensionVersion": e.version,
        "Status": e.status, "ConfigurationValues": catalogue.shown(e.settings), "CreationTime": e.created_at,
        "LastModifiedTime": e.modified_at}, "NodeSummary": node_summary(st, e)}
    if e.issues:
        out["Health"] = {"Issues": list(e.issues)}
    return out


def summaries(st: Store, cluster: str) -> list[dict]:
    """ListClusterExtensions' items, oldest first."""
    get(st, cluster)
    return [{"ExtensionArn": e.arn, "ExtensionName": e.name, "ExtensionVersion": e.version, "Status": e.status,
             "CreationTime": e.created_at} for e in st.extensions(cluster)]


def version_summaries(name: str) -> list[dict]:
    """ListClusterExtensionVersions' items, highest first (an unknown name: none, not an error)."""
    return [{"ExtensionVersion": v} for v in catalogue.versions(name)]
