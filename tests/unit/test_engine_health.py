"""StartClusterHealthCheck on the engine (sim provider): the nodes show DeepHealthCheckInProgress while
they are checked, a passing node goes back to Running, a failing one is rebooted or replaced
(NodeRecovery Automatic) or left Failure (None), the operation is listed and described, a bad request
changes nothing, and a check cut short by an engine kill runs again."""

from __future__ import annotations

import asyncio

import pytest

from lab import capacity
from lab.control import clusters, health
from lab.engine.bookkeeping import health_outcome
from lab.control.operations import describe_operation, list_operations
from lab.errors import UsageError
from tests.simlab import SimLab, spec_text


async def _ready(lab, **kw):
    lab.create(spec_text(**kw))
    await lab.run_until(lambda: lab.full())
    await lab.tick()
    assert lab.st.cluster("demo").status == "InService"


def _status(lab, node):
    return clusters.describe_node(lab.st, "demo", node)["InstanceStatus"]


def _idle(lab):
    return all(n.pending is None and n.phase == "running" for n in lab.st.nodes("demo"))


def test_passing_nodes_are_checked_and_back_in_service(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2)
        op = health.start(lab.st, "demo", [{"InstanceGroupName": "compute",
                                            "DeepHealthChecks": ["InstanceStress", "InstanceConnectivity"]}])
        for node in ("demo-compute-1", "demo-compute-2"):
            assert _status(lab, node)["Status"] == "DeepHealthCheckInProgress"
        assert _status(lab, "demo-login-1")["Status"] == "Running"
        [summary] = list_operations(lab.st, "demo", Type="DeepHealthCheck")
        assert summary["OperationId"] == op and summary["Status"] == "InProgress"
        assert list_operations(lab.st, "demo", Type="Scaling")[0]["Type"] == "Scaling"
        await lab.run_until(lambda: _idle(lab))
        await lab.tick()
        assert ("health_check", ("demo-compute-1", "demo-compute-2")) in lab.conf.calls
        d = describe_operation(lab.st, "demo", op)
        assert d["Status"] == "Done" and d["Type"] == "DeepHealthCheck"
        assert d["DeepHealthCheckDetails"] == [{"InstanceGroupName": "compute",
                                                "DeepHealthChecks": ["InstanceStress", "InstanceConnectivity"]}]
        assert "ScalingDetails" not in d
        evs = [e["Description"] for e in clusters.list_events(lab.st, "demo", OperationId=op)]
        assert sum("passed the deep health check (InstanceStress, InstanceConnectivity)" in e for e in evs) == 2
        assert lab.prov.vms["demo"]["demo-compute-1"].boots == 1  # nothing rebooted
        assert clusters.describe(lab.st, "demo")["ClusterStatus"] == "InService"
        await lab.finish()

    asyncio.run(go())


def test_a_failing_node_is_rebooted_and_rejoins(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2)
        capacity.apply(lab.st, capacity.parse("faults: {seed: 1, health_check_failure_rate: 1}"))
        iid = lab.node("demo-compute-2").instance_id
        op = health.start(lab.st, "demo", [{"InstanceGroupName": "compute", "InstanceIds": [iid],
                                            "DeepHealthChecks": ["InstanceStress"]}])
        assert _status(lab, "demo-compute-1")["Status"] == "Running"  # only the instance named
        await lab.run_until(lambda: lab.node("demo-compute-2").pending == "reboot" or
                            lab.node("demo-compute-2").phase != "running")
        assert "deep health check failed: InstanceStress: simulated failure" in lab.node("demo-compute-2").message
        await lab.run_until(lambda: _idle(lab) and lab.st.operations("demo", "InProgress") == [])
        assert lab.node("demo-compute-2").instance_id == iid  # rebooted, not replaced
        assert lab.prov.vms["demo"]["demo-compute-2"].boots == 2
        joins = [c[1] for c in lab.conf.calls if c[0] == "join"]
        assert any("demo-compute-2" in b for b in joins[1:])
        warn = [e for e in clusters.list_events(lab.st, "demo", OperationId=op) if e["EventLevel"] == "Warn"]
        assert warn and "simulated failure" in warn[0]["Description"] and "rebooting it" in warn[0]["Description"]
        assert describe_operation(lab.st, "demo", op)["Status"] == "Done"
        await lab.finish()

    asyncio.run(go())


def test_node_recovery_none_leaves_a_failed_node_failure(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1, recovery="None")
        lab.conf.health_check_async = _unhealthy({"demo-compute-1": "InstanceStress: slurmd is inactive"})
        op = health.start(lab.st, "demo", [{"InstanceGroupName": "compute", "DeepHealthChecks": ["InstanceStress"]}])
        await lab.run_until(lambda: lab.node("demo-compute-1").phase == "failed")
        await lab.ticks(3)
        st = _status(lab, "demo-compute-1")
        assert st["Status"] == "Failure" and "slurmd is inactive" in st["Message"] and "NodeRecovery is None" in st["Message"]
        assert describe_operation(lab.st, "demo", op)["Status"] == "Done"
        assert lab.prov.vms["demo"]["demo-compute-1"].boots == 1  # left alone
        await lab.finish()

    asyncio.run(go())


