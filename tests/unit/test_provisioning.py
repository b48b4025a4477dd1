"""provisioning_parameters.json beside the lifecycle scripts (lab/spec/rules/provisioning.py): roles of
an older-style request, HyperPod-shaped nodes, contradictions reported with both sides."""

from __future__ import annotations

import json

import pytest

from lab.paths import REPO_ROOT
from lab.spec import load_spec, spec_from_request
from lab.spec.problems import SpecInvalid

PARAMS = {"version": "1.0.0", "workload_manager": "slurm", "controller_group": "ctrl", "login_group": "login",
          "worker_groups": [{"instance_group_name": "workers", "partition_name": "gpu"}]}


def _folder(tmp_path, params=PARAMS):
    lc = tmp_path / "lc"
    lc.mkdir(exist_ok=True)
    (lc / "on_create.sh").write_text("true\n")
    if params is not None:
        (lc / "provisioning_parameters.json").write_text(params if isinstance(params, str) else json.dumps(params))
    return lc


def _request(lc, slurm: dict | None = None, lab: dict | None = None) -> dict:
    def group(name, itype, count):
        g = {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count,
             "LifeCycleConfig": {"SourceS3Uri": str(lc), "OnCreate": "on_create.sh"}}
        if slurm and name in slurm:
            g["SlurmConfig"] = slurm[name]
        return g
    req = {"ClusterName": "hp", "InstanceGroups": [group("ctrl", "ml.t3.medium", 1), group("login", "ml.t3.medium", 1),
                                                   group("workers", "ml.c5.large", 2), group("extra", "ml.c5.large", 1)]}
    if lab is not None:
        req["Lab"] = lab
    return req


def test_older_style_request_takes_roles_from_the_file_and_asks_for_hyperpod_nodes(tmp_path):
    spec = spec_from_request(_request(_folder(tmp_path)))
    roles = {g.InstanceGroupName: (g.node_type, g.partition_name if g.node_type == "Compute" else None)
             for g in spec.InstanceGroups}
    # a group the file does not name is a worker, as HyperPod's scripts take it
    assert roles == {"ctrl": ("Controller", None), "login": ("Login", None), "workers": ("Compute", "gpu"),
                     "extra": ("Compute", "dev")}  # the lab's default partition
    assert spec.node_environment == "HyperPod"
    assert "Lab" not in spec.to_request()  # what DescribeCluster echoes stays HyperPod's


def test_without_the_file_nothing_changes(tmp_path):
    with pytest.raises(SpecInvalid, match=r"SlurmConfig.*missing: the lab needs each group's Slurm role"):
        spec_from_request(_request(_folder(tmp_path, params=None)))
    req = _request(_folder(tmp_path, params=None), slurm={"ctrl": {"NodeType": "Controller"}, "login": {"NodeType": "Login"},
                                                          "workers": {"NodeType": "Compute"}, "extra": {"NodeType": "Compute"}})
    assert spec_from_request(req).node_environment == "Lab"


def test_a_contradiction_names_both(tmp_path):
    lc = _folder(tmp_path)
    req = _request(lc, slurm={"ctrl": {"NodeType": "Compute"}})
    with pytest.raises(SpecInvalid) as e:
        spec_from_request(req)
    text = str(e.value)
    assert "InstanceGroups[0].SlurmConfig.NodeType" in text
    assert "SlurmConfig.NodeType is Compute" in text and f"{lc}/provisioning_parameters.json names 'ctrl' as its controller_group (Controller)" in text


def test_explicit_lab_environment_wins_and_agreeing_slurm_config_is_kept(tmp_path):
    req = _request(_folder(tmp_path), slurm={"workers": {"NodeType": "Compute", "PartitionNames": ["dev"]}},
                   lab={"NodeEnvironment": "Lab"})
    spec = spec_from_request(req)
    assert spec.node_environment == "Lab"
    assert spec.group("workers").partition_name == "dev"  # the request's own SlurmConfig stays


def test_bad_json_and_bad_environment_are_reported(tmp_path):
    with pytest.raises(SpecInvalid, match=r"provisioning_parameters.json is not valid JSON"):
        spec_from_request(_request(_folder(tmp_path, params="{nope")))
    with pytest.raises(SpecInvalid, match=r"'Slurmish' is not a node environment"):
        spec_from_request(_request(_folder(tmp_path), lab={"NodeEnvironment": "Slurmish"}))


def test_the_example_loads_as_a_hyperpod_cluster():
    spec = load_spec(REPO_ROOT / "examples" / "hyperpod.yaml")
    assert spec.node_environment == "HyperPod"
    assert [(g.InstanceGroupName, g.node_type) for g in spec.InstanceGroups] == [
        ("controller-machine", "Controller"), ("worker-group-1", "Compute")]
    assert spec.group("worker-group-1").partition_name == "dev"
