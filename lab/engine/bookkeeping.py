"""What the engine writes down (`Records`): node records, failures and backoff, a group's failures in a
row (protected mode), statuses, operations, rollback, capacity arrivals. Quick store writes only, on
the engine's loop. It also keeps what every other part of the engine reads of the current pass: the
cluster's rows (`snap`), its operations in flight (`ops`), the fault injections (`faults`), and which
clusters' provider layout must be written again before a launch (`dirty`, `prepared`)."""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Callable

from lab.box.releases import pinned_box
from lab.engine import plan as planner
from lab.engine import recovery
from lab.engine.plan import NO_RETRY, Action
from lab.engine.states import Phase, Status
from lab.providers.base import MachineSpec, Placement, Provider, in_thread, role_templates_of, start_of, state_disk_name
from lab.store.db import ClusterRow, GroupRow, NodeRow, Store

log = logging.getLogger(__name__)

BACKOFF_BASE = 10.0
BACKOFF_MAX = 300.0
SCALING = {"CreateCluster", "UpdateCluster", "BatchAddClusterNodes", "BatchDeleteClusterNodes"}
HEALTH_CHECK = "DeepHealthCheck"  # StartClusterHealthCheck (lab/control/health.py)
DISK_PAUSED = "paused (disk full):"
# A VM that runs but does not answer SSH (Ansible: unreachable) this many configure attempts in a row is
# rebooted: found by CI, a guest whose network died right after its first SSH answer, retried for ever.
UNREACHABLE_REBOOT = 3
PERMANENT_HINT = "not retried: BatchReplaceClusterNodes replaces it, BatchDeleteClusterNodes removes it"


def backoff(attempts: int, rng: random.Random, base: float = BACKOFF_BASE, cap: float = BACKOFF_MAX) -> float:
    """Exponential backoff with full jitter in [d/2, d], d = min(cap, base * 2^(attempts-1))."""
    d = min(cap, base * 2 ** max(0, attempts - 1))
    return d / 2 + rng.random() * d / 2


def instance_id(cluster: str, node: str, prefix: str = "i-", generation: int = 0) -> str:
    """The node's instance id: stable for one instance, new after a replacement (generation)."""
    key = f"{cluster}/{node}" if not generation else f"{cluster}/{node}#{generation}"
    return prefix + hashlib.sha256(key.encode()).hexdigest()[:17]


# A failed stress of the instance itself (its CPU, memory or disk) replaces it; any other failure (a
# daemon down, no answer to srun) reboots it first, as HyperPod's UnschedulablePendingReboot.
HARDWARE = ("InstanceStress: cpu", "InstanceStress: memory", "InstanceStress: disk")


def health_outcome(failures: list[str], recovery: str) -> str:
    """What a node's deep health check result does: "passed", "reboot", "replace" (NodeRecovery
    Automatic) or "failed" (NodeRecovery None: Failure until BatchRebootClusterNodes or
    BatchReplaceClusterNodes)."""
    if not failures:
        return "passed"
    if recovery != "Automatic":
        return "failed"
    return "replace" if any(f.startswith(HARDWARE) for f in failures) else "reboot"


def state_disk_of(c: ClusterRow, node_type: str) -> str | None:
    """The controller's state disk (it outlives the VM: docs/adr/0007); other nodes have none."""
    return state_disk_name(c.name, c.created_at) if node_type == "Controller" else None


def _after_new_instance(pending: str | None) -> dict:
    """A fresh instance has nothing to health-check, and a moving node's new VM only attaches."""
    if pending in planner.HEALTH_MARKS:
        return {"pending": None}
    return {"pending": planner.MOVE_ATTACH} if pending == planner.MOVE_DETACH else {}


def _no_health_mark(cluster: str, node: str, store) -> dict:
    """{"pending": None} when the node waits for a deep health check (a lost VM has nothing to check)."""
    n = store.node(cluster, node)
    return {"pending": None} if n is not None and n.pending in planner.HEALTH_MARKS else {}


