"""Pure planning: from the recorded cluster and what libvirt shows, the next actions.

No I/O here; unit tests cover it branch by branch. The engine executes the actions elsewhere and
plans again (level-triggered).

Node phases (internal) and their HyperPod status:
  planned, launching, booted, configuring, configured, joining -> Pending
  running -> Running;  failed -> Failure (retried at retry_at);  removing -> ShuttingDown
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lab.capacity import short_of

from lab.store.db import ClusterRow, GroupRow, NodeRow

PENDING = {"planned", "launching", "booted", "configuring", "configured", "joining"}
VM_UP_PHASES = {"booted", "configuring", "configured", "joining", "running"}


def node_status(phase: str) -> str:
    if phase in PENDING:
        return "Pending"
    return {"running": "Running", "failed": "Failure", "removing": "ShuttingDown"}.get(phase, "Pending")


@dataclass(frozen=True)
class Action:
    kind: str  # create_node | launch | configure | join | lost | remove | delete_cluster
    node: str | None = None
    group: str | None = None
    ordinal: int | None = None
    batch: tuple[str, ...] = ()
    reason: str = ""


@dataclass
class Plan:
    actions: list[Action] = field(default_factory=list)
    cluster_status: str | None = None
    group_status: dict[str, str] = field(default_factory=dict)
    full_size: bool = False


def _current(nodes: list[NodeRow], group: str) -> int:
    return sum(1 for n in nodes if n.grp == group and n.phase == "running")


def plan(
    cluster: ClusterRow,
    groups: list[GroupRow],
    nodes: list[NodeRow],
    observed: dict[str, str],
    busy: set[str],
    now: float,
    limits: dict[str, int] | None = None,
    used: "Counter | None" = None,
) -> Plan:
    """`observed`: domain name -> libvirt state. `busy`: node names (and 'join') with work in flight.
    `limits`: simulated capacity per instance type (absent type: unlimited); `used`: instances
    held per type across the whole lab (every cluster)."""
    p = Plan()
    if cluster.status == "Deleting":
        if "delete" not in busy:
            p.actions.append(Action("delete_cluster"))
        return p
    if cluster.status in ("Failed", "RollingBack"):
        return p

    by_group: dict[str, list[NodeRow]] = {}
    for n in nodes:
        by_group.setdefault(n.grp, []).append(n)

    # 1. records for missing ordinals; surplus nodes leave (highest ordinal first)
    for g in groups:
        have = {n.ordinal for n in by_group.get(g.name, []) if n.phase != "removing"}
        for o in range(1, g.target_count + 1):
            if o not in have:
                p.actions.append(Action("create_node", group=g.name, ordinal=o))
        for n in by_group.get(g.name, []):
            if n.ordinal > g.target_count and n.phase != "removing" and n.name not in busy:
                p.actions.append(Action("remove", node=n.name, group=g.name))

    controller_groups = {g.name for g in groups if g.node_type == "Controller"}
    controller_ready = any(n.grp in controller_groups and n.phase == "running" for n in nodes)
    node_types = {g.name: g.node_type for g in groups}
    instance_types = {g.name: g.instance_type for g in groups}
    limits = limits or {}
    used = Counter(used or {})

    def launch_or_short(n: NodeRow) -> Action:
        t = instance_types.get(n.grp, "")
        why = short_of(t, limits, used)
        if why:
            return Action("short", node=n.name, group=n.grp, reason=why)
        used[t] += 1
        return Action("launch", node=n.name, group=n.grp)

    # 2. per node, the next step (controller first: nothing else starts before it runs)
    batch = []
    for n in nodes:
        if n.name in busy or n.phase == "removing":
            continue
        if n.ordinal > next((g.target_count for g in groups if g.name == n.grp), 0):
            continue
        is_ctl = n.grp in controller_groups
        if not is_ctl and not controller_ready:
            continue
        state = observed.get(n.name)
        if n.phase in VM_UP_PHASES and state != "running":
            p.actions.append(Action("lost", node=n.name, group=n.grp))
            continue
        if n.phase == "planned":
            p.actions.append(launch_or_short(n))
        elif n.phase == "failed" and n.retry_at <= now:
            if state == "running" and n.booted_at:
                p.actions.append(Action("configure", node=n.name, group=n.grp))
            else:
                p.actions.append(launch_or_short(n))
        elif n.phase == "booted":
            p.actions.append(Action("configure", node=n.name, group=n.grp))
        elif n.phase == "configured" and node_types.get(n.grp) == "Compute":
            batch.append(n.name)
    if batch and "join" not in busy:
        p.actions.append(Action("join", batch=tuple(sorted(batch))))

    # 3. statuses
    logins = [g.name for g in groups if g.node_type == "Login"]
    login_ready = not logins or any(n.grp in logins and n.phase == "running" for n in nodes)
    full = all(_current(nodes, g.name) >= g.target_count for g in groups)
    p.full_size = full
    for g in groups:
        cur = _current(nodes, g.name)
        failed = any(n.grp == g.name and n.phase == "failed" for n in nodes)
        if cur >= g.target_count and not any(n.grp == g.name and n.phase == "removing" for n in nodes):
            p.group_status[g.name] = "InService"
        elif failed:
            p.group_status[g.name] = "Degraded"
        elif cluster.status != "Creating" and g.status in ("InService", "Updating", "Degraded"):
            p.group_status[g.name] = "Updating"
        else:
            p.group_status[g.name] = "Creating"
    if cluster.status == "Creating" and controller_ready and login_ready:
        p.cluster_status = "InService"
    elif cluster.status == "Updating" and full:
        p.cluster_status = "InService"
    return p
