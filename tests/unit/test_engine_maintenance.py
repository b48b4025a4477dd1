"""Maintenance that runs itself (issue 32), on the sim provider with virtual time: image releases on
the nodes, AutoPatchConfig (WhenIdle with a busy node, WhenAllIdle, DrainFirst with Force and with
Skip, the idle window), ScheduledUpdateConfig firing, a pinned group left alone, and the refusals
(an unknown ImageReleaseVersion, a Slurm release the controller cannot serve)."""

from __future__ import annotations

import asyncio
import calendar

import pytest

from lab.box.releases import Release
from lab.control import clusters
from lab.control.pins import check_pins
from lab.control.software import update_software
from lab.errors import UsageError
from lab.providers.sim_releases import FIRST, SimReleases
from tests.simlab import SimLab, spec_text

C1, C2 = "demo-compute-1", "demo-compute-2"


def _spec(compute_extra: str = "", computes: int = 2) -> str:
    s = spec_text(computes=computes)
    return s.replace("    SlurmConfig: {NodeType: Compute, PartitionNames: [dev]}\n",
                     "    SlurmConfig: {NodeType: Compute, PartitionNames: [dev]}\n" + compute_extra)


async def _ready(lab_home, tmp_path, extra: str = "", computes: int = 2, text: str | None = None) -> SimLab:
    lab = SimLab(tmp_path)
    lab.prov.image_releases = SimReleases(lab_home / "sim-releases.json")  # the views read the same file
    lab.create(text if text is not None else _spec(extra, computes))
    await lab.run_until(lambda: lab.full())
    await lab.tick()
    assert lab.st.cluster("demo").status == "InService"
    return lab


def _op(lab, kind="AutoPatch"):
    return next((o for o in lab.st.operations("demo") if o.kind == kind), None)


def _texts(lab) -> list[str]:
    return [e["Description"] for e in clusters.list_events(lab.st, "demo")]


def _release(lab, node: str) -> str | None:
    return lab.node(node).release


def _patched(lab, node: str, version: str) -> bool:
    return _release(lab, node) == version and lab.node(node).phase == "running"


def _busy_then_new_release(lab):
    """A job on compute-2, then a newer release of the line: what every auto-patch scenario starts from."""
    lab.conf.run_job(C2)
    return lab.prov.image_releases.publish()


WHEN_IDLE = "    AutoPatchConfig: {PatchingStrategy: WhenIdle}\n"


def test_nodes_report_their_release_and_an_update_when_one_appears(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path)
        assert {n.release for n in lab.st.nodes("demo")} == {FIRST.version}
        d = clusters.describe_node(lab.st, "demo", C1)
        assert (d["CurrentImageReleaseVersion"], d["ImageVersionStatus"]) == (FIRST.version, "UpToDate")
        new = lab.prov.image_releases.publish()
        d = clusters.describe_node(lab.st, "demo", C1)
        assert d["ImageVersionStatus"] == "UpdateAvailable" and d["DesiredImageReleaseVersion"] == FIRST.version
        g = next(g for g in clusters.describe(lab.st, "demo")["InstanceGroups"] if g["InstanceGroupName"] == "compute")
        assert g["CurrentImageReleaseVersion"] == FIRST.version and g["ImageVersionStatus"] == "UpdateAvailable"
        assert clusters.image_version_status(lab.st, "demo") == "UpdateAvailable"
        lab.prov.image_releases.publish(security=True)
        assert clusters.describe_node(lab.st, "demo", C1)["ImageVersionStatus"] == "SecurityUpdateRequired"
        assert new.version != FIRST.version
        await asyncio.sleep(0)
        assert _op(lab) is None  # no AutoPatchConfig: nothing moves by itself
        await lab.ticks(30)
        assert _op(lab) is None and _release(lab, C1) == FIRST.version
        await lab.finish()

    asyncio.run(go())


