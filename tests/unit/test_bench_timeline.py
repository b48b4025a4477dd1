"""bench/cluster_timeline.py's pure parts: phases from store rows and Ansible events, how each VM
came up (warm or cold), the scale-out batch, ratios, the note, the PNG.

No VMs: the store is a tmp SQLite file written through the store API, Ansible events are written
by hand in ansible-runner's shape, and sim-provider runs check that the engine writes the events
the phases and the starts are read from (a sim provider that answers like a fork where the spec's
Lab.Start is Warm).
"""

from __future__ import annotations

import asyncio
import struct
import types

import pytest

from bench import cluster_timeline as ct
from bench import phases as ph
from bench import timeline_png
from lab.providers.base import Observed, Start
from lab.providers.sim import SimProvider
from lab.store import db
from lab.store.db import ClusterRow, GroupRow, NodeRow, Store
from tests.simlab import SimLab, spec_text

T0 = 1_700_000_000.0


def _group(name, node_type):
    return GroupRow(cluster="c", name=name, instance_type="ml.t3.medium", node_type=node_type, target_count=1,
                    partitions=["dev"] if node_type == "Compute" else [], cpus=1, memory_mib=768, status="InService")


def _store(tmp_path):
    st = Store(tmp_path / "state.db")
    st.add_cluster(ClusterRow(name="c", arn="arn", status="InService", failure_message=None, spec={},
                              provider="vagrant", net_index=1, created_at=T0, in_service_at=T0 + 300,
                              full_size_at=T0 + 450),
                   [_group("controller", "Controller"), _group("login", "Login"), _group("compute", "Compute")])
    rows = [  # name, group, launched, booted, joined (seconds after create)
        ("c-controller-1", "controller", 2, 45, 140),
        ("c-login-1", "login", 141, 220, 300),
        ("c-compute-1", "compute", 141, 215, 400),
        ("c-compute-2", "compute", 141, 230, 450),
    ]
    for i, (name, grp, launched, booted, joined) in enumerate(rows):
        st.add_node(NodeRow(cluster="c", name=name, grp=grp, ordinal=1, instance_id=f"i-{i}", address=f"10.0.0.{i}",
                            mac="m", phase="running", launched_at=T0 + launched, booted_at=T0 + booted,
                            joined_at=T0 + joined))
        st.add_event("c", "Instance", "Info", f"node {name} planned (10.0.0.{i})", grp=grp, node=name, when=T0 + 1)
    ev = lambda when, node, text, grp=None: st.add_event("c", "Instance", "Info", text, grp=grp, node=node,  # noqa: E731
                                                         when=T0 + when)
    ev(140.2, "c-controller-1", "c-controller-1: controller ready")  # written just after joined_at
    ev(300.02, "c-login-1", "c-login-1: login ready")
    ev(260, "c-compute-1", "c-compute-1: configure failed: boom (retry 1 in 9 s)")
    ev(330, "c-compute-1", "c-compute-1: compute configured, waiting to join Slurm")
    ev(420, "c-compute-2", "c-compute-2: compute configured, waiting to join Slurm")
    ev(400, None, "1 node(s) joined Slurm with one reconfigure: c-compute-1", grp="compute")
    ev(450, None, "1 node(s) joined Slurm with one reconfigure: c-compute-2", grp="compute")
    ev(999, "c-compute-2", "c-compute-2: compute configured, waiting to join Slurm")  # a later reconfigure
    return st


def test_continuous_phases_from_store_rows_and_events(tmp_path):
    st = _store(tmp_path)
    c, groups, nodes = st.snapshot("c")
    events = st.events("c")
    got = ph.continuous_phases(c, groups, nodes, events)
    assert got["c-controller-1"] == {"launch": [1.0, 2.0], "boot": [2.0, 45.0], "configure": [45.0, 140.2]}
    assert got["c-login-1"] == {"launch": [1.0, 141.0], "boot": [141.0, 220.0], "configure": [220.0, 300.0]}
    # the configure that led to the join, not the failed try nor a later one
    assert got["c-compute-1"] == {"launch": [1.0, 141.0], "boot": [141.0, 215.0], "configure": [215.0, 330.0],
                                  "join": [330.0, 400.0]}
    assert got["c-compute-2"]["configure"] == [230.0, 420.0] and got["c-compute-2"]["join"] == [420.0, 450.0]
    assert ph.reconfigures(events) == 2
    types = ph.node_types(groups, nodes)
    assert types == {"c-compute-1": "Compute", "c-compute-2": "Compute", "c-controller-1": "Controller",
                     "c-login-1": "Login"}
    assert ph.one_vm_boot({"c-controller-1": 43.0, "c-compute-1": 74.0}, types) == 43.0


