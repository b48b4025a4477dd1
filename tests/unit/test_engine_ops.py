"""UpdateCluster, BatchAdd/Delete/Reboot/ReplaceClusterNodes, ActiveOperations, events, node
recovery: the functions of lab.control.clusters the API calls, driven by the engine on the sim
provider."""

from __future__ import annotations

import asyncio
import re

import pytest

from lab.control import clusters
from lab.errors import Conflict, NotFound, SpecError
from tests.simlab import SimLab, spec_text


def _group(lab, name, cluster="demo"):
    return next(g for g in lab.st.cluster(cluster).spec["InstanceGroups"] if g["InstanceGroupName"] == name)


def _groups(lab, cluster="demo"):
    return {g["InstanceGroupName"]: g for g in clusters.describe(lab.st, cluster)["InstanceGroups"]}


async def _ready(lab, **kw):
    lab.create(spec_text(**kw))
    await lab.run_until(lambda: lab.full())
    await lab.tick()
    assert lab.st.cluster("demo").status == "InService"


GPU = """  - InstanceGroupName: gpu
    InstanceType: ml.g5.xlarge
    InstanceCount: 1
    SlurmConfig: {NodeType: Compute, PartitionNames: [gpu]}
"""


def test_update_changes_counts_adds_and_deletes_groups(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2, extra_groups=GPU)
        res = clusters.update(lab.st, "demo", {
            "InstanceGroups": [{**_group(lab, "compute"), "InstanceCount": 3},
                               {"InstanceGroupName": "big", "InstanceType": "ml.c5.xlarge", "InstanceCount": 2,
                                "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["big"]}}],
            "InstanceGroupsToDelete": ["gpu"]})
        assert res == {"ClusterArn": lab.st.cluster("demo").arn}
        assert lab.st.cluster("demo").status == "Updating"
        g = _groups(lab)
        assert g["compute"]["ActiveOperations"] == {"Scaling": 1} and g["big"]["ActiveOperations"] == {"Scaling": 1}
        assert g["gpu"]["ActiveOperations"] == {"Scaling": 1}
        assert g["controller"]["ActiveOperations"] == {}
        await lab.run_until(lambda: lab.st.cluster("demo").status == "InService")
        g = _groups(lab)
        assert set(g) == {"controller", "login", "compute", "big"}
        assert g["compute"]["CurrentCount"] == 3 and g["big"]["CurrentCount"] == 2
        assert all(x["ActiveOperations"] == {} and x["Status"] == "InService" for x in g.values())
        assert "demo-gpu-1" not in lab.phases() and "demo-gpu-1" not in lab.vms()
        assert ("leave", ("demo-gpu-1",)) in lab.conf.calls
        op = next(o for o in lab.st.operations("demo") if o.kind == "UpdateCluster")
        assert op.status == "Completed"
        evs = clusters.list_events(lab.st, "demo", OperationId=op.id)
        assert any("UpdateCluster" in e["Description"] for e in evs) and any("completed" in e["Description"] for e in evs)
        await lab.finish()

    asyncio.run(go())


def test_update_refuses_bad_requests_with_clear_messages(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        with pytest.raises(SpecError) as e:
            clusters.update(lab.st, "demo", {"InstanceGroupsToDelete": ["nope"]})
        assert "no instance group named 'nope'" in str(e.value)
        with pytest.raises(SpecError) as e:
            clusters.update(lab.st, "demo", {"InstanceGroupsToDelete": ["controller"]})
        assert "Controller group" in str(e.value)
        with pytest.raises(NotFound):
            clusters.update(lab.st, "nope", {})
        clusters.delete(lab.st, "demo", start_engine=False)
        with pytest.raises(Conflict) as e:
            clusters.update(lab.st, "demo", {"InstanceGroups": [{**_group(lab, "compute"), "InstanceCount": 2}]})
        assert "Deleting" in e.value.message
        await lab.finish()

    asyncio.run(go())


def test_batch_add_nodes_names_them_at_once_and_they_join(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        res = clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 2},
                                                  {"InstanceGroupName": "nope", "IncrementTargetCountBy": 1},
                                                  {"InstanceGroupName": "login", "IncrementTargetCountBy": 1,
                                                   "InstanceTypes": ["ml.c5.large"]}])
        assert res["Successful"] == [
            {"NodeLogicalId": "demo-compute-2", "InstanceGroupName": "compute", "Status": "Pending"},
            {"NodeLogicalId": "demo-compute-3", "InstanceGroupName": "compute", "Status": "Pending"}]
        assert [(f["InstanceGroupName"], f["ErrorCode"], f["FailedCount"]) for f in res["Failed"]] == [
            ("nope", "InstanceGroupNotFound", 1), ("login", "IncompatibleInstanceTypes", 1)]
        assert _groups(lab)["compute"]["TargetCount"] == 3
        assert _groups(lab)["compute"]["ActiveOperations"] == {"Scaling": 1}
        # `describe-cluster --wait-for FullSize` right after a scale-out waits for the new nodes
        # (the cluster reached its full size once already, at create)
        assert lab.st.cluster("demo").full_size_at
        with pytest.raises(TimeoutError):
            clusters.wait(lab.st, "demo", "FullSize", timeout=0, poll=0)
        await lab.run_until(lambda: lab.full())
        await lab.tick()  # the operation is marked complete
        assert clusters.wait(lab.st, "demo", "FullSize", timeout=0, poll=0)["ClusterStatus"] == "InService"
        joins = [c for c in lab.conf.calls if c[0] == "join"]
        assert joins[-1] == ("join", ("demo-compute-2", "demo-compute-3"))  # one reconfigure for the batch
        assert _group(lab, "compute")["InstanceCount"] == 3  # the stored spec follows
        await lab.finish()

    asyncio.run(go())


def test_batch_delete_specific_nodes_drains_them_and_lowers_the_target(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=3)
        iid = lab.node("demo-compute-1").instance_id
        res = clusters.delete_nodes(lab.st, "demo", [iid, "demo-compute-2", "i-0123456789abcdef0",
                                                     "demo-controller-1", "nope-1"])
        assert res["Successful"] == [iid] and res["SuccessfulNodeLogicalIds"] == ["demo-compute-2"]
        assert res["Failed"] == [{"NodeId": "i-0123456789abcdef0", "Code": "NodeIdNotFound",
                                  "Message": "no node 'i-0123456789abcdef0' in cluster 'demo'"}]
        codes = {f["NodeLogicalId"]: f["Code"] for f in res["FailedNodeLogicalIds"]}
        assert codes == {"demo-controller-1": "InvalidNodeStatus", "nope-1": "NodeIdNotFound"}
        assert _groups(lab)["compute"]["TargetCount"] == 1
        again = clusters.delete_nodes(lab.st, "demo", ["demo-compute-2"])
        assert again["FailedNodeLogicalIds"][0]["Code"] == "InvalidNodeStatus"
        await lab.run_until(lambda: lab.full())
        assert sorted(lab.phases()) == ["demo-compute-3", "demo-controller-1", "demo-login-1"]
        assert lab.vms() == set(lab.phases())
        assert [c for c in lab.conf.calls if c[0] == "leave"] == [("leave", ("demo-compute-1", "demo-compute-2"))]
        # a later scale-out takes the free names first
        clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}])
        assert "demo-compute-1" in lab.phases()
        await lab.finish()

    asyncio.run(go())


