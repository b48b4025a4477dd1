"""The join batching window and the early launch / configure order, end to end on the sim provider
(virtual time): the engine sets configured_at, the planner holds or releases the batch."""

from __future__ import annotations

import asyncio

from lab.configure.sim import SimConfigurer
from lab.control import clusters
from lab.engine.plan import JOIN_QUIET_S
from tests.simlab import SimLab, spec_text


class SlowConfigurer(SimConfigurer):
    """Some nodes take longer to configure (seconds added per node)."""

    def __init__(self, extra: dict[str, float], **kw):
        super().__init__(**kw)
        self.extra = dict(extra)

    async def configure_async(self, ctx, node, node_type):
        await super().configure_async(ctx, node, node_type)
        await self.sleep(self.extra.get(node, 0.0))


def _lab(tmp_path, extra: dict[str, float]) -> SimLab:
    lab = SimLab(tmp_path)
    lab.conf = SlowConfigurer(extra, sleep=lab.clock.sleep)
    lab.eng = lab.new_engine()
    return lab


def _joins(lab):
    return [c[1] for c in lab.conf.calls if c[0] == "join"]


def test_nodes_configured_seconds_apart_join_in_one_batch(tmp_path):
    async def go():
        lab = _lab(tmp_path, {"demo-compute-2": JOIN_QUIET_S - 1})
        lab.create(spec_text(computes=2, logins=0))
        await lab.run_until(lambda: lab.full())
        assert _joins(lab) == [("demo-compute-1", "demo-compute-2")]  # one reconfigure, not two
        a, b = lab.node("demo-compute-1"), lab.node("demo-compute-2")
        assert 0 < b.configured_at - a.configured_at <= JOIN_QUIET_S
        assert a.joined_at == b.joined_at
        assert lab.node("demo-controller-1").configured_at is None  # compute nodes only
        await lab.finish()

    asyncio.run(go())


def test_a_late_node_does_not_hold_the_others_past_the_quiet_period(tmp_path):
    async def go():
        lab = _lab(tmp_path, {"demo-compute-2": 60.0})
        lab.create(spec_text(computes=2, logins=0))
        await lab.run_until(lambda: lab.full())
        assert _joins(lab) == [("demo-compute-1",), ("demo-compute-2",)]
        a = lab.node("demo-compute-1")
        # held for the quiet period (the engine passes once a virtual second), not for demo-compute-2
        assert JOIN_QUIET_S <= a.joined_at - a.configured_at <= JOIN_QUIET_S + 1.5
        await lab.finish()

    asyncio.run(go())


def test_compute_configures_while_the_controller_does_and_joins_when_it_runs(tmp_path):
    async def go():
        lab = _lab(tmp_path, {"demo-controller-1": 10.0})  # a slow controller.yml
        lab.create(spec_text(computes=2, logins=1))
        await lab.run_until(lambda: lab.phases().get("demo-compute-1") == "configured"
                            and lab.phases().get("demo-compute-2") == "configured", max_ticks=30)
        assert lab.node("demo-controller-1").phase == "configuring"
        assert lab.node("demo-login-1").phase == "booted"  # sackd needs slurmctld: waits
        assert _joins(lab) == []  # the join waits for the controller
        await lab.run_until(lambda: lab.full())
        assert _joins(lab) == [("demo-compute-1", "demo-compute-2")]
        await lab.finish()

    asyncio.run(go())


def test_configured_at_is_cleared_when_the_node_gets_a_new_vm(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=1, logins=0))
        await lab.run_until(lambda: lab.full())
        n = "demo-compute-1"
        first = lab.node(n).configured_at
        assert first is not None
        clusters.replace_nodes(lab.st, "demo", [n])
        seen = set()
        for _ in range(40):
            await lab.tick()
            row = lab.node(n)
            if row.phase in ("planned", "launching", "booted", "configuring", "replacing"):
                seen.add(row.phase)
                assert row.configured_at is None, row
            if lab.full() and not row.pending and row.generation == 1:
                break
        assert "planned" in seen or "launching" in seen
        assert lab.node(n).configured_at > first
        await lab.finish()

    asyncio.run(go())


def test_boot_slots_bring_the_whole_cluster_up_in_priority_order(tmp_path):
    """With 2 boot slots the engine launches the controller and the login node first, then the
    compute nodes as slots free up, and every node of the cluster (the cluster, not a node named
    like a waiting node) reaches Running."""
    async def go():
        lab = SimLab(tmp_path)
        lab.eng = lab.new_engine()
        lab.eng.tuning.boot_slots = {"sim": 2}
        lab.create(spec_text(computes=3, logins=1))
        await lab.run_until(lambda: lab.full())
        assert set(lab.phases().values()) == {"running"}
        assert lab.prov.launched[:2] == ["demo-controller-1", "demo-login-1"]
        assert sorted(lab.prov.launched[2:]) == ["demo-compute-1", "demo-compute-2", "demo-compute-3"]
        assert all(c == "demo" for c, _ in lab.eng.tasks)  # tasks are keyed by the cluster's name
        await lab.finish()

    asyncio.run(go())


GPU = """  - InstanceGroupName: gpu
    InstanceType: ml.g5.xlarge
    InstanceCount: 1
    SlurmConfig: {NodeType: Compute, PartitionNames: [gpu]}
"""


def test_forks_take_fork_slots_and_say_what_they_wait_for(tmp_path):
    """A provider that forks the compute nodes: they wait for the cold-booting controller and login node
    (they gate InService), then launch one fork at a time while a cold-booting GPU node holds the boot
    slot, and a waiting fork's message names its slot."""
    async def go():
        lab = SimLab(tmp_path)
        lab.eng = lab.new_engine()
        lab.eng.tuning.boot_slots = {"sim": 1}
        lab.eng.tuning.fork_slots = {"sim": 1}
        lab.prov.forks = lambda cluster, m: m.group == "compute"
        lab.prov.boot_time = 20.0  # a cold boot holds its slot while the forks go
        lab.create(spec_text(computes=2, logins=1, extra_groups=GPU))
        messages = set()
        await lab.run_until(lambda: messages.update(n.message for n in lab.st.nodes("demo")) or lab.full())
        assert set(lab.phases().values()) == {"running"}
        launched = lab.prov.launched
        assert launched[:2] == ["demo-controller-1", "demo-login-1"], launched
        assert set(launched[2:4]) == {"demo-gpu-1", "demo-compute-1"}, launched  # the fork beside the cold boot
        assert "waiting for a fork slot (1 VMs are forked at once on this host, compute nodes after the controller and login nodes)" in messages
        assert "waiting for a boot slot (1 VMs boot at once on this host)" in messages
        await lab.finish()

    asyncio.run(go())
