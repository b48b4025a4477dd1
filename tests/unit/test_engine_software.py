"""UpdateClusterSoftware on the engine (sim provider): batches (the first of one node), each drained
out of Slurm, replaced with the new box, joined and health-checked before the next; the wait between
batches; a batch whose check fails rolls back to its old box and the update ends Failed; bad requests
change nothing."""

from __future__ import annotations

import asyncio

import pytest

from lab import capacity
from lab.control import clusters
from lab.control.software import update_software
from lab.errors import Conflict, UsageError
from tests.simlab import SimLab, spec_text

NEXT = "slurmlab/trixie-slurm-next"
ID = "ami-0123456789abcdef0"
IMAGES = {ID: NEXT}


def resolve(image):
    if image not in IMAGES:
        raise UsageError(f"ImageId: '{image}' names no box of this lab")
    return IMAGES[image]


async def _ready(lab, computes=3):
    lab.create(spec_text(computes=computes))
    await lab.run_until(lambda: lab.full())
    await lab.tick()
    assert lab.st.cluster("demo").status == "InService"


def _op(lab):
    return next(o for o in lab.st.operations("demo") if o.kind == "UpdateClusterSoftware")


def test_batches_replace_nodes_with_the_new_box(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab)
        old = {n.name: n.instance_id for n in lab.st.nodes("demo")}
        update_software(lab.st, "demo", ["compute"], {"RollingUpdatePolicy": {"MaximumBatchSize": {
            "Type": "INSTANCE_COUNT", "Value": 2}}, "WaitIntervalInSeconds": 30}, "ami-0123456789abcdef0", resolve=resolve)
        assert clusters.describe(lab.st, "demo")["ClusterStatus"] == "SystemUpdating"
        await lab.tick()
        assert clusters.describe_node(lab.st, "demo", "demo-compute-1")["InstanceStatus"]["Status"] == "SystemUpdating"
        await lab.run_until(lambda: _op(lab).details.get("Batches") == 1, max_ticks=600)
        t1 = lab.clock.t
        await lab.run_until(lambda: _op(lab).details.get("Batch"))
        assert lab.clock.t - t1 >= 30  # WaitIntervalInSeconds
        assert _op(lab).details["Batch"] == ["demo-compute-2", "demo-compute-3"]
        await lab.run_until(lambda: _op(lab).status != "InProgress", max_ticks=600)
        assert _op(lab).status == "Completed"
        assert clusters.describe(lab.st, "demo")["ClusterStatus"] == "InService"
        nodes = {n.name: n for n in lab.st.nodes("demo")}
        for x in ("demo-compute-1", "demo-compute-2", "demo-compute-3"):
            assert nodes[x].image == NEXT and nodes[x].instance_id != old[x] and nodes[x].phase == "running"
        assert clusters.describe_node(lab.st, "demo", "demo-compute-1")["Lab"]["Box"] == NEXT
        assert clusters.describe_node(lab.st, "demo", "demo-login-1")["Lab"]["Box"] == "slurmlab/trixie-slurm"
        for x in ("demo-controller-1", "demo-login-1"):  # not named
            assert nodes[x].image is None and nodes[x].instance_id == old[x]
        leaves = [c[1] for c in lab.conf.calls if c[0] == "leave"]
        checks = [c[1] for c in lab.conf.calls if c[0] == "health_check"]
        assert leaves == [("demo-compute-1",), ("demo-compute-2", "demo-compute-3")]  # one, then two
        assert checks == leaves
        evs = [e for e in clusters.list_events(lab.st, "demo", OperationId=_op(lab).id)]
        texts = [e["Description"] for e in evs]
        assert any("batch 1 done on box slurmlab/trixie-slurm-next: demo-compute-1" in t for t in texts)
        assert any("UpdateClusterSoftware completed" in t for t in texts)
        await lab.finish()

    asyncio.run(go())


def test_a_failed_check_rolls_the_batch_back_and_stops(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2)
        capacity.apply(lab.st, capacity.parse("faults: {seed: 2, health_check_failure_rate: 1}"))
        update_software(lab.st, "demo", ["compute"], None, "ami-0123456789abcdef0", resolve=resolve)
        await lab.run_until(lambda: _op(lab).status != "InProgress", max_ticks=600)
        op = _op(lab)
        assert op.status == "Failed" and "demo-compute-1 failed the health check" in op.message
        nodes = {n.name: n for n in lab.st.nodes("demo")}
        assert nodes["demo-compute-1"].image == "slurmlab/trixie-slurm"  # back on the box it had
        assert nodes["demo-compute-2"].image is None  # never touched: the update stopped
        assert all(n.phase == "running" and n.pending is None for n in nodes.values())
        assert clusters.describe(lab.st, "demo")["ClusterStatus"] == "InService"
        errors = [e["Description"] for e in clusters.list_events(lab.st, "demo", OperationId=op.id) if e["EventLevel"] == "Error"]
        assert any("rolling the batch back and stopping" in e for e in errors)
        await lab.finish()

    asyncio.run(go())


