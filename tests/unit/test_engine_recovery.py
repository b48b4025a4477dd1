"""Issue 26 on the sim provider (virtual time): the engine reads the simulated Slurm's view, marks a
node Slurm calls down, climbs the recovery ladder, honours Action:Reboot / Action:Replace, leaves a
user's drain alone, shows a slurmctld that does not answer, protects a group that keeps failing and
resumes it on request; the heartbeat; the `resume-group` command."""

from __future__ import annotations

import asyncio
import time

import pytest

from lab import capacity
from lab.control import views
from lab.engine.recovery import PROTECT_AFTER, RECOVER_AFTER_S, SLURM_PERIOD_S
from lab.control.commands import resume_group
from lab.engine.watching import ENGINE_STALE_S
from lab.errors import UsageError
from tests.simlab import SimLab, spec_text

C1, C2 = "demo-compute-1", "demo-compute-2"


def events(lab: SimLab) -> list[str]:
    return [e.description for e in lab.st.events("demo")]


def group(lab: SimLab, name: str = "compute"):
    return next(g for g in lab.st.groups("demo") if g.name == name)


async def up(lab: SimLab, text: str | None = None) -> None:
    lab.create(text or spec_text())
    await lab.run_until(lambda: lab.full("demo") and lab.st.cluster("demo").status == "InService")


def test_a_node_slurm_calls_down_is_shown_then_repaired_by_a_slurmd_restart(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await up(lab)
        lab.conf.break_node(C1)  # slurmd died: down*, Not responding
        t0 = lab.clock()
        await lab.run_until(lambda: lab.node(C1).slurm is not None)
        assert lab.clock() - t0 <= SLURM_PERIOD_S + 2  # within one poll
        n = lab.node(C1)
        assert n.slurm == n.message == "Slurm: down* (Not responding)" and n.phase == "running"
        await lab.run_until(lambda: group(lab).status == "Degraded", max_ticks=2)  # the next pass says so
        d = views.describe(lab.st, "demo")
        assert next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "compute")["Status"] == "Degraded"
        assert views.describe_node(lab.st, "demo", C1)["Lab"]["Slurm"]["State"] == "Slurm: down* (Not responding)"
        assert ("restart_slurmd", C1) not in lab.conf.calls  # not before the threshold
        await lab.run_until(lambda: lab.node(C1).slurm is None)
        assert lab.clock() - t0 >= RECOVER_AFTER_S
        assert [c for c in lab.conf.calls if c[0] == "restart_slurmd"] == [("restart_slurmd", C1)]
        await lab.run_until(lambda: group(lab).status == "InService", max_ticks=2)
        assert lab.node(C1).message == "" and lab.node(C1).repairs == 0
        ev = events(lab)
        assert sum(e.startswith(f"{C1}: Slurm: down* (Not responding); NodeRecovery Automatic") for e in ev) == 1, ev
        assert any("restarting slurmd" in e for e in ev) and f"{C1}: usable in Slurm again (Slurm: idle)" in ev

    asyncio.run(go())


def test_a_node_that_stays_down_is_restarted_then_rebooted_then_replaced_then_its_group_protected(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await up(lab, spec_text(computes=1))
        iid = lab.node(C1).instance_id
        lab.conf.break_node(C1, sticky=True)  # a bad node: nothing mends it
        await lab.run_until(lambda: group(lab).protected is not None, max_ticks=3000)
        ev = events(lab)
        steps = [e for e in ev if e.startswith(f"{C1}: Slurm: down* (Not responding) for") and "recovery step" in e]
        assert "step 1 of 3: repair" in steps[0] and "step 2 of 3: reboot" in steps[1], steps
        assert all("step 3 of 3: replace" in s for s in steps[2:]), steps
        # a reboot and PROTECT_AFTER - 1 replacements: each counted, none reset by the rejoin (still down)
        assert len(steps) == 1 + PROTECT_AFTER and lab.node(C1).instance_id != iid
        assert any(e.startswith("instance group compute is protected: 5 failures in a row") for e in ev), ev
        assert "ProtectedGroups" in views.describe(lab.st, "demo")["Lab"]
        await lab.run_until(lambda: lab.node(C1).phase == "running" and not lab.node(C1).pending)  # the replacement decided before it
        launched = len(lab.prov.launched)
        await lab.ticks(200)  # protected: shown, nothing more
        assert len(lab.prov.launched) == launched and lab.node(C1).slurm is not None
        lab.conf.sticky.clear()
        lab.conf.broken.clear()  # the cause fixed by hand
        assert resume_group(lab.st, "demo", "compute")["WasProtected"]
        await lab.run_until(lambda: group(lab).status == "InService" and lab.node(C1).slurm is None)
        assert group(lab).protected is None and group(lab).failures == 0

    asyncio.run(go())


def test_nodes_that_never_launch_protect_their_group_until_it_is_resumed(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=1))
        await lab.run_until(lambda: lab.st.cluster("demo").status == "InService")
        capacity.apply(lab.st, capacity.parse("faults: {launch_failure_rate: 1.0}"))
        lab.prov.crash("demo", C1, "missing")  # its VM is gone; every launch of a new one fails

        await lab.run_until(lambda: group(lab).protected is not None, max_ticks=3000)
        assert group(lab).failures == PROTECT_AFTER
        attempts = lab.node(C1).attempts
        await lab.ticks(300)
        assert lab.node(C1).attempts == attempts  # not retried any more
        capacity.apply(lab.st, capacity.parse("faults: {launch_failure_rate: 0}"))
        assert resume_group(lab.st, "demo", "compute")["Retried"] == 1
        await lab.run_until(lambda: lab.full("demo") and group(lab).status == "InService")

    asyncio.run(go())


