"""StartClusterHealthCheck through the API on the sim provider: boto3 and the AWS CLI start checks,
the nodes show DeepHealthCheckInProgress, ListClusterOperations / DescribeClusterOperation show the
DeepHealthCheck operation, a node whose (simulated, seeded) check fails is rebooted and comes back
Running; bad requests name the field and change nothing."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import wait_for
from tests.api.seed import create_request, seed_cluster
from tests.api.test_read import aws


def _nodes(c):
    return {n["NodeLogicalId"]: n for n in
            c.list_cluster_nodes(ClusterName="demo", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]}


def _checks(c):
    return c.list_cluster_operations(ClusterName="demo", Type="DeepHealthCheck")["ClusterOperationSummaries"]


def test_health_checks_with_boto3_and_the_aws_cli(live_api):
    api, c = live_api, live_api.client()
    c.create_cluster(**create_request("demo", computes=2))
    wait_for(lambda: c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService"
             and all(n["InstanceStatus"]["Status"] == "Running" for n in _nodes(c).values()) and len(_nodes(c)) == 4,
             what="demo InService with every node Running")

    # boto3: every compute node, two checks; both pass
    arn = c.start_cluster_health_check(ClusterName="demo", DeepHealthCheckConfigurations=[
        {"InstanceGroupName": "compute", "DeepHealthChecks": ["InstanceStress", "InstanceConnectivity"]}])["ClusterArn"]
    assert arn == c.describe_cluster(ClusterName="demo")["ClusterArn"]
    n = _nodes(c)
    assert n["demo-compute-1"]["InstanceStatus"]["Status"] == "DeepHealthCheckInProgress"
    assert n["demo-login-1"]["InstanceStatus"]["Status"] == "Running"
    [op] = _checks(c)
    assert op["Type"] == "DeepHealthCheck" and op["Status"] == "InProgress"
    wait_for(lambda: _checks(c)[0]["Status"] == "Done", what="the first check Done")
    d = c.describe_cluster_operation(ClusterName="demo", OperationId=op["OperationId"])
    assert d["DeepHealthCheckDetails"] == [{"InstanceGroupName": "compute",
                                            "DeepHealthChecks": ["InstanceStress", "InstanceConnectivity"]}]
    assert all(x["InstanceStatus"]["Status"] == "Running" for x in _nodes(c).values())
    passed = [e["Description"] for e in c.list_cluster_events(ClusterName="demo", OperationId=op["OperationId"])["Events"]]
    assert sum("passed the deep health check" in e for e in passed) == 2

    # the AWS CLI: one instance, whose simulated check fails (faults injected, seeded): it is rebooted
    assert api.post("/_lab/capacity", {"faults": {"seed": 5, "health_check_failure_rate": 1}})[0] == 200
    iid = _nodes(c)["demo-compute-2"]["InstanceId"]
    cfg = [{"InstanceGroupName": "compute", "InstanceIds": [iid], "DeepHealthChecks": ["InstanceStress"]}]
    out = json.loads(aws(api, "start-cluster-health-check", "--cluster-name", "demo",
                         "--deep-health-check-configurations", json.dumps(cfg)).stdout)
    assert out["ClusterArn"] == arn
    wait_for(lambda: len(_checks(c)) == 2 and _checks(c)[0]["Status"] == "Done", what="the second check Done")
    second = _checks(c)[0]["OperationId"]
    events = c.list_cluster_events(ClusterName="demo", OperationId=second)["Events"]
    warned = [e for e in events if e["EventLevel"] == "Warn"]
    assert warned and "simulated failure" in warned[0]["Description"] and "rebooting it" in warned[0]["Description"]
    assert any(e["Description"] == "demo-compute-2: rebooted" for e in events)
    after = _nodes(c)
    assert after["demo-compute-2"]["InstanceId"] == iid and after["demo-compute-2"]["InstanceStatus"]["Status"] == "Running"
    c.delete_cluster(ClusterName="demo")
    wait_for(lambda: not c.list_clusters()["ClusterSummaries"], what="demo deleted")


@pytest.mark.parametrize("configs, code, says", [
    ([{"InstanceGroupName": "nope", "DeepHealthChecks": ["InstanceStress"]}], "ValidationException",
     "DeepHealthCheckConfigurations[0].InstanceGroupName: no instance group 'nope' in cluster 'demo'"),
    ([{"InstanceGroupName": "compute", "DeepHealthChecks": ["Bogus"]}], "ValidationException", "DeepHealthChecks"),
    ([{"InstanceGroupName": "compute", "DeepHealthChecks": []}], "ValidationException", "DeepHealthChecks"),
    ([{"InstanceGroupName": "compute", "InstanceIds": ["i-0123456789abcdef0"], "DeepHealthChecks": ["InstanceStress"]}],
     "ValidationException", "InstanceIds[0]: no instance 'i-0123456789abcdef0' in instance group 'compute'"),
    ([], "ValidationException", "DeepHealthCheckConfigurations"),
])
def test_bad_health_check_requests_name_the_field(api, configs, code, says):
    seed_cluster(api.store, "demo", computes=2)
    before = (api.store.operations("demo"), api.store.nodes("demo"))
    status, answer = api.raw(json.dumps({"ClusterName": "demo", "DeepHealthCheckConfigurations": configs}),
                             target="SageMaker.StartClusterHealthCheck")
    assert status == 400 and answer["__type"] == code, answer
    assert says in answer["message"], answer["message"]
    assert (api.store.operations("demo"), api.store.nodes("demo")) == before


def test_health_check_needs_an_inservice_cluster_that_exists(api):
    seed_cluster(api.store, "demo", computes=1, status="Updating")
    body = {"DeepHealthCheckConfigurations": [{"InstanceGroupName": "compute", "DeepHealthChecks": ["InstanceStress"]}]}
    status, answer = api.raw(json.dumps({"ClusterName": "demo", **body}), target="SageMaker.StartClusterHealthCheck")
    assert status == 400 and "is Updating: a deep health check needs an InService cluster" in answer["message"]
    status, answer = api.raw(json.dumps({"ClusterName": "ghost", **body}), target="SageMaker.StartClusterHealthCheck")
    assert status == 400 and answer["__type"] == "ResourceNotFound" and "ghost" in answer["message"]
    assert all(n.pending is None for n in api.store.nodes("demo"))
