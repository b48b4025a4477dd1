"""The engine: plans from the store and what the provider observes, acts, observes again.

One asyncio loop. Providers and configurers may offer coroutines (`ensure_async`, ...: the sim
provider does), may say their plain methods are quick (`inline = True`), or else run in threads
(Vagrant, ansible-runner). A task per node step, one Slurm-config task per cluster (a join batch or
a leave batch: never both at once, both rewrite slurm.conf); a failing step marks its node Failure
with the reason and a retry time (exponential backoff with jitter), and never stops the pass.

Each cluster is built by the provider it was created with (`ClusterRow.provider`). The engine keeps
nothing it cannot rebuild: killed at any moment, a new engine on the same store resumes every
cluster from the recorded phases plus what the provider shows (docs/engine.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from lab.capacity import HOLDING, launch_fault
from lab.configure.inventory import ClusterContext
from lab.engine import plan as planner
from lab.engine.plan import JOIN_MAX_WAIT_S, JOIN_QUIET_S, LEGACY_ATTEMPTS, Action
from lab.providers.base import MachineSpec
from lab.store.db import ClusterRow, GroupRow, NodeRow, Store

log = logging.getLogger(__name__)

BACKOFF_BASE = 10.0
BACKOFF_MAX = 300.0
SCALING = {"CreateCluster", "UpdateCluster", "BatchAddClusterNodes", "BatchDeleteClusterNodes"}
ID_PREFIXES = {"sim": "i-sim-"}

# Actions done inside the pass (quick store writes); the others become tasks.
SYNC_ACTIONS = {"create_node", "short", "rollback", "drop_group", "keep_lost"}


def backoff(attempts: int, rng: random.Random, base: float = BACKOFF_BASE, cap: float = BACKOFF_MAX) -> float:
    """Exponential backoff with full jitter in [d/2, d], d = min(cap, base * 2^(attempts-1))."""
    d = min(cap, base * 2 ** max(0, attempts - 1))
    return d / 2 + rng.random() * d / 2


def instance_id(cluster: str, node: str, prefix: str = "i-", generation: int = 0) -> str:
    """The node's instance id: stable for one instance, new after a replacement (generation)."""
    key = f"{cluster}/{node}" if not generation else f"{cluster}/{node}#{generation}"
    return prefix + hashlib.sha256(key.encode()).hexdigest()[:17]


def id_prefix(provider_name: str) -> str:
    return ID_PREFIXES.get(provider_name, "i-")


def _warnings_of(results) -> list[str]:
    """The warnings of a configurer's results (lab.configure.runner.PlaybookResult.warnings), if any."""
    out: list[str] = []
    for r in results if isinstance(results, list | tuple) else [results]:
        out += [w.split(": ", 1)[-1] for w in getattr(r, "warnings", None) or ()]
    return out


def _task_key(a: Action) -> str:
    if a.kind in ("join", "leave"):
        return "join"  # one slurm.conf change at a time per cluster
    if a.kind == "delete_cluster":
        return "delete"
    if a.kind == "rollback_cluster":
        return "rollback"
    return a.node or a.kind