class Records:
    def __init__(self, store: Store, clock: Callable[[], float], rng: random.Random, *,
                 backoff_base: float = BACKOFF_BASE, backoff_max: float = BACKOFF_MAX,
                 protect_after: int = recovery.PROTECT_AFTER):
        self.store = store
        self.clock = clock
        self.rng = rng
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.protect_after = protect_after
        self.snap: dict[str, tuple[ClusterRow, list[GroupRow], dict[str, GroupRow], list[NodeRow]]] = {}
        self.ops: dict[str, list] = {}  # this pass's operations in flight, per cluster
        self.faults: dict = {}  # this pass's fault injections (lab/capacity.py)
        self.dirty: set[str] = set()  # clusters whose provider layout changed since it was written
        self.prepared: set[str] = set()  # clusters whose layout this engine wrote at least once

    def forget(self, cluster: str) -> None:
        """The cluster is gone (or its layout must be written afresh)."""
        self.prepared.discard(cluster)
        self.dirty.discard(cluster)

    def needs_prepare(self, cluster: str) -> bool:
        return cluster in self.dirty or cluster not in self.prepared

    # ------------------------------------------------------------------ statuses, operations
    def statuses(self, c: ClusterRow, groups: list[GroupRow], nodes: list[NodeRow], p: planner.Plan) -> None:
        name = c.name
        for g in groups:
            st = p.group_status.get(g.name)
            if st and st != g.status:
                self.store.update_group(name, g.name, status=st)
                self.store.add_event(name, "InstanceGroup", "Info" if st != Status.DEGRADED else "Warning",
                                     f"instance group {g.name} is {st}", grp=g.name,
                                     operation_id=self.op_of(name, group=g.name))
        if p.cluster_status and p.cluster_status != c.status:
            vals = {"status": p.cluster_status}
            if c.in_service_at is None:
                vals["in_service_at"] = self.clock()
            self.store.update_cluster(name, **vals)
            self.store.add_event(name, "Cluster", "Info", f"cluster {name} is {p.cluster_status}")
        if p.full_size and c.full_size_at is None and nodes:
            self.store.update_cluster(name, full_size_at=self.clock())
            self.store.add_event(name, "Cluster", "Info", f"cluster {name} reached its full size")
        # operations in flight: done when their groups (or nodes) are settled
        by_name = {n.name: n for n in nodes}
        gnames = {g.name for g in groups}
        for op in self.ops.get(name, []):
            if op.kind in ("UpdateClusterSoftware", "AutoPatch"):
                continue  # lab/engine/rolling.py and lab/engine/patching.py end them
            if op.kind in SCALING:
                done = all(g in p.settled or g not in gnames for g in op.groups)
                if op.kind == "BatchDeleteClusterNodes":
                    done = done and not any(x in by_name for x in op.nodes)
            else:  # a deep health check is done too when a node it failed is left Failure (NodeRecovery None)
                done = all(x not in by_name or (by_name[x].phase == Phase.RUNNING and not by_name[x].pending)
                           or (op.kind == HEALTH_CHECK and planner.failed_for_good(by_name[x])) for x in op.nodes)
            if done:
                self.store.finish_operation(op.id, "Completed", when=self.clock())
                self.store.add_event(name, "Cluster", "Info", f"operation {op.kind} completed", operation_id=op.id)

    def op_of(self, cluster: str, node: str | None = None, group: str | None = None) -> str | None:
        """The newest operation in flight about this node (or group), for its events."""
        for op in reversed(self.ops.get(cluster) or []):
            if (node and node in op.nodes) or (group and group in op.groups):
                return op.id
        return None

    def rollback(self, c: ClusterRow, a: Action) -> None:
        """Legacy mode: a group cannot reach its count. A create rolls back to nothing (then Failed);
        an update goes back to the groups and counts it started from."""
        name, msg = c.name, a.reason
        ops = self.store.operations(name, "InProgress")
        if c.status == Status.CREATING or c.in_service_at is None:
            self.store.update_cluster(name, status=Status.ROLLING_BACK, failure_message=msg)
            self.store.update_group(name, a.group, status=Status.FAILED)
            for op in ops:
                self.store.finish_operation(op.id, "Failed", msg, when=self.clock())
            self.store.add_event(name, "Cluster", "Error", f"cluster {name} is RollingBack: {msg}", grp=a.group)
            return
        undo = next((op.undo for op in ops if op.kind in SCALING and op.undo), None)
        with self.store.tx():
            if undo:
                before = {g["name"]: g for g in undo.get("groups", [])}
                for g in self.store.groups(name):
                    if g.name not in before:
                        self.store.update_group(name, g.name, status=Status.DELETING, target_count=0)
                for gd in before.values():
                    self.store.put_group(GroupRow(**{**gd, "status": Status.UPDATING}))
                self.store.update_cluster(name, spec=undo["spec"])
            self.store.update_cluster(name, status=Status.ROLLING_BACK, failure_message=f"UpdateCluster rolled back: {msg}")
            for op in ops:
                self.store.finish_operation(op.id, "Failed", msg, when=self.clock())
        self.store.add_event(name, "Cluster", "Error", f"cluster {name} is RollingBack the update: {msg}", grp=a.group)

    # ------------------------------------------------------------------ capacity
    def apply_arrivals(self) -> None:
        now = self.clock()
        for aid, t, due, count in self.store.pending_arrivals():
            if due > now:
                continue
            res = self.store.apply_arrival(aid)
            if res is None:
                continue
            waiting = self.store.retry_now(t)
            for c in self.store.clusters():
                if any(g.instance_type == t for g in self.store.groups(c.name)):
                    self.store.add_event(c.name, "Cluster", "Info",
                                         f"capacity arrived: {count} more {t} (now {res[1]} available); "
                                         f"{waiting} waiting node(s) retry now")

    def capacity_released(self, *instance_types: str | None) -> None:
        """Nodes of these types left: waiting nodes of the types try again at once."""
        for t in instance_types:
            if t:
                self.store.retry_now(t)

    # ------------------------------------------------------------------ failures
    def fail(self, cluster: str, node: str, message: str, *, keep_phase: bool = False,
              permanent: bool = False, level: str = "Error", counted: bool = True) -> None:
        """The node failed a step: Failure with the reason; retried after a backoff, or never by
        itself when `permanent` (retry_at NO_RETRY: the planner leaves it alone)."""
        n = self.store.node(cluster, node)
        if n is None:
            return
        attempts = n.attempts + 1
        if permanent and not keep_phase:
            vals = {"message": f"{message[:400]} (permanent; {PERMANENT_HINT})", "attempts": attempts,
                    "retry_at": NO_RETRY, "phase": Phase.FAILED}
            said = f"{node}: {message[:500]} (permanent failure, not retried)"
        else:
            delay = backoff(attempts, self.rng, self.backoff_base, self.backoff_max)
            vals = {"message": message[:500], "attempts": attempts, "retry_at": self.clock() + delay}
            if not keep_phase:
                vals["phase"] = Phase.FAILED
            # as much of the reason as the node's message holds (a lifecycle failure's last lines end it)
            said = (f"{node}: {message[:500]} (retry {attempts} in {delay:.0f} s)" if level == "Error"
                    else f"{node}: {message} (next try in {delay:.0f} s)")
        self.store.update_node(cluster, node, **vals)
        self.store.add_event(cluster, "Instance", level, said, grp=n.grp, node=node,
                             operation_id=self.op_of(cluster, node, n.grp))
        if level == "Error" and not keep_phase and counted:
            self.group_failed(cluster, n.grp, f"{node}: {message}")  # protected mode

    # ------------------------------------------------------------------ protected mode
    def group_succeeded(self, cluster: str, group: str) -> None:
        """A node of the group joined Slurm (or, a controller or login node, is ready): the count of
        failures in a row starts over (a protected group stays so until resume_group)."""
        g = self._group_row(cluster, group)
        if g is not None and g.failures:
            self.store.update_group(cluster, group, failures=0, failed_at=None)

    def group_failed(self, cluster: str, group: str, why: str) -> None:
        """A node of the group failed, or was rebooted or replaced by recovery: count it; at
        protect_after in a row the group is protected (nothing of it retried until resume_group)."""
        g = self._group_row(cluster, group)
        if g is None:
            return
        now = self.clock()
        count, protect = recovery.count_failure(g, now, self.protect_after)
        vals = {"failures": count, "failed_at": now}
        if protect:
            vals["protected"] = (f"{count} failures in a row (the last: {why[:200]}); not retried until "
                                 f"`slurmlab resume-group {cluster} {group}`")
        self.store.update_group(cluster, group, **vals)
        if protect:
            self.store.add_event(cluster, "InstanceGroup", "Error", f"instance group {group} is protected: "
                                 f"{vals['protected']}"[:500], grp=group)

    def _group_row(self, cluster: str, group: str) -> GroupRow | None:
        """The group as the store has it now (its failure count changes within a pass)."""
        return next((x for x in self.store.groups(cluster) if x.name == group), None)

    def unreachable(self, cluster: str, node: str) -> None:
        """A configure found the node's VM unreachable: after UNREACHABLE_REBOOT attempts, reboot it."""
        n = self.store.node(cluster, node)
        if n is None or n.attempts < UNREACHABLE_REBOOT or n.pending:
            return
        msg = f"its VM runs but did not answer SSH in {n.attempts} configure attempts: rebooting it"
        self.store.update_node(cluster, node, pending="reboot", message=msg)
        self.store.add_event(cluster, "Instance", "Warning", f"{node}: {msg}", grp=n.grp, node=node,
                             operation_id=self.op_of(cluster, node, n.grp))

    def short(self, cluster: str, a: Action) -> None:
        """No capacity of the node's type: it waits (a Warning), retried with backoff or on arrival."""
        self.fail(cluster, a.node, a.reason, level="Warning")

    def keep_lost(self, cluster: str, a: Action) -> None:
        """NodeRecovery None: the VM died; the node stays Failure until someone replaces or deletes it."""
        g = self.group(cluster, a.group)
        why = (f"instance group {a.group} is protected (slurmlab resume-group {cluster} {a.group})" if g.protected
               else "NodeRecovery is None")
        msg = f"VM {a.reason}; not replaced because {why} (BatchReplaceClusterNodes replaces it, BatchDeleteClusterNodes removes it)"
        self.store.update_node(cluster, a.node, phase=Phase.LOST, message=msg, **_no_health_mark(cluster, a.node, self.store))
        self.store.add_event(cluster, "Instance", "Error", f"{a.node}: {msg}", grp=a.group, node=a.node)

    def disk_marks(self, cluster: str, nodes: list[NodeRow], seen: dict, p: planner.Plan) -> None:
        """A node whose VM waits, paused, for room on the pool's disk says so (one Warning); once it was
        resumed the mark goes (one Info). Such a node is never replaced: its work is intact."""
        for n in nodes:
            marked = (n.message or "").startswith(DISK_PAUSED)
            if n.name in p.disk_full and not marked:
                msg = f"{DISK_PAUSED} {seen[n.name].details.get('message') or 'the storage pool has no room'}"
                self.store.update_node(cluster, n.name, message=msg)
                self.store.add_event(cluster, "Instance", "Warning", f"{n.name}: {msg}", grp=n.grp, node=n.name)
            elif marked and n.name not in p.disk_full and n.name in seen:
                said = "resumed: the storage pool's disk had room again"
                self.store.update_node(cluster, n.name, message="" if n.phase == Phase.RUNNING else said)
                self.store.add_event(cluster, "Instance", "Info", f"{n.name}: {said}", grp=n.grp, node=n.name)

    # ------------------------------------------------------------------ node records
    async def place(self, c: ClusterRow, prov: Provider, groups: list[GroupRow], first: str) -> None:
        """Before the cluster's first node record, its host (its network lives there), when the provider
        has several: the choice asks every host, so it runs in a thread, off the engine's loop."""
        if not isinstance(prov, Placement):
            return
        host = await in_thread(c.name, prov.place, c.name, sum(x.target_count * x.memory_mib for x in groups),
                               sum(x.target_count * x.cpus for x in groups))
        if host and host != c.host:
            self.store.update_cluster(c.name, host=host)
            c.host = host
            self.store.add_event(c.name, "Cluster", "Info", f"cluster placed on host {host}",
                                 operation_id=self.op_of(c.name, group=first))

    def fill_addresses(self, c: ClusterRow, prov: Provider, nodes: list[NodeRow]) -> None:
        """Records written without an address (BatchAddClusterNodes) get one, and an instance id."""
        bare = [n for n in nodes if not n.address]
        if not bare:
            return
        used = {n.address for n in nodes if n.address}
        for n in bare:
            address, mac = prov.allocate(c.name, n.name, used, c.net_index)
            used.add(address)
            vals = {"address": address, "mac": mac}
            if not n.instance_id:
                vals["instance_id"] = instance_id(c.name, n.name, prov.id_prefix, n.generation)
            self.store.update_node(c.name, n.name, **vals)
            for k, v in vals.items():
                setattr(n, k, v)
        self.dirty.add(c.name)

    def create_node(self, c: ClusterRow, prov: Provider, g: GroupRow, ordinal: int, addresses: set[str]) -> None:
        name = f"{c.name}-{g.name}-{ordinal}"
        address, mac = prov.allocate(c.name, name, addresses, c.net_index)
        addresses.add(address)
        added = self.store.add_node(NodeRow(cluster=c.name, name=name, grp=g.name, ordinal=ordinal,
                                            instance_id=instance_id(c.name, name, prov.id_prefix),
                                            address=address, mac=mac, phase=Phase.PLANNED,
                                            image=self.pinned_box(c, prov, g.name)), if_absent=True)
        if added:
            self.dirty.add(c.name)
            self.store.add_event(c.name, "Instance", "Info", f"node {name} planned ({address})", grp=g.name, node=name,
                                 operation_id=self.op_of(c.name, group=g.name))

    @staticmethod
    def pinned_box(c: ClusterRow, prov: Provider, group: str) -> str | None:
        """The box of the group's ImageReleaseVersion (None: not pinned: the cluster's box)."""
        version = c.group_spec(group).get("ImageReleaseVersion")
        if not version:
            return None
        try:
            return pinned_box(version, prov.releases())
        except Exception as e:  # noqa: BLE001 - the cluster's box then; the pin was checked when it was set
            log.warning("cluster %s: the releases cannot be read (%s): group %s gets the cluster's box", c.name, e, group)
            return None

    def new_instance(self, cluster: str, n: NodeRow, prov: Provider, message: str) -> None:
        """The node gets a fresh instance under the same name (a new generation and instance id)."""
        gen = n.generation + 1
        self.store.update_node(cluster, n.name, phase=Phase.PLANNED, booted_at=None, configured_at=None, attempts=0,
                               retry_at=0, generation=gen, instance_id=instance_id(cluster, n.name, prov.id_prefix, gen),
                               message=message, **_after_new_instance(n.pending))

    async def prepare(self, c: ClusterRow, prov: Provider, gmap: dict[str, GroupRow], nodes: list[NodeRow]) -> None:
        box = (c.spec.get("Lab") or {}).get("Box")
        machines = [spec_of(c, gmap[n.grp], n) for n in nodes if n.grp in gmap and n.address]
        self.dirty.discard(c.name)
        self.prepared.add(c.name)
        await prov.prepare_async(c.name, machines, c.net_index, box)

    def machine(self, cluster: str, n: NodeRow) -> MachineSpec:
        g = self.group(cluster, n.grp)
        c = self.snap[cluster][0] if cluster in self.snap else self.store.cluster(cluster)
        return spec_of(c, g, n)

    @staticmethod
    def fork_groups(c: ClusterRow, prov: Provider, gmap: dict[str, GroupRow], nodes: list[NodeRow]) -> set[str]:
        """The groups whose nodes waiting to launch the provider would fork (plan(): fork slots)."""
        waiting = {n.grp: n for n in nodes if n.phase in (Phase.PLANNED, Phase.LAUNCHING, Phase.FAILED) and n.grp in gmap}
        return {grp for grp, n in waiting.items() if prov.forks(c.name, spec_of(c, gmap[grp], n))}

    def group(self, cluster: str, group: str) -> GroupRow:
        snap = self.snap.get(cluster)
        g = snap[2].get(group) if snap else None
        if g is None:
            g = next(x for x in self.store.groups(cluster) if x.name == group)
        return g


def spec_of(c: ClusterRow, g: GroupRow, n: NodeRow) -> MachineSpec:
    """The VM the engine wants for node `n` of group `g`."""
    return MachineSpec(n.name, n.grp, g.cpus, g.memory_mib, n.mac, n.address, g.node_type, n.image,
                       state_disk_of(c, g.node_type), start_of(c.spec), role_template=role_templates_of(c.spec))
