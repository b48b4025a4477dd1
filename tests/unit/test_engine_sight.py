"""The engine when its provider cannot be asked (libvirtd stopped): it acts on nothing, backs off,
logs one line, records one event, marks the state stale in every view, and resumes on its own."""

from __future__ import annotations

import asyncio
import logging

from lab.control import clusters
from lab.providers.base import ProviderUnreachable
from tests.simlab import SimLab, spec_text

DOWN = "libvirt unreachable (qemu:///system): Failed to connect socket to '/var/run/libvirt/libvirt-sock'"


class Outage:
    """The sim provider's observe fails while `down` is set; counts the calls."""

    def __init__(self, lab: SimLab):
        self.real = lab.prov.observe_async
        self.down = False
        self.calls = 0
        lab.prov.observe_async = self.observe_async

    async def observe_async(self, cluster):
        self.calls += 1
        if self.down:
            raise ProviderUnreachable(DOWN)
        return await self.real(cluster)


def _events(lab, level=None):
    return [e for e in lab.st.events("demo") if level is None or e.level == level]


async def _ready(lab, computes=2):
    lab.create(spec_text(computes=computes))
    await lab.run_until(lambda: lab.full())
    await lab.tick()


async def _full_then_down(tmp_path) -> tuple[SimLab, Outage]:
    """A cluster at full size, then its provider unreachable."""
    lab = SimLab(tmp_path)
    await _ready(lab)
    out = Outage(lab)
    out.down = True
    return lab, out


def test_unreachable_provider_marks_stale_backs_off_and_resumes(tmp_path, caplog):
    async def go():
        lab = SimLab(tmp_path)
        await _ready(lab)
        out = Outage(lab)
        before = lab.phases()
        errors_before = len(_events(lab, "Error"))
        out.down = True
        clusters.add_nodes(lab.st, "demo", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}])
        t0, calls0 = lab.clock.t, out.calls
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="lab.engine"):
            while lab.clock.t < t0 + 60:
                await lab.tick()
        # backoff: 1, 2, 4, 8, 16, 30 s -> at most 7 asks in 60 s (a tick is 1 s: 60 without it)
        assert 1 <= out.calls - calls0 <= 7, out.calls - calls0
        # nothing acted on: no VM for the new node, every known node in its phase
        assert "demo-compute-3" not in lab.vms() and {k: v for k, v in lab.phases().items() if k in before} == before
        errors = _events(lab, "Error")[errors_before:]
        assert len(errors) == 1 and DOWN in errors[0].description and "Fix: slurmlab host up" in errors[0].description
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and not any(r.exc_info for r in caplog.records), [r.getMessage() for r in warnings]
        d = clusters.describe(lab.st, "demo")
        assert d["FailureMessage"].startswith("stale: the lab cannot observe") and DOWN in d["FailureMessage"]
        assert d["Lab"]["Stale"]["Reason"] == DOWN
        running = [n for n in clusters.list_nodes(lab.st, "demo") if n["InstanceStatus"]["Status"] == "Running"]
        assert running and all(n["InstanceStatus"]["Message"].startswith("stale: not observed since") for n in running)

        out.down = False
        await lab.run_until(lambda: lab.full())
        d = clusters.describe(lab.st, "demo")
        assert "FailureMessage" not in d and "Stale" not in d["Lab"]
        assert "demo-compute-3" in lab.vms()
        info = [e.description for e in _events(lab, "Info") if "observed again" in e.description]
        assert len(info) == 1
        assert all("stale" not in n["InstanceStatus"].get("Message", "") for n in clusters.list_nodes(lab.st, "demo"))

    asyncio.run(go())


def test_a_new_engine_keeps_the_stale_mark_without_a_second_event(tmp_path):
    async def go():
        lab, out = await _full_then_down(tmp_path)
        await lab.ticks(3)
        since = lab.st.cluster("demo").unobserved_since
        assert since is not None
        lab.kill()  # a new engine on the same store, the provider still down
        await lab.ticks(5)
        assert lab.st.cluster("demo").unobserved_since == since
        assert len([e for e in _events(lab, "Error") if "cannot observe" in e.description]) == 1
        out.down = False
        await lab.ticks(35)  # the backoff ends within 30 s
        assert lab.st.cluster("demo").unobserved_since is None

    asyncio.run(go())


def test_a_deleting_cluster_waits_for_the_provider_too(tmp_path):
    async def go():
        lab, out = await _full_then_down(tmp_path)
        clusters.delete(lab.st, "demo", start_engine=False)
        await lab.ticks(10)
        assert lab.st.cluster("demo") is not None and lab.vms()  # nothing removed blind
        assert lab.st.cluster("demo").unobserved_since is not None
        out.down = False
        await lab.run_until(lambda: lab.st.cluster("demo") is None)
        assert not lab.vms()

    asyncio.run(go())


def test_the_cli_shows_the_stale_mark_and_the_event(lab_home, tmp_path):
    import json

    from typer.testing import CliRunner

    from lab.cli import app
    from lab.engine import daemon
    from lab.engine.sight import Sight
    from lab.spec import loads_spec

    st = daemon.store()
    clusters.create(st, loads_spec(spec_text()), provider="sim", start_engine=False)
    Sight(st, lambda: 1000.0).lost(st.cluster("demo"), ProviderUnreachable(DOWN))
    text = CliRunner().invoke(app, ["describe-cluster", "demo"]).output
    assert "demo  Creating  STALE  (sim)" in text and "stale: the lab cannot observe this cluster's VMs since 1970-01-01T00:16:40" in text
    assert "failure:" not in text
    events = CliRunner().invoke(app, ["list-cluster-events", "demo", "--last", "1"]).output
    assert "Error" in events and DOWN in events and "Fix: slurmlab host up" in events
    data = json.loads(CliRunner().invoke(app, ["list-cluster-events", "demo", "-o", "json"]).output)
    assert [e["EventLevel"] for e in data["Events"]] == ["Info", "Error"]
