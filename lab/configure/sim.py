"""The simulated configurer (`--provider sim`): Ansible and Slurm stood in for, every step a short
simulated time and a record in `calls`; its Slurm is a set of joined nodes a test may break
(`break_node`: lab/engine/recovery.py reads it as it reads a real sinfo)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from lab.capacity import health_faults
from lab.configure.base import Configurer


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

    def context(self, cluster, groups, nodes):
        return None  # no inventory needed

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
        return {n: SlurmNode(n, *self.broken.get(n, ("idle", ""))) for n in sorted(self.in_slurm)}, self.clock()

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
        return ""

    async def take_down_async(self, ctx, node: str, why: str) -> str:
        return self.take_down(ctx, node, why)

    def _joined(self, batch) -> None:
        for n in batch:  # a join resumes the node (roles/slurm_node slurmd.yml); a sticky fault stays
            self.in_slurm.add(n)
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
