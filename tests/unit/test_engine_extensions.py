"""Cluster extensions on the engine (sim provider, virtual time): Creating -> Active on every running
node, NodeSummary's counts, a node added later gets it, a seeded fault makes it Degraded naming the
node and it recovers by itself, an Update applies again, a Delete removes it from every node and then
it is not found; a failed apply and a refused request (nothing changed)."""

from __future__ import annotations

import asyncio

import pytest

from lab import capacity
from lab.control import clusters, extensions
from lab.errors import Conflict, NotFound, UsageError
from lab.spec.problems import SpecInvalid
from tests.simlab import SimLab, spec_text

OBS = "sagemaker-observability"
FAST = '{"scrapeIntervalSeconds": 10}'


async def _ready(lab, **kw):
    lab.create(spec_text(**kw))
    await lab.run_until(lambda: lab.full())
    await lab.tick()


def _ext(lab):
    return lab.st.extension("demo", OBS)


def _describe(lab):
    return extensions.describe(lab.st, "demo", OBS)


def _events(lab):
    return [e["Description"] for e in clusters.list_events(lab.st, "demo")]


def test_an_extension_goes_active_on_every_node_and_on_a_node_added_later(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=2)
        row = extensions.create(lab.st, "demo", OBS, configuration=FAST)
        assert _describe(lab)["ExtensionDetails"]["Status"] == "Creating"
        assert _describe(lab)["NodeSummary"] == {"TotalCount": 4, "ActiveCount": 0}
        await lab.run_until(lambda: _ext(lab).status == "Active")
        every = {"demo-controller-1", "demo-login-1", "demo-compute-1", "demo-compute-2"}
        assert lab.conf.extension_nodes[OBS] == every and set(_ext(lab).installed) == every
        d = _describe(lab)
        assert d["NodeSummary"] == {"TotalCount": 4, "ActiveCount": 4} and "Health" not in d
        assert d["ExtensionDetails"]["ExtensionArn"] == row.arn and d["ExtensionDetails"]["ExtensionVersion"] == "1.1.0"
        assert any(f"extension {OBS} 1.1.0 is Active" in e for e in _events(lab))
        # probes keep samples of plausible, simulated numbers
        await lab.run_until(lambda: len(lab.st.extension_samples("demo")) >= 2)
        s = lab.st.extension_samples("demo")[-1]
        assert s["simulated"] is True and set(s["nodes"]) == every and s["slurm"]["cpus"]["total"] > 0
        assert sum(s["slurm"]["nodes"].values()) == 2 and "users" not in s["slurm"]  # BASIC: no per-user numbers
        # a node added later gets it; TotalCount counts it
        clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}])
        await lab.run_until(lambda: "demo-compute-3" in _ext(lab).installed)
        assert "demo-compute-3" in lab.conf.extension_nodes[OBS]
        assert _describe(lab)["NodeSummary"] == {"TotalCount": 5, "ActiveCount": 5}
        assert any(e.startswith(f"extension {OBS} 1.1.0 installed on demo-compute-3") for e in _events(lab))
        await lab.finish()

    asyncio.run(go())


