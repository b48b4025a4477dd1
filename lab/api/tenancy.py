"""Students on a served lab (`slurmlab serve --auth`): whose cluster is whose, and their quotas.

The caller of a request (lab.api.common.CALLER, set by operations.call) is a student or None (no
--auth, or the lab's own console and controls). A student sees only the clusters they created
(lab.students.Registry keeps the owners); the instructor and None see every cluster. A request that
would take a student over a quota (clusters, nodes, memory) is refused, as ResourceLimitExceeded,
before anything is created: the check and the act hold one lock, so two requests cannot both pass.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from lab.api.common import CALLER, Lab
from lab.api.model import ApiError
from lab.students import Student
from lab.store.rows import ClusterRow

QUOTA_OPS = ("CreateCluster", "UpdateCluster", "BatchAddClusterNodes")


def student(lab: Lab) -> Student | None:
    """The student whose quota and ownership apply to this request (None: sees everything, no quota)."""
    who = CALLER.get()
    if lab.students is None or who is None or who.Instructor:
        return None
    return who


def quota_guard(lab: Lab, op: str):
    """The lock a quota check and its act hold together (nothing for an unlimited caller)."""
    if op in QUOTA_OPS and student(lab) is not None:
        return lab.students.quota_lock
    return contextlib.nullcontext()


def record_owner(lab: Lab, row: ClusterRow) -> None:
    """At CreateCluster: the new cluster is the caller's."""
    who = CALLER.get()
    if lab.students is not None and who is not None:
        lab.students.set_owner(row.name, row.created_at, who.Name)
        lab.students.forget_owners({c.name for c in lab.store.clusters()})


# ------------------------------------------------------------------------------------ quotas
@dataclass(frozen=True)
class Use:
    nodes: int
    memory_mib: int


def _memory(instance_type: str) -> int | None:
    from lab.spec import Catalog

    try:
        return Catalog.load().size(instance_type).memory_mib
    except Exception:  # noqa: BLE001 - an unknown type: the spec check refuses the request with its own message
        return None


def _holdings(lab: Lab, who: Student) -> dict[str, Use]:
    out = {}
    for c in lab.store.clusters():
        if lab.students.owner(c.name, c.created_at) == who.Name:
            groups = lab.store.groups(c.name)
            out[c.name] = Use(sum(g.target_count for g in groups), sum(g.target_count * g.memory_mib for g in groups))
    return out


def _check(who: Student, held: dict[str, Use], cluster: str, after: Use, new_cluster: bool) -> None:
    """Refuse if the holdings with `cluster` at `after` exceed a limit that the request raises."""
    q = who.Quota
    before = held.get(cluster, Use(0, 0))
    total = {**held, cluster: after}
    fix = (f"delete clusters or nodes first, or ask the instructor to raise it (slurmlab students set-quota {who.Name} "
           "{opt} N); nothing was created or changed")
    names = ", ".join(sorted(held)) or "none"
    if new_cluster and q.MaxClusters is not None and len(total) > q.MaxClusters:
        raise ApiError("ResourceLimitExceeded", f"quota: student '{who.Name}' may hold {q.MaxClusters} cluster(s) "
                       f"(MaxClusters) and holds {len(held)} ({names}); " + fix.format(opt="--max-clusters"))
    nodes = sum(u.nodes for u in total.values())
    if q.MaxNodes is not None and nodes > q.MaxNodes and after.nodes > before.nodes:
        raise ApiError("ResourceLimitExceeded", f"quota: student '{who.Name}' may hold {q.MaxNodes} node(s) (MaxNodes, "
                       f"the InstanceCount of every group of every cluster) and holds "
                       f"{sum(u.nodes for u in held.values())} (clusters: {names}); this request would make it {nodes}; "
                       + fix.format(opt="--max-nodes"))
    mem = sum(u.memory_mib for u in total.values())
    if q.MaxMemoryMiB is not None and mem > q.MaxMemoryMiB and after.memory_mib > before.memory_mib:
        raise ApiError("ResourceLimitExceeded", f"quota: student '{who.Name}' may hold {q.MaxMemoryMiB} MiB of node memory "
                       f"(MaxMemoryMiB: nodes x their instance type's memory) and holds "
                       f"{sum(u.memory_mib for u in held.values())} MiB (clusters: {names}); this request would make it "
                       f"{mem} MiB; " + fix.format(opt="--max-memory-mib"))


def check_create(lab: Lab, spec) -> None:
    """CreateCluster of a checked spec (lab.spec.ClusterSpec)."""
    who = student(lab)
    if who is None:
        return
    nodes = mem = 0
    for g in spec.InstanceGroups:
        nodes += g.InstanceCount
        mem += g.InstanceCount * (_memory(g.instance_type) or 0)
    _check(who, _holdings(lab, who), spec.name, Use(nodes, mem), new_cluster=True)


def check_update(lab: Lab, name: str, body: dict) -> None:
    """UpdateCluster: the groups it names get their new InstanceCount (and type), deleted ones go.
    Malformed parts are left to the engine's checks (they refuse the request anyway)."""
    who = student(lab)
    if who is None:
        return
    groups = {g.name: (g.target_count, g.memory_mib) for g in lab.store.groups(name)}
    for g in body.get("InstanceGroups") or []:
        if not isinstance(g, dict) or not isinstance(g.get("InstanceGroupName"), str):
            continue
        count, prev = g.get("InstanceCount"), groups.get(g["InstanceGroupName"])
        itype = g.get("InstanceType") or ((g.get("InstanceRequirements") or {}).get("InstanceTypes") or [None])[0]
        mem = _memory(itype) if isinstance(itype, str) else (prev[1] if prev else None)
        if isinstance(count, int) and mem is not None:
            groups[g["InstanceGroupName"]] = (count, mem)
    for d in body.get("InstanceGroupsToDelete") or []:
        if isinstance(d, str):
            groups.pop(d, None)
    after = Use(sum(c for c, _ in groups.values()), sum(c * m for c, m in groups.values()))
    _check(who, _holdings(lab, who), name, after, new_cluster=False)


def check_add(lab: Lab, name: str, nodes_to_add: list[dict]) -> None:
    """BatchAddClusterNodes: each group grows by its IncrementTargetCountBy."""
    who = student(lab)
    if who is None:
        return
    held = _holdings(lab, who)
    per = {g.name: g.memory_mib for g in lab.store.groups(name)}
    now = held.get(name, Use(0, 0))
    more = [(n.get("IncrementTargetCountBy") or 0, per.get(n.get("InstanceGroupName"), 0)) for n in nodes_to_add]
    _check(who, held, name, Use(now.nodes + sum(k for k, _ in more), now.memory_mib + sum(k * m for k, m in more)),
           new_cluster=False)
