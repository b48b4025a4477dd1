"""MoveClusterNodes through the API on the sim provider with boto3 (the AWS CLI 1.x has no such command:
its copy of the model predates it): a node keeps its InstanceId and address and shows
DetachInProgress, then AttachInProgress, then Running in its new group; ClientToken; bad requests
name the field and change nothing."""

from __future__ import annotations

import json

import pytest
from botocore.exceptions import ClientError

from tests.api.conftest import wait_for
from tests.api.seed import create_request, seed_cluster


def _node(c, node):
    return c.describe_cluster_node(ClusterName="demo", NodeLogicalId=node)["NodeDetails"]


def test_a_node_moves_with_boto3(live_api):
    c = live_api.client()
    arn = c.create_cluster(**create_request("demo", computes=2, extra_computes={"spare": 1}))["ClusterArn"]
    wait_for(lambda: c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService"
             and all(g["CurrentCount"] == g["TargetCount"] for g in c.describe_cluster(ClusterName="demo")["InstanceGroups"]),
             what="demo InService at full size")
    before = _node(c, "demo-compute-2")
    request = dict(SourceClusterArn=arn, SourceInstanceGroupName="compute", TargetClusterArn=arn,
                   TargetInstanceGroupName="spare", NodeLogicalIds=["demo-compute-2"], ClientToken="move-1")
    r = c.move_cluster_nodes(**request)
    assert r["SuccessfulNodeLogicalIds"] == ["demo-compute-2"] and "FailedNodeLogicalIds" not in r
    assert _node(c, "demo-compute-2")["InstanceStatus"]["Status"] in ("DetachInProgress", "AttachInProgress")
    assert c.move_cluster_nodes(**request)["SuccessfulNodeLogicalIds"] == ["demo-compute-2"]  # the same token: the same answer
    with pytest.raises(ClientError) as e:
        c.move_cluster_nodes(**{**request, "TargetInstanceGroupName": "compute"})
    assert "ClientToken: already used with other parameters" in str(e.value)
    wait_for(lambda: _node(c, "demo-compute-2")["InstanceStatus"]["Status"] == "Running"
             and _node(c, "demo-compute-2")["InstanceGroupName"] == "spare", what="demo-compute-2 Running in spare")
    after = _node(c, "demo-compute-2")
    assert (after["InstanceId"], after["PrivatePrimaryIp"]) == (before["InstanceId"], before["PrivatePrimaryIp"])
    groups = {g["InstanceGroupName"]: (g["CurrentCount"], g["TargetCount"]) for g in
              c.describe_cluster(ClusterName="demo")["InstanceGroups"]}
    assert groups["compute"] == (1, 1) and groups["spare"] == (2, 2)
    again = c.move_cluster_nodes(SourceClusterArn=arn, SourceInstanceGroupName="compute", TargetClusterArn=arn,
                                 TargetInstanceGroupName="spare", NodeIds=[after["InstanceId"]])
    assert again["Failed"][0]["Code"] == "NodeIdNotFound"  # it is in spare now
    c.delete_cluster(ClusterName="demo")
    wait_for(lambda: not c.list_clusters()["ClusterSummaries"], what="demo deleted")


@pytest.mark.parametrize("change, code, says", [
    ({"InstanceCount": 1}, "ValidationException", "exactly one of NodeIds, NodeLogicalIds or InstanceCount"),
    ({"NodeLogicalIds": None}, "ValidationException", "exactly one of NodeIds, NodeLogicalIds or InstanceCount"),
    ({"TargetInstanceGroupName": "ghost"}, "ValidationException", "TargetInstanceGroupName: no instance group 'ghost'"),
    ({"SourceInstanceGroupName": "login"}, "ValidationException", "a Login node cannot move"),
    ({"TargetClusterArn": "arn:aws:sagemaker:us-east-1:000000000000:cluster/0123456789ab"}, "ResourceNotFound",
     "TargetClusterArn: no cluster with ARN"),
    ({"InstanceCount": 0, "NodeLogicalIds": None}, "ValidationException", "InstanceCount"),
])
def test_bad_moves_name_the_field(api, change, code, says):
    seed_cluster(api.store, "demo", computes=2, request=create_request("demo", computes=2, extra_computes={"spare": 1}))
    arn = api.store.cluster("demo").arn
    body = {"SourceClusterArn": arn, "SourceInstanceGroupName": "compute", "TargetClusterArn": arn,
            "TargetInstanceGroupName": "spare", "NodeLogicalIds": ["demo-compute-1"], **change}
    body = {k: v for k, v in body.items() if v is not None}
    before = (api.store.nodes("demo"), api.store.groups("demo"), api.store.operations("demo"))
    status, answer = api.raw(json.dumps(body), target="SageMaker.MoveClusterNodes")
    assert status == 400 and answer["__type"] == code, answer
    assert says in answer["message"], answer["message"]
    assert (api.store.nodes("demo"), api.store.groups("demo"), api.store.operations("demo")) == before


def test_moving_to_another_cluster_is_refused(api):
    seed_cluster(api.store, "demo", computes=1)
    seed_cluster(api.store, "other", computes=1)
    body = {"SourceClusterArn": api.store.cluster("demo").arn, "SourceInstanceGroupName": "compute",
            "TargetClusterArn": api.store.cluster("other").arn, "TargetInstanceGroupName": "compute",
            "NodeLogicalIds": ["demo-compute-1"]}
    before = api.store.nodes("demo")
    status, answer = api.raw(json.dumps(body), target="SageMaker.MoveClusterNodes")
    assert status == 400 and "the lab moves nodes within one cluster" in answer["message"]
    assert api.store.nodes("demo") == before
