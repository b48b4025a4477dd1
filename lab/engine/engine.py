"""The engine: plans from the store and what the provider observes, acts, observes again.

One asyncio loop. Providers and configurers follow one contract (lab/providers/base.py,
lab/configure/base.py): the engine awaits their coroutine faces (`ensure_async`, ...), which run
blocking work in threads (Vagrant, ansible-runner) or, for the sim, on the loop. A task per node
step, one Slurm-config task per cluster (a join batch or a leave batch: never both at once, both
rewrite slurm.conf); a failing step marks its node Failure with the reason and a retry time
(exponential backoff with jitter), or for good when the failure is permanent, and never stops the
pass. The actions live in lab/engine/actions.py, the records they write in lab/engine/bookkeeping.py.

Each cluster is built by the provider it was created with (`ClusterRow.provider`). The engine keeps
nothing it cannot rebuild: killed at any moment, a new engine on the same store resumes every
cluster from the recorded phases plus what the provider shows (docs/engine.md).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable

from lab import capacity
from lab.configure.base import ConfigureError, Configurer
from lab.configure.inventory import ClusterContext
from lab.engine import plan as planner
from lab.engine import recovery
from lab.engine.actions import ACTIONS, Actions
from lab.engine.bookkeeping import (  # noqa: F401 - re-exported for bench/ and tests (instance_id, backoff)
    BACKOFF_BASE, BACKOFF_MAX, SCALING, Bookkeeping, backoff, instance_id)
from lab.engine.checkpointing import Checkpointing
from lab.engine.hostloss import HOST_LOST_S, HostLoss
from lab.engine.plan import JOIN_MAX_WAIT_S, JOIN_QUIET_S, LEGACY_ATTEMPTS, Action
from lab.engine.rolling import Rolling
from lab.engine.sight import Sight
from lab.engine.watching import Watching
from lab.providers.base import LaunchError, Provider, threads_running
from lab.store.db import ClusterRow, GroupRow, NodeRow, Store

log = logging.getLogger(__name__)

# Actions done inside the pass (quick store writes); the others become tasks (actions.ACTIONS).
SYNC_ACTIONS = {"create_node", "short", "rollback", "drop_group", "keep_lost"}


def _task_key(a: Action) -> str:
    if a.kind in ("join", "leave", "detach"):
        return "join"  # one slurm.conf change at a time per cluster
    if a.kind == "delete_cluster":
        return "delete"
    if a.kind == "rollback_cluster":
        return "rollback"
    return a.node or a.kind


# every task kind: the planner's (lab/engine/actions.py) and the Slurm watch's slurmd restart
TASKS = {**ACTIONS, "repair": Watching._do_repair}


class Engine(Bookkeeping, Actions, Rolling, Checkpointing, HostLoss, Watching):
    """`Engine(store, provider, configurer)` builds every cluster with that pair (the tests' form).
    `providers` / `configurers` map provider names (ClusterRow.provider) to objects; the factories
    make one on first use for a name not mapped (the daemon passes `make_provider`/`make_configurer`).
    A cluster whose provider has no entry and no factory falls back to the positional pair."""

    def __init__(self, store: Store, provider: Provider | None = None, configurer: Configurer | None = None, *,
                 clock: Callable[[], float] = time.time, tick: float = 1.0, seed: int | None = None,
                 providers: dict[str, Provider] | None = None, configurers: dict[str, Configurer] | None = None,
                 provider_factory: Callable[[str], Provider] | None = None,
                 configurer_factory: Callable[[str], Configurer] | None = None,
                 max_attempts: int = LEGACY_ATTEMPTS,
                 backoff_base: float = BACKOFF_BASE, backoff_max: float = BACKOFF_MAX,
                 join_quiet_s: float = JOIN_QUIET_S, join_max_wait_s: float = JOIN_MAX_WAIT_S,
                 boot_slots: dict[str, int] | None = None, host_lost_s: float = HOST_LOST_S,
                 slurm_period_s: float = recovery.SLURM_PERIOD_S, recover_after_s: float = recovery.RECOVER_AFTER_S,
                 protect_after: int = recovery.PROTECT_AFTER):
        self.store = store
        self.provider = provider
        self.configurer = configurer
        self.providers = dict(providers or {})
        self.configurers = dict(configurers or {})
        if provider is not None:
            self.providers.setdefault(provider.name, provider)
            if configurer is not None:
                self.configurers.setdefault(provider.name, configurer)
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
        self.host_lost_s = host_lost_s  # a cluster's host silent this long is given up (lab/engine/hostloss.py)
        # per provider name: VMs of a cluster booting at once (plan.LAUNCH_PRIORITY); absent: no limit
        self.boot_slots = dict(boot_slots or {})
        self.tasks: dict[tuple[str, str], asyncio.Task] = {}
        self.stats: Counter = Counter()  # joins, leaves, launches, ... (benchmarks read it)
        self._prepared: set[str] = set()
        self._dirty: set[str] = set()
        self._snap: dict[str, tuple[ClusterRow, list[GroupRow], dict[str, GroupRow], list[NodeRow]]] = {}
        self._ops: dict[str, list] = {}
        self._faults: dict = {}
        self._unusable: set[str] = set()
        self.sight = Sight(store, clock)  # clusters whose VMs the provider cannot show (lab/engine/sight.py)
        self._last_error: dict[str, str] = {}
        self._watch_init(slurm_period_s, recover_after_s, protect_after)  # Slurm's view (lab/engine/watching.py)

    # ------------------------------------------------------------------ providers
    def provider_for(self, c: ClusterRow) -> Provider:
        p = self.providers.get(c.provider)
        if p is None and self.provider_factory is not None:
            p = self.providers[c.provider] = self.provider_factory(c.provider)
        if p is None:
            p = self.provider
        if p is None:
            raise RuntimeError(f"no provider {c.provider!r} in this engine")
        return p

    def configurer_for(self, c: ClusterRow) -> Configurer | None:
        conf = self.configurers.get(c.provider)
        if conf is None and self.configurer_factory is not None:
            conf = self.configurers[c.provider] = self.configurer_factory(c.provider)
        return conf if conf is not None else self.configurer

    @staticmethod
    def threads(cluster: str) -> int:
        """Blocking provider/configurer calls of the cluster still running in threads."""
        return threads_running(cluster)

    # ------------------------------------------------------------------ loop
    def busy(self, cluster: str) -> set[str]:
        out = {key for (c, key), t in self.tasks.items() if c == cluster and not t.done()}
        if self.threads(cluster) > 0:
            out.add("io")
        return out

    async def step(self) -> None:
        self.tasks = {k: t for k, t in self.tasks.items() if not t.done()}
        self._heartbeat()
        self._apply_arrivals()
        self._faults = self.store.faults()
        limits = self.store.capacity()
        snaps = [self.store.snapshot(c.name) for c in self.store.clusters()]
        snaps = [s for s in snaps if s[0] is not None]
        used = capacity.in_use(snaps)
        busy: dict[str, set[str]] = defaultdict(set)
        for (c, key) in self.tasks:
            busy[c].add(key)
        for snap in snaps:
            if self.threads(snap[0].name) > 0:
                busy[snap[0].name].add("io")
        for snap in snaps:
            name = snap[0].name
            try:
                await self._step_cluster(snap, busy[name], limits, used)
                self._last_error.pop(name, None)
            except Exception as e:  # noqa: BLE001 - one cluster's trouble never stops the others
                # a traceback when the trouble is new, one line when it is the same as last pass
                if self._last_error.get(name) != repr(e):
                    self._last_error[name] = repr(e)
                    log.exception("reconcile %s", name)
                else:
                    log.debug("reconcile %s: %s (again)", name, e)

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
        self._ops[name] = [op for op in self.store.operations(name, "InProgress")] if c.status != "Deleting" else []
        if self._checkpoint_pending(c):
            return  # a checkpoint or restore has the cluster (lab/engine/checkpointing.py)
        observed: dict[str, str] = {}
        if self.sight.waiting(name):
            return
        try:  # a deleting cluster is observed too: a delete needs the provider as much as a create
            seen = await prov.observe_async(name)
        except Exception as e:  # noqa: BLE001 - no observation: act on nothing, say so (lab/engine/sight.py)
            self.sight.lost(c, e)
            await self._maybe_host_lost(c, prov, groups, nodes, e)  # given up after a while: lab/engine/hostloss.py
            return
        self.sight.seen(c)
        if c.host is None and (host := prov.host_of(name)):  # a cluster placed before the store kept hosts
            self.store.update_cluster(name, host=host)
        if c.status != "Deleting":
            observed = {k: v.state for k, v in seen.items()}
            self._fill_addresses(c, prov, nodes)
        now = self.clock()
        p = planner.plan(c, groups, nodes, observed, busy, now, limits=limits, used=used,
                         max_attempts=self.max_attempts, join_quiet_s=self.join_quiet_s,
                         join_max_wait_s=self.join_max_wait_s,
                         boot_slots=self.boot_slots.get(c.provider))
        self._statuses(c, groups, nodes, p)
        self._watch(c, groups, nodes, busy)  # Slurm's view: marks, recovery (lab/engine/watching.py)
        self._software(c, gmap, nodes)
        self._disk_marks(name, nodes, seen, p)
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
            await self._prepare(c, prov, gmap, nodes)
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
            if a.kind in ("configure", "join", "leave", "detach", "healthcheck") and ctx is None:
                ctx = self._context_from(c, groups, nodes)
            self._start_task(name, key, self._guard(name, a, ctx))

    def _start_task(self, cluster: str, key: str, coro) -> None:
        """`coro` as the cluster's task `key` (one at a time per key: a second is dropped)."""
        t = self.tasks.get((cluster, key))
        if t is not None and not t.done():
            coro.close()
            return
        self.tasks[(cluster, key)] = asyncio.create_task(coro, name=f"{cluster}:{key}")

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

    async def _wait_threads(self, cluster: str, limit: float = 1800) -> None:
        """Until no blocking call of the cluster is in flight (a thread cannot be cancelled)."""
        t0 = time.monotonic()
        while self.threads(cluster) > 0 and time.monotonic() - t0 < limit:
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------ contexts, the task guard
    def _context_from(self, c: ClusterRow, groups, nodes) -> ClusterContext | None:
        conf = self.configurer_for(c)
        return None if conf is None else conf.context(c, groups, nodes)

    def context(self, cluster: str) -> ClusterContext | None:
        c, groups, nodes = self.store.snapshot(cluster)
        return self._context_from(c, groups, nodes)

    async def _guard(self, cluster: str, a: Action, ctx=None) -> None:
        try:
            await TASKS[a.kind](self, cluster, a, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            log.exception("%s %s", a.kind, a.node or a.batch)
            if a.kind in ("delete_cluster", "rollback_cluster", "orphan", "repair"):  # no node step failed
                self.store.add_event(cluster, "Cluster", "Error", f"{a.kind} {a.node or cluster} failed: {e}"[:500])
                return
            failures = e.failures if isinstance(e, ConfigureError) else {}
            permanent = isinstance(e, LaunchError) and e.permanent
            counted: set[str] = set()  # a batch that failed is one failure of each of its groups (protected mode)
            for node in ([a.node] if a.node else list(a.batch)):
                n = self.store.node(cluster, node)
                self._fail(cluster, node, f"{a.kind} failed: {failures.get(node) or e}",
                           keep_phase=a.kind in ("remove", "leave"), permanent=permanent,
                           counted=n is not None and n.grp not in counted)
                if n is not None:
                    counted.add(n.grp)
            if a.kind == "configure" and " unreachable" in str(failures.get(a.node) or e):
                self._unreachable(cluster, a.node)
