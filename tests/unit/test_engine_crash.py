"""Crash safety: the engine killed at any moment and restarted resumes every cluster.

A kill is played by cancelling every task of the engine where it stands (nothing after its current
await runs, as with SIGKILL) and building a new Engine on the same store; the sim provider object
survives, as libvirt does.
"""

from __future__ import annotations

import asyncio
import random

import pytest

from lab.control import clusters
from tests.simlab import SETTLE, SimLab, spec_text


def _consistent(lab: SimLab, name="demo") -> None:
    """At any instant: every VM has a record (a record is written before a launch, deleted after
    the VM)."""
    records = set(lab.phases(name))
    assert lab.vms(name) <= records, f"orphan VMs: {lab.vms(name) - records}"


def _finished(lab: SimLab, name="demo") -> None:
    """At the end: full size, VMs == records, every VM running, every node Running."""
    assert lab.full(name)
    assert lab.vms(name) == set(lab.phases(name)), "provider VMs and store nodes differ"
    assert all(vm.state == "running" for vm in lab.prov.vms[name].values())
    assert all(n["InstanceStatus"]["Status"] == "Running" for n in clusters.list_nodes(lab.st, name))
    assert lab.st.cluster(name).status == "InService"


async def _micro_steps(lab: SimLab):
    """The driver of SimLab.tick, one scheduling unit at a time: a kill may land between any two."""
    while True:
        await lab.eng.step()
        yield
        for _ in range(SETTLE):
            await asyncio.sleep(0)
            yield
        nxt = lab.clock.next_wake()
        lab.clock.advance_to(min(nxt, lab.clock.t + 1.0) if nxt is not None else lab.clock.t + 1.0)
        yield
        for _ in range(SETTLE):
            await asyncio.sleep(0)
            yield


def _reference_points(tmp_path) -> int:
    """How many scheduling units a create takes without a kill."""

    async def go():
        lab = SimLab(tmp_path / "ref")
        lab.create(spec_text(computes=2))
        k = 0
        async for _ in _micro_steps(lab):
            k += 1
            if lab.full() and lab.st.cluster("demo").status == "InService":
                break
        await lab.finish()
        return k

    return asyncio.run(go())


def test_kill_at_every_step_of_a_create_and_restart(tmp_path):
    points = _reference_points(tmp_path)
    assert points > 20
    seen_phases = set()
    for kill_at in range(points + 1):
        async def go(kill_at=kill_at):
            lab = SimLab(tmp_path / f"k{kill_at}")
            lab.create(spec_text(computes=2))
            k = 0
            async for _ in _micro_steps(lab):
                if k == kill_at:
                    seen_phases.update(lab.phases().values())
                    _consistent(lab)
                    lab.kill()
                    break
                k += 1
            await lab.run_until(lambda: lab.full() and lab.st.cluster("demo").status == "InService", max_ticks=60)
            _finished(lab)
            assert lab.engines == 2
            await lab.finish()

        asyncio.run(go())
    # the kills landed in the middle of every kind of step
    assert {"planned", "launching", "booted", "configuring", "configured", "joining", "running"} <= seen_phases


def test_engine_replaced_after_every_pass_still_finishes(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=3))
        for _ in range(80):
            if lab.full() and lab.st.cluster("demo").status == "InService":
                break
            await lab.tick()
            _consistent(lab)
            lab.kill()
        _finished(lab)
        assert lab.engines > 5
        await lab.finish()

    asyncio.run(go())


def test_random_kills_during_scale_out_and_scale_in(tmp_path):
    rng = random.Random(7)

    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=3))
        await lab.run_until(lambda: lab.full())

        async def churn(cond):
            for _ in range(300):
                if cond():
                    return
                await lab.eng.step()
                for _ in range(rng.randrange(0, 2 * SETTLE)):
                    await asyncio.sleep(0)
                if rng.random() < 0.3:
                    _consistent(lab)
                    lab.kill()
                nxt = lab.clock.next_wake()
                lab.clock.advance_to(min(nxt, lab.clock.t + 1) if nxt else lab.clock.t + 1)
                await lab.settle()
            raise AssertionError(f"did not converge: {lab.phases()}")

        clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 3}])
        await churn(lambda: lab.full() and len(lab.phases()) == 8)
        clusters.delete_nodes(lab.st, "demo", ["demo-compute-2", "demo-compute-5"])
        await churn(lambda: lab.full() and len(lab.phases()) == 6)
        _finished(lab)
        assert "demo-compute-2" not in lab.phases() and "demo-compute-5" not in lab.phases()
        # the nodes that left were drained first (a leave may be repeated after a kill: it is idempotent)
        left = {n for call in lab.conf.calls if call[0] == "leave" for n in call[1]}
        assert left == {"demo-compute-2", "demo-compute-5"}
        await lab.finish()

    asyncio.run(go())


@pytest.mark.parametrize("phase", ["launching", "booted", "configuring", "configured", "joining", "removing"])
def test_a_phase_found_with_no_task_is_resumed(tmp_path, phase):
    """What a new engine finds in the store after a kill: each in-between phase goes on."""

    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=2, logins=0))
        await lab.run_until(lambda: lab.full())
        await lab.tick()
        lab.kill()
        n = "demo-compute-2"
        if phase == "removing":
            clusters.delete_nodes(lab.st, "demo", [n])
            lab.st.update_node("demo", n, phase="removing")  # killed between the leave and the destroy
            await lab.run_until(lambda: n not in lab.phases())
            assert n not in lab.vms() and lab.st.groups("demo")[-1].target_count == 1
            assert ("leave", (n,)) in lab.conf.calls
            return
        if phase in ("launching",):
            lab.prov.remove("demo", [n])  # killed before (or during) the VM's creation
        lab.st.update_node("demo", n, phase=phase)
        calls = len(lab.conf.calls)
        await lab.run_until(lambda: lab.phases()[n] == "running")
        redone = lab.conf.calls[calls:]
        if phase in ("launching", "booted", "configuring"):
            assert ("configure", n, "Compute") in redone
        assert any(c[0] == "join" and n in c[1] for c in redone)
        _finished(lab)
        await lab.finish()

    asyncio.run(go())


def test_orphan_vm_is_removed_and_lost_vm_follows_node_recovery(tmp_path):
    from lab.providers.base import MachineSpec

    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=1, logins=0))
        await lab.run_until(lambda: lab.full())
        # a VM of the cluster with no record (e.g. created by hand, or a record lost with an old store)
        lab.prov._define("demo", MachineSpec("demo-compute-9", "compute", 1, 512, "m", "10.1.0.99"))
        lab.kill()
        await lab.ticks(3)
        assert "demo-compute-9" not in lab.vms()
        assert any("demo-compute-9" in e.description and "orphan" in e.description for e in lab.st.events("demo"))
        _finished(lab)
        await lab.finish()

    asyncio.run(go())


def test_a_zombie_is_not_running():
    """A SIGKILLed engine that nobody reaps stays a zombie; the next engine must still end its
    leftover process group (lab.osutil.running, used by the daemon)."""
    import subprocess
    import time

    from lab.osutil import running

    p = subprocess.Popen(["sleep", "30"])
    try:
        assert running(p.pid)
        p.kill()
        deadline = time.monotonic() + 5
        while running(p.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(p.pid)
        assert open(f"/proc/{p.pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"  # not reaped yet
    finally:
        p.wait()
    assert not running(p.pid)
