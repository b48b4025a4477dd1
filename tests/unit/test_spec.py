"""lab.spec: the cluster spec (HyperPod's CreateCluster request) and the instance-type catalog."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from lab.errors import SpecError
from lab.paths import REPO_ROOT
from lab.spec import (
    INSTANCE_TYPES,
    Catalog,
    ClusterSpec,
    SpecInvalid,
    VmSize,
    apply_update,
    load_spec,
    loads_spec,
    rule_size,
    spec_from_request,
    with_instance_count,
)
from lab.spec.contract import shape
from tests.specs import BASE, GPU, LOGIN

@pytest.fixture(autouse=True)
def lab_home(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SLURMLAB_MAX_NODES_PER_GROUP", raising=False)
    return tmp_path / "home"


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    lc = tmp_path / "lc"
    lc.mkdir(exist_ok=True)
    (lc / "on_create.sh").write_text("#!/bin/bash\ntrue\n")
    return path


def edit(*pairs: tuple[str, str], append: str = "") -> str:
    text = BASE
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text + append


def problems_of(tmp_path: Path, text: str, **kw) -> list[str]:
    path = write(tmp_path, text)
    with pytest.raises(SpecInvalid) as ei:
        load_spec(path, **kw)
    msg = ei.value.message
    lines = [line.strip() for line in msg.splitlines()[1:]]
    # every line is `<file>:<line>: <field path>: <what>`
    for line in lines:
        assert line.startswith(f"{path}:"), line
    return [line[len(str(path)) + 1 :] for line in lines]


# (id, spec text, [(line, field path, words the message must contain)])
CASES = [
    ("no-controller", edit(("NodeType: Controller", "NodeType: Compute")),
     [(2, "InstanceGroups", "add a group with SlurmConfig.NodeType: Controller")]),
    ("two-controllers", edit(("NodeType: Compute", "NodeType: Controller"), ("InstanceCount: 2", "InstanceCount: 1")),
     [(10, "InstanceGroups[1].SlurmConfig.NodeType",
       "'controller' (InstanceGroups[0]) and 'compute' (InstanceGroups[1]) are both Controller groups")]),
    ("controller-count", edit(("InstanceCount: 1", "InstanceCount: 2")),
     [(5, "InstanceGroups[0].InstanceCount", "exactly 1 instance, not 2")]),
    ("controller-count-0", edit(("InstanceCount: 1", "InstanceCount: 0")),
     [(5, "InstanceGroups[0].InstanceCount", "exactly 1 instance, not 0")]),
    ("two-logins", BASE + LOGIN + LOGIN.replace("Name: login", "Name: login2"),
     [(18, "InstanceGroups[3].SlurmConfig.NodeType", "are both Login groups; the lab allows one Login group")]),
    ("login-zero", BASE + LOGIN.replace("InstanceCount: 1", "InstanceCount: 0"),
     [(13, "InstanceGroups[2].InstanceCount", "a Login group needs at least 1 instance")]),
    ("duplicate-group-name", edit(("Name: compute", "Name: controller")),
     [(7, "InstanceGroups[1].InstanceGroupName", "'controller' is also the name of InstanceGroups[0]")]),
    ("count-above-model-max", edit(("InstanceCount: 2", "InstanceCount: 7000")),
     [(9, "InstanceGroups[1].InstanceCount", "7000 is above HyperPod's maximum 6758")]),
    ("count-negative", edit(("InstanceCount: 2", "InstanceCount: -1")),
     [(9, "InstanceGroups[1].InstanceCount", "-1 is below the minimum 0")]),
    ("count-above-lab-cap", edit(("InstanceCount: 2", "InstanceCount: 65")),
     [(9, "InstanceGroups[1].InstanceCount", "65 is more than the lab's limit of 64 nodes per group")]),
    ("count-not-int", edit(("InstanceCount: 2", "InstanceCount: two")),
     [(9, "InstanceGroups[1].InstanceCount", "expected an integer, got a string ('two')")]),
    ("min-above-count", edit(("InstanceCount: 2", "InstanceCount: 2\n    MinInstanceCount: 3")),
     [(10, "InstanceGroups[1].MinInstanceCount", "3 is more than InstanceCount (2)")]),
    ("group-name-underscore", edit(("Name: compute", "Name: Workers_1")),
     [(7, "InstanceGroups[1].InstanceGroupName", "'Workers_1': '_' cannot be used in a hostname", "use 'workers-1'")]),
    ("group-name-capitals", edit(("Name: compute", "Name: Compute")),
     [(7, "InstanceGroups[1].InstanceGroupName", "which the lab keeps lowercase", "use 'compute'")]),
    ("cluster-name-capitals", edit(("ClusterName: demo", "ClusterName: MyDemo")),
     [(1, "ClusterName", "'MyDemo'", "use 'mydemo'")]),
    ("cluster-name-digit", edit(("ClusterName: demo", "ClusterName: 1demo")),
     [(1, "ClusterName", "cannot start with a digit")]),
    ("cluster-name-dot", edit(("ClusterName: demo", "ClusterName: my.demo")),
     [(1, "ClusterName", "'.' cannot be used in a hostname")]),
    ("node-name-too-long", edit(("ClusterName: demo", "ClusterName: " + "c" * 40), ("Name: compute", "Name: " + "g" * 20)),
     [(7, "InstanceGroups[1].InstanceGroupName", "would be 64 characters; a hostname has at most 63", "shorten ClusterName or InstanceGroupName by 1")]),
    ("partition-underscore", edit(("{NodeType: Compute}", "{NodeType: Compute, PartitionNames: [dev_1]}")),
     [(10, "InstanceGroups[1].SlurmConfig.PartitionNames[0]", "'_' not allowed in a partition name")]),
    ("partition-reserved", edit(("{NodeType: Compute}", "{NodeType: Compute, PartitionNames: [Default]}")),
     [(10, "InstanceGroups[1].SlurmConfig.PartitionNames[0]", "reserved by Slurm")]),
    ("partition-two", edit(("{NodeType: Compute}", "{NodeType: Compute, PartitionNames: [a, b]}")),
     [(10, "InstanceGroups[1].SlurmConfig.PartitionNames", "has 2 items; at most 1 item allowed")]),
    ("partition-on-controller", edit(("{NodeType: Controller}", "{NodeType: Controller, PartitionNames: [dev]}")),
     [(6, "InstanceGroups[0].SlurmConfig.PartitionNames", "only Compute groups belong to partitions")]),
    ("partition-number", edit(("{NodeType: Compute}", "{NodeType: Compute, PartitionNames: [123]}")),
     [(10, "InstanceGroups[1].SlurmConfig.PartitionNames[0]", "expected a string", "quote it: '123'")]),
    ("unknown-top-field", edit(("ClusterName: demo", "ClusterName: demo\nClusterNmae: x")),
     [(2, "ClusterNmae", "unknown field", "did you mean 'ClusterName'?")]),
    ("unknown-group-field", edit(("InstanceCount: 2", "InstanceCount: 2\n    Partition: dev")),
     [(10, "InstanceGroups[1].Partition", "unknown field: not in HyperPod's ClusterInstanceGroupSpecification")]),
    ("unknown-nested-passthrough", edit(("InstanceCount: 2", "InstanceCount: 2\n    OverrideVpcConfig: {Subnets: [s], SecurityGroupIds: [g], Foo: 1}")),
     [(10, "InstanceGroups[1].OverrideVpcConfig.Foo", "unknown field")]),
    ("unknown-instance-type", edit(("ml.c5.large", "ml.c5.lage")),
     [(8, "InstanceGroups[1].InstanceType", "'ml.c5.lage' is not a HyperPod instance type", "close valid names: ml.c5.large")]),
    ("instance-type-without-ml", edit(("ml.c5.large", "c5.large")),
     [(8, "InstanceGroups[1].InstanceType", "close valid names: ml.c5.large")]),
    ("missing-instance-type", edit(("    InstanceType: ml.c5.large\n", "")),
     [(7, "InstanceGroups[1].InstanceType", "missing")]),
    ("type-and-requirements", edit(("InstanceCount: 2", "InstanceCount: 2\n    InstanceRequirements: {InstanceTypes: [ml.c5.large]}")),
     [(10, "InstanceGroups[1].InstanceRequirements", "cannot both be given")]),
    ("missing-slurm-config", edit(("    SlurmConfig: {NodeType: Compute}\n", "")),
     [(7, "InstanceGroups[1].SlurmConfig", "missing", "add SlurmConfig: {NodeType: Compute}")]),
    ("missing-count", edit(("    InstanceCount: 2\n", "")),
     [(7, "InstanceGroups[1].InstanceCount", "missing (required)")]),
    ("bad-node-type", edit(("NodeType: Compute", "NodeType: Worker")),
     [(10, "InstanceGroups[1].SlurmConfig.NodeType", "'Worker' is not one of: Controller, Login, Compute")]),
    ("node-recovery", edit(("ClusterName: demo", "ClusterName: demo\nNodeRecovery: automatic")),
     [(2, "NodeRecovery", "is not one of: Automatic, None", "did you mean 'Automatic'?")]),
    ("provisioning-mode", edit(("ClusterName: demo", "ClusterName: demo\nNodeProvisioningMode: Legacy")),
     [(2, "NodeProvisioningMode", "'Legacy' is not one of: Continuous")]),
    ("eks", edit(("ClusterName: demo", "ClusterName: demo\nOrchestrator:\n  Eks: {ClusterArn: arn:aws:eks:us-east-1:123456789012:cluster/x}")),
     [(3, "Orchestrator.Eks", "Slurm clusters only")]),
    ("no-groups", "ClusterName: demo\n", [(1, "InstanceGroups", "missing")]),
    ("lab-unknown", BASE + "Lab: {Box: slurmlab/trixie-slurm, Memory: 4}\n",
     [(11, "Lab.Memory", "unknown field")]),
    ("duplicate-key", edit(("InstanceCount: 2", "InstanceCount: 2\n    InstanceCount: 3")),
     [(10, "InstanceGroups[1].InstanceCount", "duplicate key (first at line 9)")]),
    ("lifecycle-s3", edit(("InstanceCount: 2", "InstanceCount: 2\n    LifeCycleConfig: {SourceS3Uri: 's3://sagemaker-x/lc', OnCreate: on_create.sh}")),
     [(10, "InstanceGroups[1].LifeCycleConfig.SourceS3Uri", "nothing under that prefix in the lab's S3", "upload the scripts first: aws s3 sync")]),
    ("lifecycle-missing-folder", edit(("InstanceCount: 2", "InstanceCount: 2\n    LifeCycleConfig: {SourceS3Uri: ./nope, OnCreate: on_create.sh}")),
     [(10, "InstanceGroups[1].LifeCycleConfig.SourceS3Uri", "nope does not exist")]),
    ("lifecycle-missing-script", edit(("InstanceCount: 2", "InstanceCount: 2\n    LifeCycleConfig: {SourceS3Uri: ./lc, OnCreate: setup.sh}")),
     [(10, "InstanceGroups[1].LifeCycleConfig.OnCreate", "no file 'setup.sh'", "it has: on_create.sh")]),
    ("lifecycle-script-outside", edit(("InstanceCount: 2", "InstanceCount: 2\n    LifeCycleConfig: {SourceS3Uri: ./lc, OnCreate: ../spec.yaml}")),
     [(10, "InstanceGroups[1].LifeCycleConfig.OnCreate", "outside the SourceS3Uri folder")]),
    ("lifecycle-no-script", edit(("InstanceCount: 2", "InstanceCount: 2\n    LifeCycleConfig: {SourceS3Uri: ./lc}")),
     [(10, "InstanceGroups[1].LifeCycleConfig.OnCreate", "missing", "add OnCreate: on_create.sh")]),
    # Lab.Users: student accounts
    ("users-zero", BASE + "Lab:\n  Users: 0\n", [(12, "Lab.Users", "0 is not a user count from 1 to 200")]),
    ("users-201", BASE + "Lab:\n  Users: {Count: 201}\n", [(12, "Lab.Users.Count", "201 is not a user count from 1 to 200")]),
    ("users-not-a-count", BASE + "Lab:\n  Users: many\n", [(12, "Lab.Users", "expected a count or a mapping")]),
    ("users-no-count", BASE + "Lab:\n  Users: {Prefix: student}\n", [(12, "Lab.Users.Count", "missing")]),
    ("users-unknown-key", BASE + "Lab:\n  Users: {Count: 2, Names: [a]}\n",
     [(12, "Lab.Users.Names", "unknown field: Users has Count, Prefix, Password")]),
    ("users-prefix-upper", BASE + "Lab:\n  Users: {Count: 2, Prefix: Student}\n",
     [(12, "Lab.Users.Prefix", "'Student' is not a valid user name prefix", "use 'student'")]),
    ("users-prefix-digit", BASE + "Lab:\n  Users: {Count: 2, Prefix: 1st}\n",
     [(12, "Lab.Users.Prefix", "'1st' is not a valid user name prefix")]),
    ("users-prefix-reserved", BASE + "Lab:\n  Users: {Count: 2, Prefix: slurm}\n",
     [(12, "Lab.Users.Prefix", "'slurm' is a system account's name")]),
    ("users-prefix-systemd", BASE + "Lab:\n  Users: {Count: 2, Prefix: systemd-x}\n",
     [(12, "Lab.Users.Prefix", "system account")]),
    ("users-prefix-long", BASE + "Lab:\n  Users: {Count: 100, Prefix: " + "a" * 30 + "}\n",
     [(12, "Lab.Users.Prefix", f"names like '{'a' * 30}100' would have 33 characters; a user name has at most 32")]),
    ("users-password-short", BASE + "Lab:\n  Users: {Count: 2, Password: hunter2}\n",
     [(12, "Lab.Users.Password", "a password of 7 characters is too short (at least 8)")]),
    ("users-password-colon", BASE + "Lab:\n  Users: {Count: 2, Password: 'abc:defgh'}\n",
     [(12, "Lab.Users.Password", "cannot contain ':'")]),
    ("users-password-number", BASE + "Lab:\n  Users: {Count: 2, Password: 123456789}\n",
     [(12, "Lab.Users.Password", "expected a string", "quote it")]),
    # Lab.Gpus: emulated GPUs per Compute group
    ("gpus-cpu-type", BASE + "Lab:\n  Gpus: {compute: 1}\n",
     [(12, "Lab.Gpus.compute", "ml.c5.large has no GPUs; only GPU instance types (ml.g5.*, ml.p4d.*, ...) can have Gpus")]),
    ("gpus-unknown-group", BASE + GPU + "Lab:\n  Gpus: {gpus: 1}\n",
     [(16, "Lab.Gpus.gpus", "no instance group named 'gpus'", "use a Compute group: compute, gpu")]),
    ("gpus-more-than-real", BASE + GPU + "Lab:\n  Gpus: {gpu: 5}\n",
     [(16, "Lab.Gpus.gpu", "5 is more than the 4 GPUs of ml.g5.12xlarge", "use 1 to 4")]),
    ("gpus-zero", BASE + GPU + "Lab:\n  Gpus: {gpu: 0}\n", [(16, "Lab.Gpus.gpu", "0 is not a GPU count from 1 to 4")]),
    ("gpus-controller", BASE + GPU + "Lab:\n  Gpus: {controller: 1}\n",
     [(16, "Lab.Gpus.controller", "'controller' is a Controller group; only Compute groups run jobs on GPUs")]),
    ("gpus-not-a-mapping", BASE + "Lab:\n  Gpus: 2\n", [(12, "Lab.Gpus", "expected a mapping")]),
    # Lab.Start: warm (forked from a template) or cold (booted)
    ("start-unknown", BASE + "Lab:\n  Start: Hot\n",
     [(12, "Lab.Start", "'Hot' is not a way to start nodes", "use Warm (forked from a saved template, the default) or Cold")]),
    ("lab-all-at-once", BASE + "Lab:\n  Users: {Count: 0, Password: short}\n  Gpus: {compute: 1}\n",
     [(12, "Lab.Users.Count", "0 is not a user count"), (12, "Lab.Users.Password", "too short"),
      (13, "Lab.Gpus.compute", "has no GPUs")]),
]


@pytest.mark.parametrize("text,expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_problem(tmp_path, text, expected):
    got = problems_of(tmp_path, text)
    assert len(got) == len(expected), got
    for (line, path, *words), message in zip(expected, got, strict=True):
        assert message.startswith(f"{line}: {path}: "), message
        for w in words:
            assert w in message, message


def test_every_problem_is_listed(tmp_path):
    text = edit(("ClusterName: demo", "ClusterName: Demo"), ("InstanceCount: 1", "InstanceCount: 3"), ("ml.c5.large", "ml.c5.huge"))
    got = problems_of(tmp_path, text)
    assert [m.split(":")[0] for m in got] == ["1", "5", "8"]


def test_yaml_syntax_error_names_line_and_column(tmp_path):
    path = write(tmp_path, BASE.replace("InstanceCount: 2", "InstanceCount: [2"))
    with pytest.raises(SpecError) as ei:
        load_spec(path)
    assert re.search(rf"^{re.escape(str(path))}:\d+:\d+: YAML syntax error", ei.value.message)
    assert not isinstance(ei.value, SpecInvalid)


def test_empty_and_non_mapping(tmp_path):
    assert problems_of(tmp_path, "") == ["1: (top level): the file is empty; write a cluster spec; see examples/cluster.yaml"]
    assert "expected a mapping" in problems_of(tmp_path, "- a\n- b\n")[0]


def test_compute_group_may_be_empty(tmp_path):
    spec = load_spec(write(tmp_path, edit(("InstanceCount: 2", "InstanceCount: 0"))))
    assert spec.node_names("compute") == []


def test_lab_cap_is_configurable(tmp_path, monkeypatch):
    path = write(tmp_path, edit(("InstanceCount: 2", "InstanceCount: 65")))
    assert load_spec(path, max_nodes_per_group=100).group("compute").InstanceCount == 65
    monkeypatch.setenv("SLURMLAB_MAX_NODES_PER_GROUP", "100")
    assert load_spec(path).group("compute").InstanceCount == 65
    monkeypatch.setenv("SLURMLAB_MAX_NODES_PER_GROUP", "10")
    with pytest.raises(SpecInvalid, match="limit of 10 nodes per group"):
        load_spec(path)


def test_helpers(tmp_path):
    spec = load_spec(write(tmp_path, BASE + LOGIN))
    assert spec.controller_group.InstanceGroupName == "controller"
    assert spec.controller_group.node_type == "Controller"
    assert [g.name for g in spec.login_groups] == ["login"]
    assert [g.name for g in spec.compute_groups] == ["compute"]
    assert spec.node_names("compute") == ["demo-compute-1", "demo-compute-2"]
    assert spec.node_names(spec.controller_group) == ["demo-controller-1"]
    assert not spec.is_continuous
    assert spec.node_recovery == "Automatic" and spec.slurm_config_strategy == "Managed"
    # A Compute group without PartitionNames is in the default partition `dev`.
    assert spec.group("compute").partition_name == "dev"
    assert spec.partitions == {"dev": ["compute"]} and spec.default_partition == "dev"
    assert spec.controller_group.partition_name is None
    assert spec.group("compute").instance_types == ["ml.c5.large"]


def test_lifecycle_paths_resolved_against_spec_folder(tmp_path):
    text = edit(("InstanceCount: 2", "InstanceCount: 2\n    LifeCycleConfig: {SourceS3Uri: lc, OnCreate: on_create.sh}"))
    spec = load_spec(write(tmp_path, text))
    g = spec.group("compute")
    assert g.LifeCycleConfig.SourceS3Uri == str(tmp_path / "lc")
    assert g.lifecycle_dir == tmp_path / "lc" and g.on_create == tmp_path / "lc" / "on_create.sh"
    # file:// URIs work too and stay file:// URIs
    text = edit(("InstanceCount: 2", f"InstanceCount: 2\n    LifeCycleConfig: {{SourceS3Uri: '{(tmp_path / 'lc').as_uri()}', OnCreate: on_create.sh}}"))
    spec = load_spec(write(tmp_path, text))
    assert spec.group("compute").LifeCycleConfig.SourceS3Uri.startswith("file:///")
    assert spec.group("compute").lifecycle_dir == tmp_path / "lc"


def test_lifecycle_s3_mirror(tmp_path, lab_home):
    (lab_home / "s3" / "sagemaker-x" / "lc").mkdir(parents=True)
    (lab_home / "s3" / "sagemaker-x" / "lc" / "on_create.sh").write_text("true\n")
    text = edit(("InstanceCount: 2", "InstanceCount: 2\n    LifeCycleConfig: {SourceS3Uri: 's3://sagemaker-x/lc', OnCreate: on_create.sh}"))
    spec = load_spec(write(tmp_path, text))
    assert spec.group("compute").LifeCycleConfig.SourceS3Uri == "s3://sagemaker-x/lc"  # echoed as given
    assert spec.group("compute").on_create == lab_home / "s3" / "sagemaker-x" / "lc" / "on_create.sh"


def test_check_files_false_skips_lifecycle_folders(tmp_path):
    req = spec_from_request(REQUEST).to_request()
    req["InstanceGroups"][0]["LifeCycleConfig"] = {"SourceS3Uri": "/gone", "OnCreate": "on_create.sh"}
    with pytest.raises(SpecInvalid, match="/gone does not exist"):
        spec_from_request(req)
    assert spec_from_request(req, check_files=False).InstanceGroups[0].LifeCycleConfig.SourceS3Uri == "/gone"


# -- examples ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["cluster.yaml", "small.yaml"])
def test_examples_load(name):
    spec = load_spec(REPO_ROOT / "examples" / name)
    assert len(spec.InstanceGroups) == 3 and len(spec.compute_groups[0].model_dump()) > 0
    assert spec.is_continuous
    assert len(spec.login_groups) == 1 and spec.compute_groups[0].InstanceCount == 2
    catalog = Catalog()
    for g in spec.InstanceGroups:
        assert catalog.size(g.instance_type).memory_mib <= 1024
        assert g.on_create is not None and os.access(g.on_create, os.X_OK)


def test_readme_example_shape():
    spec = load_spec(REPO_ROOT / "examples" / "cluster.yaml")
    assert spec.ClusterName == "demo" and spec.NodeRecovery == "Automatic"
    assert [(g.name, g.node_type, g.InstanceCount) for g in spec.InstanceGroups] == [
        ("controller", "Controller", 1), ("login", "Login", 1), ("compute", "Compute", 2)]
    assert spec.box == "slurmlab/trixie-slurm"
    assert "slurmlab-lifecycle-ran" in (REPO_ROOT / "examples/lifecycle/on_create.sh").read_text()


# -- request form -----------------------------------------------------------------------------

REQUEST = {
    "ClusterName": "demo",
    "NodeProvisioningMode": "Continuous",
    "NodeRecovery": "None",
    "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Merge"}},
    "InstanceGroups": [
        {
            "InstanceGroupName": "controller",
            "InstanceType": "ml.t3.medium",
            "InstanceCount": 1,
            "SlurmConfig": {"NodeType": "Controller"},
            "ExecutionRole": "arn:aws:iam::123456789012:role/lab",
            "ThreadsPerCore": 1,
            "InstanceStorageConfigs": [{"EbsVolumeConfig": {"VolumeSizeInGB": 100}}],
        },
        {
            "InstanceGroupName": "gpu",
            "InstanceRequirements": {"InstanceTypes": ["ml.g5.xlarge", "ml.g6.xlarge"]},
            "InstanceCount": 3,
            "MinInstanceCount": 1,
            "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["gpu"]},
            "ExecutionRole": "not-an-arn",  # meaningless in a lab: kept, never a reason to fail
            "TrainingPlanArn": "x",
            "OverrideVpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
            "OnStartDeepHealthChecks": ["InstanceStress"],
        },
    ],
    "VpcConfig": {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]},
    "Tags": [{"Key": "team", "Value": "hpc"}],
}


def test_request_round_trips():
    spec = spec_from_request(REQUEST)
    assert spec.to_request() == REQUEST
    assert spec_from_request(spec.to_request()) == spec
    assert spec.is_continuous and spec.node_recovery == "None" and spec.slurm_config_strategy == "Merge"
    assert spec.group("gpu").instance_types == ["ml.g5.xlarge", "ml.g6.xlarge"]
    assert spec.group("gpu").instance_type == "ml.g5.xlarge"


def test_yaml_and_request_agree(tmp_path):
    spec = load_spec(REPO_ROOT / "examples" / "cluster.yaml")
    again = spec_from_request(spec.to_dict())
    assert again == spec
    assert "Lab" not in spec.to_request() and spec.to_dict()["Lab"] == {"Box": "slurmlab/trixie-slurm"}


def test_request_errors_have_no_file_and_all_problems():
    bad = {**REQUEST, "ClusterName": "Demo_1", "Extra": 1}
    with pytest.raises(SpecInvalid) as ei:
        spec_from_request(bad)
    paths = [p.path for p in ei.value.problems]
    assert paths == ["ClusterName", "Extra"]
    assert ei.value.message.splitlines()[1].strip().startswith("ClusterName: 'Demo_1': '_' cannot be used")


def test_request_relative_lifecycle_path_needs_base_dir(tmp_path):
    (tmp_path / "lc").mkdir()
    (tmp_path / "lc" / "on_create.sh").write_text("true\n")
    req = {**REQUEST, "InstanceGroups": [{**REQUEST["InstanceGroups"][0], "LifeCycleConfig": {"SourceS3Uri": "lc", "OnCreate": "on_create.sh"}}]}
    with pytest.raises(SpecInvalid, match="a relative path needs a spec file"):
        spec_from_request(req)
    assert spec_from_request(req, base_dir=tmp_path).InstanceGroups[0].lifecycle_dir == tmp_path / "lc"


# -- UpdateCluster ----------------------------------------------------------------------------

def test_update_scales_adds_and_deletes():
    spec = spec_from_request(REQUEST)
    new = apply_update(spec, {"ClusterName": "demo", "InstanceGroups": [
        {**REQUEST["InstanceGroups"][1], "InstanceCount": 5},
        {"InstanceGroupName": "login", "InstanceType": "ml.t3.medium", "InstanceCount": 1, "SlurmConfig": {"NodeType": "Login"}},
    ]})
    assert [(g.name, g.InstanceCount) for g in new.InstanceGroups] == [("controller", 1), ("gpu", 5), ("login", 1)]
    new = apply_update(new, {"InstanceGroupsToDelete": ["login"], "NodeRecovery": "Automatic"})
    assert [g.name for g in new.InstanceGroups] == ["controller", "gpu"] and new.NodeRecovery == "Automatic"
    assert with_instance_count(new, "gpu", 0).group("gpu").InstanceCount == 0


@pytest.mark.parametrize("update,path,words", [
    ({"InstanceGroupsToDelete": ["controller"]}, "InstanceGroupsToDelete[0]", "is the Controller group"),
    ({"InstanceGroupsToDelete": ["nope"]}, "InstanceGroupsToDelete[0]", "no instance group named 'nope'"),
    ({"InstanceGroups": [{**REQUEST["InstanceGroups"][1], "SlurmConfig": {"NodeType": "Login"}}]},
     "InstanceGroups[0].SlurmConfig.NodeType", "cannot change group 'gpu' from Compute to Login"),
    ({"InstanceGroups": [{**REQUEST["InstanceGroups"][0], "InstanceType": "ml.m5.large"}]},
     "InstanceGroups[0].InstanceType", "cannot change the instance type"),
    ({"InstanceGroups": [{"InstanceGroupName": "ctl2", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
                          "SlurmConfig": {"NodeType": "Controller"}}]},
     "InstanceGroups[0].SlurmConfig.NodeType", "are both Controller groups"),
    ({"InstanceGroups": [{**REQUEST["InstanceGroups"][1], "InstanceCount": 99}]},
     "InstanceGroups[0].InstanceCount", "lab's limit of 64"),
    ({"InstanceGroups": [{**REQUEST["InstanceGroups"][1], "Bogus": 1}]}, "InstanceGroups[0].Bogus", "unknown field"),
])
def test_update_problems(update, path, words):
    with pytest.raises(SpecInvalid) as ei:
        apply_update(spec_from_request(REQUEST), update)
    assert [p.path for p in ei.value.problems] == [path]
    assert words in ei.value.message


# -- catalog ----------------------------------------------------------------------------------

def test_catalog_defaults_and_rule():
    c = Catalog()
    assert c.size("ml.t3.medium") == VmSize(1, 768, "default")
    assert c.size("ml.c5.xlarge") == VmSize(2, 1024, "default")
    assert c.size("ml.c6i.large") == VmSize(1, 768, "rule")
    assert c.size("ml.r6i.xlarge") == VmSize(2, 1024, "rule")
    assert c.size("ml.trn2.3xlarge") == VmSize(2, 1536, "rule")
    assert c.size("ml.p5en.48xlarge") == VmSize(2, 2048, "rule")
    assert rule_size("ml.c8g.medium").vcpus == 1
    table = c.table()
    assert len(table) == len(INSTANCE_TYPES) and all(s.vcpus <= 2 for _, s in table)


def test_catalog_unknown_type_suggests_close_names():
    with pytest.raises(SpecError) as ei:
        Catalog().size("ml.m5.xlarg")
    assert "'ml.m5.xlarg' is not a HyperPod instance type" in ei.value.message
    assert "ml.m5.xlarge" in ei.value.fix


def test_catalog_override(lab_home):
    lab_home.mkdir(parents=True)
    (lab_home / "catalog.yaml").write_text(
        "instance_types:\n  ml.c5.large: {vcpus: 2, memory_mib: 2048}\n  ml.g5.12xlarge: {vcpus: 1, memory_mib: 512}\n"
    )
    c = Catalog.load()
    assert c.size("ml.c5.large") == VmSize(2, 2048, str(lab_home / "catalog.yaml"))
    assert c.size("ml.g5.12xlarge").memory_mib == 512
    assert c.size("ml.t3.medium").source == "default"


def test_catalog_file_is_validated(tmp_path):
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "instance_types:\n"
        "  ml.c5.lrage: {vcpus: 1, memory_mib: 512}\n"
        "  ml.c5.large: {vcpus: 0, memory_mib: 512}\n"
        "  ml.m5.large: {vcpus: 1, memory: 512}\n"
        "extra: 1\n"
    )
    with pytest.raises(SpecInvalid) as ei:
        Catalog.load(path)
    lines = [line.strip() for line in ei.value.message.splitlines()[1:]]
    assert lines[0].startswith(f"{path}:2: instance_types.ml.c5.lrage: 'ml.c5.lrage' is not a HyperPod instance type")
    assert "ml.c5.large" in lines[0]
    assert lines[1].startswith(f"{path}:3: instance_types.ml.c5.large.vcpus: 0 is not a whole number from 1 to 64")
    assert any(f"{path}:4: instance_types.ml.m5.large.memory" in line for line in lines)
    assert lines[-1].startswith(f"{path}:5: extra: unknown key")


# -- the contract: botocore's service model, read at run time ------------------------------------

def test_models_cover_the_service_model():
    """Every CreateCluster member is a field of ClusterSpec (plus Lab), and so on down."""
    from lab.spec import models

    pairs = [
        (models.ClusterSpec, "CreateClusterRequest", {"Lab"}),
        (models.ClusterInstanceGroupSpecification, "ClusterInstanceGroupSpecification", set()),
        (models.ClusterSlurmConfig, "ClusterSlurmConfig", set()),
        (models.ClusterLifeCycleConfig, "ClusterLifeCycleConfig", set()),
        (models.ClusterOrchestratorSlurmConfig, "ClusterOrchestratorSlurmConfig", set()),
    ]
    for cls, name, extra in pairs:
        assert set(cls.model_fields) == set(shape(name).members) | extra, name
    assert "ml.c5.large" in INSTANCE_TYPES and len(INSTANCE_TYPES) > 100


def test_one_checker_for_the_spec_and_the_api():
    """The YAML spec and the API's requests go through the same checker (lab.spec.contract)."""
    from lab.spec import contract

    spec_side = contract.check({"ClusterName": "demo", "InstanceGroups": [], "NodeRecovery": "automatic"}, "CreateClusterRequest")
    api_side = contract.check_input("CreateCluster", {"ClusterName": "demo", "InstanceGroups": [], "NodeRecovery": "automatic"})
    assert [(p.path, p.what) for p in spec_side] == [(p.path, p.what) for p in api_side]
    assert [p.path for p in spec_side] == ["InstanceGroups", "NodeRecovery"]
    # botocore's validator reports, the lab's words: a boolean is not an integer, null is absent (JSON)
    got = contract.check_input("ListClusterNodes", {"ClusterName": "demo", "MaxResults": True, "NextToken": None})
    assert [(p.path, p.what) for p in got] == [("MaxResults", "expected an integer, got a boolean")]


