"""Every bench script, cheaply: it imports, its command line parses, its pure parts compute what
its docstring says, and what it takes from lab/ still exists.

The benchmarks with real VMs run rarely, by hand; a rename in lab/ (lab.providers.vagrant's
HOST_RESERVE_MIB moving to lab.host.registry) broke two of them without a failing test. So here:
  - every `from lab... import X` in a script resolves, every `X.attr` of such an X exists, and
    every `x.attr` of an `x = X(...)` exists on the class or is set on its instances (lab_problems);
  - every `slurmlab` command a script runs (`sl("create-cluster", "--spec", ...)`, `[sys.executable,
    "-m", "lab", ...]`) names a command and options the CLI has (cli_problems);
  - `--help` exits 0 and a typical command line parses;
  - the pure parts (ratios, notes, caps, summaries, spec copies) on small made-up inputs, and
    engine_scale.py and api_latency.py run for real on the sim provider with small sizes.
No VM, no libvirtd, no engine process.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import os
import random
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from bench import checkpoint_restore, cluster_timeline as ct, engine_scale, faults, naive
from bench import api_latency
from lab.host import registry
from lab.providers.base import Start

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "bench"
SCRIPTS = ["engine_scale", "api_latency", "cluster_timeline", "checkpoint_restore", "faults", "naive", "phases",
           "timeline_png", "room", "jupyter_hub", "onecluster", "configure_times", "faultlab", "faults_parts", "class_day", "lifecycle_rerun"]
CLI_SCRIPTS = ["engine_scale", "api_latency", "cluster_timeline", "checkpoint_restore", "faults", "room", "jupyter_hub",
               "configure_times"]


def test_every_bench_script_is_covered_here():
    assert sorted(SCRIPTS) == sorted(p.stem for p in BENCH.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("name", SCRIPTS)
def test_imports(name):
    mod = importlib.import_module(f"bench.{name}")
    assert mod.__doc__ and mod.__doc__.strip()


# ------------------------------------------------------------------------------------ what lab/ must still have
def _instance_attrs(cls) -> set[str]:
    """What an instance of `cls` has: the class's attributes, annotations (dataclass fields) and
    every `self.X = ...` in the source of its classes."""
    names = set(dir(cls))
    for k in cls.__mro__:
        names |= set(getattr(k, "__annotations__", {}))
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(k)))
        except (OSError, TypeError):
            continue
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name) and node.value.id == "self"):
                names.add(node.attr)
    return names


def lab_problems(source: str, where: str = "<source>") -> list[str]:
    """Names a bench script takes from lab/ that do not exist (see the module's docstring)."""
    tree = ast.parse(source)
    bound: dict[str, object] = {}
    problems = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "lab":
            try:
                mod = importlib.import_module(node.module)
            except ImportError as e:
                problems.append(f"{where}:{node.lineno}: {e}")
                continue
            for a in node.names:
                if hasattr(mod, a.name):
                    bound[a.asname or a.name] = getattr(mod, a.name)
                    continue
                try:
                    bound[a.asname or a.name] = importlib.import_module(f"{node.module}.{a.name}")
                except ImportError:
                    problems.append(f"{where}:{node.lineno}: {node.module} has no {a.name}")
    instances = {}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
                and inspect.isclass(bound.get(node.value.func.id))):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    instances[t.id] = bound[node.value.func.id]
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)):
            continue
        name, attr = node.value.id, node.attr
        if name in bound:
            obj = bound[name]
            if hasattr(obj, attr):
                continue
            if inspect.ismodule(obj):
                try:
                    importlib.import_module(f"{obj.__name__}.{attr}")
                    continue
                except ImportError:
                    pass
            problems.append(f"{where}:{node.lineno}: {name}.{attr} does not exist")
        elif name in instances and attr not in _instance_attrs(instances[name]):
            problems.append(f"{where}:{node.lineno}: {name}.{attr}: a {instances[name].__name__} has no {attr}")
    return sorted(set(problems))


@pytest.mark.parametrize("name", SCRIPTS)
def test_what_the_script_takes_from_lab_exists(name):
    path = BENCH / f"{name}.py"
    assert lab_problems(path.read_text(), path.name) == []


def test_lab_problems_finds_the_names_that_moved():
    """The checker itself: the two uses that broke (HOST_RESERVE_MIB left VagrantProvider) are found."""
    src = textwrap.dedent("""
        from lab.providers.vagrant import VagrantProvider
        from lab.host import registry, nosuchmodule
        from lab.osutil import meminfo_mib, no_such_function

        def f():
            prov = VagrantProvider()
            prov.prepare, prov.box, prov.warm  # a method, attributes set in __init__
            registry.HOST_RESERVE_MIB
            return prov.HOST_RESERVE_MIB + VagrantProvider.HOST_RESERVE_MIB + registry.NO_SUCH
    """)
    got = lab_problems(src)
    assert len(got) == 5, got
    assert any("prov.HOST_RESERVE_MIB: a VagrantProvider has no HOST_RESERVE_MIB" in p for p in got)
    assert any("VagrantProvider.HOST_RESERVE_MIB does not exist" in p for p in got)
    assert any("registry.NO_SUCH" in p for p in got)
    assert any("lab.host has no nosuchmodule" in p for p in got)
    assert any("lab.osutil has no no_such_function" in p for p in got)


def _cli_invocations(source: str):
    """(line, words) of every slurmlab command in the source: sl("a", "--b", x) and lists
    [..., "-m", "lab", ...]; words that are not string literals are None."""
    for node in ast.walk(ast.parse(source)):
        args = None
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "sl":
            args = node.args
        elif isinstance(node, ast.List):
            e = node.elts
            for i in range(len(e) - 1):
                if all(isinstance(x, ast.Constant) for x in e[i:i + 2]) and [e[i].value, e[i + 1].value] == ["-m", "lab"]:
                    args = e[i + 2:]
        if args and isinstance(args[0], ast.Constant):
            yield node.lineno, [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None
                                for a in args]


