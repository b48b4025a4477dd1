"""The simulated configurer (`--provider sim`): Ansible and Slurm stood in for, every step a short
simulated time and a record in `calls`; its Slurm is a set of joined nodes a test may break
(`break_node`: lab/engine/recovery.py reads it as it reads a real sinfo). Its cluster extensions
are a record of which nodes have which (`extension_nodes`) and a metrics sample labelled simulated
(lab/configure/simmetrics.py); a test may make an apply fail on a node (`extension_failures`), the
seeded fault `extension_unhealthy_rate` (lab/capacity.py) makes members miss a probe."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from lab.capacity import extension_faults, health_faults
from lab.configure import simmetrics
from lab.configure.base import Configurer, Extension, Probe
from lab.spec.extensions import scrape_interval


@dataclass(frozen=True)
class SimContext:
    """What the simulated configurer knows of a cluster: its name, groups and nodes (the store's)."""

    name: str
    groups: list
    nodes: list


class SimConfigurer(Configurer):
    """Configures nothing: each step takes a short simulated time and is recorded in `calls`. Its
    coroutine twins wait on `sleep` (virtual time in tests); the blocking methods on wall time."""

    simulated = True

    def __init__(self, configure_time: float = 0.5, join_time: float = 0.3, leave_time: float = 0.2, *,
                 health_time: float = 1.0, sleep: Callable[[float], Awaitable[None]] | None = None,
                 clock: Callable[[], float] = time.time):
        self.configure_time = configure_time
        self.health_time = health_time
        self.join_time = join_time
        self.leave_time = leave_time
        self.sleep = sleep or asyncio.sleep
        self.clock = clock  # when Slurm's view was taken (the engine's clock: a VirtualClock in tests)
        self.calls: list[tuple] = []
        # Simulated Slurm (lab/engine/recovery.py): the nodes joined, and the ones a test broke:
        # node -> (state, reason). A restart of slurmd mends a broken node unless it is in `sticky`.
        self.in_slurm: set[str] = set()
        self.broken: dict[str, tuple[str, str]] = {}
        self.sticky: set[str] = set()
        self.slurmctld_down: str | None = None  # what slurm_nodes raises, when set
        # Jobs (auto-patching, lab/engine/patching.py): node -> jobs running there; node -> the lab's drain reason
        self.jobs: dict[str, int] = {}
        self.cordoned: dict[str, str] = {}
        # Cluster extensions: extension name -> the nodes it is on; node -> why an apply fails there
        self.extension_nodes: dict[str, set[str]] = {}
        self.extension_failures: dict[str, str] = {}

    def context(self, cluster, groups, nodes):
        return SimContext(cluster.name, list(groups), list(nodes))  # no inventory: what the metrics are made of

    def break_node(self, node: str, state: str = "down*", reason: str = "Not responding", sticky: bool = False) -> None:
        """A test's fault: Slurm shows the node so (e.g. slurmd died: down*, Not responding)."""
        self.broken[node] = (state, reason)
        if sticky:
            self.sticky.add(node)

    def slurm_nodes(self, ctx, faults: dict):
        from lab.configure.slurmstate import SlurmUnreachable
        from lab.configure.sinfo import SlurmNode

        self.calls.append(("slurm_nodes",))
        if self.slurmctld_down:
            raise SlurmUnreachable(self.slurmctld_down)
        return {n: SlurmNode(n, *self._state(n)) for n in sorted(self.in_slurm)}, self.clock()

    def _state(self, node: str) -> tuple[str, str]:
        if node in self.broken:
            return self.broken[node]
        busy = self.jobs.get(node, 0) > 0
        if node in self.cordoned:
            return ("draining" if busy else "drained"), self.cordoned[node]
        return ("allocated" if busy else "idle"), ""

    def run_job(self, node: str) -> None:
        """A test's job on the node (it keeps the node busy until end_job)."""
        self.jobs[node] = self.jobs.get(node, 0) + 1

    def end_job(self, node: str) -> None:
        self.jobs[node] = max(0, self.jobs.get(node, 0) - 1)

    def cordon(self, ctx, nodes: list[str], why: str) -> dict[str, str]:
        self.calls.append(("cordon", tuple(nodes)))
        for n in nodes:
            if n in self.in_slurm:
                self.cordoned[n] = f"slurmlab: {why}"
        return {}

    async def cordon_async(self, ctx, nodes: list[str], why: str) -> dict[str, str]:
        return self.cordon(ctx, nodes, why)

    def jobs_on(self, ctx, nodes: list[str]) -> dict[str, int]:
        return {n: self.jobs.get(n, 0) for n in nodes if n in self.in_slurm}

    async def jobs_on_async(self, ctx, nodes: list[str]) -> dict[str, int]:
        return self.jobs_on(ctx, nodes)

    def uncordon(self, ctx, nodes: list[str]) -> dict[str, str]:
        self.calls.append(("uncordon", tuple(nodes)))
        for n in nodes:
            self.cordoned.pop(n, None)
        return {}

    async def uncordon_async(self, ctx, nodes: list[str]) -> dict[str, str]:
        return self.uncordon(ctx, nodes)

    async def slurm_nodes_async(self, ctx, faults: dict):
        return self.slurm_nodes(ctx, faults)

    def restart_slurmd(self, ctx, node: str) -> str:
        self.calls.append(("restart_slurmd", node))
        if node in self.sticky:
            return ""  # it starts, and dies again: Slurm still shows it down
        self.broken.pop(node, None)
        return ""

    async def restart_slurmd_async(self, ctx, node: str) -> str:
        return self.restart_slurmd(ctx, node)

    def take_down(self, ctx, node: str, why: str) -> str:
        self.calls.append(("take_down", node))
        if node in self.in_slurm and node not in self.sticky:  # a sticky fault shows through
            self.broken[node] = ("down", f"slurmlab: {why}")
            self.jobs.pop(node, None)  # its jobs end (NODE_FAIL; a batch job is requeued)
        return ""

    async def take_down_async(self, ctx, node: str, why: str) -> str:
        return self.take_down(ctx, node, why)

    def _joined(self, batch) -> None:
        for n in batch:  # a join resumes the node (roles/slurm_node slurmd.yml); a sticky fault stays
            self.in_slurm.add(n)
            self.cordoned.pop(n, None)
            if n not in self.sticky:
                self.broken.pop(n, None)

    async def configure_async(self, ctx, node: str, node_type: str) -> None:
        self.calls.append(("configure", node, node_type))
        await self.sleep(self.configure_time)

    async def join_async(self, ctx, batch: list[str]) -> None:
        self.calls.append(("join", tuple(batch)))
        await self.sleep(self.join_time)
        self._joined(batch)

    async def leave_async(self, ctx, names: list[str]) -> None:
        self.calls.append(("leave", tuple(names)))
        await self.sleep(self.leave_time)
        self.in_slurm.difference_update(names)

    async def health_check_async(self, ctx, targets: dict[str, list[str]], op_id: str, faults: dict) -> dict:
        self.calls.append(("health_check", tuple(targets)))
        await self.sleep(self.health_time)
        return health_faults(faults, op_id, targets)

    def set_clocks(self, ctx) -> dict[str, str]:
        self.calls.append(("set_clocks",))
        return {}

    async def set_clocks_async(self, ctx) -> dict[str, str]:
        return self.set_clocks(ctx)

    def health_check(self, ctx, targets: dict[str, list[str]], op_id: str, faults: dict) -> dict:
        self.calls.append(("health_check", tuple(targets)))
        time.sleep(self.health_time)
        return health_faults(faults, op_id, targets)

    def configure(self, ctx, node: str, node_type: str) -> None:
        self.calls.append(("configure", node, node_type))
        time.sleep(self.configure_time)

    def join(self, ctx, batch: list[str]) -> None:
        self.calls.append(("join", tuple(batch)))
        time.sleep(self.join_time)
        self._joined(batch)

    def leave(self, ctx, names: list[str]) -> None:
        self.calls.append(("leave", tuple(names)))
        time.sleep(self.leave_time)
        self.in_slurm.difference_update(names)

    # ------------------------------------------------------------------ cluster extensions
    def extension_apply(self, ctx, ext: Extension, targets: list[str]) -> dict[str, str]:
        self.calls.append(("extension_apply", ext.name, ext.version, tuple(targets)))
        failed = {n: self.extension_failures[n] for n in targets if n in self.extension_failures}
        self.extension_nodes.setdefault(ext.name, set()).update(n for n in targets if n not in failed)
        return failed

    async def extension_apply_async(self, ctx, ext: Extension, targets: list[str]) -> dict[str, str]:
        await self.sleep(self.configure_time)
        return self.extension_apply(ctx, ext, targets)

    def extension_remove(self, ctx, ext: Extension, targets: list[str]) -> dict[str, str]:
        self.calls.append(("extension_remove", ext.name, tuple(targets)))
        self.extension_nodes.get(ext.name, set()).difference_update(targets)
        return {}

    async def extension_remove_async(self, ctx, ext: Extension, targets: list[str]) -> dict[str, str]:
        await self.sleep(self.leave_time)
        return self.extension_remove(ctx, ext, targets)

    def extension_probe(self, ctx, ext: Extension, faults: dict) -> Probe | None:
        self.calls.append(("extension_probe", ext.name))
        now = self.clock()
        probe = int(now // scrape_interval(ext.config))
        cluster = ctx.name if ctx is not None else ""
        # only the seeded fault: `extension_nodes` is this process's memory, empty after an engine restart
        unhealthy = extension_faults(faults, cluster, ext.name, ext.members, probe)
        sample = simmetrics.sample(cluster, ctx.groups if ctx else [], ctx.nodes if ctx else [], ext, unhealthy,
                                   self.in_slurm, self.broken, now, probe, (faults or {}).get("seed") or 0)
        return Probe(unhealthy, sample)

    async def extension_probe_async(self, ctx, ext: Extension, faults: dict) -> Probe | None:
        return self.extension_probe(ctx, ext, faults)
