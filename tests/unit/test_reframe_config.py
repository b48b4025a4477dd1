"""`slurmlab reframe-config` (issue 46): the ReFrame site configuration made from a cluster's records
(lab/verify/reframe.py) and the command. Fast, no VMs; the last tests load the file with ReFrame's own
configuration loader and schema (reframe-hpc, the test extra), skipped only where ReFrame is not installed."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from lab.configure.inventory import ClusterContext
from lab.store.db import GroupRow, NodeRow
from lab.verify import reframe as rf

ROOT = Path(__file__).resolve().parents[2]
HELLO = ROOT / "examples" / "reframe" / "hello.py"
WHEN = datetime(2026, 12, 7, 12, 0, tzinfo=timezone.utc)


def _group(name, node_type, parts=(), cpus=1, mem=768, count=1):
    return GroupRow("lab1", name, "ml.t3.medium", node_type, count, list(parts), cpus, mem, "InService")


def _nodes(group, count, phase="running"):
    return [NodeRow("lab1", f"lab1-{group}-{i}", group, i, f"i-{group}{i}", f"10.0.0.{i}", "", phase)
            for i in range(1, count + 1)]


def context(mpi_default="pmix", gpus=None, name="lab1") -> ClusterContext:
    """Two compute groups in different partitions (dev: 2 nodes of 1 vCPU / 768 MiB; big: 1 of 2 vCPUs /
    2048 MiB, a second one still booting), a login node and the controller."""
    groups = [_group("controller", "Controller"), _group("login", "Login"),
              _group("compute", "Compute", ["dev"], count=2), _group("big", "Compute", ["big"], cpus=2, mem=2048, count=2)]
    nodes = (_nodes("controller", 1) + _nodes("login", 1) + _nodes("compute", 2) + _nodes("big", 1)
             + [NodeRow("lab1", "lab1-big-2", "big", 2, "i-big2", "", "", "booting")])
    return ClusterContext(name=name, groups=groups, nodes=nodes, ssh_key=Path("/k"), munge_key=Path("/m"),
                          ssh_executable="ssh", gpus=gpus or {}, mpi_default=mpi_default)


def _load(text: str) -> dict:
    """The file's site_configuration, by running it as Python (what ReFrame does)."""
    ns: dict = {}
    exec(compile(text, "lab1.py", "exec"), ns)
    return ns["site_configuration"]


# ------------------------------------------------------------------ the file


def test_the_file_is_python_with_a_header_saying_what_it_is():
    text = rf.render(context(), WHEN)
    ast.parse(text)
    head = [line for line in text.splitlines() if line.startswith("#")]
    assert "slurmlab cluster lab1" in head[0] and "2026-12-07 12:00 UTC" in "\n".join(head)
    assert any("reframe -C /etc/slurmlab/reframe/lab1.py -c hello.py -r" in line for line in head)
    assert _load(text) == rf.site_configuration(context())


def test_partitions_processor_and_memory_from_the_groups():
    conf = _load(rf.render(context(), WHEN))
    (system,) = conf["systems"]
    assert system["name"] == "lab1" and system["descr"] == "slurmlab cluster lab1"
    assert system["hostnames"] == [r"^lab1-controller-\d+$", r"^lab1-login-\d+$"]
    dev, big = system["partitions"]
    assert [dev["name"], big["name"]] == ["dev", "big"]
    assert dev["scheduler"] == "slurm" and dev["launcher"] == "srun" and dev["access"] == ["-p dev"]
    assert big["access"] == ["-p big"] and "(the default)" in dev["descr"] and "default" not in big["descr"]
    # Slurm's CPUs: 2 per vCPU (lab/spec/catalog.py); RealMemory: 0.75 of the VM's
    assert dev["processor"] == {"arch": "x86_64", "num_cpus": 2, "num_cpus_per_core": 1, "num_sockets": 1,
                                "num_cpus_per_socket": 2}
    assert big["processor"]["num_cpus"] == 4 and big["processor"]["num_cpus_per_socket"] == 4
    assert dev["extras"] == {"num_nodes": 2, "mem_per_node_mib": 576, "gpus_per_node": 0}
    assert big["extras"] == {"num_nodes": 1, "mem_per_node_mib": 1536, "gpus_per_node": 0}  # the booting one not yet
    assert dev["resources"] == [{"name": "memory", "options": ["--mem={size}"]}]
    assert "devices" not in dev and "devices" not in big
    assert conf["logging"][0]["handlers$"][0]["name"] == "stdout"