def test_unhealthy_members_make_it_degraded_naming_them_and_it_recovers(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        extensions.create(lab.st, "demo", OBS, configuration=FAST)
        await lab.run_until(lambda: _ext(lab).status == "Active")
        capacity.apply(lab.st, capacity.parse("faults: {seed: 3, extension_unhealthy_rate: 1}"))
        await lab.run_until(lambda: _ext(lab).status == "Degraded")
        d = _describe(lab)
        [issue] = d["Health"]["Issues"]
        assert issue["Code"] == "ExtensionUnhealthy" and issue["NodeCount"] == 3
        assert "demo-compute-1" in issue["Message"] and "demo-controller-1" in issue["Message"]
        assert "simulated" in issue["Message"]
        assert d["NodeSummary"] == {"TotalCount": 3, "ActiveCount": 0}
        assert lab.st.extension_samples("demo")[-1]["nodes"]["demo-compute-1"] == {"up": False}
        assert any(e.startswith(f"extension {OBS} is Degraded: the extension does not answer on") for e in _events(lab))
        capacity.apply(lab.st, capacity.parse("faults: {seed: 3}"))
        await lab.run_until(lambda: _ext(lab).status == "Active")
        d = _describe(lab)
        assert "Health" not in d and d["NodeSummary"]["ActiveCount"] == 3
        assert any("is Active again: every node answers" in e for e in _events(lab))
        await lab.finish()

    asyncio.run(go())


def test_an_update_applies_again_and_a_delete_removes_it_everywhere(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        extensions.create(lab.st, "demo", OBS, version="1.0.0", configuration=FAST)
        await lab.run_until(lambda: _ext(lab).status == "Active")
        applies = sum(1 for c in lab.conf.calls if c[0] == "extension_apply")
        extensions.update(lab.st, "demo", OBS, version="1.1.0",
                          configuration='{"metricsProvider": {"slurmMetrics": {"level": "ADVANCED"}}}')
        assert _ext(lab).status == "Updating"
        await lab.run_until(lambda: _ext(lab).status == "Active")
        last = [c for c in lab.conf.calls if c[0] == "extension_apply"][applies:]
        assert last[0][2] == "1.1.0" and len(last[0][3]) == 3  # every running node again, the new version
        await lab.run_until(lambda: "users" in (lab.st.extension_samples("demo") or [{}])[-1].get("slurm", {}))
        values = _describe(lab)["ExtensionDetails"]["ConfigurationValues"]
        assert '"slurmMetrics":{"level":"ADVANCED"}' in values and '"scrapeIntervalSeconds":10' in values
        arn = _ext(lab).arn
        extensions.delete(lab.st, "demo", arn)
        assert _ext(lab).status == "Deleting"
        with pytest.raises(Conflict):
            extensions.update(lab.st, "demo", arn, configuration='{"scrapeIntervalSeconds": 20}')
        with pytest.raises(Conflict):
            extensions.delete(lab.st, "demo", arn)
        await lab.run_until(lambda: _ext(lab) is None)
        assert lab.conf.extension_nodes[OBS] == set()
        with pytest.raises(NotFound):
            extensions.describe(lab.st, "demo", arn)
        assert any(e.startswith(f"extension {OBS} removed from every node") for e in _events(lab))
        await lab.finish()

    asyncio.run(go())


def test_an_apply_that_fails_on_some_nodes_is_degraded_and_retried(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        lab.conf.extension_failures["demo-compute-1"] = "disk full"
        extensions.create(lab.st, "demo", OBS, configuration=FAST)
        await lab.run_until(lambda: _ext(lab).status != "Creating")
        e = _ext(lab)
        assert e.status == "Degraded" and e.failed == {"demo-compute-1": "disk full"}
        assert [i["Code"] for i in e.issues] == ["InternalFailure"] and "demo-compute-1" in e.issues[0]["Message"]
        lab.conf.extension_failures.clear()
        await lab.run_until(lambda: _ext(lab).status == "Active")  # retried at the next scrape interval
        assert "demo-compute-1" in _ext(lab).installed
        await lab.finish()

    asyncio.run(go())


def test_an_apply_that_fails_everywhere_is_create_failed(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1, logins=0)
        lab.conf.extension_failures.update({"demo-controller-1": "no", "demo-compute-1": "no"})
        extensions.create(lab.st, "demo", OBS)
        await lab.run_until(lambda: _ext(lab).status != "Creating")
        assert _ext(lab).status == "CreateFailed" and "demo-compute-1: no" in _ext(lab).message
        await lab.ticks(3)
        assert _ext(lab).status == "CreateFailed"  # until a request says otherwise
        await lab.finish()

    asyncio.run(go())


def test_refused_requests_change_nothing(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1, mode=None)  # legacy mode
        lab.create(spec_text("cont", computes=1))
        before = (lab.st.extensions(), len(lab.st.events("demo")), len(lab.st.events("cont")))
        with pytest.raises(UsageError, match="legacy mode"):
            extensions.create(lab.st, "demo", OBS)
        with pytest.raises(UsageError, match="ListClusterExtensionVersions"):
            extensions.create(lab.st, "cont", "sagemaker-observabilty")
        with pytest.raises(UsageError, match="no version '9.9.9'"):
            extensions.create(lab.st, "cont", OBS, version="9.9.9")
        with pytest.raises(SpecInvalid, match="levl: unknown setting; did you mean 'level'"):
            extensions.create(lab.st, "cont", OBS, configuration='{"metricsProvider":{"nodeMetrics":{"levl":"BASIC"}}}')
        with pytest.raises(SpecInvalid, match="ADVANCED needs version 1.1.0"):
            extensions.create(lab.st, "cont", OBS, version="1.0.0",
                              configuration='{"metricsProvider":{"slurmMetrics":{"level":"ADVANCED"}}}')
        with pytest.raises(NotFound):
            extensions.create(lab.st, "ghost", OBS)
        assert (lab.st.extensions(), len(lab.st.events("demo")), len(lab.st.events("cont"))) == before
        extensions.create(lab.st, "cont", OBS, version="1.1.0")
        with pytest.raises(extensions.NameTaken):
            extensions.create(lab.st, "cont", OBS)
        with pytest.raises(UsageError, match="older than the installed 1.1.0"):
            extensions.update(lab.st, "cont", OBS, version="1.0.0")
        assert [(e.version, e.status) for e in lab.st.extensions("cont")] == [("1.1.0", "Creating")]
        clusters.delete(lab.st, "cont", start_engine=False)
        with pytest.raises(UsageError, match="Deleting"):
            extensions.create(lab.st, "cont", "other")
        with pytest.raises(Conflict, match="Deleting"):
            extensions.update(lab.st, "cont", OBS, configuration='{"scrapeIntervalSeconds": 30}')
        await lab.run_until(lambda: lab.st.cluster("cont") is None)
        assert lab.st.extensions("cont") == []  # the cluster's rows went with it
        await lab.finish()

    asyncio.run(go())


def test_simulated_cpus_are_slurms_two_per_vcpu_and_running_jobs_hold_them():
    """A 1-vCPU VM is a 2-CPU node in Slurm (docs/adr/0031): the simulated sample counts Slurm's CPUs,
    a mixed node holds one of them, an allocated one both, and a sample with running jobs never shows
    0 CPUs allocated."""
    from types import SimpleNamespace as NS

    from lab.configure import simmetrics
    from lab.configure.base import Extension

    groups = [NS(name="compute", node_type="Compute", cpus=1, memory_mib=768, partitions=["dev"])]
    nodes = [NS(name=f"c-compute-{i}", grp="compute") for i in range(1, 4)]
    ext = Extension("sagemaker-observability", "1.1.0", {}, tuple(n.name for n in nodes), "c-controller-1")
    seen, mixed = set(), 0
    for probe in range(40):
        s = simmetrics.sample("c", groups, nodes, ext, {}, {n.name for n in nodes}, {}, 0.0, probe)["slurm"]
        assert s["cpus"]["total"] == 6, s
        assert s["cpus"]["allocated"] == 2 * s["nodes"]["allocated"] + s["nodes"]["mixed"], s
        mixed += s["nodes"]["mixed"]
        seen.add(s["jobs"]["running"] > 0)
    assert seen == {True, False} and mixed > 0


def test_a_node_is_judged_two_scrapes_after_its_install(tmp_path):
    """The controller's collector may scrape a node before the exporter installed in the same run
    listens: a node that does not answer right after its install leaves the extension Active until
    two scrape intervals have passed, then makes it Degraded."""
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab, computes=1)
        capacity.apply(lab.st, capacity.parse("faults: {seed: 3, extension_unhealthy_rate: 1}"))
        extensions.create(lab.st, "demo", OBS, configuration=FAST)
        await lab.run_until(lambda: _ext(lab).status != "Creating")
        installed = lab.clock()
        assert _ext(lab).status == "Active"
        await lab.run_until(lambda: _ext(lab).status == "Degraded")
        assert lab.clock() - installed >= 2 * 10
        assert len(lab.st.extension_samples("demo")) >= 1  # probed meanwhile, not judged
        await lab.finish()

    asyncio.run(go())
