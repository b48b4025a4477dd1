"""`slurmlab lifecycle rerun` as a user runs it, on the sim provider with its engine in a process of its own:
the node gets a new instance under its name, the result comes with its times, the others keep theirs.
(On VMs, with the scripts' output live: tests/e2e/test_updates.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


def _lab(home: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLURMLAB_HOME": str(home), "SLURMLAB_SIM_BOOT_TIME": "0.2"}
    p = subprocess.run([sys.executable, "-m", "lab", *args], env=env, capture_output=True, text=True, timeout=300,
                       stdin=subprocess.DEVNULL)
    assert not check or p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return p


def _ids(home: Path) -> dict[str, str]:
    nodes = json.loads(_lab(home, "list-cluster-nodes", "demo", "--output", "json").stdout)["ClusterNodeSummaries"]
    return {n["NodeLogicalId"]: n["InstanceId"] for n in nodes}


def test_rerun_of_a_node_gives_it_a_new_instance_and_says_when_its_scripts_ended(tmp_path):
    home = tmp_path / "home"
    try:
        _lab(home, "create-cluster", "--spec", str(EXAMPLE), "--provider", "sim", "--wait")
        before = _ids(home)
        got = json.loads(_lab(home, "lifecycle", "rerun", "demo", "demo-compute-1", "--output", "json").stdout)
        assert got["Source"] == {"compute": str(EXAMPLE.parent / "lifecycle")}
        [node] = got["Nodes"]
        assert node["Node"] == "demo-compute-1" and node["Result"] == "Succeeded", got
        assert 0 < node["Seconds"]["NewInstance"] <= node["Seconds"]["Scripts"]
        after = _ids(home)
        assert after["demo-compute-1"] != before["demo-compute-1"]
        assert {k: v for k, v in after.items() if k != "demo-compute-1"} == \
            {k: v for k, v in before.items() if k != "demo-compute-1"}
        p = _lab(home, "lifecycle", "rerun", "demo", "nosuch", check=False)
        assert p.returncode != 0 and "no node or group named 'nosuch'" in p.stderr
    finally:
        _lab(home, "engine", "stop", check=False)