def test_groups_sharing_a_partition_give_what_every_node_has():
    ctx = context()
    ctx.groups[3].partitions = ["dev"]
    (dev,) = rf.site_configuration(ctx)["systems"][0]["partitions"]
    assert dev["processor"]["num_cpus"] == 2 and dev["extras"]["mem_per_node_mib"] == 576
    assert dev["extras"]["num_nodes"] == 3 and "compute, big" in dev["descr"]


def test_lmod_with_the_workshop_box_and_its_modules():
    conf = rf.site_configuration(context("pmix"))
    system = conf["systems"][0]
    assert system["modules_system"] == "lmod"
    for p in system["partitions"]:
        assert p["environs"] == ["gnu", "openmpi"] and p["prepare_cmds"] == [". /etc/profile.d/lmod.sh"]
    envs = {e["name"]: e for e in conf["environments"]}
    assert envs["gnu"]["modules"] == ["gcc/14.2.0"] and envs["gnu"]["cc"] == "gcc"
    assert envs["openmpi"]["modules"] == ["gcc/14.2.0", "openmpi/5.0.7"] and envs["openmpi"]["cc"] == "mpicc"
    assert all(e["target_systems"] == ["lab1"] for e in conf["environments"])


def test_the_modules_are_the_ones_the_box_documents():
    box = (ROOT / "docs" / "box.md").read_text()
    assert f"`{rf.GCC_MODULE}`" in box and f"`{rf.OPENMPI_MODULE}`" in box


def test_nomod_without_the_workshop_box():
    conf = rf.site_configuration(context("none"))
    system = conf["systems"][0]
    assert system["modules_system"] == "nomod"
    assert all(p["environs"] == ["gnu"] and "prepare_cmds" not in p for p in system["partitions"])
    assert conf["environments"] == [{"name": "gnu", "modules": [], "cc": "gcc", "cxx": "g++", "ftn": "gfortran",
                                     "target_systems": ["lab1"]}]


def test_a_gpu_group_gets_devices_and_the_gres_resource():
    dev, big = rf.site_configuration(context(gpus={"big": 2}))["systems"][0]["partitions"]
    assert big["devices"] == [{"type": "gpu", "model": "emulated", "num_devices": 2}]
    assert {"name": "_rfm_gpu", "options": ["--gres=gpu:{num_gpus_per_node}"]} in big["resources"]
    assert big["extras"]["gpus_per_node"] == 2 and "devices" not in dev


def test_names_reframe_refuses_are_made_valid():
    assert rf.rfm_name("lab-1_a") == "lab-1_a" and rf.rfm_name("9lab") == "_9lab" and rf.rfm_name("a.b") == "a_b"
    assert rf.site_configuration(context(name="7up"))["systems"][0]["name"] == "_7up"


# ------------------------------------------------------------------ the command


