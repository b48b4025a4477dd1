"""Issue 4 on real VMs: the same shortage in the legacy mode rolls everything back.

examples/small.yaml without NodeProvisioningMode (legacy: all or nothing) and without its login
group, one ml.c5.large for two compute nodes: the cluster goes RollingBack, every VM is removed (also
those still booting), then Failed with a FailureMessage that names the group and the reason; libvirt
keeps nothing of it. One attempt (SLURMLAB_LEGACY_ATTEMPTS=1): how many attempts a legacy create makes
before it rolls back is the engine's logic, proven on the sim provider (tests/unit/test_engine_legacy.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from lab.host import libvirtd
from lab.providers import network

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
CAPACITY = Path(__file__).parent / "data" / "capacity-one-compute.yaml"
NAME = "legacy"


def sl(home: Path, *args, timeout=900):
    return subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL,
                          env={**os.environ, "SLURMLAB_HOME": str(home), "SLURMLAB_LEGACY_ATTEMPTS": "1"})


def test_legacy_shortage_rolls_back_and_leaves_nothing(tmp_path):
    home = tmp_path / "home"
    spec = tmp_path / "legacy.yaml"
    doc = yaml.safe_load((REPO / "examples" / "small.yaml").read_text())
    del doc["NodeProvisioningMode"]
    doc["ClusterName"] = NAME
    # the controller and the compute nodes show the rollback; a login node would only add a VM
    doc["InstanceGroups"] = [{**g, "LifeCycleConfig": {**g["LifeCycleConfig"], "SourceS3Uri": str(REPO / "examples" / "lifecycle")}}
                             for g in doc["InstanceGroups"] if g["InstanceGroupName"] != "login"]
    spec.write_text(yaml.safe_dump(doc))
    assert sl(home, "delete-cluster", NAME, "--leftovers").returncode == 0  # a killed run's (another home)
    try:
        p = sl(home, "create-cluster", "--spec", str(spec), "--capacity", str(CAPACITY))
        assert p.returncode == 0, p.stderr
        deadline = time.monotonic() + 1200
        while True:
            d = json.loads(sl(home, "describe-cluster", NAME, "--output", "json").stdout)
            if d["ClusterStatus"] == "Failed" or time.monotonic() > deadline:
                break
            time.sleep(5)
        assert d["ClusterStatus"] == "Failed", d
        assert "compute" in d["FailureMessage"] and "InsufficientCapacity" in d["FailureMessage"], d["FailureMessage"]
        conn = libvirtd.connect()
        try:
            assert [x.name() for x in conn.listAllDomains() if x.name().startswith(f"{NAME}-")] == []
            assert network.net_name(NAME) not in [n.name() for n in conn.listAllNetworks()]
            pool = conn.storagePoolLookupByName(libvirtd.POOL)
            pool.refresh(0)
            assert [v.name() for v in pool.listAllVolumes() if v.name().startswith(f"{NAME}-")] == []
        finally:
            conn.close()
    finally:
        sl(home, "delete-cluster", NAME)
        sl(home, "engine", "stop")
