"""Describe / List operations with boto3 and the AWS CLI, on clusters put into the store directly
(no engine): names, shapes, filters, sorting, pagination, ARNs, errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from botocore.exceptions import ClientError

from tests.api.seed import create_request, seed_cluster

AWS = str(Path(sys.executable).with_name("aws"))


def test_list_clusters_pages_sorts_and_filters(api):
    t0 = time.time() - 100
    for i, name in enumerate(["delta", "alpha", "charlie", "bravo", "echo"]):
        seed_cluster(api.store, name, computes=1, created_at=t0 + i)
    c = api.client()
    pages = list(c.get_paginator("list_clusters").paginate(PaginationConfig={"PageSize": 2}))
    assert [len(p["ClusterSummaries"]) for p in pages] == [2, 2, 1]
    names = [s["ClusterName"] for p in pages for s in p["ClusterSummaries"]]
    assert names == ["delta", "alpha", "charlie", "bravo", "echo"]  # CreationTime, Ascending: the model's defaults
    by_name = c.list_clusters(SortBy="NAME", SortOrder="Descending")["ClusterSummaries"]
    assert [s["ClusterName"] for s in by_name] == ["echo", "delta", "charlie", "bravo", "alpha"]
    assert [s["ClusterName"] for s in c.list_clusters(NameContains="lph")["ClusterSummaries"]] == ["alpha"]
    recent = c.list_clusters(CreationTimeAfter=t0 + 2.5)["ClusterSummaries"]
    assert {s["ClusterName"] for s in recent} == {"bravo", "echo"}
    s = by_name[0]
    assert s["ClusterStatus"] == "InService" and s["ClusterArn"].startswith("arn:aws:sagemaker:us-east-1:")
    assert abs(s["CreationTime"].timestamp() - (t0 + 4)) < 1


def test_describe_cluster_echoes_fields_without_meaning(api):
    req = create_request("demo", computes=2)
    req["VpcConfig"] = {"SecurityGroupIds": ["sg-0123456789abcdef0"], "Subnets": ["subnet-0123456789abcdef0"]}
    req["Tags"] = [{"Key": "course", "Value": "hpc-101"}]
    req["InstanceGroups"][2]["ThreadsPerCore"] = 1
    req["InstanceGroups"][2]["MinInstanceCount"] = 1
    seed_cluster(api.store, "demo", computes=2, pending=1, request=req)
    c = api.client()
    d = c.describe_cluster(ClusterName="demo")
    assert d["ClusterStatus"] == "InService"
    assert d["NodeProvisioningMode"] == "Continuous"
    assert d["VpcConfig"] == req["VpcConfig"]
    groups = {g["InstanceGroupName"]: g for g in d["InstanceGroups"]}
    assert groups["compute"]["CurrentCount"] == 1 and groups["compute"]["TargetCount"] == 2
    assert groups["compute"]["Status"] == "Degraded"
    assert groups["compute"]["ActiveOperations"] == {"Scaling": 1}
    assert groups["compute"]["MinCount"] == 1
    assert groups["compute"]["ThreadsPerCore"] == 1
    assert groups["compute"]["ExecutionRole"] == req["InstanceGroups"][2]["ExecutionRole"]
    assert groups["compute"]["SlurmConfig"] == {"NodeType": "Compute", "PartitionNames": ["dev"]}
    assert groups["controller"]["Status"] == "InService" and not groups["controller"].get("ActiveOperations")
    # by ARN, too
    assert c.describe_cluster(ClusterName=d["ClusterArn"])["ClusterName"] == "demo"


def test_list_cluster_nodes(api):
    seed_cluster(api.store, "demo", computes=3, pending=1)
    c = api.client()
    nodes = c.list_cluster_nodes(ClusterName="demo")["ClusterNodeSummaries"]
    # as in HyperPod: without IncludeNodeLogicalIds, only nodes that got an instance
    assert len(nodes) == 4 and all("NodeLogicalId" not in n for n in nodes)
    assert all(n["InstanceStatus"]["Status"] == "Running" for n in nodes)
    every = c.list_cluster_nodes(ClusterName="demo", IncludeNodeLogicalIds=True, SortBy="NAME")["ClusterNodeSummaries"]
    assert [n["NodeLogicalId"] for n in every] == ["demo-compute-1", "demo-compute-2", "demo-compute-3",
                                                   "demo-controller-1", "demo-login-1"]
    waiting = every[2]["InstanceStatus"]
    assert waiting["Status"] == "Failure" and waiting["Message"].startswith("InsufficientCapacity")
    only = c.list_cluster_nodes(ClusterName="demo", InstanceGroupNameContains="contr")["ClusterNodeSummaries"]
    assert [n["InstanceGroupName"] for n in only] == ["controller"]


def test_list_cluster_nodes_paginates_250(api):
    seed_cluster(api.store, "big", computes=248)
    c = api.client()
    pages = list(c.get_paginator("list_cluster_nodes").paginate(ClusterName="big", PaginationConfig={"PageSize": 100}))
    assert [len(p["ClusterNodeSummaries"]) for p in pages] == [100, 100, 50]
    ids = [n["InstanceId"] for p in pages for n in p["ClusterNodeSummaries"]]
    assert len(set(ids)) == 250


def test_describe_cluster_node(api):
    seed_cluster(api.store, "demo", computes=2, pending=1)
    c = api.client()
    first = c.list_cluster_nodes(ClusterName="demo", IncludeNodeLogicalIds=True, SortBy="NAME")["ClusterNodeSummaries"][0]
    by_id = c.describe_cluster_node(ClusterName="demo", NodeId=first["InstanceId"])["NodeDetails"]
    assert by_id["NodeLogicalId"] == "demo-compute-1" and by_id["InstanceGroupName"] == "compute"
    assert by_id["InstanceStatus"]["Status"] == "Running"
    by_logical = c.describe_cluster_node(ClusterName="demo", NodeLogicalId="demo-compute-2")["NodeDetails"]
    assert by_logical["InstanceStatus"]["Status"] == "Failure"
    with pytest.raises(ClientError) as e:
        c.describe_cluster_node(ClusterName="demo", NodeLogicalId="demo-compute-9")
    assert e.value.response["Error"]["Code"] == "ResourceNotFound"
    assert "NodeLogicalId" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        c.describe_cluster_node(ClusterName="demo", NodeId=first["InstanceId"], NodeLogicalId="demo-compute-1")
    assert e.value.response["Error"]["Code"] == "ValidationException"


def test_events(api):
    seed_cluster(api.store, "demo", computes=2, pending=1)
    c = api.client()
    events = c.list_cluster_events(ClusterName="demo")["Events"]
    assert events[0]["Description"] == "cluster demo is InService"  # newest first: the model's default
    assert {e["EventLevel"] for e in events} <= {"Info", "Warn", "Error"}
    assert any(e["EventLevel"] == "Warn" for e in events)
    asc = c.list_cluster_events(ClusterName="demo", SortOrder="Ascending")["Events"]
    assert [e["EventId"] for e in asc] == [e["EventId"] for e in reversed(events)]
    inst = c.list_cluster_events(ClusterName="demo", ResourceType="Instance")["Events"]
    assert inst and all(e["ResourceType"] == "Instance" for e in inst)
    grp = c.list_cluster_events(ClusterName="demo", InstanceGroupName="controller")["Events"]
    assert grp and all(e.get("InstanceGroupName") == "controller" for e in grp)
    time.sleep(0.01)
    api.store.add_event("demo", "Cluster", "Info", "later")
    after = c.list_cluster_events(ClusterName="demo", EventTimeAfter=events[0]["EventTime"])["Events"]
    assert [e["Description"] for e in after] == ["later"]  # a time given back excludes its own event
    page = c.list_cluster_events(ClusterName="demo", MaxResults=2)
    assert len(page["Events"]) == 2 and page["NextToken"]
    rest = c.list_cluster_events(ClusterName="demo", MaxResults=100, NextToken=page["NextToken"])["Events"]
    assert [e["EventId"] for e in page["Events"] + rest] == [after[0]["EventId"]] + [e["EventId"] for e in events]
    one = c.describe_cluster_event(ClusterName="demo", EventId=events[-1]["EventId"])["EventDetails"]
    assert one["Description"] == events[-1]["Description"] and one["ClusterName"] == "demo"
    with pytest.raises(ClientError) as e:
        c.describe_cluster_event(ClusterName="demo", EventId="00000000-0000-4000-8000-00000000ffff")
    assert e.value.response["Error"]["Code"] == "ResourceNotFound"


def test_a_stale_cluster_says_so_to_boto3(api):
    """libvirt unreachable (issue 15): a client that reads only the model's fields still learns that
    the statuses are old: FailureMessage, and each node's InstanceStatus.Message."""
    from lab.engine.sight import Sight
    from lab.providers.base import ProviderUnreachable

    seed_cluster(api.store, "demo", computes=1)
    Sight(api.store, time.time).lost(api.store.cluster("demo"), ProviderUnreachable("libvirt unreachable: socket gone"))
    c = api.client()
    d = c.describe_cluster(ClusterName="demo")
    assert d["ClusterStatus"] == "InService" and d["FailureMessage"].startswith("stale: the lab cannot observe")
    assert "libvirt unreachable: socket gone" in d["FailureMessage"] and "slurmlab host up" in d["FailureMessage"]
    for n in c.list_cluster_nodes(ClusterName="demo")["ClusterNodeSummaries"]:
        assert n["InstanceStatus"]["Status"] == "Running"
        assert n["InstanceStatus"]["Message"].startswith("stale: not observed since"), n
    ev = c.list_cluster_events(ClusterName="demo", SortOrder="Descending", MaxResults=1)["Events"][0]
    assert ev["EventLevel"] == "Error" and "cannot observe the VMs of cluster demo" in ev["Description"]


