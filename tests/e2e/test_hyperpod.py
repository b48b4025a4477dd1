"""Issue 28 on real VMs: HyperPod-shaped nodes built by HyperPod-style lifecycle scripts.

As a HyperPod user does it: `aws s3 sync` of the lab's own bundle (examples/hyperpod-lifecycle, written
to the contract of AWS's base-config) to the lab's S3, then boto3's CreateCluster of an older-style
request (no SlurmConfig: provisioning_parameters.json names the groups). The scripts read
resource_config.json and provisioning_parameters.json, find their role by their address, add users,
set up accounting and start slurmctld and slurmd; the cluster runs `srun` on its worker as a user the
scripts added, and `sacct` answers (one worker: two took CI's time, and multi-node jobs are the class
cluster's, tests/e2e/test_cluster.py). The
node environment's files are checked field by field against the API's answers.

(Until issue 43 a third group ran a copy of the scripts with one bad command on a VM of its own: 75-92 s
of VM CPU per CI run. What it proved is proved where it can be seen: the failing step named with its
last lines and without the traceback, by the lifecycle playbook on a fake guest
(tests/unit/test_roles_fake_guest.py); a failed configuration as the node's message and an Error event
while the other nodes go on, on the sim engine (tests/unit/test_engine_health.py,
test_engine_recovery.py); a group deleted with the others untouched, tests/unit/test_engine_ops.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.homes import close_home
from tests.e2e.labcli import Cluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "examples" / "hyperpod-lifecycle"
NAME = "hp"
ROLE = "arn:aws:iam::000000000000:role/lab"
AWS = str(Path(sys.executable).with_name("aws"))
CONTROLLER, WORKERS = "controller-machine", "worker-group-1"


def sl(*args, check=True, timeout=900) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL)
    if check and p.returncode != 0:
        raise AssertionError(f"slurmlab {' '.join(args)} exited {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
    return p


def on(node: str, command: str) -> str:
    return Cluster(NAME).on(node, command)


def _wait(what, timeout: float, why: str, every: float = 5):
    deadline = time.monotonic() + timeout
    while True:
        got = what()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {why}")
        time.sleep(every)


class Api:
    def __init__(self, url: str):
        import boto3

        self.url = url
        self.sm = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x",
                               aws_secret_access_key="x")

    def s3(self, *args: str) -> str:
        env = {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
               "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_PAGER": ""}
        p = subprocess.run([AWS, "s3", *args, "--endpoint-url", self.url], env=env, capture_output=True, text=True,
                           timeout=120, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stdout + p.stderr
        return p.stdout

    def nodes(self) -> dict[str, dict]:
        listed = self.sm.list_cluster_nodes(ClusterName=NAME, IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]
        return {n["NodeLogicalId"]: n for n in listed}

    def address(self, node: str) -> str:
        return self.sm.describe_cluster_node(ClusterName=NAME, NodeLogicalId=node)["NodeDetails"]["PrivatePrimaryIp"]


def _group(name: str, itype: str, count: int, prefix: str) -> dict:
    return {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count, "ExecutionRole": ROLE,
            "LifeCycleConfig": {"SourceS3Uri": f"s3://lifecycle/{prefix}", "OnCreate": "on_create.sh"}}


GOOD = [_group(CONTROLLER, "ml.t3.medium", 1, "hp/v1"), _group(WORKERS, "ml.c5.large", 1, "hp/v1")]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    home = tmp_path_factory.mktemp("slurmlab-home")
    old = os.environ.get("SLURMLAB_HOME")
    os.environ["SLURMLAB_HOME"] = str(home)
    sl("delete-cluster", NAME, "--leftovers", timeout=300)  # a killed run's (another home)
    log = open(home / "serve.log", "w")
    server = subprocess.Popen([sys.executable, "-m", "lab", "serve", "--provider", "vagrant", "--port", "0"],
                              stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        _wait(lambda: (home / "serve.json").exists() or server.poll() is not None, 60, "slurmlab serve", 0.2)
        time.sleep(0.3)
        a = Api(json.loads((home / "serve.json").read_text())["url"])
        a.s3("mb", "s3://lifecycle")
        a.s3("sync", str(BUNDLE), "s3://lifecycle/hp/v1")
        a.sm.create_cluster(ClusterName=NAME, NodeProvisioningMode="Continuous", NodeRecovery="Automatic",
                            InstanceGroups=GOOD)

        def full():
            ns = a.nodes()
            return len(ns) == 2 and all(n["InstanceStatus"]["Status"] == "Running" for n in ns.values())

        _wait(full, 1500, "cluster hp at full size")
        yield a
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)
        close_home(home, old, NAME, "engine-hyperpod.log")


def test_nodes_carry_hyperpods_environment_field_by_field(api):
    described = api.sm.describe_cluster(ClusterName=NAME)
    listed = api.nodes()
    want_groups = {CONTROLLER: "ml.t3.medium", WORKERS: "ml.c5.large"}
    for node in listed:
        rc = json.loads(on(node, "cat /opt/ml/config/resource_config.json"))
        assert rc["ClusterConfig"] == {"ClusterArn": described["ClusterArn"], "ClusterName": NAME}
        groups = {g["Name"]: g for g in rc["InstanceGroups"]}
        assert {k: g["InstanceType"] for k, g in groups.items()} == want_groups
        mine = next(i for g in groups.values() for i in g["Instances"] if i["InstanceName"] == node)
        assert mine == {"InstanceName": node, "InstanceId": listed[node]["InstanceId"],
                        "AgentIpAddress": api.address(node), "CustomerIpAddress": api.address(node)}
        # the controller is there for every node to find (base-config's --conf-server address)
        ctl = groups[CONTROLLER]["Instances"]
        assert [i["InstanceName"] for i in ctl] == [f"{NAME}-{CONTROLLER}-1"]
        layout = on(node, "readlink /opt/slurm/etc; test -d /opt/sagemaker_cluster && echo marker; "
                          "/opt/slurm/bin/sinfo --version; ls /opt/slurm/sbin; id -u ubuntu; sudo -l -U ubuntu | tail -1")
        lines = layout.splitlines()
        assert lines[:2] == ["/etc/slurm", "marker"] and " 24.11." in lines[2], layout  # "slurm-wlm 24.11.5"
        assert "slurmd" in layout.split() and "slurmctld" in layout.split() and "1001" in layout.split(), layout
        assert "NOPASSWD: ALL" in layout, layout
    controller_ip = api.address(f"{NAME}-{CONTROLLER}-1")
    worker = f"{NAME}-{WORKERS}-1"
    # the scripts filled the unit's $SLURMD_OPTIONS (envsubst) and started it
    assert (on(worker, "grep ^ExecStart /etc/systemd/system/slurmd.service").strip()
            == f"ExecStart=/opt/slurm/sbin/slurmd -D -s --conf-server {controller_ip}")
    conf = on(f"{NAME}-{CONTROLLER}-1", "cat /etc/slurm/slurm.conf /etc/slurm/accounting.conf")
    assert f"SlurmctldHost={NAME}-{CONTROLLER}-1({controller_ip})" in conf and "Include accounting.conf" in conf
    assert "AccountingStorageType=accounting_storage/slurmdbd" in conf  # written by setup_accounting.sh


def test_the_scripts_built_a_working_cluster(api):
    ctl = f"{NAME}-{CONTROLLER}-1"
    log = sl("logs", NAME, ctl, "--lifecycle").stdout
    steps = [line for line in log.splitlines() if line.startswith("Execute script:")]
    assert steps == ["Execute script: ./add_users.sh controller", "Execute script: ./setup_accounting.sh",
                     "Execute script: ./start_slurm.sh controller"], log
    assert f"[lifecycle] {ctl} (" in log and "is a controller node of group controller-machine" in log
    for node in api.nodes():
        assert on(node, "id -u alice; id -u bob").split() == ["2001", "2002"]  # add_users.sh's, same uids
        assert on(node, "systemctl is-enabled slurmctld slurmd sackd 2>/dev/null || true").split()[
            0 if node == ctl else 1] == "enabled"
    assert on(ctl, "systemctl is-active slurmctld slurmdbd mariadb").split() == ["active"] * 3
    hosts = on(ctl, "sudo -u alice -H -- sh -c 'cd && timeout 120 srun --immediate=60 -N1 hostname'").split()
    assert hosts == [f"{NAME}-{WORKERS}-1"]
    assert NAME in on(ctl, "sacctmgr -n -P show cluster format=cluster").split()

    def accounted():
        rows = on(ctl, "sacct -a -n -X -P -u alice -o JobName,State,NNodes").splitlines()
        return "hostname|COMPLETED|1" in rows
    _wait(accounted, 60, "alice's job in sacct", 3)