def test_when_idle_patches_the_idle_node_now_and_the_busy_one_after_its_job(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path, WHEN_IDLE)
        new = _busy_then_new_release(lab)
        await lab.run_until(lambda: _op(lab) is not None)
        await lab.run_until(lambda: _patched(lab, C1, new.version), max_ticks=600)
        assert _release(lab, C2) == FIRST.version  # its job still runs: cordoned, not patched
        assert lab.conf.cordoned.get(C2, "").startswith("slurmlab: auto-patch")
        assert lab.conf.jobs[C2] == 1  # never killed
        assert clusters.describe_node(lab.st, "demo", C2)["DesiredImageReleaseVersion"] == new.version
        await lab.ticks(40)
        assert _release(lab, C2) == FIRST.version and _op(lab).status == "InProgress"
        lab.conf.end_job(C2)
        await lab.run_until(lambda: _op(lab).status != "InProgress", max_ticks=600)
        op = _op(lab)
        assert op.status == "Completed" and op.message.startswith("2 node(s) patched")
        assert _release(lab, C2) == new.version and not lab.conf.cordoned
        assert clusters.describe_node(lab.st, "demo", C2)["ImageVersionStatus"] == "UpToDate"
        assert _release(lab, "demo-login-1") == FIRST.version  # no AutoPatchConfig on the login group
        texts = _texts(lab)
        assert any("cordoned demo-compute-1, demo-compute-2" in t for t in texts)
        assert any(f"{C1} idle: patching" in t for t in texts) and any(f"{C2} idle: patching" in t for t in texts)
        assert any("AutoPatch completed" in t for t in texts)
        await lab.ticks(30)  # the same release is not tried again
        assert len([o for o in lab.st.operations("demo") if o.kind == "AutoPatch"]) == 1
        await lab.finish()

    asyncio.run(go())


def test_when_all_idle_waits_for_every_node(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path, "    AutoPatchConfig: {PatchingStrategy: WhenAllIdle}\n")
        new = _busy_then_new_release(lab)
        await lab.run_until(lambda: _op(lab) is not None and _op(lab).details.get("Cordoned"))
        await lab.ticks(60)
        assert _release(lab, C1) == FIRST.version  # idle, but its neighbour is not
        lab.conf.end_job(C2)
        await lab.run_until(lambda: _op(lab).status != "InProgress", max_ticks=600)
        assert _op(lab).status == "Completed"
        assert {_release(lab, C1), _release(lab, C2)} == {new.version}
        leaves = [c[1] for c in lab.conf.calls if c[0] == "leave"]
        assert (C1, C2) in leaves  # both left Slurm together
        await lab.finish()

    asyncio.run(go())


def test_when_all_idle_gives_up_after_the_idle_window(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path,
                           "    AutoPatchConfig: {PatchingStrategy: WhenAllIdle, IdleWaitWindowInSeconds: 3600}\n")
        _busy_then_new_release(lab)
        await lab.run_until(lambda: _op(lab) is not None and _op(lab).details.get("Cordoned"))
        lab.clock.advance(3601)
        await lab.run_until(lambda: _op(lab).status != "InProgress")
        assert _op(lab).message.startswith("0 node(s) patched") and _op(lab).status == "Completed"
        await lab.ticks(5)
        assert not lab.conf.cordoned and {_release(lab, C1), _release(lab, C2)} == {FIRST.version}
        assert lab.conf.jobs[C2] == 1
        assert any("IdleWaitWindowInSeconds passed and not every node became idle" in t for t in _texts(lab))
        await lab.finish()

    asyncio.run(go())


DRAIN_FIRST = ("    AutoPatchConfig:\n      PatchingStrategy: DrainFirst\n"
               "      DrainPolicy: {{DrainTimeoutInSeconds: 120, OnDrainTimeout: {how}}}\n"
               "      DeploymentConfig: {{RollingUpdatePolicy: {{MaximumBatchSize: {{Type: INSTANCE_COUNT, Value: 1}}}}}}\n")


@pytest.mark.parametrize("how", ["Force", "Skip"])
def test_drain_first_at_the_drain_timeout(lab_home, tmp_path, how):
    async def go():
        lab = await _ready(lab_home, tmp_path, DRAIN_FIRST.format(how=how))
        new = _busy_then_new_release(lab)
        await lab.run_until(lambda: _op(lab) is not None)
        started = _op(lab).details["Started"]
        await lab.run_until(lambda: _patched(lab, C1, new.version), max_ticks=600)
        assert lab.clock.t < started + 120 and _release(lab, C2) == FIRST.version
        await lab.run_until(lambda: _op(lab).status != "InProgress", max_ticks=900)
        assert lab.clock.t >= started + 120
        downs = [c for c in lab.conf.calls if c[0] == "take_down" and c[1] == C2]
        if how == "Force":
            assert _release(lab, C2) == new.version and downs and C2 not in lab.conf.jobs  # its job ended
            assert any("OnDrainTimeout Force" in t for t in _texts(lab))
        else:
            assert _release(lab, C2) == FIRST.version and not downs and lab.conf.jobs[C2] == 1
            assert C2 not in lab.conf.cordoned  # resumed
            assert any("OnDrainTimeout Skip" in t for t in _texts(lab))
        await lab.finish()

    asyncio.run(go())


