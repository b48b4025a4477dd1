"""The HyperPod node environment on the Ansible side: resource_config.json's fields from the lab's
records, the inventory switches, the configurer's lifecycle folders (s3:// included), and
`slurmlab logs`'s remote command."""

from __future__ import annotations

import json
from pathlib import Path

from lab.cmd.logs import PROVISION_LOG, log_command
from lab.configure import inventory as inv
from lab.configure.ansible import AnsibleConfigurer
from lab.store.db import ClusterRow, GroupRow, NodeRow

ARN = "arn:aws:sagemaker:us-west-2:000000000000:cluster/abc123"


def _ctx(**kw) -> inv.ClusterContext:
    groups = [GroupRow("hp", "controller-machine", "ml.t3.medium", "Controller", 1, [], 1, 768, "InService"),
              GroupRow("hp", "worker-group-1", "ml.c5.large", "Compute", 2, ["dev"], 1, 768, "InService")]
    nodes = [NodeRow("hp", "hp-controller-machine-1", "controller-machine", 1, "i-aa", "10.0.0.10", "", "running"),
             NodeRow("hp", "hp-worker-group-1-2", "worker-group-1", 2, "i-cc", "10.0.0.12", "", "configuring"),
             NodeRow("hp", "hp-worker-group-1-1", "worker-group-1", 1, "i-bb", "10.0.0.11", "", "configuring"),
             NodeRow("hp", "hp-worker-group-1-3", "worker-group-1", 3, "i-dd", "", "", "launching")]
    return inv.ClusterContext("hp", groups, nodes, ssh_key=Path("/k"), munge_key=Path("/m"), ssh_executable="ssh",
                              lifecycle={"controller-machine": ("/lc", "on_create.sh")}, **kw)


def test_resource_config_has_hyperpods_fields_and_the_real_addresses():
    rc = inv.resource_config(_ctx(node_environment="HyperPod", arn=ARN))
    assert rc == {
        "ClusterConfig": {"ClusterArn": ARN, "ClusterName": "hp"},
        "InstanceGroups": [
            {"Name": "controller-machine", "InstanceType": "ml.t3.medium", "Instances": [
                {"InstanceName": "hp-controller-machine-1", "InstanceId": "i-aa",
                 "AgentIpAddress": "10.0.0.10", "CustomerIpAddress": "10.0.0.10"}]},
            # in ordinal order; a node without an address yet is left out
            {"Name": "worker-group-1", "InstanceType": "ml.c5.large", "Instances": [
                {"InstanceName": "hp-worker-group-1-1", "InstanceId": "i-bb",
                 "AgentIpAddress": "10.0.0.11", "CustomerIpAddress": "10.0.0.11"},
                {"InstanceName": "hp-worker-group-1-2", "InstanceId": "i-cc",
                 "AgentIpAddress": "10.0.0.12", "CustomerIpAddress": "10.0.0.12"}]},
        ],
    }


def test_inventory_switches():
    hp = inv.build(_ctx(node_environment="HyperPod", arn=ARN))
    v = hp["all"]["vars"]
    assert v["slurmlab_node_environment"] == "hyperpod"
    assert v["slurmlab_resource_config"]["ClusterConfig"]["ClusterArn"] == ARN
    hosts = hp["all"]["children"]
    # the scripts start Slurm where they run: the group with a lifecycle folder
    assert hosts["slurm_controller"]["hosts"]["hp-controller-machine-1"]["slurmlab_lifecycle_starts_slurm"] is True
    assert "slurmlab_lifecycle_starts_slurm" not in hosts["slurm_compute"]["hosts"]["hp-worker-group-1-1"]

    lab = inv.build(_ctx())
    assert lab["all"]["vars"]["slurmlab_node_environment"] == "lab"
    assert "slurmlab_resource_config" not in lab["all"]["vars"]
    assert lab["all"]["children"]["slurm_controller"]["hosts"]["hp-controller-machine-1"]["slurmlab_lifecycle_starts_slurm"] is False


def test_configurer_context_reads_the_environment_and_s3_folders(lab_home, tmp_path):
    mirror = lab_home / "s3" / "bucket" / "base-config"
    mirror.mkdir(parents=True)
    def g(name, node_type, lc):
        return {"InstanceGroupName": name, "InstanceType": "ml.c5.large", "InstanceCount": 1,
                "SlurmConfig": {"NodeType": node_type}, "LifeCycleConfig": lc}
    spec = {"ClusterName": "hp", "Lab": {"NodeEnvironment": "HyperPod"}, "InstanceGroups": [
        g("controller-machine", "Controller", {"SourceS3Uri": "s3://bucket/base-config", "OnCreate": "on_create.sh"}),
        g("worker-group-1", "Compute", {"SourceS3Uri": f"file://{tmp_path}", "OnCreate": "go.sh"}),
        g("gone", "Compute", {"SourceS3Uri": "s3://bucket/missing", "OnCreate": "x.sh"})]}
    row = ClusterRow("hp", ARN, "InService", None, spec, "vagrant", 1, 0.0)
    ctx = AnsibleConfigurer("ssh").context(row, _ctx().groups, _ctx().nodes)
    assert ctx.node_environment == "HyperPod" and ctx.arn == ARN
    # an s3:// prefix runs what `aws s3 sync` put in the lab's S3
    assert ctx.lifecycle == {"controller-machine": (str(mirror), "on_create.sh"),
                             "worker-group-1": (str(tmp_path), "go.sh")}
    row.spec = {**spec, "Lab": {}}
    assert AnsibleConfigurer("ssh").context(row, _ctx().groups, _ctx().nodes).node_environment == "Lab"


def test_the_slurmd_unit_survives_envsubst():
    """Lifecycle scripts fill the unit with envsubst, which empties every $VAR it finds: the unit may
    name $SLURMD_OPTIONS and nothing else (an ExecReload with $MAINPID broke that once)."""
    import re

    unit = (Path(__file__).parents[2] / "roles" / "hyperpod_env" / "files" / "slurmd.service").read_text()
    body = [line for line in unit.splitlines() if not line.startswith("#")]
    assert set(re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", "\n".join(body))) == {"SLURMD_OPTIONS"}
    assert "ExecStart=/opt/slurm/sbin/slurmd -D -s $SLURMD_OPTIONS" in body


def test_logs_command():
    assert log_command(None, None) == (f"if sudo test -e {PROVISION_LOG}; then sudo cat {PROVISION_LOG}; "
                                       f"else echo 'slurmlab-logs: no {PROVISION_LOG}' >&2; exit 3; fi")
    assert f"sudo tail -n 20 {PROVISION_LOG}" in log_command(None, 20)
    assert log_command("slurmd", 5) == "sudo journalctl --no-pager --output short-iso --unit slurmd --lines 5"
    assert log_command("a;b", None).endswith("--unit 'a;b' --lines all")
    json.dumps(log_command(None, 3))
