"""The box's workshop pieces (issue 44): its packages per line, the ROCm placeholder package, the
customize step that writes the modulefiles and seff, seff's report, and MpiDefault per box.

Fast, no root, no network: customize.sh's block runs against a directory, with `in_root` faked.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from lab.box import image
from lab.box import recipe as rc
from lab.configure import inventory
from lab.configure.ansible import AnsibleConfigurer
from lab.store.db import ClusterRow, GroupRow, NodeRow
from tests.unit.scripts import load_script

SEFF = rc.FILES_DIR / "seff"


def _seff():
    return load_script("seff", SEFF)


# ------------------------------------------------------------------ recipe


def test_the_default_line_has_the_workshop_and_forky_not():
    trixie, forky = rc.default_recipe("trixie"), rc.default_recipe("forky")
    assert rc.has_workshop(trixie) and set(rc.WORKSHOP_PACKAGES) <= set(trixie.packages)
    assert {"gcc", "g++", "gfortran", "make", "openmpi-bin", "libopenmpi-dev", "python3-mpi4py",
            "python3-numpy", "lmod"} <= set(trixie.packages)
    # forky's Slurm has no mpi_pmix: no workshop there, so no placeholders and no excludes for it
    assert not rc.has_workshop(forky) and forky.placeholders == ()
    assert not set(rc.DPKG_WORKSHOP) & set(forky.dpkg_options)
    assert set(rc.DPKG_WORKSHOP) <= set(trixie.dpkg_options)


def test_the_marker_names_the_workshop_feature_only_where_it_is():
    def features(r):
        return json.loads(rc.render_marker(name="n", inputs_hash="h", built_at="t", recipe=r,
                                           slurm_version="24.11.5", kernel="k"))["features"]

    assert features(rc.default_recipe("trixie")) == ["warm-start", rc.WORKSHOP_FEATURE]
    assert features(rc.default_recipe("forky")) == ["warm-start"]


def test_dpkg_excludes_keep_the_compilers_and_drop_rocm_modules():
    pats = [o.split("=", 1)[1] for o in rc.DPKG_WORKSHOP]
    from fnmatch import fnmatch

    def excluded(path):
        return any(fnmatch(path, p) for p in pats)

    assert excluded("/usr/lib/x86_64-linux-gnu/ucx/libuct_rocm.so.0")
    assert excluded("/usr/bin/x86_64-linux-gnu-lto-dump-14")
    assert excluded("/usr/lib/x86_64-linux-gnu/libasan.so.8.0.0")
    assert excluded("/usr/lib/gcc/x86_64-linux-gnu/14/libtsan.a")
    for kept in ("/usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0", "/usr/bin/x86_64-linux-gnu-gcc-14",
                 "/usr/lib/gcc/x86_64-linux-gnu/14/lto1", "/usr/lib/gcc/x86_64-linux-gnu/14/cc1",
                 "/usr/lib/x86_64-linux-gnu/libgfortran.so.5", "/usr/lib/x86_64-linux-gnu/libmpi.so.40"):
        assert not excluded(kept), kept


def test_placeholder_package_provides_exactly_the_rocm_names(tmp_path, monkeypatch):
    control = rc.render_placeholder_control(rc.PLACEHOLDERS)
    fields = dict(line.split(": ", 1) for line in control.splitlines() if not line.startswith(" "))
    assert fields["Package"] == "slurmlab-placeholders" and fields["Architecture"] == "all"
    assert fields["Provides"] == "libamdhip64-5 (= 5.7.1-6+deb13u1), libhsa-runtime64-1 (= 6.1.2-3)"
    # dpkg-deb accepts it (the builder's own command)
    calls = []
    b = image._Build(recipe=rc.Recipe(), work=tmp_path, log=None, say=lambda *a: None)
    monkeypatch.setattr(image, "run", lambda cmd, **kw: calls.append(cmd))
    args = image._placeholders(b)
    deb = tmp_path / "slurmlab-placeholders_1_all.deb"
    assert args == [f"--include={deb}", f"--hook-dir={image.PLACEHOLDER_HOOKS}"]
    assert calls[0][:3] == ["dpkg-deb", "--root-owner-group", "--build"]
    subprocess.run(calls[0], check=True, capture_output=True)
    info = subprocess.run(["dpkg-deb", "--field", str(deb), "Provides"], check=True, capture_output=True, text=True)
    assert info.stdout.strip() == fields["Provides"]
    # no placeholders, no package and no extra arguments
    assert image._placeholders(dataclasses.replace(b, recipe=rc.default_recipe("forky"))) == []


def test_inputs_hash_covers_the_box_files(monkeypatch, tmp_path):
    before = rc.inputs_hash(rc.Recipe(), "s")
    (tmp_path / "seff").write_text("#!/bin/sh\necho other\n")
    monkeypatch.setattr(rc, "FILES_DIR", tmp_path)
    assert rc.inputs_hash(rc.Recipe(), "s") != before


# ------------------------------------------------------------------ customize.sh's workshop block


def _workshop_block() -> str:
    text = rc.CUSTOMIZE_SCRIPT.read_text()
    start = text.index('if [ -x "$R/usr/bin/mpicc.openmpi" ]; then')
    return text[start: text.index("\nfi\n", start) + 4]


def test_customize_writes_seff_and_modulefiles_named_by_versions(tmp_path):
    root = tmp_path / "root"
    for d in ("usr/bin", "usr/local/bin", "etc/lmod"):
        (root / d).mkdir(parents=True)
    (root / "usr/bin/mpicc.openmpi").write_text("")
    (root / "usr/bin/mpicc.openmpi").chmod(0o755)
    (root / "usr/bin/mpicc").symlink_to("/etc/alternatives/mpicc")  # as in the image: dangling from here
    versions = {"gcc-14": "14.2.0-19", "libopenmpi-dev": "5.0.7-1", "python3-mpi4py": "4.0.3-4",
                "python3-numpy": "1:2.2.4+ds-1"}
    fake = "\n".join(f'    *" {p}") echo -n "{v}" ;;' for p, v in versions.items())
    script = (f'set -eu\nR={root}\nFILES={rc.FILES_DIR}\nsay() {{ :; }}\n'
              f'in_root() {{\n  case "$*" in\n{fake}\n    *) : ;;\n  esac\n}}\n{_workshop_block()}')
    (tmp_path / "block.sh").write_text(script)
    subprocess.run(["sh", str(tmp_path / "block.sh")], check=True)
    mods = root / "etc/lmod/modules"
    assert sorted(str(p.relative_to(mods)) for p in mods.rglob("*.lua")) == [
        "gcc/14.2.0.lua", "mpi4py/4.0.3.lua", "openmpi/5.0.7.lua"]
    ompi = (mods / "openmpi/5.0.7.lua").read_text()
    assert 'setenv("SLURM_MPI_TYPE", "pmix")' in ompi and 'family("mpi")' in ompi
    assert 'depends_on("openmpi")' in (mods / "mpi4py/4.0.3.lua").read_text()
    assert "numpy 2.2.4" in (mods / "mpi4py/4.0.3.lua").read_text()
    assert (root / "etc/lmod/.modulespath").read_text() == "/etc/lmod/modules\n"
    seff = root / "usr/local/bin/seff"
    assert seff.read_text() == SEFF.read_text() and seff.stat().st_mode & 0o777 == 0o755


def test_customize_skips_the_workshop_without_mpi(tmp_path):
    root = tmp_path / "root"
    (root / "usr/bin").mkdir(parents=True)
    (tmp_path / "block.sh").write_text(f"set -eu\nR={root}\nFILES=/nonexistent\nsay() {{ :; }}\n"
                                       f"in_root() {{ exit 9; }}\n{_workshop_block()}")
    subprocess.run(["sh", str(tmp_path / "block.sh")], check=True)
    assert not (root / "etc").exists()


# ------------------------------------------------------------------ seff

# sacct -P -n --noconvert -j 7 --format=<seff.FIELDS>, for a 2-node, 4-task MPI job (recorded shape)
SACCT_7 = """\
7|mpi|user01|user01|COMPLETED|demo|4|2|20|00:30.000|billing=4,cpu=4,mem=1152M,node=2||0:0
7.batch|batch||||demo|2|1|20|00:02.100|cpu=2,mem=576M,node=1|cpu=00:00:02,energy=0,fs/disk=1000,mem=31457280,pages=0,vmem=0|0:0
7.0|a.out||||demo|4|2|18|00:27.900|cpu=4,mem=1152M,node=2|cpu=00:00:27,energy=0,fs/disk=2000,mem=104857600,pages=0,vmem=0|0:0
"""


def _rows(text):
    seff = _seff()
    return seff, [dict(zip(seff.FIELDS, line.split("|"))) for line in text.splitlines()]


def test_seff_report_of_a_finished_mpi_job():
    seff, rows = _rows(SACCT_7)
    r = seff.report(rows)
    assert r["cpus"] == 4 and r["nodes"] == 2 and r["cores_per_node"] == 2
    assert r["core_walltime_s"] == 80 and r["cpu_used_s"] == 30.0
    assert r["cpu_efficiency_percent"] == 37.5
    assert r["memory_used_mib"] == 100.0 and r["memory_allocated_mib"] == 1152.0
    assert r["memory_efficiency_percent"] == pytest.approx(8.68, abs=0.01)
    out = seff.text(r)
    assert "CPU Efficiency: 37.50% of 00:01:20 core-walltime" in out
    assert "Memory Efficiency: 8.68% of 1.12 GB" in out and "State: COMPLETED (exit code 0)" in out
    assert "WARNING" not in out


def test_seff_warns_on_a_running_job_and_parses_day_times():
    seff, rows = _rows("9|x|u|u|RUNNING|demo|2|1|90000|1-01:00:00|cpu=2,mem=500M,node=1||0:0\n")
    r = seff.report(rows)
    assert r["running"] and r["cpu_used_s"] == 90000 and r["memory_used_mib"] == 0
    assert "WARNING: the job is not finished" in seff.text(r)
    assert seff.seconds("05:02.5") == 302.5 and seff.clock(90061) == "1-01:01:01"


def test_seff_usage_and_unknown_job(tmp_path, capsys, monkeypatch):
    seff = _seff()
    assert seff.main([]) == 2 and "usage: seff" in capsys.readouterr().err
    assert seff.main(["12;rm"]) == 2
    fake = tmp_path / "sacct"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert seff.main(["41"]) == 1
    assert "job 41 is not in Slurm's accounting" in capsys.readouterr().err


# ------------------------------------------------------------------ MpiDefault per box


@pytest.mark.parametrize("features,want", [(["warm-start", "workshop"], "pmix"), (["warm-start"], "none"), ([], "none")])
def test_mpi_default_follows_the_controllers_box(monkeypatch, features, want):
    from lab import box

    seen = []
    monkeypatch.setattr(box, "features", lambda name: seen.append(name) or features)
    c = ClusterRow("demo", "arn:x", "InService", None, {"Lab": {"Box": "slurmlab/trixie-slurm"}}, "fake", 1, 0.0)
    groups = [GroupRow("demo", "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "InService"),
              GroupRow("demo", "compute", "ml.c5.large", "Compute", 1, ["dev"], 1, 768, "InService")]
    ctl = NodeRow(cluster="demo", name="demo-controller-1", grp="controller", ordinal=1, instance_id="i-1", address="10.0.0.2", mac="m",
                  phase="running", image="slurmlab/trixie-slurm-2")
    assert AnsibleConfigurer._mpi_default(c, groups, [ctl]) == want
    assert seen == ["slurmlab/trixie-slurm-2"]  # the controller's own image (after a software update)
    seen.clear()
    AnsibleConfigurer._mpi_default(c, groups, [dataclasses.replace(ctl, image=None)])
    assert seen == ["slurmlab/trixie-slurm"]  # else the cluster's box


def test_inventory_carries_mpi_default():
    ctx = inventory.ClusterContext(name="c", groups=[], nodes=[], ssh_key=Path("/k"), munge_key=Path("/m"),
                                   ssh_executable="ssh", mpi_default="pmix")
    assert inventory.build(ctx)["all"]["vars"]["slurmlab_mpi_default"] == "pmix"


# ------------------------------------------------------------------ Slurm's CPUs (docs/adr/0031)


def test_slurm_sees_two_cpus_per_vcpu_as_aws_counts_them():
    from lab.spec import catalog

    # ml.c5.large: 2 vCPUs on AWS, a 1-vCPU VM here, CPUs=2 in slurm.conf; ml.c5.xlarge: 4, 2, 4
    assert catalog.slurm_cpus(catalog.DEFAULTS["ml.c5.large"].vcpus) == 2
    assert catalog.slurm_cpus(catalog.DEFAULTS["ml.c5.xlarge"].vcpus) == 4
    g = GroupRow("demo", "compute", "ml.c5.large", "Compute", 2, ["dev"], 1, 768, "InService")
    n = NodeRow(cluster="demo", name="demo-compute-1", grp="compute", ordinal=1, instance_id="i-1",
                address="10.0.0.3", mac="m", phase="running")
    ctx = inventory.ClusterContext(name="demo", groups=[g], nodes=[n], ssh_key=Path("/k"), munge_key=Path("/m"),
                                   ssh_executable="ssh")
    assert [x["cpus"] for x in inventory.slurm_nodes(ctx)] == [2]
    assert inventory.build(ctx)["all"]["children"]["slurm_compute"]["hosts"]["demo-compute-1"]["slurmlab_cpus"] == 2


def test_slurmd_takes_slurm_conf_s_cpus_over_the_vms():
    import yaml

    defaults = yaml.safe_load((Path(rc.HERE).parents[1] / "roles/slurm_controller/defaults/main.yml").read_text())
    assert defaults["slurm_controller_config_defaults"]["SlurmdParameters"] == "config_overrides"
