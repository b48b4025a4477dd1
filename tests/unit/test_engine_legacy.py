"""Legacy mode (NodeProvisioningMode absent): all or nothing, rollback; and the contrast with
Continuous (the rest goes on, retried in the background)."""

from __future__ import annotations

import asyncio

from lab import capacity
from lab.control import clusters
from lab.providers.base import LaunchError
from lab.providers.sim import SimProvider
from tests.simlab import SimLab, spec_text


def test_legacy_create_rolls_back_when_a_group_cannot_reach_its_count(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.st.set_capacity("ml.c5.large", 1)
        lab.create(spec_text(computes=2, mode=None))
        await lab.run_until(lambda: lab.st.cluster("demo").status == "RollingBack")
        assert lab.vms()  # the rollback starts with VMs up
        await lab.run_until(lambda: lab.st.cluster("demo").status == "Failed")
        d = clusters.describe(lab.st, "demo")
        assert d["ClusterStatus"] == "Failed"
        msg = d["FailureMessage"]
        assert "instance group compute" in msg and "InsufficientCapacity" in msg and "ml.c5.large" in msg
        assert "after 3 attempt(s)" in msg
        assert lab.vms() == set() and "demo" not in lab.prov.vms  # every VM removed (and the network)
        assert lab.st.nodes("demo") == []
        assert {g["Status"] for g in d["InstanceGroups"]} == {"Failed"}
        descr = [e.description for e in lab.st.events("demo")]
        assert any("RollingBack" in x for x in descr) and any("is Failed" in x for x in descr)
        # nothing more happens to a Failed cluster; the capacity it held is free again
        launched = len(lab.prov.launched)
        await lab.ticks(5)
        assert len(lab.prov.launched) == launched
        assert capacity.used(lab.st)["ml.c5.large"] == 0
        # DeleteCluster still removes its record
        clusters.delete(lab.st, "demo", start_engine=False)
        await lab.ticks(2)
        assert lab.st.cluster("demo") is None
        await lab.finish()

    asyncio.run(go())


def test_the_same_shortage_in_continuous_mode_keeps_going_and_retries(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.st.set_capacity("ml.c5.large", 1)
        lab.create(spec_text(computes=2, mode="Continuous"))
        await lab.run_until(lambda: lab.st.cluster("demo").status == "InService")
        # many more attempts than the legacy limit: still retried, never rolled back
        await lab.run_until(lambda: any(n.attempts >= 6 for n in lab.st.nodes("demo")), max_ticks=200)
        assert lab.st.cluster("demo").status == "InService"
        d = {g["InstanceGroupName"]: g for g in clusters.describe(lab.st, "demo")["InstanceGroups"]}
        assert d["compute"]["Status"] == "Degraded" and d["compute"]["CurrentCount"] == 1
        short = next(n for n in lab.st.nodes("demo") if n.phase == "failed")
        assert short.retry_at - lab.clock.t <= 300  # bounded backoff
        lab.st.add_arrival("ml.c5.large", lab.clock.t + 5, 1)
        await lab.run_until(lambda: lab.full())
        await lab.finish()

    asyncio.run(go())


def test_legacy_inservice_only_when_everything_is_up_and_launches_all_at_once(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=2, mode=None))
        await lab.tick()
        await lab.tick()
        # every VM launched at once, before the controller runs
        assert set(lab.prov.launched) == {"demo-controller-1", "demo-login-1", "demo-compute-1", "demo-compute-2"}
        seen = []
        while not lab.full():
            await lab.tick()
            c = lab.st.cluster("demo")
            seen.append((c.status, sorted(lab.phases().values())))
        # Creating while some nodes ran and others did not yet (compute nodes configure while the
        # controller does, so they may join before the login node runs); never InService before full
        assert any(s == "Creating" and 0 < ph.count("running") < 4 for s, ph in seen)
        assert all(s == "Creating" for s, ph in seen if ph.count("running") < 4)
        await lab.tick()
        assert lab.st.cluster("demo").status == "InService"
        await lab.finish()

    asyncio.run(go())


class FlakySim(SimProvider):
    """Launches of some nodes fail a given number of times."""

    def __init__(self, fails: dict[str, int], **kw):
        super().__init__(**kw)
        self.fails = dict(fails)

    async def ensure_async(self, cluster, machine):
        if self.fails.get(machine.name, 0) > 0:
            self.fails[machine.name] -= 1
            raise LaunchError(f"{machine.name}: the hypervisor said no")
        return await super().ensure_async(cluster, machine)


def _flaky_lab(tmp_path, fails, **kw):
    lab = SimLab(tmp_path, **kw)
    lab.prov = FlakySim(fails, boot_time=1.0, clock=lab.clock, sleep=lab.clock.sleep)
    lab.eng = lab.new_engine()
    return lab


def test_legacy_transient_failures_within_the_attempts_succeed(tmp_path):
    async def go():
        lab = _flaky_lab(tmp_path, {"demo-compute-2": 2})
        lab.create(spec_text(computes=2, mode=None))
        await lab.run_until(lambda: lab.full(), max_ticks=300)
        await lab.tick()
        assert lab.st.cluster("demo").status == "InService"
        assert any("the hypervisor said no" in e.description for e in lab.st.events("demo"))
        await lab.finish()

    asyncio.run(go())


def test_legacy_attempts_are_configurable(tmp_path):
    async def go():
        lab = _flaky_lab(tmp_path, {"demo-compute-2": 1}, max_attempts=1)
        lab.create(spec_text(computes=2, mode=None))
        await lab.run_until(lambda: lab.st.cluster("demo").status == "Failed", max_ticks=100)
        assert "the hypervisor said no" in lab.st.cluster("demo").failure_message
        assert lab.vms() == set()
        await lab.finish()

    asyncio.run(go())


def test_legacy_update_that_cannot_complete_rolls_back_to_the_previous_counts(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.st.set_capacity("ml.c5.large", 2)
        lab.create(spec_text(computes=2, mode=None))
        await lab.run_until(lambda: lab.full())
        await lab.tick()
        spec = lab.st.cluster("demo").spec
        compute = next(g for g in spec["InstanceGroups"] if g["InstanceGroupName"] == "compute")
        clusters.update(lab.st, "demo", {"InstanceGroups": [{**compute, "InstanceCount": 3}]})
        assert lab.st.cluster("demo").status == "Updating"
        await lab.run_until(lambda: lab.st.cluster("demo").status == "RollingBack", max_ticks=200)
        await lab.run_until(lambda: lab.st.cluster("demo").status == "InService", max_ticks=50)
        c = lab.st.cluster("demo")
        assert "rolled back" in c.failure_message and "compute" in c.failure_message
        assert {g.name: g.target_count for g in lab.st.groups("demo")}["compute"] == 2
        assert next(g for g in c.spec["InstanceGroups"] if g["InstanceGroupName"] == "compute")["InstanceCount"] == 2
        assert sorted(lab.phases()) == ["demo-compute-1", "demo-compute-2", "demo-controller-1", "demo-login-1"]
        assert lab.vms() == set(lab.phases())
        ops = lab.st.operations("demo")
        assert [o.status for o in ops if o.kind == "UpdateCluster"] == ["Failed"]
        # one operation at a time in legacy mode
        lab.st.update_cluster("demo", status="Updating")
        try:
            clusters.update(lab.st, "demo", {"InstanceGroups": [{**compute, "InstanceCount": 1}]})
            raise AssertionError("expected a Conflict")
        except clusters.Conflict as e:
            assert "Updating" in e.message and "one operation" in (e.fix or "")
        await lab.finish()

    asyncio.run(go())