def cli_problems(source: str, where: str = "<source>") -> list[str]:
    """slurmlab commands of a bench script that the CLI does not have, or options it does not take."""
    import typer

    from lab.cli import app

    root = typer.main.get_command(app)
    problems, seen = [], 0
    for line, words in _cli_invocations(source):
        seen += 1
        cmd, i = root, 0
        while hasattr(cmd, "commands") and i < len(words) and words[i] in cmd.commands:
            cmd, i = cmd.commands[words[i]], i + 1
        if hasattr(cmd, "commands"):
            problems.append(f"{where}:{line}: slurmlab has no command {' '.join(str(w) for w in words[:i + 1])}")
            continue
        opts = {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
        for w in words[i:]:
            if w == "--":  # what follows goes to the node (slurmlab ssh)
                break
            if w and w.startswith("-") and w.split("=")[0] not in opts:
                problems.append(f"{where}:{line}: slurmlab {' '.join(words[:i])} has no option {w}")
    return problems if seen or "sl(" not in source else [f"{where}: no slurmlab command found"]


@pytest.mark.parametrize("name", ["cluster_timeline", "checkpoint_restore", "faults", "faults_parts", "room",
                                  "jupyter_hub", "class_day", "lifecycle_rerun"])
def test_the_slurmlab_commands_a_script_runs_exist(name):
    path = BENCH / f"{name}.py"
    assert list(_cli_invocations(path.read_text())), "the script runs slurmlab commands: the scan must see them"
    assert cli_problems(path.read_text(), path.name) == []


def test_cli_problems_finds_a_renamed_command_or_option():
    src = textwrap.dedent("""
        sl("create-cluster", "--spec", path)
        sl("batch-add-cluster-nodes", name, group, "--number", "1")
        sl("checkpoint", "restore", name, "t", "--output", "json")
        sl("checkpoint", "undo", name)
        sl("ssh", name, "login", "--", "srun --whatever")
        subprocess.run([sys.executable, "-m", "lab", "remove-cluster", name])
    """)
    got = cli_problems(src)
    assert len(got) == 3, got
    assert "has no option --number" in got[0]
    assert "no command checkpoint undo" in got[1]
    assert "no command remove-cluster" in got[2]


# ------------------------------------------------------------------------------------ command lines
@pytest.mark.parametrize("name", CLI_SCRIPTS)
def test_help_exits_0(name):
    p = subprocess.run([sys.executable, str(BENCH / f"{name}.py"), "--help"], capture_output=True, text=True,
                       timeout=60, cwd="/", stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("usage: ")


def test_cluster_timeline_command_lines(capsys):
    args = ct.parse_args([])
    assert args.ways == ["warm", "cold", "naive"] and args.scale_out == 1 and args.spec.endswith("examples/small.yaml")
    args = ct.parse_args(["examples/cluster.yaml", "--ways", "cold, warm,cold", "--scale-out", "8"])
    assert (args.spec, args.ways, args.scale_out) == ("examples/cluster.yaml", ["cold", "warm"], 8)
    assert ct.parse_args(["--skip-naive"]).ways == ["warm", "cold"]
    assert ct.parse_args(["--ways", "naive,WARM", "--skip-naive"]).ways == ["warm"]
    assert ct.parse_args(["--png-from", "x.json"]).png_from == "x.json"
    for bad in (["--ways", "naive", "--skip-naive"], ["--ways", "hot"], ["--ways", ","], ["--scale-out", "-1"]):
        with pytest.raises(SystemExit) as e:
            ct.parse_args(bad)
        assert e.value.code == 2, bad
    assert "unknown way 'hot'" in capsys.readouterr().err


def test_the_other_command_lines(capsys):
    assert engine_scale.parse_args([]).sizes == [100, 300, 1000]
    assert engine_scale.parse_args(["100", "300"]).sizes == [100, 300]
    a = api_latency.parse_args(["--nodes", "50", "--requests", "20"])
    assert (a.nodes, a.requests, a.results) == (50, 20, REPO / "bench" / "results")
    assert Path(checkpoint_restore.parse_args([]).spec) == REPO / "examples" / "cluster.yaml"
    assert checkpoint_restore.parse_args(["my.yaml"]).spec == "my.yaml"
    a = faults.parse_args(["--seed", "3", "--only", "sshd_stopped,pool_disk_full", "--pool-mib", "0"])
    assert (a.seed, a.only, a.pool_mib) == (3, "sshd_stopped,pool_disk_full", 0)
    for parse, bad in ((engine_scale.parse_args, ["5"]), (api_latency.parse_args, ["--nodes", "2"]),
                       (faults.parse_args, ["--only", "sshd_stoped"])):
        with pytest.raises(SystemExit) as e:
            parse(bad)
        assert e.value.code == 2, bad
    assert "unknown scenario(s) sshd_stoped" in capsys.readouterr().err


# ------------------------------------------------------------------------------------ cluster_timeline.py
def _spec(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "on_create.sh").write_text("#!/bin/sh\n")
    spec = tmp_path / "lab.yaml"
    spec.write_text(textwrap.dedent("""\
        ClusterName: t
        InstanceGroups:
          - InstanceGroupName: controller
            InstanceType: ml.t3.medium
            InstanceCount: 1
            SlurmConfig: {NodeType: Controller}
            LifeCycleConfig: {SourceS3Uri: ./scripts, OnCreate: on_create.sh}
          - InstanceGroupName: compute
            InstanceType: ml.c5.large
            InstanceCount: 2
            SlurmConfig: {NodeType: Compute, PartitionNames: [dev]}
            LifeCycleConfig: {SourceS3Uri: ./scripts, OnCreate: on_create.sh}
        Lab: {Box: my/box, Users: 3, Start: Cold}
        """))
    return spec


def test_spec_with_start_merges_lab_start_and_keeps_the_rest(tmp_path):
    from lab.spec import loads_spec

    spec = _spec(tmp_path)
    copy = ct.spec_with_start(spec, "Warm", tmp_path / "elsewhere" / "copy.yaml")
    assert copy == tmp_path / "elsewhere" / "copy.yaml"
    s = loads_spec(copy.read_text())  # no base folder: the lifecycle folders must be absolute
    assert (s.Lab.Start, s.Lab.Box, s.Lab.Users.Count) == ("Warm", "my/box", 3)
    assert [g.LifeCycleConfig.SourceS3Uri for g in s.InstanceGroups] == [str(tmp_path / "scripts")] * 2
    assert [(g.InstanceGroupName, g.InstanceCount) for g in s.InstanceGroups] == [("controller", 1), ("compute", 2)]
    plain = tmp_path / "plain.yaml"  # no Lab key at all
    plain.write_text(spec.read_text().replace("Lab: {Box: my/box, Users: 3, Start: Cold}\n", ""))
    assert loads_spec(ct.spec_with_start(plain, "Cold", tmp_path / "c.yaml").read_text()).Lab.Start == "Cold"
    with pytest.raises(ValueError):
        ct.spec_with_start(spec, "Lukewarm", tmp_path / "x.yaml")


def test_cap_scale_out():
    assert ct.cap_scale_out(8, 20000, 768) == (8, None)
    n, why = ct.cap_scale_out(8, 3000, 768)
    assert n == 3 and why == "--scale-out 8 capped to 3: the host has 3000 MiB free for VMs and a compute node takes 768 MiB"
    n, why = ct.cap_scale_out(8, 20000, 768, room_cpus=5, node_cpus=2)
    assert n == 2 and "may start 5 more vCPUs" in why
    assert ct.cap_scale_out(8, 20000, 768, room_cpus=None, node_cpus=2) == (8, None)
    assert ct.cap_scale_out(2, -500, 768)[0] == 0
    assert ct.cap_scale_out(0, 20000, 768) == (0, None)


def test_host_room_asks_libvirt_then_falls_back_to_meminfo(monkeypatch):
    from lab import osutil
    from lab.providers import placement

    monkeypatch.setattr(placement, "host_of", lambda cluster: registry.Host(name="local", uri="qemu:///system"))
    monkeypatch.setattr(placement, "room", lambda host: placement.Room(host.name, 5000, 3))
    assert ct.host_room("ci") == (5000, 3, "libvirt on host local")
    monkeypatch.setattr(placement, "room", lambda host: placement.Room(host.name, 0, 0, reachable=False, why="down"))
    monkeypatch.setattr(osutil, "meminfo_mib", lambda field="MemAvailable": 9000)
    assert ct.host_room("ci") == (9000 - registry.HOST_RESERVE_MIB, None, "/proc/meminfo MemAvailable")


def test_compute_shape_of_the_small_example():
    from lab.spec.catalog import load_catalog

    mib, cpus, total = ct.compute_shape(REPO / "examples" / "small.yaml")
    c5, t3 = load_catalog().size("ml.c5.large"), load_catalog().size("ml.t3.medium")
    assert (mib, cpus) == (c5.memory_mib, c5.vcpus)
    assert total == 2 * t3.memory_mib + 2 * c5.memory_mib  # controller, login, 2 compute


def test_template_check(monkeypatch, tmp_path):
    from lab.host import kvm
    from lab.providers import templates, warm

    spec = _spec(tmp_path)
    monkeypatch.setattr(kvm, "detect", lambda: types.SimpleNamespace(driver="qemu"))
    monkeypatch.setattr(warm, "box_supports", lambda box: f"box {box} was built before warm start")
    assert ct.template_check(spec) == ["box my/box was built before warm start"]
    monkeypatch.setattr(warm, "box_supports", lambda box: None)
    asked = []

    def find(box, shape, driver):
        asked.append((box, str(shape), driver))
        return None if shape.memory_mib == 768 else object()

    monkeypatch.setattr(templates, "find", find)
    monkeypatch.setattr(templates, "failure", lambda box, shape, driver: None)
    # both groups' types are 1 vCPU, 768 MiB in the lab's catalog: one shape, one template
    assert ct.template_check(spec) == ["1cpu-768mib: no template yet: the first fork builds it, inside the measured "
                                       "time; `slurmlab box build` makes it beforehand"]
    assert asked == [("my/box", "1cpu-768mib", "qemu")]
    monkeypatch.setattr(templates, "failure", lambda box, shape, driver: "qemu died")
    assert ct.template_check(spec) == ["1cpu-768mib: no template to fork, its nodes boot cold: qemu died (a failed "
                                       "build is retried after `slurmlab box templates --rebuild`)"]


class _Store:
    """The few store calls scale_out() makes; the batch "joins" when the command is sent."""

    def __init__(self):
        self.rows, self.ev = [], []

    def nodes(self, name):
        return list(self.rows)

    def events(self, name, limit=1000):
        return list(self.ev)


def _node(name, launched, booted, joined):
    from lab.store.db import NodeRow

    return NodeRow(cluster="ci", name=name, grp="compute", ordinal=1, instance_id="i", address="a", mac="m",
                   phase="running", launched_at=launched, booted_at=booted, joined_at=joined)


def test_scale_out_caps_to_the_room_and_measures_the_batch(monkeypatch):
    st = _Store()
    st.rows = [_node("ci-compute-1", 1.0, 2.0, 3.0)]
    sent = []

    def sl(*args, **kw):
        sent.append(args)
        now = ct.time.time()
        for i in (2, 3):
            st.rows.append(_node(f"ci-compute-{i}", now + 1, now + 6 + i, now + 20 + i))
            st.ev.append(types.SimpleNamespace(time=now + 6 + i, node=f"ci-compute-{i}",
                                               description=f"ci-compute-{i}: VM up (forked from template k in 5.0 s)"))
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(ct, "sl", sl)
    monkeypatch.setattr(ct, "host_room", lambda cluster=None: (2000, None, "test"))
    monkeypatch.setattr(ct, "say", lambda msg: None)
    groups = {"controller": types.SimpleNamespace(name="controller", node_type="Controller", memory_mib=768, cpus=1),
              "compute": types.SimpleNamespace(name="compute", node_type="Compute", memory_mib=768, cpus=1)}
    out = ct.scale_out(st, "ci", groups, 8, "warm")
    assert sent == [("batch-add-cluster-nodes", "ci", "compute", "--count", "2")]
    assert out["requested"] == 8 and out["count"] == 2 and "capped to 2" in out["capped"]
    assert set(out["nodes"]) == {"ci-compute-2", "ci-compute-3"} and out["forked"] == 2
    assert 22 <= out["all_running_s"] <= 24 and "error" not in out
    monkeypatch.setattr(ct, "host_room", lambda cluster=None: (500, None, "test"))
    out = ct.scale_out(st, "ci", groups, 8, "warm")
    assert out["count"] == 0 and out["error"] == "no room on the host for one more compute node" and len(sent) == 1
    # the command refused every node: no wait for nodes that will never come
    monkeypatch.setattr(ct, "host_room", lambda cluster=None: (20000, None, "test"))
    monkeypatch.setattr(ct, "sl", lambda *a, **kw: subprocess.CompletedProcess(a, 1, "", "InvalidInstanceGroupStatus"))
    out = ct.scale_out(st, "ci", groups, 8, "warm")
    assert out["count"] == 0 and out["error"].startswith("batch-add-cluster-nodes exited 1: InvalidInstanceGroupStatus")


def _three_ways() -> dict:
    from bench import phases as ph

    types_ = {"ci-controller-1": "Controller", "ci-compute-1": "Compute", "ci-compute-2": "Compute"}
    warm = {"start": "Warm", "nodes": 3, "time_to_inservice_s": 50.0, "time_to_first_job_s": 80.0,
            "time_to_full_size_s": 90.0, "reconfigures": 1, "forked": 2, "node_types": types_,
            "cold_fallbacks": {"ci-compute-2": "fork failed: restore refused"},
            "join_latency_s": {"ci-compute-1": 20.0}, "one_vm_boot_to_ssh_s": 10.0,
            "template_check": ["1cpu-768mib: no template yet"],
            "scale_out": {"requested": 8, "count": 3, "capped": "--scale-out 8 capped to 3: the host has 2500 MiB",
                          "all_running_s": 60.0, "request_to_running_s": 45.0, "request_to_ssh_s": 12.0,
                          "fork_request_to_ssh_s": 11.0, "boot_to_ssh_s": 9.0, "join_latency_s": 30.0}}
    cold = {"start": "Cold", "nodes": 3, "time_to_inservice_s": 200.0, "time_to_first_job_s": 320.0,
            "time_to_full_size_s": 360.0, "reconfigures": 2, "forked": 0, "node_types": types_,
            "boot_to_ssh_s": {"ci-controller-1": 60.0, "ci-compute-1": 88.0, "ci-compute-2": 92.0},
            "controller_boot_to_ssh_s": 60.0, "controller_ssh_to_serving_s": 40.0, "controller_nice": "-5 (default)",
            "scale_out": {"count": 3, "all_running_s": 240.0}}
    result = {"ways": ["warm", "cold", "naive"], "warm": warm, "cold": cold,
              "naive": {"error": "NaiveFailed: vagrant up failed: boom", "logs": "/tmp/x/naive-logs"}}
    result["ratios"] = ph.ratios(result)
    return result


def test_note_of_three_ways():
    result = _three_ways()
    assert result["ratios"]["time_to_first_job_warm_over_cold"] == 0.25
    lines = ct.note(result).splitlines()
    assert lines[0] == "warm:       InService 50.0 s, first job 80.0 s, full size 90.0 s, 1 reconfigure(s); 2 of 3 nodes forked"
    assert "booted cold instead: ci-compute-2: fork failed: restore refused" in lines[1]
    assert "templates: 1cpu-768mib: no template yet" in lines[2]
    assert lines[3].strip().startswith("scale-out of 3 (--scale-out 8 capped to 3") and "all Running 60.0 s" in lines[3]
    assert "request -> ssh 12.0 s" in lines[3]
    assert lines[4].startswith("cold:       InService 200.0 s, first job 320.0 s") and "0 of 3 nodes forked" in lines[4]
    assert "scale-out of 3: all Running 240.0 s" in lines[5]
    assert "controller: boot-to-ssh 60.0 s, ssh -> slurmctld serving 40.0 s" in lines[6]
    assert lines[7] == "naive:      failed: NaiveFailed: vagrant up failed: boom"
    assert lines[8] == "time to first job: warm/cold 0.25"
    assert lines[9] == "time to full size: warm/cold 0.25"
    assert lines[10] == ("a cold VM's boot-to-ssh (the cold way's compute nodes, mean): 90.0 s; over it, the warm "
                         "scale-out's request -> Running: 0.5, a fork's request -> ssh: 0.12")
    assert lines[11] == "scale-out, all Running, warm/cold: 0.25"
    assert lines[12].startswith("warm: join latency / boot-to-ssh: scale-out 3.33, create (over the controller's) 2.0")


def test_note_of_a_result_from_before_the_warm_cold_split():
    old = {"continuous": {"time_to_inservice_s": 130.3, "time_to_first_job_s": 218.0, "time_to_full_size_s": 225.7,
                          "reconfigures": 2},
           "naive": {"time_to_first_job_s": 219.9, "time_to_full_size_s": 217.0, "vagrant_up_s": 150.0,
                     "ansible_s": 39.6, "reconfigures": 0},
           "ratios": {"time_to_first_job_continuous_over_naive": 0.99, "time_to_full_size_continuous_over_naive": 1.04,
                      "join_latency_over_boot_to_ssh": 0.52, "create_join_latency_over_boot_to_ssh": 0.8}}
    note = ct.note(old)
    assert note.splitlines()[0].startswith("continuous: InService 130.3 s, first job 218.0 s")
    assert "naive:      first job 219.9 s, full size 217.0 s (vagrant up 150.0 s, Ansible 39.6 s)" in note
    assert "time to first job: continuous/naive 0.99" in note and "time to full size: continuous/naive 1.04" in note
    assert "scale-out: join latency / boot-to-ssh 0.52; create: 0.8" in note


def test_png_from_redraws_a_saved_result(tmp_path, capsys):
    saved = tmp_path / "cluster_timeline-1.json"
    phases = {"ci-controller-1": {"launch": [0, 1], "boot": [1, 9], "configure": [9, 40]},
              "ci-compute-1": {"launch": [0, 41], "boot": [41, 50], "configure": [50, 70], "join": [70, 80]}}
    result = _three_ways()
    result["warm"]["phases"] = phases
    result["cold"]["phases"] = {n: {k: [a * 3, b * 3] for k, (a, b) in p.items()} for n, p in phases.items()}
    saved.write_text(json.dumps(result))
    ct.main(["--png-from", str(saved)])
    assert capsys.readouterr().out.strip() == str(saved.with_suffix(".png"))
    assert saved.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    saved.write_text(json.dumps({"warm": {"error": "x"}}))
    with pytest.raises(SystemExit, match="no per-node phases"):
        ct.main(["--png-from", str(saved)])


# ------------------------------------------------------------------------------------ naive.py
def test_naive_memory_warning():
    assert naive.memory_warning([768] * 4, 3072 + registry.HOST_RESERVE_MIB) is None
    said = naive.memory_warning([768] * 4, 3000)
    assert said == (f"warning: 3000 MiB free, the VMs take 3072 MiB (+{registry.HOST_RESERVE_MIB} kept for the host); "
                    "going on, as the engine's per-VM check would")


def test_naive_records_are_the_engines_rows():
    from lab.spec import load_spec

    class Prov:
        def allocate(self, cluster, name, used, preferred_index=0):
            return f"10.9.0.{len(used) + 10}", f"52:54:00:00:00:{len(used):02x}"

    spec = load_spec(REPO / "examples" / "small.yaml")
    c, groups, nodes = naive._records(spec, Prov(), 1000.0)
    assert (c.name, c.created_at, c.status) == ("ci", 1000.0, "Creating")
    assert [g.name for g in groups] == ["controller", "login", "compute"]
    assert [(n.name, n.address, n.phase) for n in nodes] == [
        ("ci-controller-1", "10.9.0.10", "booted"), ("ci-login-1", "10.9.0.11", "booted"),
        ("ci-compute-1", "10.9.0.12", "booted"), ("ci-compute-2", "10.9.0.13", "booted")]
    assert len({n.instance_id for n in nodes}) == 4
    machines = naive.machines_of(groups, nodes)
    mib = {g.name: g.memory_mib for g in groups}
    assert [(m.name, m.node_type, m.address, m.memory_mib) for m in machines] == [
        (n.name, t, n.address, mib[n.grp]) for n, t in zip(nodes, ["Controller", "Login", "Compute", "Compute"])]
    assert {m.start for m in machines} == {Start.COLD}  # no warm-start template built beside the naive build


# ------------------------------------------------------------------------------------ faults.py
def test_faults_hog_size_leaves_less_than_the_vm_and_the_reserve():
    left = 6000 - faults.hog_size(6000, 768)
    assert left == 768 + registry.HOST_RESERVE_MIB - 300


def test_faults_spec_and_scenarios():
    from lab.spec import loads_spec

    s = loads_spec(faults.SPEC)
    assert s.name == faults.NAME and [g.InstanceCount for g in s.InstanceGroups] == [1, 2]
    names = [fn.__name__ for fn in faults.SCENARIOS]
    assert len(set(names)) == len(names) == 17 and names[0] == "engine_sigkill_during_create"
    assert names[-1] == "delete_interrupted"
    assert {"slurmd_stopped", "action_replace_under_auto_resume", "vm_hung", "slurmctld_killed", "controller_destroyed",
            "node_cut_off", "nfs_stalled", "disk_full_during_checkpoint", "engine_killed_during_fork"} <= set(names)


class _Lab:
    def __init__(self, lost=(), orphans=()):
        self._lost, self._orphans = list(lost), list(orphans)

    def wait(self, cond, timeout, what):
        assert cond()
        return 0.0

    def full(self):
        return True

    def lost(self):
        return self._lost

    def orphans(self):
        return self._orphans


def test_faults_run_scores_a_scenario(monkeypatch):
    monkeypatch.setattr(faults, "say", lambda msg: None)

    def fine(lab, rng):
        return {"recover_s": 12.0, "detail": "came back"}

    def broke(lab, rng):
        raise RuntimeError("ssh refused")

    row = faults.run(_Lab(), fine, random.Random(1))
    assert (row["scenario"], row["survived"], row["nodes_lost"], row["orphans"]) == ("fine", True, 0, [])
    assert faults.run(_Lab(lost=["faults-compute-2"]), fine, random.Random(1))["survived"] is False
    assert faults.run(_Lab(orphans=["domain x"]), fine, random.Random(1))["survived"] is False
    row = faults.run(_Lab(), broke, random.Random(1))
    assert row["survived"] is False and row["error"] == "RuntimeError: ssh refused"
    table = faults.table([faults.run(_Lab(), fine, random.Random(1)), {"scenario": "pool_disk_full",
                                                                      "not_run": faults.POOL_NOT_RUN}])
    assert table.splitlines()[2] == "| fine | yes | 0 | 0 | 12.0 s | came back |"
    assert table.splitlines()[3].startswith("| pool_disk_full | - |")


# ------------------------------------------------------------------------------------ checkpoint_restore.py
def test_jupyter_hub_conclude_and_arguments():
    from bench import jupyter_hub

    res = jupyter_hub.conclude({"without": {"inservice_s": 120.0}, "with": {"inservice_s": 190.0}})
    assert res["ratio_inservice"] == 1.583
    assert Path(jupyter_hub.parse_args([]).spec) == REPO / "examples" / "cluster.yaml"
    assert jupyter_hub.parse_args([]).starts == 0 and jupyter_hub.parse_args(["--starts", "5"]).starts == 5


@pytest.mark.parametrize(("health", "restarts", "ok"), [
    ("HTTP/1.1 200 OK", "0\n0\n", True),
    ("HTTP/1.1 200 OK", "0\n3\n", False),  # it answers, after a crash loop: not a start that works every time
    ("HTTP/1.1 503 Service Unavailable", "0\n0\n", False),
    ("", "0\n0\n", False),
])
def test_jupyter_hub_starts_count_a_hub_that_answers_and_never_restarted(monkeypatch, health, restarts, ok):
    from bench import jupyter_hub

    monkeypatch.setattr(jupyter_hub, "build", lambda spec, name, flag: {"inservice_s": 150.0, "full_s": 170.0})

    def sl(*args, timeout=0):
        out = restarts if "NRestarts" in args[-1] else f"slurmlab-hub login {health}\n"
        return subprocess.CompletedProcess(args, 0, out, "")

    monkeypatch.setattr(jupyter_hub, "sl", sl)
    got = jupyter_hub.one_start(REPO / "examples" / "cluster.yaml", "demo")
    assert got["ok"] is ok and got["inservice_s"] == 150.0 and "full_s" not in got
    assert got["restarts"] == dict(zip(("jupyterhub-proxy", "jupyterhub"), map(int, restarts.split())))


def test_checkpoint_restore_conclude():
    res = checkpoint_restore.conclude({"rebuild_s": 324.6, "restore_s": 18.7}, ["c-compute-1", "c-compute-2"],
                                      ["c-compute-2", "c-compute-1"])
    assert res["ratio"] == 0.058 and res["srun_ok"] is True
    assert checkpoint_restore.conclude({"rebuild_s": 10, "restore_s": 5}, ["a", "b"], ["a"])["srun_ok"] is False


# ------------------------------------------------------------------------------------ the no-VM benchmarks, run
def test_engine_scale_runs_on_the_sim(tmp_path, capsys):
    engine_scale.main(["20", "40", "--results", str(tmp_path)])
    result = json.loads(capsys.readouterr().out)
    saved = list(tmp_path.glob("engine_scale-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text()) == result
    small, big = result["runs"]
    assert (small["nodes"], big["nodes"]) == (20, 40) and big["size_ratio_vs_smallest"] == 2.0
    for r in (small, big):
        assert r["add_batch_nodes"] == 10 and r["add_batch_joins"] == 1
        assert r["launches"] >= r["nodes"] + 10 and r["injected_failures"] >= 1  # 10 % failures, seeded
        assert r["joined_nodes"] == r["nodes"] - 2  # every compute node joined
    assert small["cpu_ratio_vs_smallest"] == 1.0


def test_api_latency_runs_against_a_small_cluster(tmp_path):
    p = subprocess.run([sys.executable, str(BENCH / "api_latency.py"), "--nodes", "12", "--requests", "3",
                        "--results", str(tmp_path)], capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL, env={**os.environ, "TMPDIR": str(tmp_path)})  # its private home
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout)
    assert out["nodes"] == 12 and out["requests_per_op"] == 3
    assert set(out["results"]["boto3"]) == {"DescribeCluster", "ListClusterNodes_page100", "ListClusterNodes_all_pages"}
    assert all(v["n"] == 3 and v["p50_ms"] > 0 for v in out["results"]["raw_http"].values())
    assert len(list(tmp_path.glob("api_latency-*.json"))) == 1


def test_api_latency_seed_and_stats(tmp_path):
    from lab.store.db import Store

    st = Store(tmp_path / "state.db")
    api_latency.seed(st, 7)
    c = st.cluster("bench")
    assert c.status == "InService" and c.full_size_at
    assert [n.phase for n in st.nodes("bench")] == ["running"] * 7
    assert {g.name: g.target_count for g in st.groups("bench")} == {"controller": 1, "login": 1, "compute": 5}
    s = api_latency.stats([0.001, 0.002, 0.003, 0.004])
    assert s == {"n": 4, "p50_ms": 2.5, "p99_ms": 3.97, "max_ms": 4.0, "mean_ms": 2.5}


def test_cluster_timeline_main_runs_the_ways_in_order_and_keeps_what_a_failed_one_leaves(tmp_path, monkeypatch,
                                                                                           capsys):
    """main() with the measuring parts replaced: each engine way gets a spec copy with its Lab.Start,
    a failed way leaves its error and the next way runs, the JSON, the PNG and the note are written."""
    from lab.host import kvm
    from lab.spec import load_spec

    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path / "home"))  # main points it at a new private home
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(ct.tempfile, "tempdir", None)
    monkeypatch.setattr(ct.signal, "signal", lambda *a: None)
    monkeypatch.setattr(ct, "say", lambda msg: None)
    monkeypatch.setattr(ct, "template_check", lambda spec: [])
    monkeypatch.setattr(ct, "host_room", lambda cluster=None: (100000, None, "test"))
    monkeypatch.setattr(kvm, "detect", lambda: types.SimpleNamespace(driver="qemu"))
    calls = []
    node_types = {"ci-controller-1": "Controller", "ci-compute-1": "Compute"}

    def continuous(spec, way, scale_n):
        s = load_spec(spec)
        calls.append((way, s.Lab.Start, scale_n, Path(spec).parent.parent == tmp_path))
        if way == "cold":
            raise SystemExit("cluster failed: no box")
        return {"nodes": 2, "time_to_inservice_s": 40.0, "time_to_first_job_s": 60.0, "time_to_full_size_s": 70.0,
                "reconfigures": 1, "forked": 2, "node_types": node_types,
                "phases": {n: {"boot": [1.0, 9.0], "configure": [9.0, 50.0]} for n in node_types}}

    def naive_run(spec):
        calls.append(("naive", None, None, True))
        return {"time_to_first_job_s": 300.0, "time_to_full_size_s": 280.0, "vagrant_up_s": 100.0,
                "ansible_s": 90.0, "reconfigures": 0, "node_types": node_types,
                "phases": {n: {"boot": [0.0, 90.0], "configure": [100.0, 270.0]} for n in node_types}}

    monkeypatch.setattr(ct, "continuous", continuous)
    monkeypatch.setattr(naive, "run", naive_run)
    with pytest.raises(SystemExit) as e:
        ct.main(["--ways", "naive,cold,warm", "--scale-out", "3", "--results", str(tmp_path / "out")])
    assert e.value.code == 1
    assert calls == [("naive", None, None, True), ("cold", "Cold", 3, True), ("warm", "Warm", 3, True)]
    out = capsys.readouterr()
    result = json.loads(out.out)
    saved = list((tmp_path / "out").glob("cluster_timeline-*.json"))
    assert len(saved) == 1 and json.loads(saved[0].read_text()) == result
    assert (tmp_path / "out" / saved[0].with_suffix(".png").name).exists()
    assert result["ways"] == ["naive", "cold", "warm"] and result["scale_out_requested"] == 3
    assert result["cold"]["error"] == "SystemExit: cluster failed: no box"
    assert result["warm"]["template_check"] == [] and result["naive"]["time_to_first_job_s"] == 300.0
    assert result["ratios"] == {"time_to_first_job_warm_over_naive": 0.2, "time_to_full_size_warm_over_naive": 0.25}
    assert "cold:       failed: SystemExit: cluster failed: no box" in result["note"]
    assert result["note"] in out.err


def test_cluster_timeline_main_stops_at_ctrl_c(tmp_path, monkeypatch, capsys):
    from lab.host import kvm

    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path / "home"))
    monkeypatch.setattr(ct.tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(ct.signal, "signal", lambda *a: None)
    monkeypatch.setattr(ct, "say", lambda msg: None)
    monkeypatch.setattr(ct, "template_check", lambda spec: [])
    monkeypatch.setattr(kvm, "detect", lambda: types.SimpleNamespace(driver="qemu"))
    ran = []

    def continuous(spec, way, scale_n):
        ran.append(way)
        raise KeyboardInterrupt("SIGTERM")

    monkeypatch.setattr(ct, "continuous", continuous)
    with pytest.raises(SystemExit) as e:
        ct.main(["--ways", "warm,cold", "--scale-out", "0", "--results", str(tmp_path / "out")])
    assert e.value.code == 130 and ran == ["warm"]
    result = json.loads(capsys.readouterr().out)
    assert result["warm"]["error"] == "interrupted (SIGTERM)" and result["cold"] is None and result["naive"] is None


# ------------------------------------------------------------------------------------ room.py
def test_room_reads_each_ansible_run_by_playbook_and_host(tmp_path):
    from bench import room

    log = tmp_path / "engine.log"
    log.write_text(
        "2026-12-04 13:54:53,494 lab.configure.runner INFO nodes.yml limit=['room1-compute-1'] ok=True changed={'room1-compute-1': 4} 71.1s\n"
        "2026-12-04 13:55:54,154 lab.configure.runner INFO controller.yml limit=['room2-controller-1'] ok=True changed={} 133.5s\n"
        "2026-12-04 13:56:29,881 lab.configure.runner INFO join.yml limit=['room1-controller-1', 'room1-compute-1'] ok=True changed={} 34.4s\n"
        "2026-12-04 13:56:40,569 lab.configure.runner INFO nodes.yml limit=['room2-compute-1'] ok=True changed={} 64.5s\n"
        "2026-12-04 13:56:41,000 lab.configure.runner INFO nodes.yml limit=['other-compute-1'] ok=True changed={} 9.0s\n"
        "2026-12-04 13:56:42,000 lab.configure.runner INFO nodes.yml limit=['room1-compute-1'] ok=False changed={} 5.0s\n")
    runs = room.ansible_runs(log, {"room1": "local", "room2": "room-b"})
    assert runs == {"nodes.yml": {"local": [71.1], "room-b": [64.5]}, "controller.yml": {"room-b": [133.5]},
                    "join.yml": {"local": [34.4]}}
    assert room.parse_args([]).students == 2
    with pytest.raises(SystemExit):
        room.parse_args(["--students", "1"])
    req = room.request("room1")
    assert [g["InstanceCount"] for g in req["InstanceGroups"]] == [1, 1]
    from lab.spec.catalog import Catalog

    cat = Catalog.load()  # the host limits are sized from it: a changed shape must change the bench too
    assert sum(cat.size(g["InstanceType"]).memory_mib for g in req["InstanceGroups"]) == room.CLUSTER_MIB


# ------------------------------------------------------------------------------------ configure_times.py
def _ev(kind, host, task, start=None, end=None, duration=None):
    data = {"host": host, "task": task}
    if duration is not None:
        data.update(start=start, end=end, duration=duration)
    return {"event": kind, "event_data": data}


def test_configure_times_sums_each_host_s_tasks_and_names_the_slowest(tmp_path):
    from bench import configure_times

    run = tmp_path / "clusters" / "demo" / "ansible" / "20261206-011252-0001-controller"
    (run / "artifacts" / "x" / "job_events").mkdir(parents=True)
    events = [
        {"event": "playbook_on_start", "event_data": {}},
        _ev("runner_on_ok", "ctl", "Read the node's state", "2026-12-06T01:12:52.000000", "2026-12-06T01:12:55.100000", 3.1),
        _ev("runner_on_skipped", "ctl", "Set the hostname"),
        _ev("runner_on_ok", "ctl", "Start MariaDB", "2026-12-06T01:12:55.200000", "2026-12-06T01:13:10.700000", 15.5),
        _ev("runner_on_failed", "ctl", "Wait for slurmctld", "2026-12-06T01:13:10.800000", "2026-12-06T01:13:12.000000", 1.2),
        _ev("runner_on_ok", "cmp", "Read the node's state", "2026-12-06T01:12:53.000000", "2026-12-06T01:12:54.000000", 1.0),
    ]
    for i, e in enumerate(events):
        (run / "artifacts" / "x" / "job_events" / f"{i}-e.json").write_text(json.dumps(e))
    (run / "artifacts" / "x" / "job_events" / "9-broken.json").write_text("{")  # a run killed mid-write
    runs = configure_times.cluster_runs(tmp_path / "clusters" / "demo")
    assert [r["playbook"] for r in runs] == ["controller.yml"]
    r = runs[0]
    assert r["seconds"] == 20.0 and r["started"] == "2026-12-06T01:12:52.000000"
    ctl = r["hosts"]["ctl"]
    assert (ctl["tasks"], ctl["skipped"], ctl["remote_s"]) == (3, 1, 19.8)
    assert ctl["slowest"] == [[15.5, "Start MariaDB"], [3.1, "Read the node's state"], [1.2, "Wait for slurmctld"]]
    assert r["hosts"]["cmp"]["tasks"] == 1
    assert configure_times.cluster_runs(tmp_path / "clusters" / "none") == []


# ------------------------------------------------------------------------------------ class_day.py
def test_class_day_reads_every_run_of_each_job():
    from bench import class_day as cd

    runs = cd.runs_by_name("cd-user01-1|17|COMPLETED\ncd-user01-2|18|NODE_FAIL\ncd-user01-2|18|COMPLETED\n"
                           "cd-user02-1|19_1|COMPLETED\ncd-user02-1|19_2|CANCELLED by 1001\n\n|x|y\n"
                           "cd-user03-1|20|NODE_FAIL\ncd-user03-1|21|COMPLETED\n")
    assert runs == {"cd-user01-1": {"": ["COMPLETED"]}, "cd-user01-2": {"": ["NODE_FAIL", "COMPLETED"]},
                    "cd-user02-1": {"1": ["COMPLETED"], "2": ["CANCELLED"]},
                    "cd-user03-1": {"": ["NODE_FAIL", "COMPLETED"]}}  # an --auto-resume restart: a new job


@pytest.mark.parametrize("kind,tasks,rc,want", [
    ("batch", {"": ["COMPLETED"]}, 0, "completed"),
    ("batch", {"": ["NODE_FAIL", "COMPLETED"]}, 0, "rerun"),  # requeued by Slurm
    ("batch", {"": ["REQUEUED", "COMPLETED"]}, 0, "rerun"),
    ("resume", {"": ["NODE_FAIL", "COMPLETED"]}, 0, "rerun"),
    ("srun", {"": ["NODE_FAIL"]}, 1, "by_fault"),
    ("batch", {"": ["FAILED"]}, 0, "other"),
    ("batch", {"": ["RUNNING"]}, 0, "lost"),  # no final state after the drain
    ("batch", None, 0, "lost"),
    ("batch", None, 1, "refused"),
    ("array", {"1": ["COMPLETED"], "2": ["COMPLETED"]}, 0, "lost"),  # a task missing
    ("array", {i: ["COMPLETED"] for i in "123"}, 0, "completed"),
])
def test_class_day_verdict(kind, tasks, rc, want):
    from bench import class_day as cd

    assert cd.verdict(kind, tasks, rc) == want


def test_class_day_tally_and_schedule():
    from bench import class_day as cd

    sub = [{"name": "a", "kind": "batch", "student": "user01", "at_s": 1.0, "rc": 0},
           {"name": "b", "kind": "srun", "student": "user02", "at_s": 2.0, "rc": 0}]
    t = cd.tally(sub, {"a": {"": ["COMPLETED"]}})
    assert (t["submitted"], t["completed"], t["lost"]) == (2, 1, 1) and t["not_done"][0]["name"] == "b"
    assert t["by_kind"]["srun"]["lost"] == 1
    s = cd.schedule(35, True)
    assert [f for _, f in s] == list(cd.FAULTS) and s[0][0] == 300.0 and s[-1][0] == 1800.0
    assert cd.schedule(35, False) == []
    assert {cd.pick(random.Random(i)) for i in range(200)} == {k for k, _ in cd.KINDS}


def test_class_day_drain_cancels_what_is_left_and_says_so(monkeypatch):
    from bench import class_day as cd

    ran = []

    class Day:
        def on(self, node, command, timeout=900):
            ran.append(command)
            out = "7|RUNNING|cd-user01-3|user01|16:02\n" if "squeue" in command else ""
            return subprocess.CompletedProcess(command, 0, out, "")

    clock = iter([0.0, 0.0, 500.0, 1000.0, 1000.0])
    monkeypatch.setattr(cd.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(cd.time, "sleep", lambda s: None)
    took, left = cd.drain(Day(), timeout=900)
    assert left == ["7|RUNNING|cd-user01-3|user01|16:02"] and took == 1000.0
    assert ran[-1] == "sudo scancel --full 7"


# ------------------------------------------------------------------------------------ lifecycle_rerun.py
def test_lifecycle_rerun_reads_the_commands_times_and_concludes(tmp_path):
    from bench import lifecycle_rerun as lr

    assert lr.times_of("c-compute-1: Succeeded (new fork 9.0 s, scripts' result 16.0 s)") == (9.0, 16.0)
    assert lr.times_of("c-compute-1: Failed") is None
    res = lr.conclude({"rebuild_s": 120.0, "reruns": [{"command_s": 20.0, "ok": True}, {"command_s": 40.0, "ok": True},
                                                       {"command_s": 22.0, "ok": True}, {"command_s": 5.0, "ok": False}]})
    assert res["rerun_median_s"] == 22.0 and res["ratio"] == 0.183 and res["goal_met"] is True
    folder = lr.edited_scripts(REPO / "examples" / "cluster.yaml", tmp_path, 2)
    assert (folder / "on_create.sh").read_text().endswith('echo "Execute script: ./bench"\necho 2 > /etc/bench-rerun\n')
    assert lr.parse_args(["--runs", "5"]).runs == 5