def test_a_schedule_fires_a_rolling_update(lab_home, tmp_path):
    async def go():
        # the virtual clock starts at 1000 s after the epoch: 03:00 on the 1st is 10800
        lab = await _ready(lab_home, tmp_path, "    ScheduledUpdateConfig: {ScheduleExpression: 'cron(0 3 1 * ? *)'}\n")
        new = lab.prov.image_releases.publish()
        await lab.ticks(3)
        assert _op(lab, "UpdateClusterSoftware") is None
        assert any("the next update of compute at 1970-01-01T03:00:00" in t for t in _texts(lab))
        lab.clock.advance_to(10800)
        await lab.run_until(lambda: _op(lab, "UpdateClusterSoftware") is not None)
        op = _op(lab, "UpdateClusterSoftware")
        assert op.details["Trigger"] == "ScheduledUpdateConfig" and op.details["Releases"] == {"compute": new.version}
        assert lab.st.cluster("demo").status == "SystemUpdating"
        await lab.run_until(lambda: _op(lab, "UpdateClusterSoftware").status != "InProgress", max_ticks=900)
        assert _op(lab, "UpdateClusterSoftware").status == "Completed"
        assert {_release(lab, C1), _release(lab, C2)} == {new.version}
        assert _release(lab, "demo-login-1") == FIRST.version
        nxt = calendar.timegm((1970, 2, 1, 3, 0, 0))
        assert any(f"next: compute {_iso(nxt)}" in t for t in _texts(lab))
        await lab.finish()

    asyncio.run(go())


def _iso(t: float) -> str:
    from lab.osutil import iso_seconds

    return iso_seconds(t)


def test_a_pinned_group_is_left_alone(lab_home, tmp_path):
    async def go():
        pin = f"    ImageReleaseVersion: '{FIRST.version}'\n" + WHEN_IDLE + \
              "    ScheduledUpdateConfig: {ScheduleExpression: 'cron(0 3 1 * ? *)'}\n"
        lab = await _ready(lab_home, tmp_path, pin)
        assert lab.node(C1).image == FIRST.box  # its new nodes are made from the pinned release's box
        lab.prov.image_releases.publish()
        lab.clock.advance_to(10800)
        await lab.ticks(40)
        assert _op(lab) is None and _op(lab, "UpdateClusterSoftware") is None
        assert {_release(lab, C1), _release(lab, C2)} == {FIRST.version}
        d = clusters.describe_node(lab.st, "demo", C1)
        assert d["DesiredImageReleaseVersion"] == FIRST.version and d["ImageVersionStatus"] == "UpdateAvailable"
        with pytest.raises(UsageError, match="pinned to ImageReleaseVersion"):
            update_software(lab.st, "demo", ["compute"], release=lab.prov.image_releases.all()[-1].version)
        await lab.finish()

    asyncio.run(go())


def test_an_unknown_pin_names_the_releases_the_lab_has(lab_home, tmp_path):
    lab = SimLab(tmp_path)
    with pytest.raises(UsageError) as e:
        lab.create(_spec("    ImageReleaseVersion: '9.9.9'\n"))
    assert "InstanceGroups[2].ImageReleaseVersion: '9.9.9' names no image release" in e.value.message
    assert FIRST.version in e.value.message
    assert lab.st.cluster("demo") is None  # nothing recorded


NEW_SLURM = Release(version="2026.12.1", line="forky-slurm", box="slurmlab/forky-slurm", inputs_hash="f",
                    slurm_version="26.05.5")
TOO_NEW = Release(version="2026.12.2", line="sid-slurm", box="slurmlab/sid-slurm", inputs_hash="g",
                  slurm_version="27.05.1")


def test_slurm_releases_the_controller_cannot_serve_are_refused():
    groups = [{"InstanceGroupName": "controller", "SlurmConfig": {"NodeType": "Controller"}},
              {"InstanceGroupName": "compute", "SlurmConfig": {"NodeType": "Compute"},
               "ImageReleaseVersion": NEW_SLURM.version}]
    with pytest.raises(UsageError, match="newer than the controller's slurmctld 24.11.5"):
        check_pins(groups, [FIRST, NEW_SLURM], FIRST.box)
    groups[0]["ImageReleaseVersion"] = NEW_SLURM.version  # the controller on 26.05 too: fine
    check_pins(groups, [FIRST, NEW_SLURM], FIRST.box)
    groups[1]["ImageReleaseVersion"] = FIRST.version  # slurmd 24.11 beside slurmctld 26.05: within the window
    check_pins(groups, [FIRST, NEW_SLURM], FIRST.box)