def no_state_disk(c, node):
    return False


def test_the_controller_goes_last_alone_shut_down_cleanly_then_replaced(tmp_path):
    """No group named: every group, the controller's too (its sim VM "has" a state disk). The other
    nodes first; then the controller alone: stopped cleanly (never drained: it is no Slurm node),
    replaced with the new box, configured, health-checked; the update completes."""
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        old = lab.st.node("demo", "demo-controller-1").instance_id
        stops = []
        real_stop = lab.prov.stop_async

        async def stop(cluster, name):
            stops.append((name, lab.prov.observe(cluster)[name].state, [n.image for n in lab.st.nodes(cluster)]))
            await real_stop(cluster, name)

        lab.prov.stop_async = stop
        prepared, launched = {}, []  # the Vagrantfile's box per machine (prepare), what it was at each launch
        real_prepare, real_ensure = lab.prov.prepare_async, lab.prov.ensure_async

        async def prepare(cluster, machines, *args):
            prepared.update({m.name: m.box for m in machines})
            return await real_prepare(cluster, machines, *args)

        async def ensure(cluster, machine):
            launched.append((machine.name, prepared.get(machine.name)))
            return await real_ensure(cluster, machine)

        lab.prov.prepare_async, lab.prov.ensure_async = prepare, ensure
        update_software(lab.st, "demo", None, None, ID, resolve=resolve, keeps_state=lambda c, node: lab.prov.keeps_state(c.name, node))
        op = _op(lab)
        assert sorted(op.groups) == ["compute", "controller", "login"] and "demo-controller-1" in op.nodes
        await lab.run_until(lambda: _op(lab).status != "InProgress", max_ticks=900)
        assert _op(lab).status == "Completed", _op(lab).message
        nodes = {n.name: n for n in lab.st.nodes("demo")}
        assert all(n.image == NEXT and n.phase == "running" for n in nodes.values()), nodes
        assert nodes["demo-controller-1"].instance_id != old
        # stopped once, while it still ran, after every other node was on the new box
        assert [(x, state) for x, state, _ in stops] == [("demo-controller-1", "running")]
        assert stops[0][2] == [NEXT] * 3  # the others done (the controller's own image is set as its replace starts)
        assert "demo-controller-1" not in {x for c in lab.conf.calls if c[0] == "leave" for x in c[1]}
        # the real provider launches from the Vagrantfile: it named the new box before each relaunch
        assert launched and all(box == NEXT for _, box in launched), launched
        checks = [c[1] for c in lab.conf.calls if c[0] == "health_check"]
        assert checks[-1] == ("demo-controller-1",)
        texts = [e["Description"] for e in clusters.list_events(lab.st, "demo", OperationId=_op(lab).id)]
        assert any("demo-controller-1 to box slurmlab/trixie-slurm-next (the controller, last" in t for t in texts), texts
        await lab.finish()

    asyncio.run(go())


def test_bad_updates_change_nothing(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2)
        before = (lab.st.nodes("demo"), lab.st.operations("demo"), lab.st.cluster("demo").status)
        policy = lambda kind, v: {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": kind, "Value": v}}}  # noqa: E731
        for args, words in [
            ((["nope"], None, ID), "InstanceGroups[0].InstanceGroupName: no instance group 'nope'"),
            ((["controller"], None, ID), "demo-controller-1 has no state disk"),
            ((["compute"], policy("INSTANCE_COUNT", 3), ID), "Value: 3 is above the 2 node(s) to update"),
            ((["compute"], policy("INSTANCE_COUNT", 0), ID), "must be a whole number >= 1"),
            ((["compute"], policy("CAPACITY_PERCENTAGE", 150), ID), "150% is above 100%"),
            ((["compute"], None, "ami-00000000"), "ImageId: 'ami-00000000' names no box"),
        ]:
            with pytest.raises(UsageError) as e:
                update_software(lab.st, "demo", *args, resolve=resolve, keeps_state=no_state_disk)
            assert words in str(e.value), str(e.value)
        assert (lab.st.nodes("demo"), lab.st.operations("demo"), lab.st.cluster("demo").status) == before
        # no state disk (a cluster made before it): every group but the controller's
        update_software(lab.st, "demo", None, None, "ami-0123456789abcdef0", resolve=resolve, keeps_state=no_state_disk)
        with pytest.raises(Conflict):
            update_software(lab.st, "demo", None, None, "ami-0123456789abcdef0", resolve=resolve)
        assert _op(lab).groups == ["compute", "login"] and "demo-controller-1" not in _op(lab).nodes
        await lab.finish()

    asyncio.run(go())
