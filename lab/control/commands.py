"""The requests that change a cluster: create, update, delete (the batch node operations:
lab/control/batches.py).

Each writes desired state into the store in one transaction, recorded as an operation that
DescribeCluster's ActiveOperations shows until the engine sees it done, and, when asked, makes sure
the engine process runs; the engine does the work.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from lab.control.operations import new_op, scaling_of
from lab.control.views import arn, get
from lab.engine import daemon
from lab.engine.plan import NO_RETRY
from lab.errors import Conflict, UsageError
from lab.box.recipe import box_name
from lab.control.pins import check_pins, maintenance_changes
from lab.engine.rolling import cluster_box
from lab.providers import registry
from lab.store.db import ClusterRow, GroupRow, Store

MAX_CLUSTERS = 249  # the lab gives each cluster its own /24 network: 10.x.<1..249>


class NameTaken(Conflict):
    """CreateCluster: a cluster of that name exists."""


class ClusterLimit(Conflict):
    """CreateCluster: the lab holds MAX_CLUSTERS clusters already (one network index each)."""


def _continuous(c: ClusterRow) -> bool:
    return c.spec.get("NodeProvisioningMode") == "Continuous"


def check_open(c: ClusterRow, op: str) -> None:
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


def record_targets(st: Store, c: ClusterRow, kind: str, targets: dict[str, int], groups, nodes,
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
def _taken(name: str) -> NameTaken:
    return NameTaken(f"a cluster named '{name}' already exists",
                     f"pick another ClusterName, or delete it first: slurmlab delete-cluster {name}")


def check_new(st: Store, name: str) -> None:
    """A cluster named `name` may be created now: raises NameTaken or ClusterLimit (both Conflict)."""
    if st.cluster(name):
        raise _taken(name)
    if len(st.clusters()) >= MAX_CLUSTERS:
        raise ClusterLimit(f"the lab holds at most {MAX_CLUSTERS} clusters", "delete one first")


def create(st: Store, spec, provider: str = registry.DEFAULT, *, start_engine: bool = True,
           prepare_host: bool = True, cluster_arn: str | None = None,
           admit: Callable[[Any], None] | None = None) -> ClusterRow:
    """The one way a cluster is made: create-cluster, up and the API's CreateCluster all call it.
    Records a new cluster (status Creating) from a validated ClusterSpec; the engine builds it with
    `provider` (lab/providers/registry.py). In one transaction, in this order: the name and the lab's
    limit (NameTaken, ClusterLimit: both Conflict), the caller's own checks and writes (`admit(spec)`:
    a student's quota, a capacity file), the provider's host preparation (`preflight`: the box, libvirtd, no leftovers of the name; a test that
    records a real-VM cluster without a host passes prepare_host=False), then the records. When any
    of them fails nothing is recorded, and a clash or a quota never touches the host. Raises
    UsageError for an unknown provider."""
    info = registry.check(provider)
    stored, groups = _group_rows(spec.name, spec)
    users = (stored.get("Lab") or {}).get("Users")
    if users and "Password" in users:  # it goes to the accounts file (0600), not into the store
        stored["Lab"]["Users"] = {k: v for k, v in users.items() if k != "Password"}
    with st.tx():  # BEGIN IMMEDIATE: another process's create waits for this one
        check_new(st, spec.name)
        if admit is not None:
            admit(spec)
        if any(g.get("ImageReleaseVersion") for g in stored.get("InstanceGroups", [])):
            check_pins(stored["InstanceGroups"], registry.releases(provider), spec.box or box_name())
        if prepare_host:
            registry.make(provider).preflight(spec.box, spec.name)
        used = {c.net_index for c in st.clusters()}
        net_index = next(i for i in range(1, MAX_CLUSTERS + 1) if i not in used)
        row = ClusterRow(name=spec.name, arn=cluster_arn or arn(spec.name), status="Creating", failure_message=None, spec=stored,
                         provider=provider, net_index=net_index, created_at=time.time())
        try:
            st.add_cluster(row, groups)
        except sqlite3.IntegrityError:  # the store's own guard of the name
            raise _taken(spec.name) from None
        if spec.users:  # in the transaction: written only for a cluster that is recorded, before the engine sees it
            from lab import users as accounts

            accounts.create(spec.name, spec.users)
        op = new_op(spec.name, "CreateCluster", [g.name for g in groups],
                     scaling=scaling_of(st, spec.name, {g.name: (0, g.target_count) for g in groups}, None, stored))
        st.add_operation(op)
        st.add_event(spec.name, "Cluster", "Info", f"cluster {spec.name} requested"
                     + (f" (simulated: provider {provider})" if info.simulated else "") + ": "
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


def remove_leftovers(st: Store, name: str, provider: str = registry.DEFAULT) -> list[str]:
    """`delete-cluster NAME --leftovers`: what the host holds under a name no cluster of this lab has
    (lab/providers/leftovers.py), removed; what went. Conflict when the lab has the cluster."""
    registry.check(provider)
    if st.cluster(name):
        raise Conflict(f"cluster {name} is a cluster of this lab: --leftovers is for a name it does not have",
                       f"slurmlab delete-cluster {name} deletes it with everything it has")
    return registry.make(provider).leftovers(name, remove=True)


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
        check_open(c, "UpdateCluster")
        if any(g.get("ImageReleaseVersion") for g in stored.get("InstanceGroups", [])):
            check_pins(stored["InstanceGroups"], registry.releases(c.provider), cluster_box(c))
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
        changes += maintenance_changes(c.spec, stored)
        st.add_event(name, "Cluster", "Info", f"UpdateCluster: {'; '.join(changes) or 'no change'}",
                     operation_id=op.id if op else None)
    if start_engine:
        daemon.ensure_running()
    return {"ClusterArn": c.arn}


def resume_group(st: Store, cluster: str, group: str) -> dict:
    """A protected group tries again: its count starts over and its failed nodes retry now."""
    c = st.cluster(cluster)
    if c is None:
        raise UsageError(f"no cluster named '{cluster}'", "slurmlab list-clusters shows the clusters")
    groups = {g.name: g for g in st.groups(cluster)}
    g = groups.get(group)
    if g is None:
        raise UsageError(f"cluster '{cluster}' has no instance group '{group}'",
                         f"its groups: {', '.join(groups) or 'none'}")
    with st.tx():
        st.update_group(cluster, group, failures=0, failed_at=None, protected=None)
        retried = 0
        for n in st.nodes(cluster):
            if n.grp == group and n.phase in ("failed", "lost") and n.retry_at != NO_RETRY:
                st.update_node(cluster, n.name, retry_at=0, **({"phase": "failed"} if n.phase == "lost" else {}))
                retried += 1
        st.add_event(cluster, "InstanceGroup", "Info", f"instance group {group} resumed"
                     + (f" (it was protected: {g.protected})" if g.protected else " (it was not protected)")
                     + (f"; {retried} failed node(s) retry now" if retried else ""), grp=group)
    return {"ClusterName": cluster, "InstanceGroupName": group, "WasProtected": g.protected is not None,
            "Retried": retried}
