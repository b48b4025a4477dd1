"""Cluster checkpoints on the engine (sim provider): a checkpoint keeps the engine's record with the
simulated VMs; a restore puts both back (a node removed since comes back, one added since goes), the
clocks are set, and the engine carries on with nothing lost or replaced; bad requests change nothing."""

from __future__ import annotations

import asyncio

import pytest

from lab import capacity
from lab.control import batches
from lab.control.checkpoints import RESTORE, request
from lab.errors import Conflict, UsageError
from tests.simlab import SimLab, spec_text


async def _with_checkpoint(tmp_path, tag):
    """A running one-compute cluster with checkpoint `tag` taken."""
    lab = SimLab(tmp_path)
    lab.create(spec_text(computes=1))
    await lab.run_until(lambda: lab.full())
    _ask(lab, tag)
    await _done(lab, "Checkpoint")
    return lab


def _op(lab, kind):
    return [o for o in lab.st.operations("demo") if o.kind == kind][-1]


def _ask(lab, tag, kind="Checkpoint"):
    return request(lab.st, "demo", tag, kind, checkpoints=lambda c: lab.prov.checkpoints(c.name))


async def _done(lab, kind):
    await lab.run_until(lambda: _op(lab, kind).status != "InProgress", max_ticks=300)
    return _op(lab, kind)


def test_restore_brings_back_the_nodes_and_the_engine_carries_on(tmp_path, lab_home):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=2))
        await lab.run_until(lambda: lab.full())
        before = {n.name: n.instance_id for n in lab.st.nodes("demo")}
        _ask(lab, "step-1")
        op = await _done(lab, "Checkpoint")
        assert op.status == "Completed" and "checkpoint step-1 taken" in op.message, op.message
        assert [c["tag"] for c in lab.prov.checkpoints("demo")] == ["step-1"]
        # break it: one compute node deleted, the other group grown
        batches.delete_nodes(lab.st, "demo", ["demo-compute-2"])
        await lab.run_until(lambda: lab.full() and "demo-compute-2" not in lab.vms(), max_ticks=300)
        batches.add_nodes(lab.st, "demo", [{"InstanceGroupName": "login", "IncrementTargetCountBy": 1}])
        await lab.run_until(lambda: lab.full() and "demo-login-2" in lab.vms(), max_ticks=300)
        events_before = len(lab.st.events("demo"))
        _ask(lab, "step-1", RESTORE)
        op = await _done(lab, RESTORE)
        assert op.status == "Completed" and "restored" in op.message, op.message
        assert {n.name: n.instance_id for n in lab.st.nodes("demo")} == before
        assert lab.vms() == set(before)
        assert ("set_clocks",) in lab.conf.calls
        await lab.run_until(lambda: lab.full(), max_ticks=50)
        for _ in range(20):  # the engine carries on: nothing lost, replaced or launched again
            await lab.tick()
        later = [e.description for e in lab.st.events("demo")[events_before:]]
        assert not any(w in e for e in later for w in ("lost", "replac", "launch", "orphan")), later
        assert lab.st.cluster("demo").status == "InService"
        assert {g.name: g.target_count for g in lab.st.groups("demo")} == {"controller": 1, "login": 1, "compute": 2}
        await lab.finish()

    asyncio.run(go())


def test_a_group_short_of_capacity_is_short_again_after_a_restore(tmp_path, lab_home):
    async def go():
        lab = SimLab(tmp_path)
        capacity.apply(lab.st, capacity.parse("instance_types: {ml.c5.large: {available: 1}}"))
        lab.create(spec_text(computes=2))
        await lab.run_until(lambda: sum(n.phase == "running" for n in lab.st.nodes("demo")) == 3, max_ticks=300)
        _ask(lab, "short")
        assert (await _done(lab, "Checkpoint")).status == "Completed"
        capacity.apply(lab.st, capacity.parse("instance_types: {ml.c5.large: {available: 2}}"))
        await lab.run_until(lambda: lab.full(), max_ticks=600)
        capacity.apply(lab.st, capacity.parse("instance_types: {ml.c5.large: {available: 1}}"))
        _ask(lab, "short", RESTORE)
        assert (await _done(lab, RESTORE)).status == "Completed"
        short = [n for n in lab.st.nodes("demo") if n.grp == "compute" and n.phase != "running"]
        assert len(short) == 1 and len(lab.vms()) == 3, lab.phases()
        capacity.apply(lab.st, capacity.parse("instance_types: {ml.c5.large: {available: 2}}"))
        await lab.run_until(lambda: lab.full(), max_ticks=900)  # and the engine carries on
        await lab.finish()

    asyncio.run(go())


def test_bad_checkpoint_requests_change_nothing(tmp_path, lab_home):
    async def go():
        lab = await _with_checkpoint(tmp_path, "one")
        before = (lab.st.nodes("demo"), lab.st.operations("demo"), lab.prov.checkpoints("demo"))
        for tag, kind, words in [("One", "Checkpoint", "is not a checkpoint tag"),
                                 ("", "Checkpoint", "is not a checkpoint tag"),
                                 ("one", "Checkpoint", "already has a checkpoint 'one'"),
                                 ("two", RESTORE, "has no checkpoint 'two' (its checkpoints: one)")]:
            with pytest.raises(UsageError) as e:
                _ask(lab, tag, kind)
            assert words in str(e.value), str(e.value)
        lab.st.update_cluster("demo", status="SystemUpdating")
        with pytest.raises(UsageError) as e:
            _ask(lab, "two")
        assert "in a rolling software update" in str(e.value)
        lab.st.update_cluster("demo", status="InService")
        assert (lab.st.nodes("demo"), lab.st.operations("demo"), lab.prov.checkpoints("demo")) == before
        _ask(lab, "two")
        with pytest.raises(Conflict):
            _ask(lab, "three")
        await lab.finish()

    asyncio.run(go())


def test_a_node_whose_clock_could_not_be_set_is_named(tmp_path, lab_home):
    async def go():
        lab = await _with_checkpoint(tmp_path, "one")

        async def clocks(ctx):
            return {"demo-compute-1": "ssh exit 255: connection refused"}

        lab.conf.set_clocks_async = clocks
        _ask(lab, "one", RESTORE)
        op = await _done(lab, RESTORE)
        assert op.status == "Completed"
        assert "clocks set except on demo-compute-1 (ssh exit 255: connection refused)" in op.message, op.message
        await lab.finish()

    asyncio.run(go())


@pytest.mark.parametrize("missed", [[], ["demo-compute-1"]])
def test_clocks_the_guest_agents_set_are_not_set_again_over_ssh(tmp_path, lab_home, missed):
    """A provider whose restore set every clock through the guest agents (`clocks_missed` empty) spares the
    configurer's ssh round; one agent that did not answer and the configurer sets them all."""
    async def go():
        lab = await _with_checkpoint(tmp_path, "one")
        restore = lab.prov.restore_async

        async def by_agents(cluster, tag):
            return {**await restore(cluster, tag), "clocks_missed": missed}

        lab.prov.restore_async = by_agents
        lab.conf.calls.clear()
        _ask(lab, "one", RESTORE)
        op = await _done(lab, RESTORE)
        assert op.status == "Completed"
        assert (("set_clocks",) in lab.conf.calls) == bool(missed), lab.conf.calls
        assert ("clocks set by the guest agents" in op.message) == (not missed), op.message
        await lab.finish()

    asyncio.run(go())
