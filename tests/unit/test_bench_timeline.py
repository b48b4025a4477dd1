"""bench/cluster_timeline.py's pure parts: phases from store rows and Ansible events, ratios, the PNG.

No VMs: the store is a tmp SQLite file written through the store API, Ansible events are written
by hand in ansible-runner's shape, and one sim-provider run checks that the engine writes the
events the phases are read from.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from bench import phases as ph
from bench import timeline_png
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


def test_ratios():
    cont = {"time_to_first_job_s": 400.0, "time_to_full_size_s": 450.0, "join_latency_s": {"a": 180.0, "b": 220.0},
            "one_vm_boot_to_ssh_s": 40.0}
    naive = {"time_to_first_job_s": 500.0, "time_to_full_size_s": 480.0}
    assert ph.ratios(cont, naive) == {"time_to_first_job_continuous_over_naive": 0.8,
                                      "time_to_full_size_continuous_over_naive": 0.94,
                                      "create_join_latency_over_boot_to_ssh": 5.0,
                                      "join_latency_over_boot_to_ssh": 5.0}
    assert ph.ratios(cont, None) == {"create_join_latency_over_boot_to_ssh": 5.0, "join_latency_over_boot_to_ssh": 5.0}
    assert ph.ratios(cont, {"error": "boom"})["join_latency_over_boot_to_ssh"] == 5.0
    # with a scale-out node, the join latency is its own over its own boot (one VM booting alone)
    cont["scale_out"] = {"node": "c-compute-3", "boot_to_ssh_s": 40.0, "join_latency_s": 12.0}
    assert ph.ratios(cont, None) == {"create_join_latency_over_boot_to_ssh": 5.0, "join_latency_over_boot_to_ssh": 0.3}


def _result(with_naive=True):
    cont_types = {"c-controller-1": "Controller", "c-login-1": "Login", "c-compute-1": "Compute",
                  "c-compute-2": "Compute"}
    result = {
        "spec": "examples/small.yaml", "driver": "qemu",
        "continuous": {
            "time_to_inservice_s": 300.0, "time_to_first_job_s": 410.0, "time_to_full_size_s": 450.0,
            "node_types": cont_types,
            "phases": {
                "c-compute-2": {"launch": [1, 141], "boot": [141, 230], "configure": [230, 420], "join": [420, 450]},
                "c-controller-1": {"launch": [1, 2], "boot": [2, 45], "configure": [45, 140]},
                "c-login-1": {"launch": [1, 141], "boot": [141, 220], "configure": [220, 300]},
                "c-compute-1": {"launch": [1, 141], "boot": [141, 215], "configure": [215, 330], "join": [330, 400]},
            },
        },
        "naive": None,
        "ratios": {"time_to_first_job_continuous_over_naive": 0.8, "join_latency_over_boot_to_ssh": 5.0},
    }
    if with_naive:
        result["naive"] = {
            "time_to_first_job_s": 520.0, "time_to_full_size_s": 505.0, "node_types": cont_types,
            "phases": {n: {"launch": [0, 10], "boot": [10, 120], "configure": [130, 480]}
                       | ({"join": [480, 500]} if t == "Compute" else {}) for n, t in cont_types.items()},
        }
    return result


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24]), len(data)


def test_png_has_a_bar_per_node_and_way(tmp_path):
    png = tmp_path / "t.png"
    bars = timeline_png.draw(_result(), png)
    assert bars == ["continuous/c-controller-1", "continuous/c-login-1", "continuous/c-compute-1",
                    "continuous/c-compute-2", "naive/c-controller-1", "naive/c-login-1", "naive/c-compute-1",
                    "naive/c-compute-2"]
    (w, h), size = _png_size(png)
    assert w == 1100 and 400 <= h <= 1200 and size > 20_000


def test_png_of_a_run_without_the_naive_way(tmp_path):
    png = tmp_path / "t.png"
    bars = timeline_png.draw(_result(with_naive=False), png)
    assert len(bars) == 4 and all(b.startswith("continuous/") for b in bars)
    (w, h), _ = _png_size(png)
    assert h < _png_size_of_full(tmp_path)


def _png_size_of_full(tmp_path):
    png = tmp_path / "full.png"
    timeline_png.draw(_result(), png)
    return _png_size(png)[0][1]


def test_png_refuses_a_result_without_phases(tmp_path):
    with pytest.raises(ValueError, match="no per-node phases"):
        timeline_png.draw({"continuous": {"time_to_first_job_s": 1.0}, "naive": {"error": "x"}}, tmp_path / "t.png")