@pytest.mark.parametrize("reason,recovery", [("Action:Replace", "Automatic"), ("Action:Replace", "None"),
                                             ("Action:Reboot", "Automatic")])
def test_an_action_reason_reboots_or_replaces_the_node_under_its_name(tmp_path, reason, recovery):
    async def go():
        lab = SimLab(tmp_path)
        await up(lab, spec_text(recovery=recovery))
        before = lab.node(C2)
        lab.conf.break_node(C2, "fail", reason)
        await lab.run_until(lambda: lab.node(C2).generation != before.generation or ("take_down", C2) in lab.conf.calls)
        await lab.run_until(lambda: lab.full("demo") and lab.node(C2).slurm is None)
        after = lab.node(C2)
        replaced = reason == "Action:Replace"
        assert (after.instance_id != before.instance_id) == replaced
        assert ("take_down", C2) in lab.conf.calls  # DOWN in Slurm first: its jobs end now
        ev = events(lab)
        assert any(e.startswith(f"{C2}: Slurm reason '{reason}' (set by a user)") for e in ev), ev
        assert (f"{C2}: rebooted" in ev) == (not replaced)
        assert group(lab).failures == 0  # a user's request is not a failure

    asyncio.run(go())


def test_a_job_on_a_failing_node_is_waited_for_and_another_drain_is_left_alone(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await up(lab)
        lab.conf.break_node(C1, "failing", "Action:Replace")  # state=fail with a job on it
        lab.conf.break_node(C2, "drained", "disk check by hand")
        await lab.ticks(int(3 * SLURM_PERIOD_S + RECOVER_AFTER_S))
        assert lab.node(C1).pending is None and "waiting for the jobs on it to end" in lab.node(C1).message
        assert lab.node(C2).slurm is None and lab.node(C2).message == ""  # the user's business
        assert not [c for c in lab.conf.calls if c[0] in ("take_down", "restart_slurmd")]
        lab.conf.break_node(C1, "fail", "Action:Replace")  # the job ended
        await lab.run_until(lambda: lab.node(C1).generation == 1 and lab.full("demo"))

    asyncio.run(go())


def test_none_recovery_shows_the_truth_and_does_nothing(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await up(lab, spec_text(recovery="None"))
        lab.conf.break_node(C1)
        await lab.run_until(lambda: lab.node(C1).slurm is not None)
        await lab.ticks(int(4 * RECOVER_AFTER_S))
        assert not [c for c in lab.conf.calls if c[0] in ("take_down", "restart_slurmd")]
        assert lab.node(C1).pending is None and group(lab).status == "Degraded"
        assert any("NodeRecovery None: shown, not recovered" in e for e in events(lab))

    asyncio.run(go())


def test_a_slurmctld_that_does_not_answer_is_a_cluster_problem_shown_once(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await up(lab)
        lab.conf.slurmctld_down = "slurm_load_partitions: Unable to contact slurm controller (connect failure)"
        await lab.run_until(lambda: lab.st.cluster("demo").slurm_problem is not None)
        await lab.ticks(int(3 * SLURM_PERIOD_S))
        d = views.describe(lab.st, "demo")
        assert "Unable to contact slurm controller" in d["Lab"]["SlurmProblem"]["Reason"]
        assert sum(e.startswith("Slurm does not answer") for e in events(lab)) == 1
        lab.conf.slurmctld_down = None
        await lab.run_until(lambda: lab.st.cluster("demo").slurm_problem is None)
        assert "Slurm answers again" in events(lab) and "SlurmProblem" not in views.describe(lab.st, "demo")["Lab"]

    asyncio.run(go())


def test_the_heartbeat_is_shown_and_a_silent_engine_is_named_in_describe(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await up(lab)
        d = views.describe(lab.st, "demo")
        assert d["Lab"]["EngineSeenAt"] and "FailureMessage" not in d
        lab.st.set_meta("engine_seen_at", time.time() - ENGINE_STALE_S - 5)
        d = views.describe(lab.st, "demo")
        assert "the engine has not run for" in d["FailureMessage"] and "slurmlab engine start" in d["FailureMessage"]

    asyncio.run(go())


def test_resume_group_names_a_bad_cluster_or_group_and_changes_nothing(tmp_path):
    lab = SimLab(tmp_path)
    lab.create(spec_text())
    with pytest.raises(UsageError, match="no cluster named 'nope'"):
        resume_group(lab.st, "nope", "compute")
    with pytest.raises(UsageError, match="has no instance group 'gpu'") as e:
        resume_group(lab.st, "demo", "gpu")
    assert e.value.fix == "its groups: controller, login, compute"
    assert resume_group(lab.st, "demo", "compute") == {"ClusterName": "demo", "InstanceGroupName": "compute",
                                                       "WasProtected": False, "Retried": 0}


def test_an_engine_whose_state_folder_is_deleted_exits(tmp_path, monkeypatch):
    """Found by hand: an engine kept running 25 minutes after its state folder was deleted, holding the
    deleted state.db open. Now it notices at its next pass and exits; until then it beats."""
    import shutil

    from lab.engine import daemon
    from lab.control import clusters as ops
    from lab.spec import loads_spec

    home = tmp_path / "home"
    monkeypatch.setenv("SLURMLAB_HOME", str(home))
    home.mkdir()
    ops.create(daemon.store(), loads_spec(spec_text()), provider="sim", start_engine=False)

    async def go():
        task = asyncio.create_task(daemon.serve_forever())
        for _ in range(100):
            await asyncio.sleep(0.05)
            if daemon.store().meta("engine_seen_at"):
                break
        assert daemon.store().meta("engine_seen_at") > time.time() - 10  # the heartbeat
        shutil.rmtree(home)
        await asyncio.wait_for(task, timeout=10)  # it ends by itself (a cluster is still "there")

    asyncio.run(go())


def test_a_failed_join_of_a_batch_is_one_failure_of_its_group(tmp_path):
    """Protected mode counts failed steps, not nodes: a join of 2 nodes that fails once counts 1."""
    from lab.configure.base import ConfigureError

    async def go():
        lab = SimLab(tmp_path)
        real, failed = lab.conf.join_async, []

        async def join_once(ctx, batch):
            if not failed and len(batch) == 2:
                failed.append(tuple(batch))
                raise ConfigureError("join.yml failed: slurmctld busy")
            return await real(ctx, batch)

        lab.conf.join_async = join_once
        lab.create(spec_text())
        await lab.run_until(lambda: bool(failed) and group(lab).failures > 0)
        assert group(lab).failures == 1 and failed == [(C1, C2)]
        await lab.run_until(lambda: lab.full("demo"))
        assert group(lab).failures == 0  # the retried join succeeded: the count starts over

    asyncio.run(go())


def test_a_node_replaced_while_it_joins_is_not_marked_joined_by_that_join(tmp_path):
    """Issue 45's fault run: compute-3's VM was destroyed while its join ran; the join then marked the node
    Running on its new VM, which was not configured yet (its configure ended after, and put it back to
    waiting). The join leaves a node whose VM changed meanwhile to that VM's own progress."""
    async def go():
        lab = SimLab(tmp_path)
        real, seen = lab.conf.join_async, []

        async def slow_join(ctx, batch):
            if C2 in batch and not seen:
                seen.append(lab.node(C2).generation)
                lab.prov.crash("demo", C2)  # its VM is gone while the join runs
                await lab.clock.sleep(60)
            return await real(ctx, batch)

        lab.conf.join_async = slow_join
        lab.create(spec_text())
        await lab.run_until(lambda: bool(seen) and lab.node(C2).generation > seen[0])
        marked = []

        def watch():
            n = lab.node(C2)
            if n.generation > seen[0] and n.phase == "running" and n.configured_at is None:
                marked.append(n)
            return lab.full("demo")

        await lab.run_until(watch)
        assert not marked, marked  # never Running on a VM that was not configured
        assert lab.node(C2).generation > seen[0] and lab.node(C2).joined_at is not None
        joined = [e for e in events(lab) if "joined Slurm" in e]
        assert any(C2 in e for e in joined[1:]), joined  # its new VM joined on its own

    asyncio.run(go())


def test_a_host_short_of_memory_makes_a_node_wait_without_protecting_its_group(tmp_path):
    """Issue 45's fault run: the host's memory taken by another process; each launch is refused with
    InsufficientCapacity. That is a shortage, not a failing node: Warnings, retried, and the group is not
    protected after PROTECT_AFTER refusals (it was); the node launches once the memory is back."""
    from lab.providers.base import LaunchError

    async def go():
        lab = SimLab(tmp_path)
        real, refused = lab.prov.ensure_async, []

        async def short(cluster, machine):
            if machine.name == C2 and len(refused) < PROTECT_AFTER + 2:
                refused.append(lab.clock())
                raise LaunchError(f"InsufficientCapacity: host local has 400 MiB free for VMs (1024 MiB kept for the "
                                  f"host); {machine.name} needs 768 MiB")
            return await real(cluster, machine)

        lab.prov.ensure_async = short
        lab.create(spec_text())
        await lab.run_until(lambda: lab.full("demo"), max_ticks=2000)
        assert len(refused) == PROTECT_AFTER + 2
        assert not group(lab).protected and group(lab).failures == 0
        said = [e for e in lab.st.events("demo") if e.node == C2 and "InsufficientCapacity" in e.description]
        assert len(said) == PROTECT_AFTER + 2 and {e.level for e in said} == {"Warning"}, said

    asyncio.run(go())
