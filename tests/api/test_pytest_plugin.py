"""The pytest plugin (lab/pytest_plugin.py) as a user runs it: plain `pytest` on a test folder of their own,
the cluster made from a spec on the sim provider (its engine in a process of its own, as on VMs), shared by
the session's tests, reset to its ready checkpoint, and deleted at the end. tests/e2e/test_updates.py runs
examples/verification/ on real VMs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.simlab import spec_text

USER_TESTS = '''
import pytest

pytestmark = pytest.mark.slurm_cluster(spec="cluster.yaml")


def test_first(slurm_cluster):
    d = slurm_cluster.describe()
    assert d["ClusterName"] == "plug" and d["ClusterStatus"] == "InService"
    assert sorted(slurm_cluster.nodes()) == ["plug-compute-1", "plug-compute-2", "plug-controller-1"]
    assert slurm_cluster.checkpoints() == ["pytest-ready"]


def test_second_gets_the_same_cluster_and_resets_it(slurm_cluster):
    c = slurm_cluster.sagemaker
    ids = [n["InstanceId"] for n in c.list_cluster_nodes(ClusterName="plug")["ClusterNodeSummaries"]
           if n["InstanceGroupName"] == "compute"]
    c.batch_delete_cluster_nodes(ClusterName="plug", NodeIds=ids[:1])
    slurm_cluster.reset()
    assert len(slurm_cluster.nodes()) == 3
'''


def _pytest(folder: Path, home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURMLAB_HOME": str(home), "SLURMLAB_SIM_BOOT_TIME": "0.2"}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE", str(folder), *args],
                          cwd=folder, env=env, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL)


def _clusters(home: Path) -> list[str]:
    env = {**os.environ, "SLURMLAB_HOME": str(home)}
    p = subprocess.run([sys.executable, "-m", "lab", "list-clusters", "--output", "json"], env=env,
                       capture_output=True, text=True, timeout=60, check=True)
    return [c["ClusterName"] for c in json.loads(p.stdout)["ClusterSummaries"]]


def test_a_users_folder_gets_a_cluster_from_its_spec_shared_reset_and_deleted(tmp_path):
    folder, home = tmp_path / "mine", tmp_path / "home"
    folder.mkdir()
    (folder / "cluster.yaml").write_text(spec_text(name="plug", logins=0))
    (folder / "test_mine.py").write_text(USER_TESTS)
    try:
        p = _pytest(folder, home, "--slurm-provider", "sim")
        assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]
        assert "2 passed" in p.stdout
        assert _clusters(home) == []  # the session created it, so it deleted it
    finally:
        subprocess.run([sys.executable, "-m", "lab", "engine", "stop"], env={**os.environ, "SLURMLAB_HOME": str(home)},
                       capture_output=True, timeout=60)


def test_without_a_cluster_the_fixture_says_how_to_name_one(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "test_mine.py").write_text("def test_x(slurm_cluster):\n    pass\n")
    p = _pytest(folder, tmp_path / "home")
    assert p.returncode == 1
    assert "--slurm-cluster NAME, --slurm-spec FILE" in p.stdout
    p = _pytest(folder, tmp_path / "home", "--slurm-cluster", "nosuch")
    assert p.returncode == 1 and "no lab cluster nosuch is running" in p.stdout, p.stdout[-3000:]
