"""Pure planning: from the recorded cluster and what the provider shows, the next actions.

No I/O here; unit tests cover it branch by branch. The engine executes the actions elsewhere and
plans again (level-triggered). One pass is linear in the number of nodes.

Node phases (internal) and their HyperPod status:
  planned, launching, booted, configuring, configured, joining, rebooting -> Pending
  running -> Running;  failed (retried at retry_at; never by itself when retry_at is NO_RETRY: a
  permanent launch failure), lost (not replaced: NodeRecovery None) -> Failure
  removing, replacing -> ShuttingDown

A phase found with no task in flight (the engine was killed, or just started) is resumed: launching
-> launch again (idempotent), configuring -> configure again, joining -> join again, removing ->
remove again, rebooting / replacing -> again.

Order (continuous mode): the controller launches first; the others launch once the controller's VM
is defined (its name among the observed VMs, any state) or it runs. Compute nodes configure as soon
as their VM is up; login nodes wait for the controller (sackd needs slurmctld); joins wait for it.
Configured compute nodes join in batches, one `scontrol reconfigure` each, after a short window
(`join_wait`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from lab.capacity import short_of
from lab.engine.slots import LAUNCH_PRIORITY, Slots
from lab.engine.states import Kind, Phase, Status
from lab.providers.base import DISK_FULL
from lab.store.db import ClusterRow, GroupRow, NodeRow

# A deep health check's marks on a running node (nodes.pending): asked for, then under way. Both show
# InstanceStatus DeepHealthCheckInProgress; the node stays `running` (a member of its group).
HEALTH_ASKED, HEALTH_CHECKING = "healthcheck", "checking"
HEALTH_MARKS = frozenset({HEALTH_ASKED, HEALTH_CHECKING})
# MoveClusterNodes (lab/control/moves.py): the node, already in its new group, leaves Slurm (detach), then
# is configured and joins again as a member of that group (attach).
MOVE_DETACH, MOVE_ATTACH = "detach", "attach"
# UpdateClusterSoftware (lab/engine/rolling.py): the node leaves Slurm like a moving node, then its VM is
# replaced with the new box (pending = replace).
UPDATE_DRAIN = "update"

PENDING = {Phase.PLANNED, Phase.LAUNCHING, Phase.BOOTED, Phase.CONFIGURING, Phase.CONFIGURED, Phase.JOINING, Phase.REBOOTING}
VM_UP_PHASES = {Phase.BOOTED, Phase.CONFIGURING, Phase.CONFIGURED, Phase.JOINING, Phase.RUNNING}
LEGACY_ATTEMPTS = 3
# retry_at of a node whose launch failed permanently (lab.providers.base.LaunchError, transient=False):
# it stays Failure until BatchReplaceClusterNodes / BatchRebootClusterNodes / BatchDeleteClusterNodes;
# in legacy mode its group cannot reach its count, so the create or update rolls back at once.
NO_RETRY = -1.0

# The join batching window: configured compute nodes wait for the ones still configuring, so that
# nodes finishing a few seconds apart share one join (one `scontrol reconfigure`). A batch joins
# when the newest member has been configured JOIN_QUIET_S ago, or the oldest JOIN_MAX_WAIT_S ago;
# at once if a member is `joining` (a join cut short by a crash) or no other compute node is in
# JOIN_COMING_PHASES.
JOIN_QUIET_S = 10.0
JOIN_MAX_WAIT_S = 30.0
JOIN_COMING_PHASES = frozenset({Phase.BOOTED, Phase.CONFIGURING})


def node_status(phase: str, pending: str | None = None) -> str:
    if phase == Phase.RUNNING and pending in HEALTH_MARKS:
        return "DeepHealthCheckInProgress"
    if pending == MOVE_DETACH and phase == Phase.RUNNING:
        return "DetachInProgress"
    if pending == UPDATE_DRAIN and phase == Phase.RUNNING:
        return "SystemUpdating"
    if pending == MOVE_ATTACH and phase not in (Phase.FAILED, Phase.LOST):
        return "AttachInProgress"
    if phase in PENDING:
        return "Pending"
    return {Phase.RUNNING: "Running", Phase.FAILED: "Failure", Phase.LOST: "Failure", Phase.REMOVING: "ShuttingDown",
            Phase.REPLACING: "ShuttingDown"}.get(phase, "Pending")


@dataclass(frozen=True)
class Action:
    # lab/engine/states.py Kind. A join's reason says which rule let it go: resume | alone | quiet |
    # max_wait (see join_wait()).
    kind: Kind
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
    settled: set[str] = field(default_factory=set)  # groups at their target, every node running, none leaving
    current: dict[str, int] = field(default_factory=dict)  # running nodes per group
    # seconds until the join window lets the configured batch go (None: no batch held by the window)
    join_wait: float | None = None
    boot_waiting: list[str] = field(default_factory=list)  # nodes that may launch but wait for a boot slot
    fork_waiting: list[str] = field(default_factory=list)  # nodes that may launch but wait for a fork slot
    disk_full: list[str] = field(default_factory=list)  # nodes whose VM is paused on a full pool disk


def is_continuous(cluster: ClusterRow) -> bool:
    return (cluster.spec or {}).get("NodeProvisioningMode") == "Continuous"


def node_recovery(cluster: ClusterRow) -> str:
    return (cluster.spec or {}).get("NodeRecovery") or "Automatic"


def failed_for_good(n: NodeRow) -> bool:
    """A permanent failure: the planner does not retry it."""
    return n.phase == Phase.FAILED and n.retry_at == NO_RETRY


def leaving(n: NodeRow) -> bool:
    return n.phase == Phase.REMOVING or n.pending == "delete"


def free_ordinals(members: list[NodeRow], k: int, names: set[str] = frozenset(), prefix: str = "") -> list[int]:
    """The k lowest ordinals (from 1) no node of the group holds and whose name (`prefix` + ordinal)
    no node of the cluster has (a node moved to another group keeps its name)."""
    taken = {n.ordinal for n in members}
    out, o = [], 1
    while len(out) < k:
        if o not in taken and f"{prefix}{o}" not in names:
            out.append(o)
        o += 1
    return out


def join_wait(batch: list[NodeRow], others_coming: bool, now: float,
              quiet_s: float = JOIN_QUIET_S, max_wait_s: float = JOIN_MAX_WAIT_S) -> tuple[float, str]:
    """(seconds until the batch may join, 0.0 = now; the rule that decides). `batch`: the compute nodes
    in phase configured / joining; `others_coming`: another compute node of the cluster is in
    JOIN_COMING_PHASES. A node with no configured_at (a row older than the column) counts as
    configured long ago."""
    if any(n.phase == Phase.JOINING for n in batch):
        return 0.0, "resume"  # a join cut short (engine killed): finish it at once
    if not others_coming:
        return 0.0, "alone"  # nobody else will be configured soon: no reason to wait
    stamps = [n.configured_at if n.configured_at is not None else float("-inf") for n in batch]
    quiet_left = quiet_s - (now - max(stamps))
    if quiet_left <= 0:
        return 0.0, "quiet"
    max_left = max_wait_s - (now - min(stamps))
    if max_left <= 0:
        return 0.0, "max_wait"
    return min(quiet_left, max_left), "window"


def group_settled(g: GroupRow, members: list[NodeRow]) -> bool:
    if g.status == Status.DELETING:
        return not members
    return (len(members) == g.target_count  # a health check does not unsettle a group: its nodes stay members
            and not any(leaving(n) or (n.pending and n.pending not in HEALTH_MARKS) for n in members)
            and all(n.phase == Phase.RUNNING for n in members))


def plan(
    cluster: ClusterRow,
    groups: list[GroupRow],
    nodes: list[NodeRow],
    observed: dict[str, str],
    busy: set[str],
    now: float,
    limits: dict[str, int] | None = None,
    used: "Counter | None" = None,
    *,
    max_attempts: int = LEGACY_ATTEMPTS,
    join_quiet_s: float = JOIN_QUIET_S,
    join_max_wait_s: float = JOIN_MAX_WAIT_S,
    boot_slots: int | None = None,
    fork_slots: int | None = None,
    fork_groups: frozenset[str] | set[str] = frozenset(),
) -> Plan:
    """`observed`: VM name -> state. `busy`: node names (and 'join', 'delete', 'rollback', 'io') with work
    in flight. `limits`: simulated capacity per instance type (absent type: unlimited); `used`: instances
    held per type across the whole lab; launches planned here are added to it (so one Counter shared by
    every cluster of a pass never over-commits). `join_quiet_s` / `join_max_wait_s`: the join batching
    window (join_wait()). `boot_slots`: how many VMs may boot at once (LAUNCH_PRIORITY); the nodes of
    `fork_groups` are forked, at most `fork_slots` at once, and take no boot slot."""
    p = Plan()
    if cluster.status == Status.DELETING:
        if "delete" not in busy:
            p.actions.append(Action(Kind.DELETE_CLUSTER))
        return p
    if cluster.status == Status.FAILED:
        return p
    if cluster.status == Status.ROLLING_BACK and cluster.in_service_at is None:
        # a legacy create that could not finish: everything goes, then Failed
        if "rollback" not in busy:
            p.actions.append(Action(Kind.ROLLBACK_CLUSTER))
        return p

    continuous = is_continuous(cluster)
    recovery = node_recovery(cluster)
    limits = limits or {}
    used = used if used is not None else Counter()
    gmap = {g.name: g for g in groups}
    by_group: dict[str, list[NodeRow]] = {g.name: [] for g in groups}
    names = set()
    for n in nodes:
        by_group.setdefault(n.grp, []).append(n)
        names.add(n.name)

    # 0. VMs the provider shows that no record owns: orphans (a record is written before any launch)
    for vm in observed:
        if vm not in names and vm not in busy:
            p.actions.append(Action(Kind.ORPHAN, node=vm))

    # 1. legacy mode: a group that cannot reach its count within its attempts -> roll back
    if not continuous and cluster.status in (Status.CREATING, Status.UPDATING):
        for n in nodes:
            g = gmap.get(n.grp)
            if g is None or g.status == Status.DELETING or leaving(n):
                continue
            if (n.phase == Phase.FAILED and n.attempts >= max_attempts) or n.phase == Phase.LOST or failed_for_good(n):
                why = n.message or n.phase
                p.actions = [Action(Kind.ROLLBACK, node=n.name, group=n.grp,
                                    reason=f"instance group {n.grp} could not reach {g.target_count} "
                                           f"instance(s) after {n.attempts} attempt(s): {why}")]
                return p

    # 2. counts: records for missing nodes; surplus nodes leave (not-running first, then highest ordinal)
    surplus: set[str] = set()
    for g in groups:
        members = by_group.get(g.name, [])
        active = [n for n in members if not leaving(n)]
        target = 0 if g.status == Status.DELETING else g.target_count
        if len(active) < target:
            for o in free_ordinals(members, target - len(active), names, f"{cluster.name}-{g.name}-"):
                p.actions.append(Action(Kind.CREATE_NODE, group=g.name, ordinal=o))
        elif len(active) > target:
            for n in sorted(active, key=lambda n: (n.phase == Phase.RUNNING, -n.ordinal))[: len(active) - target]:
                surplus.add(n.name)
        if g.status == Status.DELETING and not members:
            p.actions.append(Action(Kind.DROP_GROUP, group=g.name))
    # Leaving nodes that joined Slurm leave it first, in one batch (drain, slurm.conf, one reconfigure);
    # then each VM is destroyed. A join and a leave never run at once (both rewrite slurm.conf).
    leave_batch = []
    for n in nodes:
        if n.grp not in gmap and not leaving(n):
            surplus.add(n.name)  # its group is gone
        if (n.name in surplus or leaving(n)) and n.name not in busy:
            if n.phase == Phase.REMOVING and n.retry_at > now:
                continue  # a remove that failed waits for its retry time
            g = gmap.get(n.grp)
            if n.joined_at is not None and (g is None or g.node_type != "Controller"):
                leave_batch.append(n.name)
            else:
                p.actions.append(Action(Kind.REMOVE, node=n.name, group=n.grp))
    if leave_batch and "join" not in busy:
        p.actions.append(Action(Kind.LEAVE, batch=tuple(sorted(leave_batch))))

    controller_groups = {g.name for g in groups if g.node_type == "Controller"}
    controllers = [n for g in controller_groups for n in by_group.get(g, ())]
    controller_ready = any(n.phase == Phase.RUNNING for n in controllers)
    # Its VM exists (any state): the box volume it was created from is complete, so other `vagrant up`s
    # no longer race the first upload of the box into a fresh storage pool.
    controller_defined = controller_ready or any(n.name in observed for n in controllers)

    def launch_or_short(n: NodeRow, t: str) -> Action:
        why = short_of(t, limits, used)
        if why:
            return Action(Kind.SHORT, node=n.name, group=n.grp, reason=why)
        used[t] += 1
        return Action(Kind.LAUNCH, node=n.name, group=n.grp)

    # 3. per node, the next step. Continuous: the controller first; the others launch once its VM is
    # defined. Legacy: every VM launches at once. Compute nodes configure as soon as they are up (the
    # playbook needs only the node); login nodes wait for the controller (sackd needs slurmctld).
    batch: list[NodeRow] = []
    checks: list[str] = []  # running nodes a deep health check waits for (one task per cluster at a time)
    detach: list[str] = []  # running nodes moving to another group or to a new box: out of Slurm first
    others_coming = False  # a compute node on its way to `configured` (for the join window)
    to_launch: list[tuple[tuple, NodeRow, GroupRow, bool]] = []  # new launches, placed after the loop
    for n in nodes:
        if n.name in surplus or leaving(n):
            continue
        g = gmap.get(n.grp)
        if g is None:
            continue
        if g.node_type == "Compute" and n.phase in JOIN_COMING_PHASES:
            others_coming = True
        if observed.get(n.name) == DISK_FULL:  # paused until the pool has room (busy or not): the provider resumes it
            p.disk_full.append(n.name)
            continue
        if n.name in busy:
            continue
        is_ctl = g.node_type == "Controller"
        may_launch = is_ctl or not continuous or controller_defined
        may_configure = is_ctl or controller_ready or g.node_type == "Compute"
        state = observed.get(n.name)
        if n.pending == "replace" or n.phase == Phase.REPLACING:
            p.actions.append(Action(Kind.REPLACE, node=n.name, group=n.grp))
            continue
        if n.pending == "reboot" or n.phase == Phase.REBOOTING:
            p.actions.append(Action(Kind.REBOOT, node=n.name, group=n.grp, reason=state or "missing"))
            continue
        if n.phase in VM_UP_PHASES and state != "running":  # a protected group replaces nothing by itself
            kind = Kind.LOST if recovery == "Automatic" and not g.protected else Kind.KEEP_LOST
            p.actions.append(Action(kind, node=n.name, group=n.grp, reason=state or "missing"))
            continue
        if n.pending in HEALTH_MARKS and n.phase == Phase.RUNNING:
            checks.append(n.name)
            continue
        if n.pending in (MOVE_DETACH, UPDATE_DRAIN) and n.phase == Phase.RUNNING:
            detach.append(n.name)
            continue
        order = (LAUNCH_PRIORITY.get(g.node_type, 3), n.ordinal, n.name)
        if n.phase == Phase.PLANNED:
            if may_launch:
                to_launch.append((order, n, g, True))
        elif n.phase == Phase.LAUNCHING:
            if may_launch:  # resumed: it already holds its instance
                p.actions.append(Action(Kind.LAUNCH, node=n.name, group=n.grp))
        elif failed_for_good(n):
            continue  # Failure with its reason until someone replaces, reboots or deletes it
        elif n.phase == Phase.FAILED and n.retry_at <= now and not g.protected:
            if state == "running" and n.booted_at:
                if may_configure:
                    p.actions.append(Action(Kind.CONFIGURE, node=n.name, group=n.grp))
            elif may_launch:
                # its VM is there (stopped): start it again (it holds its instance); else a new one
                to_launch.append((order, n, g, not (state is not None and n.booted_at)))
        elif n.phase in (Phase.BOOTED, Phase.CONFIGURING):
            if may_configure:
                p.actions.append(Action(Kind.CONFIGURE, node=n.name, group=n.grp))
        elif n.phase in (Phase.CONFIGURED, Phase.JOINING):
            if g.node_type == "Compute":
                batch.append(n)
            elif may_configure:
                p.actions.append(Action(Kind.CONFIGURE, node=n.name, group=n.grp))
    # New launches in priority order, as many as the slots allow (a resumed launch holds one): forks
    # take fork slots, cold boots boot slots (lab/engine/slots.py)
    slots = Slots(nodes, boot_slots, fork_slots, fork_groups, {g.name for g in groups if g.node_type != "Compute"})
    for _, n, g, needs_capacity in sorted(to_launch, key=lambda x: x[0]):
        if slots.full(n):
            (p.fork_waiting if slots.forked(n) else p.boot_waiting).append(n.name)
            continue
        a = launch_or_short(n, g.instance_type) if needs_capacity else Action(Kind.LAUNCH, node=n.name, group=n.grp)
        p.actions.append(a)
        if a.kind == Kind.LAUNCH:
            slots.take(n)
    if checks and "healthcheck" not in busy:
        p.actions.append(Action(Kind.HEALTHCHECK, batch=tuple(sorted(checks))))
    # Moving nodes leave Slurm in one batch (like a leave, but the VM stays); a join waits for it.
    if detach and "join" not in busy and not leave_batch:
        p.actions.append(Action(Kind.DETACH, batch=tuple(sorted(detach))))
    # One join for every configured compute node (one reconfigure), once the controller runs, no other
    # slurm.conf change is in flight, and the batching window lets it go.
    if batch and "join" not in busy and not leave_batch and not detach and controller_ready:
        wait, why = join_wait(batch, others_coming, now, join_quiet_s, join_max_wait_s)
        if wait <= 0:
            p.actions.append(Action(Kind.JOIN, batch=tuple(sorted(n.name for n in batch)), reason=why))
        else:
            p.join_wait = wait

    # 4. statuses
    logins = [g.name for g in groups if g.node_type == "Login"]
    login_ready = not logins or any(n.phase == Phase.RUNNING for g in logins for n in by_group.get(g, ()))
    full = True
    for g in groups:
        members = by_group.get(g.name, [])
        cur = sum(1 for n in members if n.phase == Phase.RUNNING)
        p.current[g.name] = cur
        settled = group_settled(g, members)
        if settled:
            p.settled.add(g.name)
        if g.status == Status.DELETING:
            full = False
            continue
        if g.status == Status.FAILED:
            full = False
            continue
        active = [n for n in members if not leaving(n) and n.name not in surplus]
        if cur < g.target_count:
            full = False
        troubled = g.protected or any(n.slurm for n in active)  # lab/engine/recovery.py
        if settled and not troubled:
            p.group_status[g.name] = Status.IN_SERVICE
        elif troubled or any(n.phase in (Phase.FAILED, Phase.LOST) for n in active):
            p.group_status[g.name] = Status.DEGRADED
        elif cluster.status != Status.CREATING and g.status in (Status.IN_SERVICE, Status.UPDATING, Status.DEGRADED):
            p.group_status[g.name] = Status.UPDATING
        else:
            p.group_status[g.name] = Status.CREATING
    p.full_size = full
    if cluster.status == Status.CREATING:
        if (continuous and controller_ready and login_ready) or (not continuous and full):
            p.cluster_status = Status.IN_SERVICE
    elif cluster.status in (Status.UPDATING, Status.ROLLING_BACK) and full and all(
            g.name in p.settled for g in groups):
        p.cluster_status = Status.IN_SERVICE
    return p
