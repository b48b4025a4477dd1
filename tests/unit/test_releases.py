"""Image releases (lab/box/releases.py), HyperPod's cron() schedules (lab/cron.py) and the spec rules of
the maintenance fields (lab/spec/rules/maintenance.py): issue 32."""

from __future__ import annotations

import calendar
import json

import pytest

from lab import cron
from lab.box import recipe as rc
from lab.box import releases as rel
from lab.spec import spec_from_request
from lab.spec.problems import SpecInvalid


def _t(*ymdhm) -> float:
    return float(calendar.timegm((*ymdhm, 0)))


# ---------------------------------------------------------------- cron
@pytest.mark.parametrize("expr, after, want", [
    ("cron(0 3 ? * SUN *)", _t(2026, 12, 5, 15, 0), _t(2026, 12, 6, 3, 0)),  # a Saturday -> Sunday 03:00
    ("cron(30 1 15 * ? *)", _t(2026, 12, 15, 1, 30), _t(2027, 1, 15, 1, 30)),  # strictly after
    ("cron(0 3 ? * 5L *)", _t(2026, 12, 1, 0, 0), _t(2026, 12, 31, 3, 0)),  # the last Thursday
    ("cron(0 3 ? * 3#2 *)", _t(2026, 12, 1, 0, 0), _t(2026, 12, 8, 3, 0)),  # the second Tuesday
    ("cron(0 3 ? * L *)", _t(2026, 12, 5, 15, 0), _t(2026, 12, 12, 3, 0)),  # the last day of the week: Saturday
    ("cron(0 3 1 */3 ? *)", _t(2026, 2, 1, 0, 0), _t(2026, 4, 1, 3, 0)),  # every third month from January
    ("cron(0 3 1 * ? 2027)", _t(2026, 12, 5, 0, 0), _t(2027, 1, 1, 3, 0)),
])
def test_cron_next_firing(expr, after, want):
    assert cron.parse(expr).next_after(after) == want


def test_a_schedule_of_a_past_year_never_fires():
    assert cron.parse("cron(0 3 1 * ? 2025)").next_after(_t(2026, 1, 1, 0, 0)) is None


@pytest.mark.parametrize("expr, says", [
    ("rate(1 day)", "cron() expressions only"),
    ("cron(0 3 * * ? *)", "not a schedule HyperPod accepts"),  # * is no day of the month
    ("cron(0 3 ? * ? *)", "either a day of the month or a day of the week"),
    ("cron(0 3 1 * MON *)", "either a day of the month or a day of the week"),
    ("cron(0 25 ? * MON *)", "not a schedule HyperPod accepts"),
    ("cron(0 3 ? * MON)", "has 5 field(s)"),
    ("0 3 * * 1", "is not cron("),
    ("", "empty"),
])
def test_bad_schedules_say_what_is_wrong(expr, says):
    with pytest.raises(cron.CronError, match=None) as e:
        cron.parse(expr)
    assert says in str(e.value)


# ---------------------------------------------------------------- versions and statuses
def test_next_version_counts_the_lines_releases_of_the_month():
    now = _t(2026, 12, 5, 12, 0)
    assert rel.next_version([], now) == "2026.12.1"
    assert rel.next_version(["2026.11.4", "2026.12.1"], now) == "2026.12.2"
    assert rel.next_version(["2027.1.1"], now) == "2027.1.2"  # a clock set back: still the newest


R = rel.Release
A = R("2026.12.1", "trixie-slurm", "b/a", "h1", "24.11.5")
B = R("2026.12.2", "trixie-slurm", "b/b", "h2", "24.11.5")
SEC = R("2026.12.3", "trixie-slurm", "b/c", "h3", "24.11.5", security=True)
GONE = R("2026.11.1", "trixie-slurm", "b/old", "h0", "24.11.5", available=False)
FORKY = R("2026.12.1", "forky-slurm", "b/f", "hf", "26.05.5")


def test_status_of_a_node_by_its_release():
    assert rel.status([A], A) == "UpToDate"
    assert rel.status([A, B], A) == "UpdateAvailable"
    assert rel.status([A, B, SEC], A) == "SecurityUpdateRequired"
    assert rel.status([A, B, SEC], SEC) == "UpToDate"
    assert rel.status([GONE, FORKY], GONE) == "EndOfLife"  # gone, and its line has nothing newer
    assert rel.status([GONE, A], GONE) == "UpdateAvailable"
    assert rel.status([A, FORKY], A) == "UpToDate"  # another line is no update
    assert rel.status([A], None) is None
    assert rel.worst(["UpToDate", "SecurityUpdateRequired", None, "UpdateAvailable"]) == "SecurityUpdateRequired"
    assert rel.newest([A, B, GONE, FORKY], "trixie-slurm") == B


@pytest.mark.parametrize("a, b, why", [
    ("24.11.5", "24.11.6", None),
    ("24.11.5", "26.05.5", None),  # three releases on: allowed since 24.11
    ("24.05.1", "25.11.2", None),  # 25.11's slurmdbd takes 25.05, 24.11 and 24.05 (Slurm's upgrade guide)
    ("24.05.1", "26.05.2", "skips more Slurm releases"),
    ("22.05.9", "23.11.1", None),  # the 9-month cycle: 23.02 between them
    ("22.05.9", "24.05.1", "skips more"),  # before 24.11: two releases only
    ("23.02.1", "25.05.1", "skips more"),
    ("26.05.5", "24.11.5", "does not downgrade"),
])
def test_slurm_upgrade_window(a, b, why):
    got = rel.slurm_step(a, b)
    assert (got is None) if why is None else (why in got), got