class Engine:
    """`Engine(store, provider, configurer)` builds every cluster with that pair (the tests' form).
    `providers` / `configurers` map provider names (ClusterRow.provider) to objects; the factories
    make one on first use for a name not mapped (the daemon passes `make_provider`/`make_configurer`).
    A cluster whose provider has no entry and no factory falls back to the positional pair."""

    def __init__(self, store: Store, provider=None, configurer=None, *, clock: Callable[[], float] = time.time,
                 tick: float = 1.0, seed: int | None = None,
                 providers: dict | None = None, configurers: dict | None = None,
                 provider_factory: Callable[[str], object] | None = None,
                 configurer_factory: Callable[[str], object] | None = None,
                 max_attempts: int = LEGACY_ATTEMPTS,
                 backoff_base: float = BACKOFF_BASE, backoff_max: float = BACKOFF_MAX,
                 join_quiet_s: float = JOIN_QUIET_S, join_max_wait_s: float = JOIN_MAX_WAIT_S,
                 boot_slots: dict[str, int] | None = None):
        self.store = store
        self.provider = provider
        self.configurer = configurer
        self.providers = dict(providers or {})
        self.configurers = dict(configurers or {})
        if provider is not None:
            pname = getattr(provider, "name", "default")
            self.providers.setdefault(pname, provider)
            if configurer is not None:
                self.configurers.setdefault(pname, configurer)
        self.provider_factory = provider_factory
        self.configurer_factory = configurer_factory
        self.clock = clock
        self.tick = tick
        self.rng = random.Random(seed)
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.join_quiet_s = join_quiet_s
        self.join_max_wait_s = join_max_wait_s
        # per provider name: VMs of a cluster booting at once (plan.LAUNCH_PRIORITY); absent: no limit
        self.boot_slots = dict(boot_slots or {})
        self.tasks: dict[tuple[str, str], asyncio.Task] = {}
        self.stats: Counter = Counter()  # joins, leaves, launches, ... (benchmarks read it)
        self._io: Counter = Counter()  # blocking provider/configurer calls in flight, per cluster
        self._io_lock = threading.Lock()
        self._prepared: set[str] = set()
        self._dirty: set[str] = set()
        self._snap: dict[str, tuple[ClusterRow, list[GroupRow], dict[str, GroupRow], list[NodeRow]]] = {}
        self._ops: dict[str, list] = {}
        self._faults: dict = {}
        self._unusable: set[str] = set()

    # ------------------------------------------------------------------ providers
    def provider_for(self, c: ClusterRow):
        p = self.providers.get(c.provider)
        if p is None and self.provider_factory is not None:
            p = self.providers[c.provider] = self.provider_factory(c.provider)
        if p is None:
            p = self.provider
        if p is None:
            raise RuntimeError(f"no provider {c.provider!r} in this engine")
        return p

    def configurer_for(self, c: ClusterRow):
        conf = self.configurers.get(c.provider)
        if conf is None and self.configurer_factory is not None:
            conf = self.configurers[c.provider] = self.configurer_factory(c.provider)
        return conf if conf is not None else self.configurer

    async def _call(self, cluster: str, obj, method: str, *args):
        """obj.method(*args): its coroutine twin if it has one, inline if quick, else in a thread."""
        fa = getattr(obj, method + "_async", None)
        if fa is not None:
            return await fa(*args)
        fn = getattr(obj, method)
        if getattr(obj, "inline", False):
            return fn(*args)
        with self._io_lock:
            self._io[cluster] += 1

        def run():
            try:
                return fn(*args)
            finally:
                with self._io_lock:
                    self._io[cluster] -= 1

        return await asyncio.to_thread(run)

    # ------------------------------------------------------------------ loop
    def busy(self, cluster: str) -> set[str]:
        out = {key for (c, key), t in self.tasks.items() if c == cluster and not t.done()}
        if self._io.get(cluster, 0) > 0:
            out.add("io")
        return out

    async def step(self) -> None:
        self.tasks = {k: t for k, t in self.tasks.items() if not t.done()}
        self._apply_arrivals()
        self._faults = self.store.faults()
        limits = self.store.capacity()
        snaps = [self.store.snapshot(c.name) for c in self.store.clusters()]
        snaps = [s for s in snaps if s[0] is not None]
        used = self._count_used(snaps)
        busy: dict[str, set[str]] = defaultdict(set)
        for (c, key) in self.tasks:
            busy[c].add(key)
        for c, n in self._io.items():
            if n > 0:
                busy[c].add("io")
        for snap in snaps:
            try:
                await self._step_cluster(snap, busy[snap[0].name], limits, used)
            except Exception:  # noqa: BLE001 - one cluster's trouble never stops the others
                log.exception("reconcile %s", snap[0].name)

    async def _step_cluster(self, snap, busy: set[str], limits: dict[str, int], used: Counter) -> None:
        c, groups, nodes = snap
        name = c.name
        gmap = {g.name: g for g in groups}
        self._snap[name] = (c, groups, gmap, nodes)
        if c.status == "Failed":
            return
        try:
            prov = self.provider_for(c)
        except Exception as e:  # noqa: BLE001
            if name not in self._unusable:
                self._unusable.add(name)
                self.store.add_event(name, "Cluster", "Error", f"cluster {name}: provider {c.provider!r} unusable: {e}")
            return
        observed: dict[str, str] = {}
        if c.status != "Deleting":
            seen = await self._call(name, prov, "observe", name)
            observed = {k: v.state for k, v in seen.items()}
            self._fill_addresses(c, prov, nodes)
        now = self.clock()
        p = planner.plan(c, groups, nodes, observed, busy, now, limits=limits, used=used,
                         max_attempts=self.max_attempts, join_quiet_s=self.join_quiet_s,
                         join_max_wait_s=self.join_max_wait_s,
                         boot_slots=self.boot_slots.get(c.provider))
        self._ops[name] = [op for op in self.store.operations(name, "InProgress")] if c.status != "Deleting" else []
        self._statuses(c, groups, nodes, p)
        if p.boot_waiting:
            msg = f"waiting for a boot slot ({self.boot_slots.get(c.provider)} VMs boot at once on this host)"
            by_name = {n.name: n for n in nodes}
            for waiting in p.boot_waiting:
                if by_name[waiting].message != msg:
                    self.store.update_node(c.name, waiting, message=msg)

        if any(a.kind == "rollback" for a in p.actions):
            self._rollback(c, next(a for a in p.actions if a.kind == "rollback"))
            return
        if any(a.kind in ("launch", "reboot") for a in p.actions) and (name in self._dirty or name not in self._prepared):
            await self._prepare(c, prov, groups, gmap, nodes)
        addresses = None
        for a in p.actions:
            if a.kind == "create_node":
                if addresses is None:
                    addresses = {n.address for n in nodes if n.address}
                self._create_node(c, prov, gmap[a.group], a.ordinal, addresses)
            elif a.kind == "short":
                self._short(name, a)
            elif a.kind == "drop_group":
                self.store.delete_group(name, a.group)
                self.store.add_event(name, "InstanceGroup", "Info", f"instance group {a.group} deleted", grp=a.group,
                                     operation_id=self._op_of(name, group=a.group))
            elif a.kind == "keep_lost":
                self._keep_lost(name, a)
        ctx = None
        for a in p.actions:
            if a.kind in SYNC_ACTIONS:
                continue
            key = _task_key(a)
            if (name, key) in self.tasks and not self.tasks[(name, key)].done():
                continue
            if a.kind in ("delete_cluster", "rollback_cluster"):
                await self._cancel(name, keep=key)
            if a.kind in ("configure", "join", "leave") and ctx is None:
                ctx = self._context_from(c, groups, nodes)
            self.tasks[(name, key)] = asyncio.create_task(self._guard(name, a, ctx), name=f"{name}:{a.kind}:{key}")

    async def run(self, until: Callable[[], bool] | None = None, timeout: float | None = None) -> None:
        t0 = time.monotonic()
        while True:
            await self.step()
            if until and until():
                break
            if timeout and time.monotonic() - t0 > timeout:
                raise TimeoutError("engine did not reach the condition in time")
            await asyncio.sleep(self.tick)

    async def drain(self) -> None:
        """Cancel in-flight work (engine shutdown); the store keeps enough to resume."""
        for t in self.tasks.values():
            t.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)

    async def _cancel(self, cluster: str, keep: str | None = None) -> None:
        mine = [t for (c, k), t in self.tasks.items() if c == cluster and k != keep and not t.done()]
        for t in mine:
            t.cancel()
        await asyncio.gather(*mine, return_exceptions=True)

    async def _wait_io(self, cluster: str, limit: float = 1800) -> None:
        """Until no blocking call of the cluster is in flight (a thread cannot be cancelled)."""
        t0 = time.monotonic()
        while self._io.get(cluster, 0) > 0 and time.monotonic() - t0 < limit:
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------ statuses, operations
    def _statuses(self, c: ClusterRow, groups: list[GroupRow], nodes: list[NodeRow], p: planner.Plan) -> None:
        name = c.name
        for g in groups:
            st = p.group_status.get(g.name)
            if st and st != g.status:
                self.store.update_group(name, g.name, status=st)
                self.store.add_event(name, "InstanceGroup", "Info" if st != "Degraded" else "Warning",
                                     f"instance group {g.name} is {st}", grp=g.name,
                                     operation_id=self._op_of(name, group=g.name))
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
        for op in self._ops.get(name, []):
            if op.kind in SCALING:
                done = all(g in p.settled or g not in gnames for g in op.groups)
                if op.kind == "BatchDeleteClusterNodes":
                    done = done and not any(x in by_name for x in op.nodes)
            else:
                done = all(x not in by_name or (by_name[x].phase == "running" and not by_name[x].pending)
                           for x in op.nodes)
            if done:
                self.store.finish_operation(op.id, "Completed", when=self.clock())
                self.store.add_event(name, "Cluster", "Info", f"operation {op.kind} completed", operation_id=op.id)

    def _op_of(self, cluster: str, node: str | None = None, group: str | None = None) -> str | None:
        """The newest operation in flight about this node (or group), for its events."""
        for op in reversed(self._ops.get(cluster) or []):
            if (node and node in op.nodes) or (group and group in op.groups):
                return op.id
        return None

    def _rollback(self, c: ClusterRow, a: Action) -> None:
        """Legacy mode: a group cannot reach its count. A create rolls back to nothing (then Failed);
        an update goes back to the groups and counts it started from."""
        name, msg = c.name, a.reason
        ops = self.store.operations(name, "InProgress")
        if c.status == "Creating" or c.in_service_at is None:
            self.store.update_cluster(name, status="RollingBack", failure_message=msg)
            self.store.update_group(name, a.group, status="Failed")
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
                        self.store.update_group(name, g.name, status="Deleting", target_count=0)
                for gd in before.values():
                    self.store.put_group(GroupRow(**{**gd, "status": "Updating"}))
                self.store.update_cluster(name, spec=undo["spec"])
            self.store.update_cluster(name, status="RollingBack", failure_message=f"UpdateCluster rolled back: {msg}")
            for op in ops:
                self.store.finish_operation(op.id, "Failed", msg, when=self.clock())
        self.store.add_event(name, "Cluster", "Error", f"cluster {name} is RollingBack the update: {msg}", grp=a.group)

    # ------------------------------------------------------------------ capacity
    @staticmethod
    def _count_used(snaps) -> Counter:
        used: Counter = Counter()
        for c, groups, nodes in snaps:
            types = {g.name: g.instance_type for g in groups}
            for n in nodes:
                if n.phase in HOLDING or (n.phase == "failed" and n.booted_at):
                    used[types.get(n.grp)] += 1
        return used

    def _used(self) -> Counter:
        """Instances held per type across the lab, from the store."""
        return self._count_used([self.store.snapshot(c.name) for c in self.store.clusters()])

    def _apply_arrivals(self) -> None:
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

    def capacity_released(self, instance_type: str | None) -> None:
        """A node of this type left: waiting nodes of the type try again at once."""
        if instance_type:
            self.store.retry_now(instance_type)

    def _short(self, cluster: str, a: Action) -> None:
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        attempts = n.attempts + 1
        delay = backoff(attempts, self.rng, self.backoff_base, self.backoff_max)
        self.store.update_node(cluster, a.node, phase="failed", message=a.reason, attempts=attempts,
                               retry_at=self.clock() + delay)
        self.store.add_event(cluster, "Instance", "Warning", f"{a.node}: {a.reason} (next try in {delay:.0f} s)",
                             grp=a.group, node=a.node, operation_id=self._op_of(cluster, a.node, a.group))

    # ------------------------------------------------------------------ helpers
    def _fill_addresses(self, c: ClusterRow, prov, nodes: list[NodeRow]) -> None:
        """Records written without an address (BatchAddClusterNodes) get one, and an instance id."""
        bare = [n for n in nodes if not n.address]
        if not bare:
            return
        used = {n.address for n in nodes if n.address}
        prefix = getattr(prov, "id_prefix", None) or id_prefix(c.provider)
        for n in bare:
            address, mac = prov.allocate(c.name, n.name, used, c.net_index)
            used.add(address)
            vals = {"address": address, "mac": mac}
            if not n.instance_id:
                vals["instance_id"] = instance_id(c.name, n.name, prefix, n.generation)
            self.store.update_node(c.name, n.name, **vals)
            for k, v in vals.items():
                setattr(n, k, v)
        self._dirty.add(c.name)

    def _create_node(self, c: ClusterRow, prov, g: GroupRow, ordinal: int, addresses: set[str]) -> None:
        name = f"{c.name}-{g.name}-{ordinal}"
        address, mac = prov.allocate(c.name, name, addresses, c.net_index)
        addresses.add(address)
        prefix = getattr(prov, "id_prefix", None) or id_prefix(c.provider)
        added = self.store.add_node(NodeRow(cluster=c.name, name=name, grp=g.name, ordinal=ordinal,
                                            instance_id=instance_id(c.name, name, prefix),
                                            address=address, mac=mac, phase="planned"), if_absent=True)
        if added:
            self._dirty.add(c.name)
            self.store.add_event(c.name, "Instance", "Info", f"node {name} planned ({address})", grp=g.name, node=name,
                                 operation_id=self._op_of(c.name, group=g.name))

    async def _prepare(self, c: ClusterRow, prov, groups, gmap, nodes) -> None:
        box = (c.spec.get("Lab") or {}).get("Box")
        machines = [MachineSpec(n.name, n.grp, gmap[n.grp].cpus, gmap[n.grp].memory_mib, n.mac, n.address,
                                gmap[n.grp].node_type)
                    for n in nodes if n.grp in gmap and n.address]
        self._dirty.discard(c.name)
        self._prepared.add(c.name)
        await self._call(c.name, prov, "prepare", c.name, machines, c.net_index, box)

    def _machine(self, cluster: str, n: NodeRow) -> MachineSpec:
        g = self._group(cluster, n.grp)
        return MachineSpec(n.name, n.grp, g.cpus, g.memory_mib, n.mac, n.address, g.node_type)

    def _group(self, cluster: str, group: str) -> GroupRow:
        snap = self._snap.get(cluster)
        g = snap[2].get(group) if snap else None
        if g is None:
            g = next(x for x in self.store.groups(cluster) if x.name == group)
        return g

    def _context_from(self, c: ClusterRow, groups, nodes) -> ClusterContext | None:
        conf = self.configurer_for(c)
        if conf is None or getattr(conf, "wants_context", True) is False:
            return None
        return conf.context(c, groups, nodes)

    def context(self, cluster: str) -> ClusterContext | None:
        c, groups, nodes = self.store.snapshot(cluster)
        return self._context_from(c, groups, nodes)

    def _fail(self, cluster: str, node: str, message: str, *, keep_phase: bool = False) -> None:
        n = self.store.node(cluster, node)
        if n is None:
            return
        attempts = n.attempts + 1
        delay = backoff(attempts, self.rng, self.backoff_base, self.backoff_max)
        vals = {"message": message[:500], "attempts": attempts, "retry_at": self.clock() + delay}
        if not keep_phase:
            vals["phase"] = "failed"
        self.store.update_node(cluster, node, **vals)
        self.store.add_event(cluster, "Instance", "Error", f"{node}: {message[:300]} (retry {attempts} in {delay:.0f} s)",
                             grp=n.grp, node=node, operation_id=self._op_of(cluster, node, n.grp))

    async def _guard(self, cluster: str, a: Action, ctx=None) -> None:
        try:
            await getattr(self, f"_do_{a.kind}")(cluster, a, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            log.exception("%s %s", a.kind, a.node or a.batch)
            if a.kind in ("delete_cluster", "rollback_cluster", "orphan"):
                self.store.add_event(cluster, "Cluster", "Error", f"{a.kind} {a.node or cluster} failed: {e}"[:500])
                return
            failures = getattr(getattr(e, "result", None), "failures", {}) or {}
            for node in ([a.node] if a.node else list(a.batch)):
                self._fail(cluster, node, f"{a.kind} failed: {failures.get(node) or e}",
                           keep_phase=a.kind in ("remove", "leave"))

    # ------------------------------------------------------------------ actions
    async def _do_launch(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None or n.phase not in ("planned", "failed", "launching"):
            return
        c = self._snap[cluster][0]
        self.store.update_node(cluster, a.node, phase="launching", launched_at=self.clock(), message="launching VM")
        self.stats["launches"] += 1
        fault = launch_fault(self._faults, cluster, n.name, n.generation, n.attempts)
        if fault:
            self._fail(cluster, a.node, f"launch failed: {fault}")
            return
        try:
            await self._call(cluster, self.provider_for(c), "ensure", cluster, self._machine(cluster, n))
        except Exception as e:  # noqa: BLE001
            self._fail(cluster, a.node, f"launch failed: {e}")
            return
        self.store.update_node(cluster, a.node, phase="booted", booted_at=self.clock(), configured_at=None,
                               message="VM answers ssh")
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: VM up", grp=a.group, node=a.node,
                             operation_id=self._op_of(cluster, a.node, a.group))

    async def _do_configure(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None or n.phase not in ("booted", "configuring", "configured", "failed"):
            return
        c = self._snap[cluster][0]
        node_type = self._group(cluster, n.grp).node_type
        self.store.update_node(cluster, a.node, phase="configuring", message="configuring (Ansible)")
        results = await self._call(cluster, self.configurer_for(c), "configure", ctx, n.name, node_type)
        warnings = _warnings_of(results)  # e.g. a boot-time setup that failed: Ansible did it instead
        for w in warnings:
            self.store.add_event(cluster, "Instance", "Warning", f"{a.node}: {w}"[:500], grp=a.group, node=a.node,
                                 operation_id=self._op_of(cluster, a.node, a.group))
        said = f" ({'; '.join(warnings)})"[:400] if warnings else ""
        if node_type == "Compute":
            # configured_at starts the join batching window (plan.join_wait)
            self.store.update_node(cluster, a.node, phase="configured", configured_at=self.clock(),
                                   message="configured, waiting to join" + said)
            # when configuring ended and waiting for the join began (bench/cluster_timeline.py reads it)
            self.store.add_event(cluster, "Instance", "Info", f"{a.node}: compute configured, waiting to join Slurm",
                                 grp=a.group, node=a.node, operation_id=self._op_of(cluster, a.node, a.group))
        else:
            self.store.update_node(cluster, a.node, phase="running", joined_at=self.clock(), message=said.strip(" ()"),
                                   attempts=0)
            self.store.add_event(cluster, "Instance", "Info", f"{a.node}: {node_type.lower()} ready",
                                 grp=a.group, node=a.node, operation_id=self._op_of(cluster, a.node, a.group))

    async def _do_join(self, cluster: str, a: Action, ctx=None) -> None:
        c = self._snap[cluster][0]
        batch = list(a.batch)
        with self.store.tx():
            for n in batch:
                self.store.update_node(cluster, n, phase="joining", message="joining Slurm")
        self.stats["joins"] += 1
        self.stats["joined_nodes"] += len(batch)
        await self._call(cluster, self.configurer_for(c), "join", ctx, batch)
        now = self.clock()
        with self.store.tx():
            for n in batch:
                self.store.update_node(cluster, n, phase="running", joined_at=now, message="", attempts=0)
        shown = ", ".join(batch[:20]) + (f" and {len(batch) - 20} more" if len(batch) > 20 else "")
        groups = {n.rsplit("-", 1)[0][len(cluster) + 1:] for n in batch}
        self.store.add_event(cluster, "InstanceGroup", "Info",
                             f"{len(batch)} node(s) joined Slurm with one reconfigure: {shown}",
                             grp=next(iter(groups)) if len(groups) == 1 else None,
                             operation_id=self._op_of(cluster, batch[0], next(iter(groups)) if len(groups) == 1 else None))

    async def _do_leave(self, cluster: str, a: Action, ctx=None) -> None:
        """Scale-in, Slurm side, for a batch: drain, wait for jobs, out of slurm.conf, one reconfigure."""
        c = self._snap[cluster][0]
        batch = list(a.batch)
        with self.store.tx():
            for n in batch:
                self.store.update_node(cluster, n, phase="removing", message="draining (Slurm) before removal")
        self.stats["leaves"] += 1
        await self._call(cluster, self.configurer_for(c), "leave", ctx, batch)
        with self.store.tx():
            for n in batch:
                self.store.update_node(cluster, n, joined_at=None, message="out of Slurm; removing the VM")
        self.store.add_event(cluster, "InstanceGroup", "Info",
                             f"{len(batch)} node(s) drained and removed from slurm.conf: {', '.join(batch[:20])}")

    async def _do_remove(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        c = self._snap[cluster][0]
        self.store.update_node(cluster, a.node, phase="removing", message="removing the VM")
        await self._call(cluster, self.provider_for(c), "remove", cluster, [a.node])
        self.store.delete_node(cluster, a.node)
        self._dirty.add(cluster)
        g = self._snap[cluster][2].get(n.grp)
        self.capacity_released(g.instance_type if g else None)
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: removed", grp=n.grp, node=a.node,
                             operation_id=self._op_of(cluster, a.node, n.grp), instance_id=n.instance_id)

    async def _do_orphan(self, cluster: str, a: Action, ctx=None) -> None:
        c = self._snap[cluster][0]
        await self._call(cluster, self.provider_for(c), "remove", cluster, [a.node])
        self.store.add_event(cluster, "Cluster", "Warning",
                             f"VM {a.node} belongs to cluster {cluster} but has no record: removed (orphan)")

    async def _do_lost(self, cluster: str, a: Action, ctx=None) -> None:
        """NodeRecovery Automatic: the VM died; a fresh instance replaces it under the same name."""
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        c = self._snap[cluster][0]
        prov = self.provider_for(c)
        if a.reason != "missing":  # a stopped domain: remove it first
            await self._call(cluster, prov, "remove", cluster, [a.node])
        gen = n.generation + 1
        prefix = getattr(prov, "id_prefix", None) or id_prefix(c.provider)
        self.store.update_node(cluster, a.node, phase="planned", booted_at=None, configured_at=None, attempts=0,
                               retry_at=0, generation=gen, instance_id=instance_id(cluster, a.node, prefix, gen),
                               message=f"VM lost ({a.reason}): replacing it (NodeRecovery Automatic)")
        self.store.add_event(cluster, "Instance", "Warning",
                             f"{a.node}: VM is {a.reason}; NodeRecovery is Automatic: replacing it",
                             grp=a.group, node=a.node)

    def _keep_lost(self, cluster: str, a: Action) -> None:
        """NodeRecovery None: the VM died; the node stays Failure until someone replaces or deletes it."""
        msg = (f"VM {a.reason}; not replaced because NodeRecovery is None "
               "(BatchReplaceClusterNodes replaces it, BatchDeleteClusterNodes removes it)")
        self.store.update_node(cluster, a.node, phase="lost", message=msg)
        self.store.add_event(cluster, "Instance", "Error", f"{a.node}: {msg}", grp=a.group, node=a.node)

    async def _do_reboot(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        c = self._snap[cluster][0]
        prov = self.provider_for(c)
        op = self._op_of(cluster, a.node)
        self.store.update_node(cluster, a.node, phase="rebooting", pending=None, message="rebooting")
        if a.reason == "missing":  # nothing to reboot: launch it again
            self.store.update_node(cluster, a.node, phase="planned", booted_at=None, configured_at=None,
                                   message="no VM to reboot: launching")
            return
        if hasattr(prov, "reboot") or hasattr(prov, "reboot_async"):
            await self._call(cluster, prov, "reboot", cluster, a.node)
        else:
            await self._call(cluster, prov, "ensure", cluster, self._machine(cluster, n))
        self.store.update_node(cluster, a.node, phase="booted", booted_at=self.clock(), configured_at=None, attempts=0,
                               message="rebooted; configuring again")
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: rebooted", grp=a.group, node=a.node,
                             operation_id=op)

    async def _do_replace(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        c = self._snap[cluster][0]
        prov = self.provider_for(c)
        op = self._op_of(cluster, a.node)
        self.store.update_node(cluster, a.node, phase="replacing", pending=None, message="replacing: removing the old VM")
        await self._call(cluster, prov, "remove", cluster, [a.node])
        gen = n.generation + 1
        prefix = getattr(prov, "id_prefix", None) or id_prefix(c.provider)
        self.store.update_node(cluster, a.node, phase="planned", generation=gen,
                               instance_id=instance_id(cluster, a.node, prefix, gen), booted_at=None,
                               configured_at=None, attempts=0, retry_at=0, message="replaced: a new instance launches")
        g = self._snap[cluster][2].get(n.grp)
        self.capacity_released(g.instance_type if g else None)
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: old instance {n.instance_id} removed; "
                             "a new one launches", grp=a.group, node=a.node, operation_id=op)

    async def _do_rollback_cluster(self, cluster: str, a: Action, ctx=None) -> None:
        """Legacy create that failed: remove every VM (and the cluster's network), then Failed."""
        c = self._snap[cluster][0]
        await self._teardown(c)
        types = {g.instance_type for g in self.store.groups(cluster)}
        with self.store.tx():
            self.store.delete_nodes(cluster)
            for g in self.store.groups(cluster):
                self.store.update_group(cluster, g.name, status="Failed")
            self.store.update_cluster(cluster, status="Failed")
        for t in types:
            self.capacity_released(t)
        self.store.add_event(cluster, "Cluster", "Error",
                             f"cluster {cluster} is Failed: rolled back, every VM removed ({c.failure_message})")

    async def _do_delete_cluster(self, cluster: str, a: Action, ctx=None) -> None:
        c = self._snap[cluster][0]
        types = {g.instance_type for g in self.store.groups(cluster)}
        await self._teardown(c)
        self.store.delete_cluster(cluster)
        for t in types:
            self.capacity_released(t)
        for d in (self._snap, self._ops):
            d.pop(cluster, None)

    async def _teardown(self, c: ClusterRow) -> None:
        """Every VM, volume and network of the cluster gone, even those a thread still creates."""
        prov = self.provider_for(c)
        had_io = self._io.get(c.name, 0) > 0
        await self._call(c.name, prov, "delete_cluster", c.name)
        if had_io:
            await self._wait_io(c.name)
            await self._call(c.name, prov, "delete_cluster", c.name)
        self._prepared.discard(c.name)
        self._dirty.discard(c.name)