def test_continuous_phases_without_the_configured_event_fall_back(tmp_path):
    st = _store(tmp_path)
    c, groups, nodes = st.snapshot("c")
    events = [e for e in st.events("c") if "compute configured" not in e.description]
    got = ph.continuous_phases(c, groups, nodes, events)
    assert got["c-compute-1"]["configure"] == [215.0, 400.0] and "join" not in got["c-compute-1"]


def test_engine_writes_the_events_the_phases_read(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.create(spec_text(computes=3))
        await lab.run_until(lambda: lab.full())
        await lab.finish()
        return lab.st.events("demo"), lab.st.nodes("demo")

    events, nodes = asyncio.run(go())
    names = {n.name for n in nodes}
    assert set(ph.planned_times(events)) == names
    ready = {e.node for e in events if e.node and e.description.startswith(f"{e.node}: ")
             and e.description.endswith(ph.READY_SUFFIXES)}
    assert ready == names
    assert 1 <= ph.reconfigures(events) <= 3


def _ans(t, event, host=None, play="Configure login and compute nodes", task="x", changed=False):
    return {"t": T0 + t, "event": event, "host": host, "play": play, "task": task, "changed": changed}


JOIN_PLAYS = {"Add the new nodes to slurm.conf", "Start slurmd on the joining compute nodes"}


def test_naive_phases_from_libvirt_ssh_and_ansible_events():
    types = {"n-controller-1": "Controller", "n-compute-1": "Compute", "n-compute-2": "Compute"}
    defined = {"n-controller-1": T0 + 10, "n-compute-1": T0 + 12}  # n-compute-2's definition was not seen
    ssh = {"n-controller-1": T0 + 90, "n-compute-1": T0 + 95, "n-compute-2": T0 + 99}
    events = [
        _ans(100, "runner_on_start", "n-controller-1", play="Configure the Slurm controller"),
        _ans(150, "runner_on_ok", "n-controller-1", play="Configure the Slurm controller"),
        _ans(155, "runner_on_skipped", "n-controller-1", play="Run the OnCreate lifecycle script"),
        _ans(160, "runner_on_start", "n-compute-1"),
        _ans(160, "runner_on_start", "n-compute-2"),
        _ans(200, "runner_on_ok", "n-compute-1"),
        _ans(205, "runner_item_on_ok", "n-compute-2"),
        _ans(210, "runner_on_ok", "n-controller-1", play="Add the new nodes to slurm.conf"),
        _ans(211, "runner_on_skipped", "n-controller-1", play="Add the new nodes to slurm.conf",
             task=ph.RECONFIGURE_HANDLER),
        _ans(230, "runner_on_ok", "n-compute-1", play="Start slurmd on the joining compute nodes", task=ph.JOIN_WAIT_TASK),
        _ans(240, "runner_on_ok", "n-compute-1", play="Start slurmd on the joining compute nodes", task="ping"),
        _ans(236, "runner_on_ok", "n-compute-2", play="Start slurmd on the joining compute nodes", task=ph.JOIN_WAIT_TASK),
    ]
    got = ph.naive_phases(T0, types, defined, ssh, events, JOIN_PLAYS, T0 + 99, T0 + 245)
    assert got["n-controller-1"] == {"launch": [0.0, 10.0], "boot": [10.0, 90.0], "configure": [100.0, 155.0]}
    assert got["n-compute-1"] == {"launch": [0.0, 12.0], "boot": [12.0, 95.0], "configure": [160.0, 200.0],
                                  "join": [200.0, 230.0]}
    assert got["n-compute-2"] == {"boot": [0.0, 99.0], "configure": [160.0, 205.0], "join": [205.0, 236.0]}
    assert ph.ansible_reconfigures(events) == 0
    events.append(_ans(212, "runner_on_ok", "n-controller-1", play="Add the new nodes to slurm.conf",
                       task=ph.RECONFIGURE_HANDLER, changed=True))
    assert ph.ansible_reconfigures(events) == 1


def test_ansible_event_reads_runner_fields_and_time():
    ev = {"event": "runner_on_ok", "created": "2023-11-14T22:13:20.500000+00:00",
          "event_data": {"host": "h", "play": "p", "task": "t", "res": {"changed": True}}}
    assert ph.ansible_event(ev, 5.0) == {"t": 1_700_000_000.5, "event": "runner_on_ok", "host": "h", "play": "p",
                                         "task": "t", "changed": True}
    assert ph.ansible_event({"event": "verbose", "created": "bogus"}, 5.0)["t"] == 5.0


def _way(first_job, full_size, **kw):
    return {"time_to_inservice_s": first_job - 50, "time_to_first_job_s": first_job, "time_to_full_size_s": full_size,
            "reconfigures": 1, **kw}


def test_ratios_of_three_ways():
    types = {"c-controller-1": "Controller", "c-compute-1": "Compute", "c-compute-2": "Compute"}
    warm = _way(100.0, 120.0, join_latency_s={"c-compute-1": 20.0, "c-compute-2": 30.0}, one_vm_boot_to_ssh_s=10.0,
                scale_out={"count": 8, "boot_to_ssh_s": 12.0, "join_latency_s": 24.0, "request_to_running_s": 40.0,
                           "fork_request_to_ssh_s": 15.0, "all_running_s": 90.0})
    cold = _way(400.0, 480.0, node_types=types, join_latency_s={"c-compute-1": 50.0}, one_vm_boot_to_ssh_s=50.0,
                boot_to_ssh_s={"c-controller-1": 50.0, "c-compute-1": 70.0, "c-compute-2": 90.0},
                scale_out={"count": 8, "boot_to_ssh_s": 100.0, "join_latency_s": 25.0, "all_running_s": 300.0})
    naive = {"time_to_first_job_s": 500.0, "time_to_full_size_s": 480.0}
    r = ph.ratios({"warm": warm, "cold": cold, "naive": naive})
    assert r == {
        "time_to_first_job_warm_over_naive": 0.2, "time_to_full_size_warm_over_naive": 0.25,
        "time_to_first_job_cold_over_naive": 0.8, "time_to_full_size_cold_over_naive": 1.0,
        "time_to_first_job_warm_over_cold": 0.25, "time_to_full_size_warm_over_cold": 0.25,
        "cold_boot_to_ssh_s": 80.0,  # the cold way's compute nodes only (not its controller)
        "warm_scale_out_request_to_running_over_cold_boot_to_ssh": 0.5,
        "warm_fork_request_to_ssh_over_cold_boot_to_ssh": 0.19,
        "scale_out_all_running_warm_over_cold": 0.3,
        "warm_create_join_latency_over_boot_to_ssh": 2.5, "warm_join_latency_over_boot_to_ssh": 2.0,
        "cold_create_join_latency_over_boot_to_ssh": 1.0, "cold_join_latency_over_boot_to_ssh": 0.25,
    }


def test_ratios_leave_out_what_a_missing_or_failed_way_cannot_give():
    warm = _way(100.0, 120.0, join_latency_s={"a": 30.0}, one_vm_boot_to_ssh_s=10.0)
    assert ph.ratios({"warm": warm, "cold": None, "naive": {"error": "boom"}}) == {
        "warm_create_join_latency_over_boot_to_ssh": 3.0, "warm_join_latency_over_boot_to_ssh": 3.0}
    assert ph.ratios({"warm": {"error": "x"}, "cold": _way(400.0, 480.0), "naive": _way(500.0, 480.0)}) == {
        "time_to_first_job_cold_over_naive": 0.8, "time_to_full_size_cold_over_naive": 1.0}
    assert ph.ratios({}) == {}


def test_join_ratios_of_one_engine_way():
    cont = {"join_latency_s": {"a": 180.0, "b": 220.0}, "one_vm_boot_to_ssh_s": 40.0}
    assert ph.join_ratios(cont) == {"create_join_latency_over_boot_to_ssh": 5.0, "join_latency_over_boot_to_ssh": 5.0}
    cont["scale_out"] = {"boot_to_ssh_s": 40.0, "join_latency_s": 12.0}
    assert ph.join_ratios(cont)["join_latency_over_boot_to_ssh"] == 0.3
    assert ph.join_ratios({}) == {"create_join_latency_over_boot_to_ssh": None, "join_latency_over_boot_to_ssh": None}


def test_cold_boot_to_ssh_is_the_mean_of_the_compute_nodes():
    cold = {"node_types": {"x-ctl": "Controller", "x-c1": "Compute", "x-c2": "Compute"},
            "boot_to_ssh_s": {"x-ctl": 10.0, "x-c1": 61.0, "x-c2": 62.0}}
    assert ph.cold_boot_to_ssh(cold) == 61.5
    assert ph.cold_boot_to_ssh({"node_types": {}, "boot_to_ssh_s": {"x": 1.0}}) is None
    assert ph.cold_boot_to_ssh(None) is None


class _E:
    def __init__(self, t, description, node=None):
        self.time, self.description, self.node = T0 + t, description, node


def test_vm_starts_and_cold_fallbacks_from_the_engines_event_text():
    events = [
        _E(10, "c-controller-1: VM up (forked from template 1cpu-768mib-0a1b2c3d4e5f in 9.4 s)", "c-controller-1"),
        _E(11, "c-compute-1: booted cold: no template: its build failed", "c-compute-1"),
        _E(60, "c-compute-1: VM up", "c-compute-1"),
        _E(61, "c-compute-2: VM up (forked from template 1cpu-768mib-0a1b2c3d4e5f in 8 s)", "c-compute-2"),
        _E(62, "c-compute-2: VM up", "c-compute-2"),  # launched again, cold: the last one counts
        _E(63, "c-login-1: rebooted", "c-login-1"),
        _E(64, "node c-login-1 planned (10.0.0.3)", "c-login-1"),
        _E(65, "c-login-1: VM up", "c-compute-1"),  # an event about another node: not the login node's
        _E(66, "c-login-2: VM up (forked from role template 1cpu-768mib-0a1b-login-9f in 7.5 s)", "c-login-2"),
    ]
    assert ph.vm_starts(events) == {
        "c-controller-1": {"start": "Warm", "at": T0 + 10, "template": "1cpu-768mib-0a1b2c3d4e5f", "fork_s": 9.4,
                           "role_template": False},
        "c-compute-1": {"start": "Cold", "at": T0 + 60},
        "c-login-2": {"start": "Warm", "at": T0 + 66, "template": "1cpu-768mib-0a1b-login-9f", "fork_s": 7.5,
                      "role_template": True},
        "c-compute-2": {"start": "Cold", "at": T0 + 62},
    }
    assert ph.cold_fallbacks(events) == {"c-compute-1": "no template: its build failed"}


class _ForkingSim(SimProvider):
    """The sim provider answering as the Vagrant provider does (lab/providers/warm.py): a node of a
    cluster whose Lab.Start is Warm comes up "forked", c-compute-2 excepted (it "falls back" cold)."""

    async def ensure_async(self, cluster, machine):
        obs = await super().ensure_async(cluster, machine)
        if machine.start == Start.WARM and not machine.name.endswith("-compute-2"):
            details = {"start": "Warm", "template": "1cpu-768mib-feedc0ffee00", "timings": {"restore": 1.2},
                       "seconds": 6.5}
        else:
            details = {"start": "Cold"}
            if machine.start == Start.WARM:
                details["warning"] = "booted cold: fork failed: restore refused"
        return Observed(obs.name, obs.state, obs.address, {**obs.details, **details})


def _sim_run(tmp_path, monkeypatch, start, add=0):
    """examples/small.yaml through spec_with_start (absolute lifecycle folders: loads_spec without a
    base folder takes them), built on the forking sim, then `add` compute nodes at once. Events get
    the virtual clock's time, as the node rows do (the real engine's clock is the wall clock)."""
    copy = ct.spec_with_start(ct.REPO / "examples" / "small.yaml", start, tmp_path / f"small-{start}.yaml")

    async def go():
        lab = SimLab(tmp_path)
        monkeypatch.setattr(db, "time", types.SimpleNamespace(time=lab.clock))
        lab.prov = _ForkingSim(1.0, clock=lab.clock, sleep=lab.clock.sleep)
        lab.eng = lab.new_engine()
        lab.create(copy.read_text())
        await lab.run_until(lambda: lab.full("ci"))
        before = {n.name for n in lab.st.nodes("ci")}
        t0 = lab.clock()
        if add:
            from lab.control import clusters

            clusters.add_nodes(lab.st, "ci", [{"InstanceGroupName": "compute", "IncrementTargetCountBy": add}])
            await lab.run_until(lambda: lab.full("ci"))
        await lab.finish()
        new = [n for n in lab.st.nodes("ci") if n.name not in before]
        return lab.st.events("ci", limit=100000), new, t0

    return asyncio.run(go())


def test_engine_events_tell_forks_from_cold_boots(tmp_path, monkeypatch):
    events, _, _ = _sim_run(tmp_path, monkeypatch, "Warm")
    starts = ph.vm_starts(events)
    assert {k: v["start"] for k, v in starts.items()} == {
        "ci-controller-1": "Warm", "ci-login-1": "Warm", "ci-compute-1": "Warm", "ci-compute-2": "Cold"}
    assert starts["ci-compute-1"]["template"] == "1cpu-768mib-feedc0ffee00" and starts["ci-compute-1"]["fork_s"] == 6.5
    assert ph.cold_fallbacks(events) == {"ci-compute-2": "fork failed: restore refused"}


def test_a_cold_copy_of_the_spec_boots_every_node_cold(tmp_path, monkeypatch):
    events, _, _ = _sim_run(tmp_path, monkeypatch, "Cold")
    assert {v["start"] for v in ph.vm_starts(events).values()} == {"Cold"}
    assert len(ph.vm_starts(events)) == 4 and ph.cold_fallbacks(events) == {}


def test_scale_out_summary_of_a_batch_on_the_sim(tmp_path, monkeypatch):
    events, new, t0 = _sim_run(tmp_path, monkeypatch, "Warm", add=3)
    assert sorted(n.name for n in new) == ["ci-compute-3", "ci-compute-4", "ci-compute-5"]
    so = ph.scale_out_summary(new, t0, events)
    assert so["count"] == 3 and so["forked"] == 3 and "node" not in so
    assert set(so["nodes"]) == {n.name for n in new}
    for name, d in so["nodes"].items():
        n = next(x for x in new if x.name == name)
        assert d["start"] == "Warm" and d["fork_s"] == 6.5
        assert d["request_to_running_s"] == round(n.joined_at - t0, 1) > 0
        assert d["boot_to_ssh_s"] == round(n.booted_at - n.launched_at, 1)
        assert 0 < d["request_to_ssh_s"] <= d["request_to_running_s"]
    assert so["all_running_s"] == round(max(n.joined_at for n in new) - t0, 1)
    assert so["fork_request_to_ssh_s"] == so["request_to_ssh_s"]
    assert so["joins"] >= 1


def _row(name, launched, booted, joined, phase="running"):
    return NodeRow(cluster="c", name=name, grp="compute", ordinal=1, instance_id="i", address="a", mac="m",
                   phase=phase, launched_at=T0 + launched if launched else None,
                   booted_at=T0 + booted if booted else None, joined_at=T0 + joined if joined else None)


def test_scale_out_summary_medians_forks_and_a_node_not_yet_running():
    nodes = [_row("c-compute-3", 1, 8, 30), _row("c-compute-4", 1, 9, 40), _row("c-compute-5", 2, 90, 120)]
    events = [_E(8, "c-compute-3: VM up (forked from template t in 6.0 s)", "c-compute-3"),
              _E(9, "c-compute-4: VM up (forked from template t in 7.0 s)", "c-compute-4"),
              _E(90, "c-compute-5: VM up", "c-compute-5"),
              _E(-5, "1 node(s) joined Slurm with one reconfigure: c-compute-1"),  # before the request
              _E(30, "1 node(s) joined Slurm with one reconfigure: c-compute-3"),
              _E(120, "2 node(s) joined Slurm with one reconfigure: c-compute-4, c-compute-5")]
    so = ph.scale_out_summary(nodes, T0, events)
    assert so["nodes"]["c-compute-5"] == {"boot_to_ssh_s": 88.0, "join_latency_s": 30.0, "request_to_running_s": 120.0,
                                          "start": "Cold", "request_to_ssh_s": 90.0}
    assert (so["boot_to_ssh_s"], so["join_latency_s"], so["request_to_running_s"]) == (8.0, 30.0, 40.0)
    assert so["request_to_ssh_s"] == 9.0 and so["fork_request_to_ssh_s"] == 8.5 and so["forked"] == 2
    assert so["all_running_s"] == 120.0 and so["joins"] == 2
    nodes[2] = _row("c-compute-5", 2, None, None, phase="launching")
    so = ph.scale_out_summary(nodes, T0, events[:2])
    assert so["all_running_s"] is None and so["nodes"]["c-compute-5"] == {}
    one = ph.scale_out_summary(nodes[:1], T0, events[:1])
    assert one["node"] == "c-compute-3" and one["count"] == 1 and one["all_running_s"] == 30.0


def _phases(types, base=0):
    return {n: {"launch": [1, 2 + base], "boot": [2 + base, 45 + base], "configure": [45 + base, 140 + base]}
            | ({"join": [140 + base, 150 + base]} if t == "Compute" else {}) for n, t in types.items()}


def _result(with_naive=True, ways=("warm", "cold")):
    cont_types = {"c-controller-1": "Controller", "c-login-1": "Login", "c-compute-1": "Compute",
                  "c-compute-2": "Compute"}
    result = {"spec": "examples/small.yaml", "driver": "qemu", "warm": None, "cold": None, "naive": None,
              "ratios": {"time_to_first_job_warm_over_naive": 0.4, "time_to_first_job_warm_over_cold": 0.5}}
    if "warm" in ways:
        result["warm"] = {"time_to_inservice_s": 60.0, "time_to_first_job_s": 110.0, "time_to_full_size_s": 150.0,
                          "node_types": cont_types, "phases": _phases(cont_types), "forked": 4, "nodes": 4}
    if "cold" in ways:
        result["cold"] = {"time_to_inservice_s": 300.0, "time_to_first_job_s": 410.0, "time_to_full_size_s": 450.0,
                          "node_types": cont_types, "phases": _phases(cont_types, base=100), "forked": 0, "nodes": 4}
    if with_naive:
        result["naive"] = {
            "time_to_first_job_s": 520.0, "time_to_full_size_s": 505.0, "node_types": cont_types,
            "phases": {n: {"launch": [0, 10], "boot": [10, 120], "configure": [130, 480]}
                       | ({"join": [480, 500]} if t == "Compute" else {}) for n, t in cont_types.items()},
        }
    return result


def _old_result():
    """A result from before the warm/cold split: the engine's way under "continuous"."""
    r = _result(ways=())
    r["continuous"] = {"time_to_inservice_s": 300.0, "time_to_first_job_s": 410.0, "time_to_full_size_s": 450.0,
                       "node_types": r["naive"]["node_types"], "phases": _phases(r["naive"]["node_types"])}
    r["ratios"] = {"time_to_first_job_continuous_over_naive": 0.8, "join_latency_over_boot_to_ssh": 5.0}
    return r


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24]), len(data)


