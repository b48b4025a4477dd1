"""The engine: plans from the store and what the provider observes, acts, observes again.

One asyncio loop; blocking work (Vagrant, ansible-runner) runs in threads. A task per node
step and one join task per cluster; a failing step marks its node Failure with the reason and
a retry time (exponential backoff with jitter), and never stops the pass.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import time
from collections.abc import Callable

from lab.configure.inventory import ClusterContext
from lab.engine import plan as planner
from lab.engine.plan import Action
from lab.store.db import NodeRow, Store

log = logging.getLogger(__name__)

BACKOFF_BASE = 10.0
BACKOFF_MAX = 300.0


def backoff(attempts: int, rng: random.Random, base: float = BACKOFF_BASE, cap: float = BACKOFF_MAX) -> float:
    """Exponential backoff with full jitter in [d/2, d], d = min(cap, base * 2^(attempts-1))."""
    d = min(cap, base * 2 ** max(0, attempts - 1))
    return d / 2 + rng.random() * d / 2


def instance_id(cluster: str, node: str, prefix: str = "i-") -> str:
    return prefix + hashlib.sha256(f"{cluster}/{node}".encode()).hexdigest()[:17]


class Engine:
    def __init__(self, store: Store, provider, configurer, *, clock: Callable[[], float] = time.time,
                 tick: float = 1.0, seed: int | None = None):
        self.store = store
        self.provider = provider
        self.configurer = configurer
        self.clock = clock
        self.tick = tick
        self.rng = random.Random(seed)
        self.tasks: dict[tuple[str, str], asyncio.Task] = {}

    # ------------------------------------------------------------------ loop
    def busy(self, cluster: str) -> set[str]:
        return {key for (c, key), t in self.tasks.items() if c == cluster and not t.done()}

    async def step(self) -> None:
        self.tasks = {k: t for k, t in self.tasks.items() if not t.done()}
        self._apply_arrivals()
        for c in self.store.clusters():
            try:
                await self._step_cluster(c.name)
            except Exception:  # noqa: BLE001 - one cluster's trouble never stops the others
                log.exception("reconcile %s", c.name)

    async def _step_cluster(self, name: str) -> None:
        c = self.store.cluster(name)
        if c is None:
            return
        observed = {k: v.state for k, v in (await asyncio.to_thread(self.provider.observe, name)).items()}
        groups = self.store.groups(name)
        nodes = self.store.nodes(name)
        p = planner.plan(c, groups, nodes, observed, self.busy(name), self.clock(),
                         limits=self.store.capacity(), used=self._used())
        for g in groups:
            st = p.group_status.get(g.name)
            if st and st != g.status:
                self.store.update_group(name, g.name, status=st)
                self.store.add_event(name, "InstanceGroup", "Info" if st != "Degraded" else "Warning",
                                     f"instance group {g.name} is {st}", grp=g.name)
        if p.cluster_status and p.cluster_status != c.status:
            self.store.update_cluster(name, status=p.cluster_status,
                                      **({"in_service_at": self.clock()} if c.in_service_at is None else {}))
            self.store.add_event(name, "Cluster", "Info", f"cluster {name} is {p.cluster_status}")
        if p.full_size and c.full_size_at is None and nodes:
            self.store.update_cluster(name, full_size_at=self.clock())
            self.store.add_event(name, "Cluster", "Info", f"cluster {name} reached its full size")
        created = False
        for a in p.actions:
            if a.kind == "create_node":
                self._create_node(name, a.group, a.ordinal)
                created = True
        for a in p.actions:
            if a.kind == "short":
                self._short(name, a)
        for a in p.actions:
            if a.kind in ("create_node", "short"):
                continue
            key = "join" if a.kind == "join" else ("delete" if a.kind == "delete_cluster" else a.node)
            if (name, key) in self.tasks and not self.tasks[(name, key)].done():
                continue
            self.tasks[(name, key)] = asyncio.create_task(self._guard(name, a), name=f"{name}:{a.kind}:{key}")
        if created:
            await asyncio.to_thread(self._prepare, name)

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

    # ------------------------------------------------------------------ capacity
    def _used(self):
        from collections import Counter

        from lab.capacity import HOLDING

        used: Counter = Counter()
        for c in self.store.clusters():
            types = {g.name: g.instance_type for g in self.store.groups(c.name)}
            for n in self.store.nodes(c.name):
                if n.phase in HOLDING or (n.phase == "failed" and n.booted_at):
                    used[types.get(n.grp)] += 1
        return used

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
        n = next((x for x in self.store.nodes(cluster) if x.name == a.node), None)
        if n is None:
            return
        attempts = n.attempts + 1
        delay = backoff(attempts, self.rng)
        self.store.update_node(cluster, a.node, phase="failed", message=a.reason, attempts=attempts,
                               retry_at=self.clock() + delay)
        self.store.add_event(cluster, "Instance", "Warning", f"{a.node}: {a.reason} (next try in {delay:.0f} s)",
                             grp=a.group, node=a.node)

    # ------------------------------------------------------------------ helpers
    def _create_node(self, cluster: str, group: str, ordinal: int) -> None:
        name = f"{cluster}-{group}-{ordinal}"
        c = self.store.cluster(cluster)
        used = {n.address for n in self.store.nodes(cluster)}
        address, mac = self.provider.allocate(cluster, name, used, c.net_index)
        self.store.add_node(NodeRow(cluster=cluster, name=name, grp=group, ordinal=ordinal,
                                    instance_id=instance_id(cluster, name, getattr(self.provider, "id_prefix", "i-")),
                                    address=address, mac=mac, phase="planned"))
        self.store.add_event(cluster, "Instance", "Info", f"node {name} planned ({address})", grp=group, node=name)

    def _prepare(self, cluster: str) -> None:
        c = self.store.cluster(cluster)
        box = ((c.spec.get("Lab") or {}).get("Box")) if c else None
        self.provider.prepare(cluster, self._machines(cluster), c.net_index, box=box)

    def _machines(self, cluster: str):
        from lab.providers.base import MachineSpec

        groups = {g.name: g for g in self.store.groups(cluster)}
        return [MachineSpec(n.name, n.grp, groups[n.grp].cpus, groups[n.grp].memory_mib, n.mac, n.address)
                for n in self.store.nodes(cluster) if n.grp in groups]

    def context(self, cluster: str) -> ClusterContext:
        return self.configurer.context(self.store.cluster(cluster), self.store.groups(cluster), self.store.nodes(cluster))

    def _fail(self, cluster: str, node: str, message: str) -> None:
        n = next((x for x in self.store.nodes(cluster) if x.name == node), None)
        if n is None:
            return
        attempts = n.attempts + 1
        delay = backoff(attempts, self.rng)
        self.store.update_node(cluster, node, phase="failed", message=message[:500], attempts=attempts,
                               retry_at=self.clock() + delay)
        self.store.add_event(cluster, "Instance", "Error", f"{node}: {message[:300]} (retry {attempts} in {delay:.0f} s)",
                             grp=n.grp, node=node)

    async def _guard(self, cluster: str, a: Action) -> None:
        try:
            await getattr(self, f"_do_{a.kind}")(cluster, a)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            log.exception("%s %s", a.kind, a.node or a.batch)
            for node in ([a.node] if a.node else list(a.batch)):
                self._fail(cluster, node, f"{a.kind}: {e}")

    # ------------------------------------------------------------------ actions
    async def _do_launch(self, cluster: str, a: Action) -> None:
        self.store.update_node(cluster, a.node, phase="launching", launched_at=self.clock(), message="launching VM")
        await asyncio.to_thread(self._prepare, cluster)
        m = next(m for m in self._machines(cluster) if m.name == a.node)
        try:
            await asyncio.to_thread(self.provider.ensure, cluster, m)
        except Exception as e:  # noqa: BLE001
            self._fail(cluster, a.node, f"launch failed: {e}")
            return
        self.store.update_node(cluster, a.node, phase="booted", booted_at=self.clock(), message="VM answers ssh")
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: VM up", grp=a.group, node=a.node)

    async def _do_configure(self, cluster: str, a: Action) -> None:
        self.store.update_node(cluster, a.node, phase="configuring", message="running Ansible")
        ctx = self.context(cluster)
        node = next(n for n in ctx.nodes if n.name == a.node)
        node_type = next(g.node_type for g in ctx.groups if g.name == node.grp)
        try:
            await asyncio.to_thread(self.configurer.configure, ctx, node.name, node_type)
        except Exception as e:  # noqa: BLE001
            self._fail(cluster, a.node, str(e))
            return
        if node_type == "Compute":
            self.store.update_node(cluster, a.node, phase="configured", message="configured, waiting to join")
        else:
            self.store.update_node(cluster, a.node, phase="running", joined_at=self.clock(), message="",
                                   attempts=0)
            self.store.add_event(cluster, "Instance", "Info", f"{a.node}: {node_type.lower()} ready",
                                 grp=a.group, node=a.node)

    async def _do_join(self, cluster: str, a: Action) -> None:
        batch = list(a.batch)
        for n in batch:
            self.store.update_node(cluster, n, phase="joining", message="joining Slurm")
        ctx = self.context(cluster)
        try:
            await asyncio.to_thread(self.configurer.join, ctx, batch)
        except Exception as e:  # noqa: BLE001
            failures = getattr(getattr(e, "result", None), "failures", {}) or {}
            for n in batch:
                self._fail(cluster, n, f"join failed: {failures.get(n) or e}")
            return
        now = self.clock()
        for n in batch:
            self.store.update_node(cluster, n, phase="running", joined_at=now, message="", attempts=0)
        self.store.add_event(cluster, "InstanceGroup", "Info",
                             f"{len(batch)} node(s) joined Slurm with one reconfigure: {', '.join(batch)}")

    async def _do_lost(self, cluster: str, a: Action) -> None:
        self.store.update_node(cluster, a.node, phase="planned", booted_at=None, message="VM lost: replacing")
        self.store.add_event(cluster, "Instance", "Warning", f"{a.node}: VM is gone or stopped, replacing it",
                             grp=a.group, node=a.node)

    async def _do_remove(self, cluster: str, a: Action) -> None:
        n = next((x for x in self.store.nodes(cluster) if x.name == a.node), None)
        if n is None:
            return
        was_running = n.phase == "running"
        self.store.update_node(cluster, a.node, phase="removing", message="draining and removing")
        ctx = self.context(cluster)
        if was_running:
            await asyncio.to_thread(self.configurer.leave, ctx, [a.node])
        await asyncio.to_thread(self.provider.remove, cluster, [a.node])
        self.store.delete_node(cluster, a.node)
        self.capacity_released(next((g.instance_type for g in self.store.groups(cluster) if g.name == a.group), None))
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: removed", grp=a.group, node=a.node)
        await asyncio.to_thread(self._prepare, cluster)

    async def _do_delete_cluster(self, cluster: str, a: Action) -> None:
        types = {g.instance_type for g in self.store.groups(cluster)}
        await asyncio.to_thread(self.provider.delete_cluster, cluster)
        self.store.delete_cluster(cluster)
        for t in types:
            self.capacity_released(t)
