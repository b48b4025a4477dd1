"""The provider and configurer contract (lab/providers/base.py, lab/configure/base.py), the error
taxonomy (transient vs permanent launch failures) end to end through the engine, and the capacity
accounting and file."""

from __future__ import annotations

import ast
import asyncio
import inspect
from pathlib import Path

import pytest

from lab import capacity
from lab.configure.ansible import AnsibleConfigurer
from lab.configure.base import Configurer, ConfigureError
from lab.configure.runner import PlaybookFailed, PlaybookResult
from lab.configure.sim import SimConfigurer
from lab.engine.plan import NO_RETRY
from lab.providers import vagrant
from lab.providers import registry
from lab.providers.base import ENGINE_METHODS, Checkpoints, LaunchError, MachineSpec, Placement, Provider
from lab.providers.sim import SimProvider
from lab.providers.vagrant import VagrantProvider
from lab.spec.problems import SpecInvalid
from tests.fakes import FakeConfigurer, FakeProvider
from tests.simlab import SimLab, spec_text

LAB = Path(__file__).resolve().parents[2] / "lab"


# the optional interfaces each provider takes on (the engine detects them with isinstance)
INTERFACES = {SimProvider: {Checkpoints}, VagrantProvider: {Checkpoints, Placement}, FakeProvider: {Checkpoints}}


@pytest.mark.parametrize("cls", list(INTERFACES))
def test_every_provider_implements_the_core_and_the_interfaces_it_takes_on(cls):
    assert issubclass(cls, Provider) and not inspect.isabstract(cls)
    assert {i for i in (Checkpoints, Placement) if issubclass(cls, i)} == INTERFACES[cls]
    for iface in {Provider} | INTERFACES[cls]:
        for m in iface.__abstractmethods__:
            assert getattr(cls, m) is not getattr(iface, m), f"{cls.__name__} does not define {m}"
    for m in ENGINE_METHODS[1:]:
        assert inspect.iscoroutinefunction(getattr(cls, m)), m
    assert isinstance(cls.name, str) and cls.id_prefix.startswith("i-")
    assert cls is FakeProvider or registry.info(cls.name).name == cls.name  # the registry knows it


def _engine_provider_calls() -> set[str]:
    """The methods lab/engine calls on a provider object (`prov.m(...)`, `provider_for(c).m(...)`,
    or passed to in_thread as `prov.m`)."""
    called = set()
    for f in (LAB / "engine").glob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            v = node.value
            if (isinstance(v, ast.Name) and v.id == "prov") or (
                    isinstance(v, ast.Call) and isinstance(v.func, ast.Attribute) and v.func.attr == "provider_for"):
                called.add(node.attr)
    return called


def test_the_engine_calls_only_what_the_contract_has():
    """Every provider method the engine calls is in Provider or an optional interface: nothing a
    provider might lack (the engine never probes with getattr)."""
    contract = {m for i in (Provider, Checkpoints, Placement) for m in dir(i) if not m.startswith("_")}
    called = _engine_provider_calls()
    assert {"observe_async", "ensure_async", "place", "rehome", "checkpoint_async"} <= called  # the scan sees them
    assert called <= contract, called - contract


@pytest.mark.parametrize("cls", [SimConfigurer, AnsibleConfigurer, FakeConfigurer])
def test_every_configurer_implements_the_whole_contract(cls):
    assert issubclass(cls, Configurer) and not inspect.isabstract(cls)
    for m in ("configure_async", "join_async", "leave_async"):
        assert inspect.iscoroutinefunction(getattr(cls, m))


def test_sim_runs_on_the_loop_vagrant_in_threads():
    """The sim overrides every coroutine twin (no thread per simulated boot); Vagrant keeps the
    base's, which run its blocking methods in threads."""
    for m in ENGINE_METHODS[1:]:
        assert getattr(SimProvider, m) is not getattr(Provider, m), m
        assert getattr(VagrantProvider, m) is getattr(Provider, m), m


def test_no_getattr_or_hasattr_probing_in_the_engine_providers_or_configurers():
    for folder in ("engine", "providers", "configure"):
        for f in (LAB / folder).glob("*.py"):
            for node in ast.walk(ast.parse(f.read_text())):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                    assert node.func.id not in ("getattr", "hasattr"), f"{f.name}:{node.lineno}"