def _unhealthy(failures: dict[str, str]):
    """The sim configurer's checks, except that these nodes fail with these messages."""
    async def check(ctx, targets, op_id, faults):
        return {n: [failures[n]] if n in failures else [] for n in targets}
    return check


def test_outcome_reboots_for_services_and_replaces_for_hardware():
    assert health_outcome([], "Automatic") == "passed"
    assert health_outcome(["InstanceStress: slurmd is inactive (systemctl is-active slurmd)"], "Automatic") == "reboot"
    assert health_outcome(["InstanceConnectivity: srun on x alone failed"], "Automatic") == "reboot"
    assert health_outcome(["InstanceStress: disk: cannot write 32 MiB to /var/tmp"], "Automatic") == "replace"
    assert health_outcome(["InstanceStress: memory: 100 MiB ..."], "None") == "failed"


def test_bad_requests_change_nothing(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        before = (lab.st.operations("demo"), lab.st.nodes("demo"))
        for cfgs, words in [
            ([{"InstanceGroupName": "nope", "DeepHealthChecks": ["InstanceStress"]}],
             "DeepHealthCheckConfigurations[0].InstanceGroupName: no instance group 'nope'"),
            ([{"InstanceGroupName": "compute", "DeepHealthChecks": ["Bogus"]}],
             "DeepHealthCheckConfigurations[0].DeepHealthChecks: 'Bogus' is not a check"),
            ([{"InstanceGroupName": "compute", "DeepHealthChecks": ["InstanceStress"]},
              {"InstanceGroupName": "compute", "InstanceIds": ["i-0123456789abcdef0"], "DeepHealthChecks": ["InstanceStress"]}],
             "DeepHealthCheckConfigurations[1].InstanceIds[0]: no instance 'i-0123456789abcdef0'"),
            ([{"InstanceGroupName": "login", "InstanceIds": [lab.node("demo-compute-1").instance_id],
               "DeepHealthChecks": ["InstanceStress"]}], "in instance group 'login'"),
            ([], "give at least one"),
        ]:
            with pytest.raises(UsageError) as e:
                health.start(lab.st, "demo", cfgs)
            assert words in str(e.value), str(e.value)
        assert (lab.st.operations("demo"), lab.st.nodes("demo")) == before
        health.start(lab.st, "demo", [{"InstanceGroupName": "compute", "DeepHealthChecks": ["InstanceStress"]}])
        with pytest.raises(UsageError) as e:  # already under a check
            health.start(lab.st, "demo", [{"InstanceGroupName": "compute", "DeepHealthChecks": ["InstanceStress"]}])
        assert "DeepHealthCheckInProgress (a deep health check)" in str(e.value)
        clusters.update(lab.st, "demo", {"InstanceGroups": [
            {**next(g for g in lab.st.cluster("demo").spec["InstanceGroups"] if g["InstanceGroupName"] == "compute"),
             "InstanceCount": 2}]})
        with pytest.raises(UsageError) as e:
            health.start(lab.st, "demo", [{"InstanceGroupName": "login", "DeepHealthChecks": ["InstanceStress"]}])
        assert "is Updating: a deep health check needs an InService cluster" in str(e.value)
        await lab.finish()

    asyncio.run(go())


def test_a_check_cut_short_by_an_engine_kill_runs_again(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        lab.conf.health_time = 30.0
        health.start(lab.st, "demo", [{"InstanceGroupName": "compute", "DeepHealthChecks": ["InstanceStress"]}])
        await lab.run_until(lambda: lab.node("demo-compute-1").pending == "checking")
        lab.kill()
        assert lab.node("demo-compute-1").pending == "checking"
        lab.conf.health_time = 1.0
        await lab.run_until(lambda: _idle(lab))
        assert sum(1 for c in lab.conf.calls if c[0] == "health_check") == 2
        await lab.finish()

    asyncio.run(go())


def test_a_vm_that_stops_answering_ssh_is_rebooted(tmp_path):
    """Found by CI: a guest whose network died right after its first SSH answer was retried for ever.
    Three configure attempts that find it unreachable, then its VM is rebooted and it configures."""
    from lab.configure.base import ConfigureError

    async def go():
        lab = SimLab(tmp_path)
        real, tries = lab.conf.configure_async, {"n": 0}

        async def configure(ctx, node, node_type):
            if node == "demo-compute-1" and tries["n"] < 3:
                tries["n"] += 1
                raise ConfigureError(f"nodes.yml failed: {node}: task 'Read' unreachable: ssh: No route to host",
                                     {node: "task 'Read' unreachable: ssh: No route to host"})
            return await real(ctx, node, node_type)

        lab.conf.configure_async = configure
        await _ready(lab, computes=1)
        assert tries["n"] == 3
        assert lab.prov.vms["demo"]["demo-compute-1"].boots == 2  # rebooted once, then configured
        warn = [e["Description"] for e in clusters.list_events(lab.st, "demo", NodeId="demo-compute-1")
                if e["EventLevel"] == "Warn"]
        assert any("did not answer SSH in 3 configure attempts: rebooting it" in w for w in warn), warn
        await lab.finish()

    asyncio.run(go())
