"""A lab on the sim provider with virtual time, for engine tests (and the benchmark's shape).

    async def scenario():
        lab = SimLab(tmp_path)
        lab.create(SPEC)                       # clusters.create(..., provider="sim")
        await lab.run_until(lambda: lab.full("demo"))

Time only moves when the driver moves it: after each engine pass the loop settles, then the clock
jumps to the next wake-up (a simulated boot, configure, join) or the next tick, and over idle
stretches straight to the next retry time or capacity arrival.
"""

from __future__ import annotations

import asyncio

from lab.configure.sim import SimConfigurer
from lab.control import clusters
from lab.engine.engine import Engine, Tuning
from lab.providers.sim import SimProvider, VirtualClock
from lab.spec import loads_spec
from lab.store.db import Store

SETTLE = 6

SPEC = """
ClusterName: demo
NodeProvisioningMode: Continuous
NodeRecovery: Automatic
InstanceGroups:
  - InstanceGroupName: controller
    InstanceType: ml.t3.medium
    InstanceCount: 1
    SlurmConfig: {NodeType: Controller}
  - InstanceGroupName: login
    InstanceType: ml.t3.medium
    InstanceCount: 1
    SlurmConfig: {NodeType: Login}
  - InstanceGroupName: compute
    InstanceType: ml.c5.large
    InstanceCount: 2
    SlurmConfig: {NodeType: Compute, PartitionNames: [dev]}
"""


def spec_text(name="demo", computes=2, logins=1, mode="Continuous", recovery="Automatic", extra_groups=""):
    s = SPEC.replace("ClusterName: demo", f"ClusterName: {name}")
    s = s.replace("    InstanceCount: 2\n", f"    InstanceCount: {computes}\n")
    if logins == 0:
        s = s.replace("""  - InstanceGroupName: login
    InstanceType: ml.t3.medium
    InstanceCount: 1
    SlurmConfig: {NodeType: Login}
""", "")
    s = s.replace("NodeProvisioningMode: Continuous\n", f"NodeProvisioningMode: {mode}\n" if mode else "")
    s = s.replace("NodeRecovery: Automatic", f"NodeRecovery: {recovery}")
    return s + extra_groups


class SimLab:
    def __init__(self, tmp_path, *, boot_time=1.0, configure_time=0.5, join_time=0.3, leave_time=0.2,
                 max_attempts=3, seed=1, provider=None):
        self.clock = VirtualClock()
        self.st = Store(tmp_path / "state.db")
        self.prov = provider or SimProvider(boot_time, clock=self.clock, sleep=self.clock.sleep)
        self.conf = SimConfigurer(configure_time, join_time, leave_time, sleep=self.clock.sleep, clock=self.clock)
        self.max_attempts = max_attempts
        self.seed = seed
        self.engines = 0
        self.eng = self.new_engine()

    def new_engine(self) -> Engine:
        self.engines += 1
        return Engine(self.st, self.prov, self.conf, clock=self.clock, seed=self.seed + self.engines,
                      tuning=Tuning(max_attempts=self.max_attempts))

    # ------------------------------------------------------------------ records
    def create(self, text: str = SPEC, **kw):
        return clusters.create(self.st, loads_spec(text), provider="sim", start_engine=False, **kw)

    def phases(self, name="demo") -> dict[str, str]:
        return {n.name: n.phase for n in self.st.nodes(name)}

    def node(self, name: str, cluster="demo"):
        return self.st.node(cluster, name)

    def full(self, name="demo") -> bool:
        c = self.st.cluster(name)
        if c is None:
            return False
        gs = self.st.groups(name)
        ns = self.st.nodes(name)
        return all(sum(1 for n in ns if n.grp == g.name and n.phase == "running") == g.target_count
                   and sum(1 for n in ns if n.grp == g.name) == g.target_count for g in gs)

    def vms(self, name="demo") -> set[str]:
        return set(self.prov.vms.get(name, {}))

    # ------------------------------------------------------------------ driving
    async def settle(self, n: int = SETTLE) -> None:
        for _ in range(n):
            await asyncio.sleep(0)

    def _next_due(self) -> float | None:
        """The next retry time or capacity arrival after now (for jumps over idle stretches)."""
        now = self.clock.t
        dues = [due for _, _, due, _ in self.st.pending_arrivals() if due > now]
        for c in self.st.clusters():
            dues += [n.retry_at for n in self.st.nodes(c.name) if n.retry_at > now]
        return min(dues) if dues else None

    async def tick(self) -> None:
        """One engine pass, then time moves to the next event (at most one tick ahead, unless idle)."""
        await self.eng.step()
        await self.settle()
        nxt = self.clock.next_wake()
        target = self.clock.t + self.eng.tuning.tick
        if nxt is not None:
            target = min(target, nxt)
        elif not any(not t.done() for t in self.eng.tasks.values()):
            due = self._next_due()
            if due is not None and due > target:
                target = due
        self.clock.advance_to(target)
        await self.settle()

    async def run_until(self, cond, max_ticks: int = 400) -> int:
        for i in range(max_ticks):
            if cond():
                return i
            await self.tick()
        raise AssertionError(f"condition not reached in {max_ticks} ticks; phases {self.phases()}")

    async def ticks(self, n: int) -> None:
        for _ in range(n):
            await self.tick()

    def kill(self) -> None:
        """SIGKILL, as far as one process can play it: the engine's tasks are cancelled where they
        stand (nothing after their current await runs) and a new engine takes over the store."""
        for t in self.eng.tasks.values():
            t.cancel()
        self.eng.tasks.clear()
        self.eng = self.new_engine()

    async def finish(self) -> None:
        await self.eng.drain()