def test_playbook_failed_is_a_configure_error_with_its_failures():
    e = PlaybookFailed(PlaybookResult("nodes.yml", False, {}, {"demo-compute-1": "task 'x' failed: y"}))
    assert isinstance(e, ConfigureError) and e.failures == {"demo-compute-1": "task 'x' failed: y"}


@pytest.mark.parametrize("tail,transient", [
    ("The box 'slurmlab/debian13' could not be found or could not be accessed in the remote catalog.", False),
    ("There is a syntax error in the following Vagrantfile. The syntax error\nmessage is reproduced below", False),
    ("There are errors in the configuration of this machine. Please fix\nthe following errors", False),
    ("The provider 'libvirt' could not be found, but was requested to\nback the machine 'x'.", False),
    ("Call to virDomainCreateWithFlags failed: internal error: process exited while connecting to monitor", True),
    ("Error while activating network: Call to virNetworkCreate failed: Network is already in use", True),
    ("", True),
])
def test_vagrant_failures_are_classified(tail, transient):
    assert vagrant.is_transient(tail) is transient


# ---------------------------------------------------------------- transient vs permanent, end to end

class BrokenBoxSim(SimProvider):
    """A sim whose compute VMs cannot be created: the box is missing (permanent) or libvirt is busy
    for the first `busy` attempts (transient)."""

    def __init__(self, *a, permanent: bool, busy: int = 2, **kw):
        super().__init__(*a, **kw)
        self.permanent, self.busy, self.tries = permanent, busy, 0

    async def ensure_async(self, cluster: str, machine: MachineSpec):
        if "compute" in machine.name:
            self.tries += 1
            if self.permanent:
                raise LaunchError("vagrant up failed: the box 'x' could not be found", transient=False)
            if self.tries <= self.busy:
                raise LaunchError("vagrant up failed: libvirt busy")
        return await super().ensure_async(cluster, machine)


def _run(tmp_path, permanent: bool, mode: str = "Continuous"):
    async def go():
        lab = SimLab(tmp_path, provider=None)
        lab.prov = BrokenBoxSim(1.0, clock=lab.clock, sleep=lab.clock.sleep, permanent=permanent)
        lab.eng = lab.new_engine()
        lab.create(spec_text(computes=1, mode=mode))
        if permanent and mode == "Continuous":
            await lab.run_until(lambda: lab.st.cluster("demo").status == "InService"
                                and lab.node("demo-compute-1").phase == "failed")
            await lab.ticks(200)  # a long time: no retry storm
        elif permanent:
            await lab.run_until(lambda: lab.st.cluster("demo").status == "Failed")
        else:
            await lab.run_until(lambda: lab.full())
        await lab.finish()
        return lab

    return asyncio.run(go())


def test_a_permanent_launch_failure_is_failure_with_its_reason_and_no_retries(tmp_path):
    lab = _run(tmp_path, permanent=True)
    n = lab.node("demo-compute-1")
    assert lab.prov.tries == 1 and n.phase == "failed" and n.retry_at == NO_RETRY
    assert "could not be found" in n.message and "permanent" in n.message
    assert lab.st.groups("demo")[-1].status == "Degraded"
    assert any("permanent failure, not retried" in e.description for e in lab.st.events("demo", limit=1000))


def test_a_permanent_launch_failure_in_legacy_mode_rolls_back_at_once(tmp_path):
    lab = _run(tmp_path, permanent=True, mode=None)
    assert lab.prov.tries == 1 and lab.st.cluster("demo").status == "Failed"


def test_a_transient_launch_failure_backs_off_and_recovers(tmp_path):
    lab = _run(tmp_path, permanent=False)
    assert lab.prov.tries == 3 and lab.node("demo-compute-1").phase == "running"
    retries = [e.description for e in lab.st.events("demo", limit=1000) if "libvirt busy" in e.description]
    assert len(retries) == 2 and all("retry" in r for r in retries)


def test_a_permanent_failure_is_replaced_on_request(tmp_path):
    async def go():
        prov, conf = FakeProvider(), FakeConfigurer()
        lab = SimLab(tmp_path, provider=prov)
        lab.conf = conf
        lab.eng = lab.new_engine()
        prov.fail_for_good["demo-compute-1"] = "the box is missing"
        lab.create(spec_text(computes=1, logins=0))
        await lab.run_until(lambda: getattr(lab.node("demo-compute-1"), "phase", None) == "failed")
        await lab.ticks(30)
        assert prov.launched.count("demo-compute-1") == 1
        prov.fail_for_good.clear()
        lab.st.update_node("demo", "demo-compute-1", pending="replace")
        await lab.run_until(lambda: lab.full())
        await lab.finish()

    asyncio.run(go())