NODES = ["c-controller-1", "c-login-1", "c-compute-1", "c-compute-2"]


def test_png_has_a_block_of_bars_per_way(tmp_path):
    png = tmp_path / "t.png"
    bars = timeline_png.draw(_result(), png)
    assert bars == [f"{w}/{n}" for w in ("warm", "cold", "naive") for n in NODES]
    (w, h), size = _png_size(png)
    assert w == 1100 and 600 <= h <= 1600 and size > 20_000
    title = timeline_png._title(_result())
    assert "first job warm/naive 0.4" in title and "first job warm/cold 0.5" in title


def test_png_of_a_run_without_the_naive_way(tmp_path):
    png = tmp_path / "t.png"
    bars = timeline_png.draw(_result(with_naive=False), png)
    assert bars == [f"{w}/{n}" for w in ("warm", "cold") for n in NODES]
    (w, h), _ = _png_size(png)
    assert h < _png_size_of_full(tmp_path)


def test_png_of_one_way(tmp_path):
    bars = timeline_png.draw(_result(with_naive=False, ways=("cold",)), tmp_path / "t.png")
    assert bars == [f"cold/{n}" for n in NODES]


def test_png_of_a_result_from_before_the_warm_cold_split(tmp_path):
    png = tmp_path / "old.png"
    bars = timeline_png.draw(_old_result(), png)
    assert bars == [f"{w}/{n}" for w in ("continuous", "naive") for n in NODES]
    assert "first job continuous/naive 0.8" in timeline_png._title(_old_result())


def _png_size_of_full(tmp_path):
    png = tmp_path / "full.png"
    timeline_png.draw(_result(), png)
    return _png_size(png)[0][1]


def test_png_refuses_a_result_without_phases(tmp_path):
    with pytest.raises(ValueError, match="no per-node phases"):
        timeline_png.draw({"warm": {"time_to_first_job_s": 1.0}, "cold": None, "naive": {"error": "x"}},
                          tmp_path / "t.png")