def test_concurrent_operations_do_not_block_each_other(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1, extra_groups=GPU)
        lab.st.set_capacity("ml.g5.xlarge", 1)  # the gpu group has all it may get
        clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "gpu", "IncrementTargetCountBy": 2}])
        clusters.update(lab.st, "demo", {"InstanceGroups": [{**_group(lab, "compute"), "InstanceCount": 2}]})
        clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}])
        assert _groups(lab)["compute"]["ActiveOperations"] == {"Scaling": 2}
        await lab.run_until(lambda: _groups(lab)["compute"]["CurrentCount"] == 3)
        await lab.tick()
        g = _groups(lab)
        assert g["compute"]["ActiveOperations"] == {} and g["compute"]["Status"] == "InService"
        assert g["gpu"]["ActiveOperations"] == {"Scaling": 1} and g["gpu"]["Status"] == "Degraded"
        ops = {(o.kind, tuple(o.groups)): o.status for o in lab.st.operations("demo")}
        assert ops[("BatchAddClusterNodes", ("gpu",))] == "InProgress"
        assert ops[("UpdateCluster", ("compute",))] == "Completed"
        assert ops[("BatchAddClusterNodes", ("compute",))] == "Completed"
        warn = clusters.list_events(lab.st, "demo", ResourceType="Instance", InstanceGroupName="gpu")
        assert any(e["EventLevel"] == "Warn" and "InsufficientCapacity" in e["Description"] for e in warn)
        await lab.finish()

    asyncio.run(go())


