"""UpdateClusterSoftware through the API on the sim provider, with boto3 and the AWS CLI: the cluster is
SystemUpdating, the nodes of the named group get new instances on the new box, batch by batch, and
the cluster is InService again; a second update meanwhile is a ConflictException; bad requests name
the field and change nothing. (Which boxes exist is the lab's: the tests name one fake image.)"""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from lab.errors import UsageError
from tests.api.conftest import wait_for
from tests.api.seed import create_request, seed_cluster
from tests.api.test_read import aws

ID = "ami-0123456789abcdef0"


def _resolve(image):
    if image != ID:
        raise UsageError(f"ImageId: '{image}' names no box of this lab (the boxes: {ID} (slurmlab/next))")
    return "slurmlab/next"


def _ids(c):
    return {n["NodeLogicalId"]: n["InstanceId"] for n in
            c.list_cluster_nodes(ClusterName="demo", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]}


def test_rolling_updates_with_boto3_and_the_aws_cli(live_api):
    api, c = live_api, live_api.client()
    api.lab.resolve_image = _resolve
    c.create_cluster(**create_request("demo", computes=2))
    wait_for(lambda: c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService" and len(_ids(c)) == 4
             and all(g["CurrentCount"] == g["TargetCount"] for g in c.describe_cluster(ClusterName="demo")["InstanceGroups"]),
             what="demo InService at full size")
    before = _ids(c)
    c.update_cluster_software(ClusterName="demo", InstanceGroups=[{"InstanceGroupName": "compute"}], ImageId=ID,
                              DeploymentConfig={"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 1}},
                                                "WaitIntervalInSeconds": 0})
    assert c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "SystemUpdating"
    with pytest.raises(ClientError) as e:
        c.update_cluster_software(ClusterName="demo", ImageId=ID)
    assert e.value.response["Error"]["Code"] == "ConflictException"
    wait_for(lambda: c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService", timeout=120,
             what="the update done")
    after = _ids(c)
    assert after["demo-compute-1"] != before["demo-compute-1"] and after["demo-compute-2"] != before["demo-compute-2"]
    assert after["demo-login-1"] == before["demo-login-1"]
    texts = [e["Description"] for e in c.list_cluster_events(ClusterName="demo", SortOrder="Ascending", MaxResults=100)["Events"]]
    assert any(t.startswith("UpdateClusterSoftware completed") for t in texts), texts[-10:]

    # the AWS CLI, every group (the login node; then the controller, last: its sim VM "has" a state disk),
    # percentages
    out = json.loads(aws(api, "update-cluster-software", "--cluster-name", "demo", "--image-id", ID,
                         "--deployment-config", json.dumps({"RollingUpdatePolicy": {"MaximumBatchSize": {
                             "Type": "CAPACITY_PERCENTAGE", "Value": 50}}})).stdout)
    assert out["ClusterArn"] == c.describe_cluster(ClusterName="demo")["ClusterArn"]
    wait_for(lambda: c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService", timeout=120,
             what="the second update done")
    final = _ids(c)
    assert final["demo-login-1"] != before["demo-login-1"] and final["demo-controller-1"] != before["demo-controller-1"]
    assert final["demo-compute-1"] == after["demo-compute-1"]  # already on that box: left alone
    c.delete_cluster(ClusterName="demo")
    wait_for(lambda: not c.list_clusters()["ClusterSummaries"], what="demo deleted")


@pytest.mark.parametrize("change, says", [
    ({"DeploymentConfig": {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 0}}}},
     "MaximumBatchSize.Value"),
    ({"DeploymentConfig": {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": 3}}}},
     "Value: 3 is above the 2 node(s) to update"),
    ({"ImageId": "ami-00000000"}, "ImageId: 'ami-00000000' names no box of this lab"),
    ({"ImageId": "centos"}, "ImageId"),
    ({"InstanceGroups": [{"InstanceGroupName": "ghost"}]}, "InstanceGroups[0].InstanceGroupName: no instance group 'ghost'"),
    ({"InstanceGroups": [{"InstanceGroupName": "controller"}]}, "demo-controller-1 has no state disk"),
])
def test_bad_updates_name_the_field(api, change, says):
    api.lab.resolve_image = _resolve
    seed_cluster(api.store, "demo", computes=2)
    body = {"ClusterName": "demo", "InstanceGroups": [{"InstanceGroupName": "compute"}], "ImageId": ID, **change}
    before = (api.store.nodes("demo"), api.store.operations("demo"), api.store.cluster("demo").status)
    status, answer = api.raw(json.dumps(body), target="SageMaker.UpdateClusterSoftware")
    assert status == 400 and answer["__type"] == "ValidationException", answer
    assert says in answer["message"], answer["message"]
    assert (api.store.nodes("demo"), api.store.operations("demo"), api.store.cluster("demo").status) == before


def test_the_cli_shows_each_nodes_box_and_refuses_a_bad_update(api):
    from typer.testing import CliRunner

    from lab.cli import app

    seed_cluster(api.store, "demo", computes=1)
    api.store.update_node("demo", "demo-compute-1", image="slurmlab/trixie-slurm-next")
    shown = CliRunner().invoke(app, ["describe-cluster-node", "demo", "demo-compute-1"]).output
    assert "box: slurmlab/trixie-slurm-next  phase: running" in shown, shown
    login = CliRunner().invoke(app, ["describe-cluster-node", "demo", "demo-login-1", "-o", "json"]).output
    assert json.loads(login)["NodeDetails"]["Lab"]["Box"] == "slurmlab/trixie-slurm"
    bad = CliRunner().invoke(app, ["update-cluster-software", "demo", "--group", "controller"])
    assert isinstance(bad.exception, UsageError) and "demo-controller-1 has no state disk" in bad.exception.message
    assert api.store.cluster("demo").status == "InService"
