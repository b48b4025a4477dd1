"""Issue 2 on the real host: host set-up is idempotent, doctor is green, the box build is cached."""

import json
import subprocess
import sys

import pytest

from lab import box
from lab.host import libvirtd, mode

pytestmark = pytest.mark.e2e


def sl(*args):
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=600,
                          stdin=subprocess.DEVNULL)


def test_host_up_twice_keeps_one_libvirtd_in_the_namespace():
    first = json.loads(sl("host", "up", "--output", "json").stdout)
    second = json.loads(sl("host", "up", "--output", "json").stdout)
    assert first["libvirtd_pid"] == second["libvirtd_pid"]
    if mode.uses_netns():
        st = libvirtd.daemon_state("libvirtd")
        assert st.in_netns, "libvirtd must run inside the lab's network namespace"


def test_doctor_is_green_on_a_prepared_host():
    p = sl("doctor", "--output", "json")
    data = json.loads(p.stdout)
    failing = [r for r in data["probes"] if not r["ok"] and r["severity"] == "blocking"]
    assert p.returncode == 0 and data["ok"], failing


def test_second_box_build_does_nothing():
    assert box.is_current(), "make test builds the box before the tests"
    p = sl("box", "build", "--output", "json")
    assert p.returncode == 0, p.stderr
    assert "up to date" in p.stderr
    info = json.loads(p.stdout)
    assert info["inputs_hash"] == box.inputs_hash()


def test_unknown_box_in_a_spec_is_refused_before_anything_starts(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path / "home"))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "ClusterName: nobox\nInstanceGroups:\n"
        "  - {InstanceGroupName: controller, InstanceType: ml.t3.medium, InstanceCount: 1, SlurmConfig: {NodeType: Controller}}\n"
        "Lab: {Box: nosuch/box}\n"
    )
    p = sl("create-cluster", "--spec", str(spec))
    assert p.returncode == 3, p.stderr
    assert "nosuch/box" in p.stderr and "vagrant box add" in p.stderr
    assert not (tmp_path / "home" / "clusters" / "nobox").exists()