def test_reboot_keeps_the_instance_replace_gives_a_new_one(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2)
        old = {n: lab.node(n).instance_id for n in ("demo-compute-1", "demo-compute-2")}
        r = clusters.reboot_nodes(lab.st, "demo", [old["demo-compute-1"]])
        assert r == {"Successful": [old["demo-compute-1"]]}
        busy = clusters.reboot_nodes(lab.st, "demo", ["demo-compute-1"])
        assert busy["FailedNodeLogicalIds"][0]["ErrorCode"] == "InstanceIdInUse"
        r = clusters.replace_nodes(lab.st, "demo", ["demo-compute-2", "i-00000000"])
        assert r["SuccessfulNodeLogicalIds"] == ["demo-compute-2"]
        assert r["Failed"][0]["ErrorCode"] == "InstanceIdNotFound"
        await lab.tick()
        await lab.run_until(lambda: lab.full() and not any(n.pending for n in lab.st.nodes("demo")))
        await lab.tick()
        assert lab.node("demo-compute-1").instance_id == old["demo-compute-1"]
        assert lab.prov.vms["demo"]["demo-compute-1"].boots == 2
        new = lab.node("demo-compute-2").instance_id
        assert new != old["demo-compute-2"] and re.fullmatch(r"i-[0-9a-f]{17}", new)
        assert lab.prov.launched.count("demo-compute-2") == 2
        assert {o.kind: o.status for o in lab.st.operations("demo")} == {
            "CreateCluster": "Completed", "BatchRebootClusterNodes": "Completed", "BatchReplaceClusterNodes": "Completed"}
        joined = [c[1] for c in lab.conf.calls if c[0] == "join"]
        assert any("demo-compute-1" in b for b in joined[1:]) and any("demo-compute-2" in b for b in joined[1:])
        await lab.finish()

    asyncio.run(go())


