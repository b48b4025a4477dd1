"""The engine: plans from the store and what the provider observes, acts, observes again.

One asyncio loop (`Engine.step`, once a tick) over every cluster, and parts that own their state
(docs/engine.md draws them; each gets only the parts it needs):
  Records           lab/engine/bookkeeping.py  what is written down: node records, failures, statuses,
                                               operations; this pass's rows and operations
  Backends          lab/engine/backends.py     which provider and configurer build a cluster
  Tasks             lab/engine/tasks.py        the tasks in flight, one per (cluster, key)
  Steps             lab/engine/actions.py      the node steps the planner asks for, each a task
  Rollout           lab/engine/rolling.py      UpdateClusterSoftware, batch by batch
  Patching          lab/engine/patching.py     AutoPatchConfig: cordon, patch idle nodes, give up in time
  Schedules         lab/engine/schedules.py    ScheduledUpdateConfig: the rolling update, when due
  CheckpointRunner  lab/engine/checkpointing.py checkpoints and restores
  SlurmWatch        lab/engine/watching.py     Slurm's view, marks and recovery; the heartbeat
  ExtensionWork     lab/engine/extensions.py   cluster extensions applied, probed, removed
  HostLoss, Sight   lab/engine/hostloss.py, sight.py  a host that does not answer
The plan itself is pure (lab/engine/plan.py); the boot and fork slots it keeps are counted per
cluster from its own host's cores and memory (lab/engine/slots.py HostSlots, Tuning.host_slots). A
failing step marks its node Failure with the reason and a retry time (exponential backoff with
jitter), or for good when the failure is permanent, and never stops the pass.

Each cluster is built by the provider it was created with (`ClusterRow.provider`). The engine keeps
nothing it cannot rebuild: killed at any moment, a new engine on the same store resumes every
cluster from the recorded phases plus what the provider shows (docs/engine.md).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from lab import capacity
from lab.configure.base import Configurer
from lab.engine import plan as planner
from lab.engine import recovery
from lab.engine.actions import Steps
from lab.engine.backends import Backends
from lab.engine.bookkeeping import BACKOFF_BASE, BACKOFF_MAX, Records
from lab.engine.checkpointing import CheckpointRunner
from lab.engine.extensions import ExtensionWork
from lab.engine.hostloss import HOST_LOST_S, HostLoss
from lab.engine import hangs
from lab.engine.hangs import HangWatch
from lab.engine.hubwatch import HubWatch
from lab.engine.patching import Patching
from lab.engine.plan import JOIN_MAX_WAIT_S, JOIN_QUIET_S, LEGACY_ATTEMPTS, Action
from lab.engine.rolling import Rollout
from lab.engine.schedules import Schedules
from lab.engine.sight import Sight
from lab.engine.states import Kind, Status
from lab.engine.tasks import Tasks
from lab.engine.watching import SlurmWatch
from lab.providers.base import Placement, Provider
from lab.store.db import Store

log = logging.getLogger(__name__)

# Actions done inside the pass (quick store writes); the others become tasks (actions.ACTIONS).
SYNC_ACTIONS = {Kind.CREATE_NODE, Kind.SHORT, Kind.ROLLBACK, Kind.DROP_GROUP, Kind.KEEP_LOST}


def _task_key(a: Action) -> str:
    if a.kind in (Kind.JOIN, Kind.LEAVE, Kind.DETACH):
        return "join"  # one slurm.conf change at a time per cluster
    if a.kind == Kind.DELETE_CLUSTER:
        return "delete"
    if a.kind == Kind.ROLLBACK_CLUSTER:
        return "rollback"
    return a.node or a.kind


@dataclass
class Tuning:
    """Every knob of the engine, with its default, in one place (the daemon's come from lab.settings:
    lab/engine/daemon.py make_engine)."""

    tick: float = 1.0  # seconds between passes
    max_attempts: int = LEGACY_ATTEMPTS  # legacy mode: a node's attempts before its group rolls back
    backoff_base: float = BACKOFF_BASE  # a failed step's retry: base * 2^(attempts-1), jittered, at most max
    backoff_max: float = BACKOFF_MAX
    join_quiet_s: float = JOIN_QUIET_S  # the join batching window (plan.join_wait)
    join_max_wait_s: float = JOIN_MAX_WAIT_S
    # (provider, host or None) -> a cluster's (boot, fork) slots, None: no limit (slots.HostSlots, per host)
    host_slots: Callable[[str, str | None], tuple[int | None, int | None]] | None = None
    # without host_slots, per provider name: VMs of a cluster booting at once (slots.LAUNCH_PRIORITY),
    # and forked at once (they take no boot slot); absent: no limit
    boot_slots: dict[str, int] = field(default_factory=dict)
    fork_slots: dict[str, int] = field(default_factory=dict)
    host_lost_s: float = HOST_LOST_S  # a cluster's host silent this long is given up (hostloss.py)
    slurm_period_s: float = recovery.SLURM_PERIOD_S  # how often Slurm's view is read (watching.py)
    recover_after_s: float = recovery.RECOVER_AFTER_S  # a node down this long gets the next recovery step
    protect_after: int = recovery.PROTECT_AFTER  # a group's failures in a row before it is protected
    hang_period_s: float = hangs.HANG_PERIOD_S  # how often the VMs' guest agents are pinged (hangs.py)
    hung_after_s: float = hangs.HUNG_AFTER_S  # a VM silent this long is hung: rebooted, then replaced


class Engine:
    """`Engine(store, provider, configurer)` builds every cluster with that pair (the tests' form);
    `providers`, `configurers` and the factories: lab/engine/backends.py. `tuning`: the knobs."""

    def __init__(self, store: Store, provider: Provider | None = None, configurer: Configurer | None = None, *,
                 clock: Callable[[], float] = time.time, seed: int | None = None, tuning: Tuning | None = None,
                 providers: dict[str, Provider] | None = None, configurers: dict[str, Configurer] | None = None,
                 provider_factory: Callable[[str], Provider] | None = None,
                 configurer_factory: Callable[[str], Configurer] | None = None):
        self.store = store
        self.clock = clock
        self.tuning = t = tuning or Tuning()
        self.io = Backends(store, provider, configurer, providers=providers, configurers=configurers,
                           provider_factory=provider_factory, configurer_factory=configurer_factory)
        self.rec = Records(store, clock, random.Random(seed), backoff_base=t.backoff_base, backoff_max=t.backoff_max,
                           protect_after=t.protect_after)
        self.work = Tasks()
        self.rollout = Rollout(self.rec)
        self.steps = Steps(self.rec, self.io, self.work, self.rollout)
        self.checkpoints = CheckpointRunner(self.rec, self.io, self.work)
        self.sight = Sight(store, clock)  # clusters whose VMs the provider cannot show (lab/engine/sight.py)
        self.hostloss = HostLoss(self.rec, self.sight, self.work, t.host_lost_s)
        self.watch = SlurmWatch(self.rec, self.io, self.work, self.steps, slurm_period_s=t.slurm_period_s,
                                recover_after_s=t.recover_after_s)
        self.extensions = ExtensionWork(self.rec, self.io, self.work)
        self.hubs = HubWatch(self.rec, self.io, self.work)
        self.hangs = HangWatch(self.rec, self.io, self.work, t.hang_period_s, t.hung_after_s)
        self.patching = Patching(self.rec, self.io, self.work, self.watch.last.get)
        self.schedules = Schedules(self.rec, self.io)
        self._unusable: set[str] = set()
        self._last_error: dict[str, str] = {}

    # ------------------------------------------------------------------ what tests and benchmarks read
    @property
    def tasks(self) -> dict[tuple[str, str], asyncio.Task]:
        return self.work.running

    @property
    def stats(self) -> Counter:
        return self.steps.stats

    def capacity_released(self, *instance_types: str | None) -> None:
        self.rec.capacity_released(*instance_types)

    # ------------------------------------------------------------------ loop
    async def step(self) -> None:
        self.work.prune()
        self.watch.heartbeat()
        self.rec.apply_arrivals()
        self.rec.faults = self.store.faults()
        limits = self.store.capacity()
        snaps = [self.store.snapshot(c.name) for c in self.store.clusters()]
        snaps = [s for s in snaps if s[0] is not None]
        used = capacity.in_use(snaps)
        # what runs, taken with the snapshots: a task that ends during this pass is still busy for it
        busy = {s[0].name: self.work.keys(s[0].name) for s in snaps}
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
        name, rec = c.name, self.rec
        gmap = {g.name: g for g in groups}
        rec.snap[name] = (c, groups, gmap, nodes)
        if c.status == Status.FAILED:
            return
        try:
            prov = self.io.provider_for(c)
        except Exception as e:  # noqa: BLE001
            if name not in self._unusable:
                self._unusable.add(name)
                self.store.add_event(name, "Cluster", "Error", f"cluster {name}: provider {c.provider!r} unusable: {e}")
            return
        rec.ops[name] = [op for op in self.store.operations(name, "InProgress")] if c.status != Status.DELETING else []
        if self.checkpoints.pending(c):
            return  # a checkpoint or restore has the cluster (lab/engine/checkpointing.py)
        observed: dict[str, str] = {}
        if self.sight.waiting(name):
            return
        try:  # a deleting cluster is observed too: a delete needs the provider as much as a create
            seen = await prov.observe_async(name)
        except Exception as e:  # noqa: BLE001 - no observation: act on nothing, say so (lab/engine/sight.py)
            self.sight.lost(c, e)
            await self.hostloss.check(c, prov, groups, nodes, e)  # given up after a while: lab/engine/hostloss.py
            return
        self.sight.seen(c)
        if c.host is None and isinstance(prov, Placement) and (host := prov.host_of(name)):  # a cluster placed before the store kept hosts
            self.store.update_cluster(name, host=host)
        if c.status != Status.DELETING:
            observed = {k: v.state for k, v in seen.items()}
            rec.fill_addresses(c, prov, nodes)
        now = self.clock()
        t = self.tuning
        slots = (t.host_slots(c.provider, c.host) if t.host_slots  # the cluster's host's cores (slots.py)
                 else (t.boot_slots.get(c.provider), t.fork_slots.get(c.provider)))
        forks = rec.fork_groups(c, prov, gmap, nodes) if slots != (None, None) else set()
        p = planner.plan(c, groups, nodes, observed, busy, now, limits=limits, used=used,
                         max_attempts=t.max_attempts, join_quiet_s=t.join_quiet_s, join_max_wait_s=t.join_max_wait_s,
                         boot_slots=slots[0], fork_slots=slots[1], fork_groups=forks)
        rec.statuses(c, groups, nodes, p)
        self.watch.watch(c, groups, nodes, busy)  # Slurm's view: marks, recovery (lab/engine/watching.py)
        self.extensions.step(c, groups, nodes)  # cluster extensions (lab/engine/extensions.py)
        self.hubs.watch(c, groups, nodes, busy)  # Lab.Jupyter: each login node's hub (lab/engine/hubwatch.py)
        self.hangs.watch(c, groups, nodes, busy)  # hung VMs: their guest agents (lab/engine/hangs.py)
        self.schedules.step(c, gmap, nodes)  # ScheduledUpdateConfig: a rolling update when due (lab/engine/schedules.py)
        self.rollout.step(c, gmap, nodes)
        self.patching.step(c, gmap, nodes)  # AutoPatchConfig (lab/engine/patching.py)
        rec.disk_marks(name, nodes, seen, p)
        by_name = {n.name: n for n in nodes}
        for waiting, msg in ((p.boot_waiting, f"waiting for a boot slot ({slots[0]} VMs boot at once on this host)"),
                             (p.fork_waiting, f"waiting for a fork slot ({slots[1]} VMs are forked at once on this "
                                              f"host, compute nodes after the controller and login nodes)")):
            for w in waiting:
                if by_name[w].message != msg:
                    self.store.update_node(c.name, w, message=msg)

        if any(a.kind == Kind.ROLLBACK for a in p.actions):
            rec.rollback(c, next(a for a in p.actions if a.kind == Kind.ROLLBACK))
            return
        if any(a.kind in (Kind.LAUNCH, Kind.REBOOT) for a in p.actions) and rec.needs_prepare(name):
            await rec.prepare(c, prov, gmap, nodes)
        addresses = None
        for a in p.actions:
            if a.kind == Kind.CREATE_NODE:
                if addresses is None:
                    addresses = {n.address for n in nodes if n.address}
                    if not addresses:  # the cluster's first node: its host first
                        await rec.place(c, prov, groups, a.group)
                rec.create_node(c, prov, gmap[a.group], a.ordinal, addresses)
            elif a.kind == Kind.SHORT:
                rec.short(name, a)
            elif a.kind == Kind.DROP_GROUP:
                self.store.delete_group(name, a.group)
                self.store.add_event(name, "InstanceGroup", "Info", f"instance group {a.group} deleted", grp=a.group,
                                     operation_id=rec.op_of(name, group=a.group))
            elif a.kind == Kind.KEEP_LOST:
                rec.keep_lost(name, a)
        ctx = None
        for a in p.actions:
            if a.kind in SYNC_ACTIONS:
                continue
            key = _task_key(a)
            if self.work.active(name, key):
                continue
            if a.kind in (Kind.DELETE_CLUSTER, Kind.ROLLBACK_CLUSTER):
                await self.work.cancel(name, keep=key)
            if a.kind in (Kind.CONFIGURE, Kind.JOIN, Kind.LEAVE, Kind.DETACH, Kind.HEALTHCHECK) and ctx is None:
                ctx = self.io.context_from(c, groups, nodes)
            self.work.start(name, key, self.steps.run(name, a, ctx))

    async def run(self, until: Callable[[], bool] | None = None, timeout: float | None = None) -> None:
        t0 = time.monotonic()
        while True:
            await self.step()
            if until and until():
                break
            if timeout and time.monotonic() - t0 > timeout:
                raise TimeoutError("engine did not reach the condition in time")
            await asyncio.sleep(self.tuning.tick)

    async def drain(self) -> None:
        """Cancel in-flight work (engine shutdown); the store keeps enough to resume."""
        await self.work.drain()