# ---------------------------------------------------------------- capacity: one "in use", the file

def test_in_use_counts_holding_phases_and_failed_nodes_with_a_vm(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=2))
        await lab.run_until(lambda: lab.full())
        assert capacity.used(lab.st)["ml.c5.large"] == 2
        lab.st.update_node("demo", "demo-compute-1", phase="failed")  # booted, VM kept: still held
        lab.st.update_node("demo", "demo-compute-2", phase="failed", booted_at=None)  # no VM: free
        assert capacity.used(lab.st)["ml.c5.large"] == 1
        assert capacity.state(lab.st)["Capacity"][0] == {"InstanceType": "ml.c5.large", "Available": None, "InUse": 1}
        await lab.finish()

    asyncio.run(go())


def test_capacity_does_not_import_the_engine():
    tree = ast.parse((LAB / "capacity.py").read_text())
    mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m and m.startswith("lab.engine") for m in mods)


def test_capacity_file_reports_every_problem_with_its_line():
    text = ("instance_types:\n  ml.c5.large:\n    available: -1\n    arrivals:\n"
            "      - {after_seconds: x, count: 0}\n      - {count: 1, z: 2}\n  ml.bogus: {available: 1}\n"
            "  ml.t3.medium: 4\nfaults: 3\n")
    with pytest.raises(SpecInvalid) as e:
        capacity.parse(text, "cap.yaml")
    got = str(e.value)
    for line in ("cap.yaml:3: instance_types.ml.c5.large.available: must be a whole number >= 0, not -1",
                 "cap.yaml:5: instance_types.ml.c5.large.arrivals[0].after_seconds: must be a number of seconds >= 0",
                 "cap.yaml:5: instance_types.ml.c5.large.arrivals[0].count: must be a whole number >= 1, not 0",
                 "cap.yaml:6: instance_types.ml.c5.large.arrivals[1]: an arrival is {after_seconds: N, count: M}",
                 "cap.yaml:7: instance_types.ml.bogus: 'ml.bogus' is not a HyperPod instance type",
                 "cap.yaml:8: instance_types.ml.t3.medium: must be a mapping with available and/or arrivals",
                 "cap.yaml:9: faults: must be a mapping: {seed: N, launch_failure_rate: R, health_check_failure_rate: R, "
                 "extension_unhealthy_rate: R}"):
        assert line in got, got
    assert "8 problems" in got or "7 problems" in got


@pytest.mark.parametrize("text,available,faults", [
    ("", {}, None),
    ("faults:\n", {}, capacity.Faults()),
    ("instance_types:\n  ml.c5.large: {available: 0}\n", {"ml.c5.large": 0}, None),
    ("instance_types:\n  ml.c5.large: {arrivals: [{count: 2}]}\n", {}, None),
])
def test_capacity_file_shapes(text, available, faults):
    cap = capacity.parse(text)
    assert cap.available == available and cap.faults == faults


def test_a_queued_blocking_call_cancelled_before_it_starts_is_not_counted(monkeypatch):
    """A delete waits for the threads of a cluster: a call that was still waiting for a free
    worker when its awaiter was cancelled never runs and must not be waited for; a running one
    stays counted until it ends."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from lab.providers import base

    pool = ThreadPoolExecutor(max_workers=1)
    monkeypatch.setattr(base, "_pool", pool)
    release, started, ran = threading.Event(), threading.Event(), []

    def blocking():
        started.set()
        release.wait(10)

    async def scenario():
        running = asyncio.create_task(base.in_thread("c", blocking))
        queued = asyncio.create_task(base.in_thread("c", lambda: ran.append(1)))
        await asyncio.to_thread(started.wait, 10)
        assert base.threads_running("c") == 2
        queued.cancel()
        running.cancel()
        for t in (queued, running):
            with pytest.raises(asyncio.CancelledError):
                await t
        counted_while_running = base.threads_running("c")
        release.set()
        await asyncio.to_thread(pool.shutdown, True)
        return counted_while_running

    assert asyncio.run(scenario()) == 1
    assert base.threads_running("c") == 0 and ran == []