def test_node_recovery_automatic_replaces_a_dead_vm(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        old = lab.node("demo-compute-1").instance_id
        lab.prov.crash("demo", "demo-compute-1", "shutoff")
        await lab.run_until(lambda: lab.phases()["demo-compute-1"] != "running")
        await lab.run_until(lambda: lab.full())
        assert lab.node("demo-compute-1").instance_id != old
        ev = [e for e in clusters.list_events(lab.st, "demo", NodeId="demo-compute-1") if "Automatic" in e["Description"]]
        assert ev and ev[0]["EventLevel"] == "Warn"
        await lab.finish()

    asyncio.run(go())


def test_node_recovery_none_marks_the_node_failed_and_keeps_it(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2, recovery="None")
        lab.prov.crash("demo", "demo-compute-2", "missing")
        await lab.ticks(3)
        n = clusters.describe_node(lab.st, "demo", "demo-compute-2")
        assert n["InstanceStatus"]["Status"] == "Failure" and "NodeRecovery is None" in n["InstanceStatus"]["Message"]
        launched = lab.prov.launched.count("demo-compute-2")
        await lab.ticks(20)
        assert lab.prov.launched.count("demo-compute-2") == launched  # not replaced
        assert _groups(lab)["compute"]["Status"] == "Degraded"
        err = [e for e in clusters.list_events(lab.st, "demo", ResourceType="Instance") if e["EventLevel"] == "Error"]
        assert err and "not replaced" in err[-1]["Description"]
        detail = clusters.describe_event(lab.st, "demo", err[-1]["EventId"])
        assert detail["EventDetails"]["EventMetadata"]["Instance"]["NodeLogicalId"] == "demo-compute-2"
        assert "NodeRecovery is None" in detail["EventDetails"]["EventMetadata"]["Instance"]["FailureMessage"]
        # the person replaces it by hand
        clusters.replace_nodes(lab.st, "demo", ["demo-compute-2"])
        await lab.run_until(lambda: lab.full())
        await lab.finish()

    asyncio.run(go())


def test_describe_node_and_events_shapes(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        n = clusters.describe_node(lab.st, "demo", lab.node("demo-compute-1").instance_id)
        assert n["NodeLogicalId"] == "demo-compute-1" and n["InstanceType"] == "ml.c5.large"
        assert n["InstanceStatus"]["Status"] == "Running" and "simulated" in n["InstanceStatus"]["Message"]
        assert n["Lab"]["Simulated"] is True and re.fullmatch(r"i-[0-9a-f]{17}", n["InstanceId"])
        assert clusters.describe_node(lab.st, "demo", "demo-compute-1")["InstanceId"] == n["InstanceId"]
        with pytest.raises(NotFound):
            clusters.describe_node(lab.st, "demo", "i-deadbeef")
        evs = clusters.list_events(lab.st, "demo")
        assert {"EventId", "ClusterArn", "ClusterName", "ResourceType", "EventTime", "Description", "EventLevel"} <= set(evs[0])
        assert {e["ResourceType"] for e in evs} == {"Cluster", "InstanceGroup", "Instance"}
        assert clusters.list_events(lab.st, "demo", SortOrder="Descending", MaxResults=2) == evs[::-1][:2]
        node_evs = clusters.list_events(lab.st, "demo", NodeId=n["InstanceId"])
        assert node_evs and all(e.get("InstanceId") == n["InstanceId"] for e in node_evs)
        assert clusters.list_events(lab.st, "demo", EventTimeAfter=9e9) == []
        d = clusters.describe_event(lab.st, "demo", evs[0]["EventId"])
        assert d["EventId"] == evs[0]["EventId"] and d["Description"] == evs[0]["Description"]
        with pytest.raises(NotFound):
            clusters.describe_event(lab.st, "demo", "00000000-0000-4000-8000-000000000001")
        with pytest.raises(clusters.UsageError):
            clusters.list_events(lab.st, "demo", Bogus=1)
        assert clusters.describe(lab.st, "demo")["Lab"]["Provider"] == "sim"
        await lab.finish()

    asyncio.run(go())


BIG = {"InstanceGroupName": "big", "InstanceType": "ml.c5.xlarge", "InstanceCount": 1,
       "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["big"]}}


def test_update_keeps_a_change_another_process_makes_while_it_checks(tmp_path, monkeypatch):
    """UpdateCluster (the API) adds a group while a CLI process adds a compute node: the update
    reads, checks and writes in one transaction, so the other writer waits and its node stays
    (before, the update wrote back the compute count it had read and the node was lost)."""
    import threading
    import time

    from lab import spec as spec_module
    from lab.store.db import Store

    original = spec_module.apply_update
    racer: list[threading.Thread] = []
    added: list[dict] = []

    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2)
        other = Store(lab.st.path)  # another process's connection to the same file

        def apply_then_race(*a, **kw):
            out = original(*a, **kw)
            t = threading.Thread(target=lambda: added.append(clusters.add_nodes(
                other, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}])))
            t.start()
            racer.append(t)
            time.sleep(0.5)  # the other writer's whole request fits here when nothing holds it back
            return out

        monkeypatch.setattr(spec_module, "apply_update", apply_then_race)
        clusters.update(lab.st, "demo", {"InstanceGroups": [BIG]})
        racer[0].join(35)
        assert not racer[0].is_alive() and [s["NodeLogicalId"] for s in added[0]["Successful"]] == ["demo-compute-3"]
        g = {x.name: x for x in lab.st.groups("demo")}
        assert g["compute"].target_count == 3 and g["big"].target_count == 1
        spec = {x["InstanceGroupName"]: x["InstanceCount"] for x in lab.st.cluster("demo").spec["InstanceGroups"]}
        assert spec == {"controller": 1, "login": 1, "compute": 3, "big": 1}
        await lab.run_until(lambda: lab.full())
        assert "demo-compute-3" in lab.vms() and "demo-big-1" in lab.vms()

    asyncio.run(go())
