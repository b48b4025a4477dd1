"""MoveClusterNodes on the engine (sim provider): a Running node keeps its VM (name, InstanceId,
address), detaches from Slurm (one leave), is configured for its new group and joins it (one join);
the groups' counts move with it; bad requests change nothing; a later scale-out of the source group
never reuses the moved node's name."""

from __future__ import annotations

import asyncio

import pytest

from lab.control import clusters
from lab.control.moves import move_nodes
from lab.errors import UsageError
from tests.simlab import SimLab, spec_text

SPARE = """  - InstanceGroupName: spare
    InstanceType: ml.c5.large
    InstanceCount: 1
    SlurmConfig: {NodeType: Compute, PartitionNames: [spare]}
  - InstanceGroupName: gpu
    InstanceType: ml.g5.xlarge
    InstanceCount: 1
    SlurmConfig: {NodeType: Compute, PartitionNames: [gpu]}
"""


async def _ready(lab):
    lab.create(spec_text(computes=2, extra_groups=SPARE))
    await lab.run_until(lambda: lab.full())
    await lab.tick()
    assert lab.st.cluster("demo").status == "InService"


def _counts(lab):
    return {g["InstanceGroupName"]: (g["CurrentCount"], g["TargetCount"], g["Status"])
            for g in clusters.describe(lab.st, "demo")["InstanceGroups"]}


def test_a_node_moves_with_its_vm_and_joins_its_new_partition(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab)
        before = lab.node("demo-compute-2")
        boots = lab.prov.vms["demo"]["demo-compute-2"].boots
        calls = len(lab.conf.calls)
        r = move_nodes(lab.st, "demo", "compute", "spare", logical_ids=["demo-compute-2"])
        assert r == {"SuccessfulNodeLogicalIds": ["demo-compute-2"]}
        status = clusters.describe_node(lab.st, "demo", "demo-compute-2")["InstanceStatus"]
        assert status["Status"] == "DetachInProgress" and "moving from compute to spare" in status["Message"]
        seen = set()
        await lab.run_until(lambda: seen.add(clusters.describe_node(lab.st, "demo", "demo-compute-2")
                                             ["InstanceStatus"]["Status"]) or
                            (lab.node("demo-compute-2").phase == "running" and lab.node("demo-compute-2").pending is None))
        assert "AttachInProgress" in seen
        after = lab.node("demo-compute-2")
        assert (after.grp, after.instance_id, after.address) == ("spare", before.instance_id, before.address)
        assert lab.prov.vms["demo"]["demo-compute-2"].boots == boots  # the VM stayed up
        new = lab.conf.calls[calls:]
        assert new == [("leave", ("demo-compute-2",)), ("configure", "demo-compute-2", "Compute"),
                       ("join", ("demo-compute-2",))], new
        await lab.run_until(lambda: lab.st.operations("demo", "InProgress") == [])
        c = _counts(lab)
        assert c["compute"] == (1, 1, "InService") and c["spare"] == (2, 2, "InService")
        spec = {g["InstanceGroupName"]: g["InstanceCount"] for g in lab.st.cluster("demo").spec["InstanceGroups"]}
        assert spec["compute"] == 1 and spec["spare"] == 2
        # the source group grows again: its new node does not take the moved node's name
        clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}])
        await lab.run_until(lambda: lab.full())
        assert {n.name: n.grp for n in lab.st.nodes("demo") if n.grp in ("compute", "spare")} == {
            "demo-compute-1": "compute", "demo-compute-3": "compute", "demo-compute-2": "spare", "demo-spare-1": "spare"}
        await lab.finish()

    asyncio.run(go())


def test_instance_count_picks_nodes_and_ids_answer_per_node(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab)
        gpu = lab.node("demo-gpu-1").instance_id
        r = move_nodes(lab.st, "demo", "compute", "spare", node_ids=[lab.node("demo-compute-1").instance_id,
                                                                   "i-0123456789abcdef0", gpu])
        assert r["Successful"] == [lab.node("demo-compute-1").instance_id]
        assert [(f["NodeId"], f["Code"]) for f in r["Failed"]] == [("i-0123456789abcdef0", "NodeIdNotFound"),
                                                                    (gpu, "NodeIdNotFound")]
        again = move_nodes(lab.st, "demo", "compute", "spare", logical_ids=["demo-compute-1"])
        assert again["FailedNodeLogicalIds"][0]["Code"] == "NodeIdInUse"
        r = move_nodes(lab.st, "demo", "spare", "compute", count=1)  # the highest ordinal of spare
        assert r == {"Successful": [lab.node("demo-spare-1").instance_id]}
        mismatch = move_nodes(lab.st, "demo", "compute", "gpu", logical_ids=["demo-compute-2"])
        assert mismatch["FailedNodeLogicalIds"][0]["Code"] == "NodeInstanceTypeMismatch"
        await lab.run_until(lambda: all(n.pending is None and n.phase == "running" for n in lab.st.nodes("demo")))
        assert {n.name: n.grp for n in lab.st.nodes("demo") if n.grp in ("compute", "spare")} == {
            "demo-compute-1": "spare", "demo-compute-2": "compute", "demo-spare-1": "compute"}
        await lab.finish()

    asyncio.run(go())


def test_bad_moves_change_nothing(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab)
        before = (lab.st.nodes("demo"), lab.st.groups("demo"), lab.st.operations("demo"))
        for kw, words in [
            (dict(source_group="compute", target_group="nope", logical_ids=["demo-compute-1"]),
             "TargetInstanceGroupName: no instance group 'nope'"),
            (dict(source_group="compute", target_group="compute", logical_ids=["demo-compute-1"]), "is the source group itself"),
            (dict(source_group="controller", target_group="login", logical_ids=["demo-controller-1"]), "a Controller node cannot move"),
            (dict(source_group="compute", target_group="spare"), "exactly one of NodeIds, NodeLogicalIds or InstanceCount"),
            (dict(source_group="compute", target_group="spare", count=3), "InstanceCount: 3 asked, 2 node(s)"),
            (dict(source_group="compute", target_group="gpu", count=1), "NodeInstanceTypeMismatch"),
            (dict(source_group="compute", target_group="spare", count=1, target_cluster="other"),
             "TargetClusterArn: the lab moves nodes within one cluster"),
        ]:
            with pytest.raises(UsageError) as e:
                move_nodes(lab.st, "demo", **kw)
            assert words in str(e.value), str(e.value)
        assert (lab.st.nodes("demo"), lab.st.groups("demo"), lab.st.operations("demo")) == before
        await lab.finish()

    asyncio.run(go())


def test_a_move_cut_short_by_an_engine_kill_finishes(tmp_path):
    async def go():
        lab = SimLab(tmp_path, leave_time=20.0)
        await _ready(lab)
        move_nodes(lab.st, "demo", "compute", "spare", logical_ids=["demo-compute-2"])
        await lab.run_until(lambda: any(c[0] == "leave" for c in lab.conf.calls))
        lab.kill()
        lab.conf.leave_time = 0.2
        await lab.run_until(lambda: lab.node("demo-compute-2").pending is None and lab.node("demo-compute-2").phase == "running")
        assert lab.node("demo-compute-2").grp == "spare"
        assert sum(1 for c in lab.conf.calls if c[0] == "leave") == 2  # the detach ran again
        await lab.finish()

    asyncio.run(go())