def test_a_slurmd_never_newer_than_slurmctld():
    assert "newer than the controller" in rel.beside_controller("26.05.5", "24.11.5")
    assert rel.beside_controller("24.11.5", "26.05.5") is None


# ---------------------------------------------------------------- the registry
def _vagrant_box(home, name: str, marker: dict) -> None:
    d = home / "boxes" / name.replace("/", "-VAGRANTSLASH-") / "0" / "libvirt"
    d.mkdir(parents=True)
    (d / "metadata.json").write_text("{}")
    (d / "box.img").write_bytes(b"x")
    (d / "slurmlab.json").write_text(json.dumps(marker))


def test_boxes_become_releases_once_and_stay_known(tmp_path, monkeypatch):
    monkeypatch.setenv("VAGRANT_HOME", str(tmp_path / "vagrant"))
    monkeypatch.setenv("SLURMLAB_CACHE", str(tmp_path / "cache"))
    m = {"inputs_hash": "h1", "debian_suite": "trixie", "slurm_version": "24.11.5", "built_at": "2026-12-01T00:00:00Z"}
    _vagrant_box(tmp_path / "vagrant", "slurmlab/trixie-slurm", m)
    first = rel.catalog()
    assert [(r.box, r.line, r.available) for r in first] == [("slurmlab/trixie-slurm", "trixie-slurm", True)]
    tagged = rel.register("slurmlab/trixie-slurm-next", m, security=True)
    assert rel.version_key(tagged.version) > rel.version_key(first[0].version) and tagged.security
    assert rel.register("slurmlab/trixie-slurm-next", m).version == tagged.version  # once
    forky = rel.register("slurmlab/forky-slurm", {**m, "inputs_hash": "hf", "debian_suite": "forky"})
    assert forky.line == "forky-slurm" and forky.version not in (first[0].version, tagged.version)  # one per lab
    again = [r for r in rel.catalog() if r.line == "trixie-slurm"]
    assert [r.version for r in again] == [first[0].version, tagged.version]
    assert [r.available for r in again] == [True, False]  # the tag's box is not in this Vagrant


def test_a_box_line_keeps_the_trixie_hash_and_forky_differs():
    trixie, forky = rc.default_recipe(), rc.default_recipe("forky")
    assert rc.inputs_hash(trixie, "s") == rc.inputs_hash(rc.Recipe(), "s")  # apt_options empty: the old hash
    assert rc.inputs_hash(forky, "s") != rc.inputs_hash(trixie, "s")
    assert (forky.slurm_series, rc.box_name("forky"), rc.box_filename("forky")) == (
        "26.05", "slurmlab/forky-slurm", "slurmlab-forky-slurm.box")
    assert "initramfs-tools" in forky.packages and forky.wheels == ("batchspawner==1.3.0",)
    from lab.errors import UsageError

    with pytest.raises(UsageError, match="trixie, forky"):
        rc.default_recipe("bookworm")


# ---------------------------------------------------------------- the spec rules
def _body(**group) -> dict:
    return {"ClusterName": "c", "NodeProvisioningMode": "Continuous", "InstanceGroups": [
        {"InstanceGroupName": "ctl", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "w", "InstanceType": "ml.c5.large", "InstanceCount": 2,
         "SlurmConfig": {"NodeType": "Compute"}, **group}]}


@pytest.mark.parametrize("group, where, says", [
    ({"ScheduledUpdateConfig": {"ScheduleExpression": "rate(7 days)"}}, "ScheduleExpression", "not rate()"),
    ({"ScheduledUpdateConfig": {"ScheduleExpression": "cron(0 3 1 * ? 2020)"}}, "ScheduleExpression", "never fires"),
    ({"AutoPatchConfig": {"PatchingStrategy": "WhenIdle", "IdleWaitWindowInSeconds": 60}}, "IdleWaitWindowInSeconds",
     "below the minimum 3600"),
    ({"AutoPatchConfig": {"PatchingStrategy": "WhenIdle", "DrainPolicy": {"OnDrainTimeout": "Force"}}}, "DrainPolicy",
     "DrainFirst only"),
    ({"AutoPatchConfig": {"PatchingStrategy": "DrainFirst"}}, "DeploymentConfig", "needs"),
    ({"AutoPatchConfig": {"PatchingStrategy": "DrainFirst", "IdleWaitWindowInSeconds": 3600,
                          "DeploymentConfig": {"RollingUpdatePolicy": {"MaximumBatchSize": {
                              "Type": "INSTANCE_COUNT", "Value": 1}}}}}, "IdleWaitWindowInSeconds", "WhenIdle and WhenAllIdle"),
    ({"ImageReleaseVersion": "latest"}, "ImageReleaseVersion", "pattern"),
])
def test_maintenance_fields_are_checked(group, where, says):
    with pytest.raises(SpecInvalid) as e:
        spec_from_request(_body(**group))
    hits = [p for p in e.value.problems if where in p.loc]
    assert hits and says in hits[0].what, e.value.problems


def test_the_controller_group_takes_no_automatic_maintenance():
    body = _body()
    body["InstanceGroups"][0]["AutoPatchConfig"] = {"PatchingStrategy": "WhenIdle"}
    with pytest.raises(SpecInvalid) as e:
        spec_from_request(body)
    assert any("UpdateClusterSoftware only" in p.what for p in e.value.problems)


def test_good_maintenance_fields_pass():
    spec_from_request(_body(ScheduledUpdateConfig={"ScheduleExpression": "cron(0 3 ? * SUN *)"},
                            AutoPatchConfig={"PatchingStrategy": "WhenAllIdle", "IdleWaitWindowInSeconds": 7200}))