def test_update_software_refuses_a_slurm_change_the_rolling_order_cannot_make(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path)
        for bad in (NEW_SLURM, TOO_NEW):
            with pytest.raises(UsageError, match="slurmd|Slurm"):
                update_software(lab.st, "demo", ["compute"], release=bad.version, releases=[FIRST, NEW_SLURM, TOO_NEW],
                                keeps_state=lambda c, n: True)
        with pytest.raises(UsageError, match="skips more Slurm releases"):
            update_software(lab.st, "demo", ["controller"], release=TOO_NEW.version,
                            releases=[FIRST, NEW_SLURM, TOO_NEW], keeps_state=lambda c, n: True)
        with pytest.raises(UsageError, match="controller upgraded first"):
            update_software(lab.st, "demo", ["controller"], release=NEW_SLURM.version,
                            releases=[FIRST, NEW_SLURM, TOO_NEW], keeps_state=lambda c, n: True)
        assert lab.st.cluster("demo").status == "InService" and not lab.st.operations("demo", "InProgress")
        await lab.finish()

    asyncio.run(go())


def test_update_cluster_turns_auto_patching_on_and_says_so(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path)
        group = {"InstanceGroupName": "compute", "InstanceType": "ml.c5.large", "InstanceCount": 2,
                 "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["dev"]},
                 "AutoPatchConfig": {"PatchingStrategy": "WhenIdle"}}
        clusters.update(lab.st, "demo", {"ClusterName": "demo", "InstanceGroups": [group]})
        assert any("UpdateCluster: group compute AutoPatchConfig set (WhenIdle)" in t for t in _texts(lab))
        new = lab.prov.image_releases.publish()
        await lab.run_until(lambda: _op(lab) is not None and _op(lab).status != "InProgress", max_ticks=600)
        assert {_release(lab, C1), _release(lab, C2)} == {new.version}
        await lab.finish()

    asyncio.run(go())


def test_a_login_group_is_patched_as_it_runs_no_slurm_job(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path, text=spec_text().replace(
            "    SlurmConfig: {NodeType: Login}\n", "    SlurmConfig: {NodeType: Login}\n" + WHEN_IDLE))
        new = lab.prov.image_releases.publish()
        await lab.run_until(lambda: _op(lab) is not None and _op(lab).status != "InProgress", max_ticks=600)
        assert _op(lab).status == "Completed" and _release(lab, "demo-login-1") == new.version
        assert not [c for c in lab.conf.calls if c[0] == "cordon"]  # no Slurm node to drain
        assert _release(lab, C1) == FIRST.version
        await lab.finish()

    asyncio.run(go())


def test_a_killed_engine_resumes_the_auto_patch(lab_home, tmp_path):
    async def go():
        lab = await _ready(lab_home, tmp_path, WHEN_IDLE)
        new = _busy_then_new_release(lab)
        await lab.run_until(lambda: lab.node(C1).pending is not None)  # compute-1 on its way out of Slurm
        lab.kill()
        await lab.run_until(lambda: _patched(lab, C1, new.version), max_ticks=600)
        lab.kill()
        lab.conf.end_job(C2)
        await lab.run_until(lambda: _op(lab).status != "InProgress", max_ticks=600)
        assert _op(lab).status == "Completed" and _release(lab, C2) == new.version
        assert len([o for o in lab.st.operations("demo") if o.kind == "AutoPatch"]) == 1
        await lab.finish()

    asyncio.run(go())


def test_a_node_slurm_shows_drained_with_a_job_on_it_is_not_patched(lab_home, tmp_path):
    """A node state read while slurmctld restarts for a reconfigure once showed a busy node drained (CI):
    squeue's job records decide."""
    async def go():
        lab = await _ready(lab_home, tmp_path, WHEN_IDLE)
        _busy_then_new_release(lab)
        await lab.run_until(lambda: _op(lab) is not None and _op(lab).details.get("Cordoned"))
        lab.conf.broken[C2] = ("drained", "slurmlab: auto-patch")  # what the lying read said
        await lab.ticks(60)
        assert lab.node(C2).pending is None and _op(lab).details["Nodes"][C2] == "cordoned"
        assert lab.conf.jobs[C2] == 1
        await lab.finish()

    asyncio.run(go())