def test_delete_cluster_marks_deleting(api):
    seed_cluster(api.store, "demo", computes=1)
    c = api.client()
    arn = c.describe_cluster(ClusterName="demo")["ClusterArn"]
    assert c.delete_cluster(ClusterName="demo")["ClusterArn"] == arn
    assert c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "Deleting"


def aws_env() -> dict:
    """The AWS CLI's environment in tests: any key, one region, no config file, no pager, no retries."""
    return {**os.environ, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_CONFIG_FILE": "/dev/null", "AWS_SHARED_CREDENTIALS_FILE": "/dev/null", "AWS_PAGER": "",
            "AWS_MAX_ATTEMPTS": "1"}


def aws(api, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([AWS, "sagemaker", *args, "--endpoint-url", api.url, "--output", "json"], env=aws_env(),
                       capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p


def test_aws_cli_reads(api):
    seed_cluster(api.store, "demo", computes=2, pending=1)
    d = json.loads(aws(api, "describe-cluster", "--cluster-name", "demo").stdout)
    assert d["ClusterStatus"] == "InService"
    assert [g["InstanceGroupName"] for g in d["InstanceGroups"]] == ["controller", "login", "compute"]
    nodes = json.loads(aws(api, "list-cluster-nodes", "--cluster-name", "demo", "--include-node-logical-ids").stdout)
    assert len(nodes["ClusterNodeSummaries"]) == 4
    assert json.loads(aws(api, "list-clusters").stdout)["ClusterSummaries"][0]["ClusterName"] == "demo"
    ev = json.loads(aws(api, "list-cluster-events", "--cluster-name", "demo", "--resource-type", "Cluster").stdout)
    assert ev["Events"] and all(e["ResourceType"] == "Cluster" for e in ev["Events"])
    p = aws(api, "describe-cluster", "--cluster-name", "nope", check=False)
    assert p.returncode != 0
    assert "ResourceNotFound" in p.stderr and "no cluster named 'nope'" in p.stderr
