import asyncio
import time

import pytest

from lab.engine.bookkeeping import backoff
from lab.engine.engine import Engine, Tuning
from lab.store.db import ClusterRow, GroupRow, Store
from tests.fakes import FakeConfigurer, FakeProvider


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _cluster(st: Store, name="demo", computes=2, logins=1):
    groups = [GroupRow(name, "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "Creating")]
    if logins:
        groups.append(GroupRow(name, "login", "ml.t3.medium", "Login", logins, [], 1, 768, "Creating"))
    groups.append(GroupRow(name, "compute", "ml.c5.large", "Compute", computes, ["dev"], 1, 768, "Creating"))
    st.add_cluster(ClusterRow(name, "arn:x", "Creating", None, {"InstanceGroups": [], "NodeProvisioningMode": "Continuous"}, "fake", 1, time.time()), groups)


@pytest.fixture
def env(tmp_path):
    st = Store(tmp_path / "state.db")
    prov, conf, clock = FakeProvider(), FakeConfigurer(), Clock()
    eng = Engine(st, prov, conf, clock=clock, seed=1, tuning=Tuning(tick=0))
    return st, prov, conf, clock, eng


def run_steps(eng, n=30):
    async def go():
        for _ in range(n):
            await eng.step()
            await asyncio.sleep(0)
            await asyncio.gather(*eng.tasks.values(), return_exceptions=True)
    asyncio.run(go())


def phases(st, name="demo"):
    return {n.name: n.phase for n in st.nodes(name)}


def test_controller_first_then_others(env):
    st, prov, conf, clock, eng = env
    _cluster(st)
    run_steps(eng, 1)
    # first pass: records for every node
    assert set(phases(st)) == {"demo-controller-1", "demo-login-1", "demo-compute-1", "demo-compute-2"}
    run_steps(eng, 1)
    # the controller launches alone: nothing else before its VM is defined
    assert prov.launched == ["demo-controller-1"]
    assert phases(st)["demo-controller-1"] == "booted"  # its VM is defined, Slurm not configured yet
    run_steps(eng, 1)
    # its VM exists (the box volume is complete): the others launch while it is configured
    assert sorted(prov.launched[1:]) == ["demo-compute-1", "demo-compute-2", "demo-login-1"]


def test_reaches_inservice_and_full_size_with_one_join_batch(env):
    st, prov, conf, clock, eng = env
    _cluster(st)
    run_steps(eng, 10)
    assert set(phases(st).values()) == {"running"}
    c = st.cluster("demo")
    assert c.status == "InService" and c.in_service_at and c.full_size_at
    joins = [c for c in conf.calls if c[0] == "join"]
    assert joins == [("join", ("demo-compute-1", "demo-compute-2"))]
    assert {g.status for g in st.groups("demo")} == {"InService"}


def test_inservice_waits_for_a_login_node(env):
    st, prov, conf, clock, eng = env
    _cluster(st)
    prov.fail_launch["demo-login-1"] = 1
    run_steps(eng, 6)
    assert st.cluster("demo").status == "Creating"
    assert phases(st)["demo-login-1"] == "failed"
    assert phases(st)["demo-compute-1"] == "running"  # compute nodes joined meanwhile
    clock.t += 1000
    run_steps(eng, 6)
    assert st.cluster("demo").status == "InService"


def test_failed_launch_is_retried_after_backoff_with_message(env):
    st, prov, conf, clock, eng = env
    _cluster(st, logins=0)
    prov.fail_launch["demo-compute-2"] = 2
    run_steps(eng, 6)
    n = {n.name: n for n in st.nodes("demo")}["demo-compute-2"]
    assert n.phase == "failed" and "injected launch failure" in n.message and n.attempts == 1
    assert {g.name: g.status for g in st.groups("demo")}["compute"] == "Degraded"
    launches = prov.launched.count("demo-compute-2")
    run_steps(eng, 3)  # retry time not reached: no new launch
    assert prov.launched.count("demo-compute-2") == launches
    clock.t += 10_000
    run_steps(eng, 3)
    clock.t += 10_000
    run_steps(eng, 6)
    assert phases(st)["demo-compute-2"] == "running"
    assert any("injected launch failure" in e.description for e in st.events("demo"))


def test_failed_configure_names_the_task_and_retries_configure_not_launch(env):
    st, prov, conf, clock, eng = env
    _cluster(st, logins=0, computes=1)
    conf.fail_configure["demo-compute-1"] = 1
    run_steps(eng, 6)
    n = st.nodes("demo")[0] if st.nodes("demo")[0].name == "demo-compute-1" else st.nodes("demo")[1]
    assert n.phase == "failed" and "task 'munge key'" in n.message
    clock.t += 10_000
    run_steps(eng, 6)
    assert phases(st)["demo-compute-1"] == "running"
    assert prov.launched.count("demo-compute-1") == 1


def test_lost_vm_is_replaced(env):
    st, prov, conf, clock, eng = env
    _cluster(st, logins=0, computes=1)
    run_steps(eng, 8)
    prov.vms["demo"].pop("demo-compute-1")
    run_steps(eng, 8)
    assert phases(st)["demo-compute-1"] == "running"
    assert prov.launched.count("demo-compute-1") == 2
    assert any("replacing" in e.description for e in st.events("demo"))


def test_scale_in_drains_then_removes(env):
    st, prov, conf, clock, eng = env
    _cluster(st, logins=0, computes=2)
    run_steps(eng, 8)
    st.update_group("demo", "compute", target_count=1)
    run_steps(eng, 5)
    assert "demo-compute-2" not in phases(st)
    assert ("leave", ("demo-compute-2",)) in conf.calls
    assert prov.removed == ["demo-compute-2"]


def test_delete_removes_cluster(env):
    st, prov, conf, clock, eng = env
    _cluster(st, logins=0, computes=1)
    run_steps(eng, 5)
    st.update_cluster("demo", status="Deleting")
    run_steps(eng, 3)
    assert st.cluster("demo") is None and "demo" not in prov.vms


def test_backoff_grows_and_is_bounded():
    import random

    rng = random.Random(0)
    ds = [backoff(a, rng) for a in range(1, 12)]
    assert ds[0] <= 10 and ds[3] >= 40 and max(ds) <= 300


def test_capacity_shortage_keeps_cluster_going_and_fills_up_when_capacity_arrives(env):
    st, prov, conf, clock, eng = env
    _cluster(st)
    st.set_capacity("ml.c5.large", 1)
    run_steps(eng, 10)
    ph = phases(st)
    assert st.cluster("demo").status == "InService"
    assert sorted(ph.values()).count("running") == 3  # controller, login, one compute
    short = next(n for n in st.nodes("demo") if n.phase == "failed")
    assert short.message.startswith("InsufficientCapacity") and "ml.c5.large" in short.message
    assert {g.name: g.status for g in st.groups("demo")}["compute"] == "Degraded"
    assert any(e.level == "Warning" and "InsufficientCapacity" in e.description for e in st.events("demo"))
    launched_before = len(prov.launched)
    st.add_arrival("ml.c5.large", clock.t + 30, 1)
    run_steps(eng, 3)
    assert len(prov.launched) == launched_before  # not yet arrived
    # what `slurmlab capacity show` and GET /_lab/capacity report
    from lab import capacity

    state = capacity.state(st, now=clock.t)
    assert {"InstanceType": "ml.c5.large", "Available": 1, "InUse": 1} in state["Capacity"]
    assert state["Arrivals"] == [{"InstanceType": "ml.c5.large", "InSeconds": 30, "Count": 1}]
    clock.t += 31  # arrival due; the waiting node retries at once, not after its backoff
    run_steps(eng, 8)
    assert set(phases(st).values()) == {"running"}
    assert st.cluster("demo").full_size_at
    assert any("capacity arrived" in e.description for e in st.events("demo"))


def test_shortage_in_one_group_does_not_delay_another(env):
    st, prov, conf, clock, eng = env
    groups = [GroupRow("demo", "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "Creating"),
              GroupRow("demo", "cpu", "ml.c5.large", "Compute", 2, ["dev"], 1, 768, "Creating"),
              GroupRow("demo", "gpu", "ml.g5.xlarge", "Compute", 1, ["gpu"], 2, 1024, "Creating")]
    st.add_cluster(ClusterRow("demo", "arn:x", "Creating", None, {"NodeProvisioningMode": "Continuous"}, "fake", 1, time.time()), groups)
    st.set_capacity("ml.g5.xlarge", 0)
    run_steps(eng, 10)
    ph = phases(st)
    assert ph["demo-cpu-1"] == ph["demo-cpu-2"] == "running"
    assert ph["demo-gpu-1"] == "failed"


def test_released_capacity_wakes_waiting_nodes(env):
    st, prov, conf, clock, eng = env
    _cluster(st, logins=0, computes=2)
    st.set_capacity("ml.c5.large", 1)
    run_steps(eng, 10)
    st.update_group("demo", "compute", target_count=2)
    waiting = next(n for n in st.nodes("demo") if n.phase == "failed")
    assert waiting.retry_at > clock.t
    # scale-in of another cluster's node of the type is simulated by deleting a running one here
    eng.capacity_released("ml.c5.large")
    assert next(n for n in st.nodes("demo") if n.name == waiting.name).retry_at == 0


def test_a_vm_paused_on_a_full_disk_waits_and_is_never_replaced(env):
    from lab.providers.base import DISK_FULL

    st, prov, conf, clock, eng = env
    _cluster(st, logins=0, computes=1)
    run_steps(eng, 8)
    prov.vms["demo"]["demo-compute-1"] = DISK_FULL
    run_steps(eng, 5)
    n = st.node("demo", "demo-compute-1")
    assert (n.phase, prov.launched.count("demo-compute-1"), prov.removed) == ("running", 1, [])
    assert n.message.startswith("paused (disk full):")
    warned = [e for e in st.events("demo") if "paused (disk full)" in e.description]
    assert len(warned) == 1 and warned[0].level == "Warning"  # once, not once per pass
    prov.vms["demo"]["demo-compute-1"] = "running"  # the provider resumed it
    run_steps(eng, 2)
    assert st.node("demo", "demo-compute-1").message == ""
    assert [e.level for e in st.events("demo") if "resumed: the storage pool" in e.description] == ["Info"]
