"""Issue 5's real-VM pass: unmodified boto3 against `slurmlab serve --provider vagrant`.

Create (a controller-only cluster, to keep CI short), InService, node list, delete; nothing left.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from lab.host import libvirtd

pytestmark = pytest.mark.e2e

ROLE = "arn:aws:iam::000000000000:role/lab"
LIFECYCLE = Path(__file__).resolve().parents[2] / "examples" / "lifecycle"  # a local folder


@pytest.fixture
def server(tmp_path):
    state = tmp_path / "state"
    log = open(tmp_path / "serve.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "lab", "serve", "--provider", "vagrant", "--port", "0",
                             "--state-dir", str(state)], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env={**os.environ, "SLURMLAB_HOME": str(state)})
    deadline = time.monotonic() + 60
    while not (state / "serve.json").exists():
        assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
        time.sleep(0.2)
    time.sleep(0.3)
    url = json.loads((state / "serve.json").read_text())["url"]
    client = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="x", aws_secret_access_key="x")
    yield client, state
    try:
        client.delete_cluster(ClusterName="api")
    except Exception:  # noqa: BLE001 - already gone
        pass
    subprocess.run([sys.executable, "-m", "lab", "delete-cluster", "api"], env={**os.environ, "SLURMLAB_HOME": str(state)},
                   capture_output=True, timeout=600)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=30)
    subprocess.run([sys.executable, "-m", "lab", "engine", "stop"], env={**os.environ, "SLURMLAB_HOME": str(state)},
                   capture_output=True, timeout=60)


def test_boto3_creates_lists_and_deletes_a_real_cluster(server):
    client, state = server
    arn = client.create_cluster(
        ClusterName="api",
        NodeProvisioningMode="Continuous",
        InstanceGroups=[{
            "InstanceGroupName": "controller", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
            "ExecutionRole": ROLE, "SlurmConfig": {"NodeType": "Controller"},
            "LifeCycleConfig": {"SourceS3Uri": str(LIFECYCLE), "OnCreate": "on_create.sh"},
        }],
    )["ClusterArn"]
    assert arn.startswith("arn:aws:sagemaker:")
    deadline = time.monotonic() + 1200
    while True:
        d = client.describe_cluster(ClusterName="api")
        if d["ClusterStatus"] in ("InService", "Failed") or time.monotonic() > deadline:
            break
        time.sleep(5)
    assert d["ClusterStatus"] == "InService", d
    nodes = client.list_cluster_nodes(ClusterName="api")["ClusterNodeSummaries"]
    assert [(n["InstanceGroupName"], n["InstanceStatus"]["Status"]) for n in nodes] == [("controller", "Running")]
    detail = client.describe_cluster_node(ClusterName="api", NodeId=nodes[0]["InstanceId"])["NodeDetails"]
    assert detail["PrivateDnsHostname"] == "api-controller-1"
    # the node is a real VM with a real slurmctld
    out = subprocess.run([sys.executable, "-m", "lab", "ssh", "api", "controller", "--", "systemctl is-active slurmctld"],
                         env={**os.environ, "SLURMLAB_HOME": str(state)}, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "active", out.stderr
    client.delete_cluster(ClusterName="api")
    deadline = time.monotonic() + 600
    while any(c["ClusterName"] == "api" for c in client.list_clusters()["ClusterSummaries"]):
        assert time.monotonic() < deadline, "cluster never went away"
        time.sleep(3)
    conn = libvirtd.connect()
    try:
        assert [d.name() for d in conn.listAllDomains() if d.name().startswith("api-")] == []
    finally:
        conn.close()