def _cli(home, *args):
    return subprocess.run([sys.executable, "-m", "lab", *args], env={**os.environ, "SLURMLAB_HOME": str(home)},
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_an_unknown_cluster_is_not_found(tmp_path):
    from lab import exitcodes

    p = _cli(tmp_path, "reframe-config", "nosuch")
    assert p.returncode == exitcodes.NOT_FOUND, p.stderr
    assert "no cluster named 'nosuch'" in p.stderr and p.stdout == ""


def test_the_command_prints_or_writes_a_sim_clusters_file_and_will_not_install_it(lab_home, tmp_path):
    from typer.testing import CliRunner

    from lab.cli import app
    from lab.control import clusters
    from lab.engine import daemon
    from lab.errors import LabError
    from lab.spec import loads_spec

    spec = "\n".join(line for line in (ROOT / "examples" / "small.yaml").read_text().splitlines()
                     if "LifeCycleConfig" not in line)
    clusters.create(daemon.store(), loads_spec(spec), provider="sim", start_engine=False)
    res = CliRunner().invoke(app, ["reframe-config", "ci"])
    assert res.exit_code == 0, res.output
    conf = _load(res.stdout)
    assert [p["name"] for p in conf["systems"][0]["partitions"]] == ["dev"]
    target = tmp_path / "ci.py"
    res = CliRunner().invoke(app, ["reframe-config", "ci", "-o", str(target)])
    assert res.exit_code == 0 and _load(target.read_text()) == conf
    res = CliRunner().invoke(app, ["reframe-config", "ci", "--install"])
    assert isinstance(res.exception, LabError) and "simulated" in res.exception.message


def test_the_install_command_writes_both_files_readable_by_all():
    from lab.cmd.reframe import install_command

    cmd = install_command("lab1")
    assert "sudo tee /etc/slurmlab/reframe/lab1.py.new" in cmd and "sudo mv -f /etc/slurmlab/reframe/lab1.py.new" in cmd
    assert "export RFM_CONFIG_FILES=/etc/slurmlab/reframe/lab1.py" in cmd and "chmod 0644" in cmd
    assert subprocess.run(["sh", "-n", "-c", cmd]).returncode == 0


# ------------------------------------------------------------------ the box


def test_the_workshop_box_carries_reframe_and_forky_not():
    from lab.box import recipe as rc

    trixie, forky = rc.default_recipe("trixie"), rc.default_recipe("forky")
    assert "reframe-hpc==4.10.4" in trixie.wheels and "archspec==0.2.7" in trixie.wheels
    assert not any(w.startswith(("reframe", "archspec")) for w in forky.wheels)
    assert all("==" in w for w in rc.WORKSHOP_WHEELS)  # pinned: the same box from the same inputs
    assert 'reframe -V' in rc.CUSTOMIZE_SCRIPT.read_text()


def test_debian_packages_cover_reframes_dependencies():
    """Each of the wheel's requirements is a python3-* package of the workshop, a wheel of its own, or
    polars (left out: results storage only)."""
    md = pytest.importorskip("importlib.metadata")
    try:
        requires = md.requires("reframe-hpc") or []
    except md.PackageNotFoundError:
        pytest.skip("reframe-hpc is not installed")
    from lab.box import recipe as rc

    names = {r.split(";")[0].split("~")[0].split(">")[0].split("=")[0].strip().lower() for r in requires
             if "extra ==" not in r}
    debian = {"pyyaml": "python3-yaml"}
    wheels = {w.split("==")[0] for w in rc.WORKSHOP_WHEELS}
    missing = [n for n in sorted(names - {"polars"} - wheels) if debian.get(n, f"python3-{n}") not in rc.WORKSHOP_PACKAGES]
    assert missing == []


# ------------------------------------------------------------------ ReFrame's own loader and schema


def _write(tmp_path, ctx) -> Path:
    path = tmp_path / f"{ctx.name}.py"
    path.write_text(rf.render(ctx, WHEN))
    return path


@pytest.mark.parametrize("ctx", [context("pmix", {"big": 2}), context("none")], ids=["lmod-gpu", "nomod"])
def test_reframe_loads_and_validates_the_file(tmp_path, ctx):
    config = pytest.importorskip("reframe.core.config")
    site = config.load_config(str(_write(tmp_path, ctx)))
    site.validate()  # the JSON schema (reframe/schemas/config.json)
    site.select_subconfig("lab1", ignore_resolve_errors=False)  # every partition's environments exist
    assert site.get("systems/0/modules_system") == ctx_modules(ctx)
    assert [p["name"] for p in site.get("systems/0/partitions")] == ["dev", "big"]
    assert site.get("systems/0/partitions/@big/processor/num_cpus") == 4


def ctx_modules(ctx) -> str:
    return "lmod" if ctx.mpi_default == "pmix" else "nomod"


def test_reframe_lists_the_hello_check_with_the_file(tmp_path):
    pytest.importorskip("reframe")
    path = _write(tmp_path, context("none"))
    env = {**os.environ, "HOME": str(tmp_path), "RFM_CONFIG_FILES": ""}
    main = "import sys; from reframe.frontend.cli import main; sys.argv[0] = 'reframe'; sys.exit(main())"
    p = subprocess.run([sys.executable, "-c", main, "-C", str(path), "--system=lab1", "-c", str(HELLO), "-l"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "hello_nodes" in p.stdout and "Found 1 check(s)" in p.stdout