def test_cluster_spec_is_frozen():
    spec = spec_from_request(REQUEST)
    with pytest.raises(ValidationError):
        spec.ClusterName = "other"
    assert isinstance(spec, ClusterSpec)


def test_loads_spec_names_its_source():
    with pytest.raises(SpecInvalid) as ei:
        loads_spec(BASE.replace("ml.c5.large", "ml.c5.lage"), source="inline")
    assert "inline:8: InstanceGroups[1].InstanceType" in ei.value.message


# -- the lab's own key: student accounts and emulated GPUs --------------------------------------

def test_lab_users_shorthand_and_names(tmp_path):
    short = load_spec(write(tmp_path, BASE + "Lab:\n  Users: 20\n"))
    full = load_spec(write(tmp_path, BASE + "Lab:\n  Users: {Count: 20, Prefix: user}\n"))
    assert short.users == full.users
    assert short.users.names[0] == "user01" and short.users.names[-1] == "user20" and len(short.users.names) == 20
    assert short.users.Password is None
    big = load_spec(write(tmp_path, BASE + "Lab:\n  Users: {Count: 120, Prefix: stud_, Password: correct-horse}\n"))
    assert big.users.names[0] == "stud_001" and big.users.names[-1] == "stud_120"
    assert big.users.Password == "correct-horse"
    assert spec_from_request(big.to_dict()) == big
    assert "Lab" not in big.to_request()
    assert load_spec(write(tmp_path, BASE)).users is None


