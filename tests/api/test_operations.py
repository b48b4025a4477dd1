"""ListClusterOperations and DescribeClusterOperation with boto3 (the AWS CLI 1.x has no such
commands yet: its own copy of the SageMaker model, botocore 1.43, predates them), on a cluster put into
the store directly (no engine): every scaling request is an operation, with its groups before and after;
filters, sorting, pagination, errors; ActiveOperations agrees with the InProgress ones."""

from __future__ import annotations

import json
import re
import time

import pytest

from tests.api.seed import seed_cluster

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def _scaled(api):
    """demo: created (3 compute), then one node added, then compute set to 5 by UpdateCluster."""
    seed_cluster(api.store, "demo", computes=3)
    create_op = api.store.operations("demo")[0]
    api.store.finish_operation(create_op.id, "Completed")
    c = api.client()
    time.sleep(0.01)
    c.batch_add_cluster_nodes(ClusterName="demo", NodesToAdd=[{"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}])
    time.sleep(0.01)
    d = c.describe_cluster(ClusterName="demo")
    groups = [{**{k: g[k] for k in ("InstanceGroupName", "InstanceType", "LifeCycleConfig", "ExecutionRole", "SlurmConfig")},
               "InstanceCount": 5 if g["InstanceGroupName"] == "compute" else g["TargetCount"]} for g in d["InstanceGroups"]]
    c.update_cluster(ClusterName="demo", InstanceGroups=groups)
    return c


def test_every_scaling_request_is_an_operation(api):
    c = _scaled(api)
    ops = c.list_cluster_operations(ClusterName="demo")["ClusterOperationSummaries"]
    assert [o["Status"] for o in ops] == ["InProgress", "InProgress", "Done"]  # newest first: the model's default
    assert all(UUID.match(o["OperationId"]) and o["Type"] == "Scaling" and o["ClusterArn"].endswith(
        c.describe_cluster(ClusterName="demo")["ClusterArn"].split("/")[-1]) for o in ops)
    newest, added, created = (c.describe_cluster_operation(ClusterName="demo", OperationId=o["OperationId"]) for o in ops)
    assert newest["ScalingDetails"] == [{"InstanceGroupName": "compute", "Status": "InProgress",
                                         "Original": {"CurrentCount": 3, "TargetCount": 4},
                                         "Desired": {"TargetCount": 5}}]
    assert added["ScalingDetails"][0]["Original"] == {"CurrentCount": 3, "TargetCount": 3}
    assert added["ScalingDetails"][0]["Desired"] == {"TargetCount": 4}
    assert {d["InstanceGroupName"]: (d["Original"]["TargetCount"], d["Desired"]["TargetCount"], d["Status"])
            for d in created["ScalingDetails"]} == {"controller": (0, 1, "Done"), "login": (0, 1, "Done"),
                                                    "compute": (0, 3, "Done")}
    # ActiveOperations counts the same InProgress operations
    compute = next(g for g in c.describe_cluster(ClusterName="demo")["InstanceGroups"] if g["InstanceGroupName"] == "compute")
    assert compute["ActiveOperations"] == {"Scaling": 2}


def test_filters_sorting_and_pages(api):
    c = _scaled(api)
    everything = c.list_cluster_operations(ClusterName="demo")["ClusterOperationSummaries"]
    assert [o["Status"] for o in c.list_cluster_operations(ClusterName="demo", Status="Done")["ClusterOperationSummaries"]] == ["Done"]
    assert c.list_cluster_operations(ClusterName="demo", Status="Superseded")["ClusterOperationSummaries"] == []
    assert c.list_cluster_operations(ClusterName="demo", Type="DeepHealthCheck")["ClusterOperationSummaries"] == []
    asc = c.list_cluster_operations(ClusterName="demo", SortBy="CreationTime", SortOrder="Ascending")
    assert [o["OperationId"] for o in asc["ClusterOperationSummaries"]] == [o["OperationId"] for o in reversed(everything)]
    second = everything[1]["CreationTime"]
    after = c.list_cluster_operations(ClusterName="demo", CreationTimeAfter=second)["ClusterOperationSummaries"]
    assert [o["OperationId"] for o in after] == [everything[0]["OperationId"]]
    before = c.list_cluster_operations(ClusterName="demo", CreationTimeBefore=second)["ClusterOperationSummaries"]
    assert [o["OperationId"] for o in before] == [everything[2]["OperationId"]]
    page = c.list_cluster_operations(ClusterName="demo", MaxResults=2)
    rest = c.list_cluster_operations(ClusterName="demo", NextToken=page["NextToken"])
    assert [o["OperationId"] for o in page["ClusterOperationSummaries"] + rest["ClusterOperationSummaries"]] == \
        [o["OperationId"] for o in everything] and "NextToken" not in rest
    arn = c.describe_cluster(ClusterName="demo")["ClusterArn"]
    assert c.list_cluster_operations(ClusterName=arn)["ClusterOperationSummaries"] == everything


@pytest.mark.parametrize("op,body,code,says", [
    ("ListClusterOperations", {"ClusterName": "nope"}, "ResourceNotFound", "no cluster named 'nope'"),
    ("DescribeClusterOperation", {"ClusterName": "demo", "OperationId": "00000000-0000-4000-8000-000000000000"},
     "ResourceNotFound", "OperationId: no operation '00000000-0000-4000-8000-000000000000'"),
    ("DescribeClusterOperation", {"ClusterName": "demo", "OperationId": "not-a-uuid"}, "ValidationException",
     "OperationId"),
    ("DescribeClusterOperation", {"ClusterName": "demo"}, "ValidationException", "OperationId"),
    ("ListClusterOperations", {"ClusterName": "demo", "Status": "Finished"}, "ValidationException", "Status"),
    ("ListClusterOperations", {"ClusterName": "demo", "SortBy": "Name"}, "ValidationException", "SortBy"),
    ("ListClusterOperations", {"ClusterName": "demo", "MaxResults": 101}, "ValidationException", "MaxResults"),
    ("ListClusterOperations", {"ClusterName": "demo", "NextToken": "garbage"}, "ValidationException", "NextToken"),
    ("ListClusterOperations", {"ClusterName": "demo", "CreationTimeAfter": "yesterday"}, "ValidationException",
     "CreationTimeAfter"),
])
def test_bad_requests_name_the_field(api, op, body, code, says):
    seed_cluster(api.store, "demo", computes=1)
    status, answer = api.raw(json.dumps(body), target=f"SageMaker.{op}")  # the server checks, as HyperPod does
    assert status == 400 and answer["__type"] == code
    assert says in answer["message"]
    assert len(api.store.operations("demo")) == 1  # nothing changed


def test_boto3_pages_through_operations_with_its_paginator(api):
    _scaled(api)
    c = api.client()
    pages = list(c.get_paginator("list_cluster_operations").paginate(ClusterName="demo", PaginationConfig={"PageSize": 1}))
    assert [len(p["ClusterOperationSummaries"]) for p in pages] == [1, 1, 1]


def test_the_cli_lists_and_describes_operations(api):
    from typer.testing import CliRunner

    from lab.cli import app
    from lab.errors import NotFound, UsageError

    _scaled(api)
    listed = CliRunner().invoke(app, ["list-cluster-operations", "demo", "--status", "InProgress", "-o", "json"])
    ops = json.loads(listed.output)["ClusterOperationSummaries"]
    assert len(ops) == 2
    text = CliRunner().invoke(app, ["describe-cluster-operation", "demo", ops[0]["OperationId"]]).output
    assert f"{ops[0]['OperationId']}  Scaling  InProgress" in text and "compute      3 running, target 4 -> 5" in text
    bad = CliRunner().invoke(app, ["list-cluster-operations", "demo", "--status", "Finished"])
    assert isinstance(bad.exception, UsageError)  # lab.cli.main prints it and exits 2
    assert str(bad.exception.message) == "Status: 'Finished' is not one of InProgress, Superseded, Done"
    missing = CliRunner().invoke(app, ["describe-cluster-operation", "demo", "00000000-0000-4000-8000-000000000000"])
    assert isinstance(missing.exception, NotFound) and missing.exception.fix == "ListClusterOperations lists them"