def test_lab_gpus_default_to_the_real_count(tmp_path):
    spec = load_spec(write(tmp_path, BASE + GPU))
    assert spec.gpus("gpu") == 4 and spec.gpus("compute") == 0 and spec.gpus("controller") == 0
    spec = load_spec(write(tmp_path, BASE + GPU + "Lab:\n  Gpus: {gpu: 2}\n"))
    assert spec.gpus("gpu") == 2
    assert spec_from_request(spec.to_dict()) == spec
    # a GPU instance type in a Login group has no GPUs for Slurm
    login = LOGIN.replace("ml.t3.medium", "ml.g5.xlarge")
    assert load_spec(write(tmp_path, BASE + login)).gpus("login") == 0


def test_with_users_sets_the_count_and_keeps_the_rest(tmp_path):
    from lab.spec import with_users

    spec = load_spec(write(tmp_path, BASE + "Lab:\n  Users: {Count: 2, Prefix: stu, Password: correct-horse}\n"))
    more = with_users(spec, 5)
    assert more.users.names == ["stu01", "stu02", "stu03", "stu04", "stu05"]
    assert more.users.Password == "correct-horse"
    assert with_users(load_spec(write(tmp_path, BASE)), 3).users.names == ["user01", "user02", "user03"]
    for bad in (0, 201):
        with pytest.raises(SpecInvalid, match=f"Lab.Users.Count: {bad} is not a user count from 1 to 200"):
            with_users(spec, bad)


def test_gpu_table_is_hyperpods_gpu_types():
    from lab.spec.catalog import GPUS, gpu_count

    assert set(GPUS) <= set(INSTANCE_TYPES), set(GPUS) - set(INSTANCE_TYPES)
    gpu_families = ("ml.g4dn.", "ml.g5.", "ml.g6.", "ml.gr6.", "ml.g6e.", "ml.g7.", "ml.g7e.", "ml.p")
    assert {t for t in INSTANCE_TYPES if t.startswith(gpu_families)} == set(GPUS)
    assert all(1 <= n <= 8 for n in GPUS.values())
    assert gpu_count("ml.g5.xlarge") == 1 and gpu_count("ml.g5.12xlarge") == 4 and gpu_count("ml.g5.48xlarge") == 8
    assert gpu_count("ml.g4dn.12xlarge") == 4 and gpu_count("ml.g4dn.16xlarge") == 1
    assert gpu_count("ml.p4d.24xlarge") == 8 and gpu_count("ml.p5.48xlarge") == 8
    assert gpu_count("ml.trn1.32xlarge") == 0 and gpu_count("ml.c5.large") == 0 and gpu_count("ml.nope") == 0


def test_catalog_file_every_problem_once(tmp_path):
    """catalog.yaml through pydantic (CatalogFile): wrong types, missing keys, and a bad name whose
    entry is not looked at, all at once with their lines."""
    path = tmp_path / "catalog.yaml"
    path.write_text(
        "instance_types:\n"
        "  ml.nope: 5\n"
        "  ml.c5.xlarge: {}\n"
        "  ml.t3.medium: {vcpus: true, memory_mib: '512'}\n"
        "  ml.c5.large: 3\n"
    )
    with pytest.raises(SpecInvalid) as ei:
        Catalog.load(path)
    got = [line.strip()[len(str(path)) + 1:] for line in ei.value.message.splitlines()[1:]]
    assert got == [
        "2: instance_types.ml.nope: 'ml.nope' is not a HyperPod instance type; use one of HyperPod's instance "
        "types, e.g. ml.t3.medium, ml.c5.large, ml.m5.xlarge",
        "3: instance_types.ml.c5.xlarge.vcpus: missing; add vcpus",
        "3: instance_types.ml.c5.xlarge.memory_mib: missing; add memory_mib",
        "4: instance_types.ml.t3.medium.vcpus: True is not a whole number from 1 to 64",
        "4: instance_types.ml.t3.medium.memory_mib: '512' is not a whole number from 256 to 1048576",
        "5: instance_types.ml.c5.large: expected {vcpus: N, memory_mib: N}",
    ]
    path.write_text("instance_types:\n")
    assert Catalog.load(path).overrides == {}
