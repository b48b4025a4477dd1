"""Whole lifecycles through the API on the sim provider (the real engine process, simulated VMs),
driven by unmodified boto3 and by the AWS CLI.

Continuous: create with a capacity shortage -> InService with the short group Degraded -> fill-up
when capacity arrives -> two groups updated at once (one short of capacity, the other unblocked)
-> node deletion, reboot, replacement -> deletion. Legacy: a create that cannot complete rolls back.
"""

from __future__ import annotations

import json
import threading

import pytest
from botocore.exceptions import ClientError

from tests.api.conftest import wait_for
from tests.api.seed import create_request, group
from tests.api.test_read import aws


def groups(c, name):
    return {g["InstanceGroupName"]: g for g in c.describe_cluster(ClusterName=name)["InstanceGroups"]}


def nodes(c, name):
    return {n["NodeLogicalId"]: n for n in c.list_cluster_nodes(ClusterName=name, IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]}


def counts(c, name):
    return {k: (g["CurrentCount"], g["TargetCount"], g["Status"]) for k, g in groups(c, name).items()}


def test_continuous_lifecycle_with_boto3(live_api):
    api, c = live_api, live_api.client()
    assert api.post("/_lab/capacity", {"InstanceType": "ml.c5.large", "Available": 1})[0] == 200

    # 1. continuous create with a shortage: InService with the compute group short of one node
    arn = c.create_cluster(**create_request("demo", computes=2))["ClusterArn"]
    assert c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "Creating"
    d = wait_for(lambda: (x := c.describe_cluster(ClusterName="demo"))["ClusterStatus"] == "InService" and x,
                 what="InService")
    assert d["ClusterArn"] == arn
    wait_for(lambda: counts(c, "demo")["compute"] == (1, 2, "Degraded"), what="compute 1/2 Degraded")
    g = groups(c, "demo")
    assert g["controller"]["CurrentCount"] == 1 and g["login"]["CurrentCount"] == 1
    assert g["compute"]["ActiveOperations"] == {"Scaling": 1}
    short = [n for n in nodes(c, "demo").values() if n["InstanceStatus"]["Status"] == "Failure"]
    assert len(short) == 1 and short[0]["InstanceStatus"]["Message"].startswith("InsufficientCapacity")
    warn = [e for e in c.list_cluster_events(ClusterName="demo", ResourceType="Instance")["Events"]
            if "InsufficientCapacity" in e.get("Description", "")]
    assert warn and warn[0]["EventLevel"] == "Warn"
    detail = c.describe_cluster_event(ClusterName="demo", EventId=warn[0]["EventId"])["EventDetails"]
    assert "InsufficientCapacity" in detail["EventDetails"]["EventMetadata"]["Instance"]["FailureMessage"]
    # without IncludeNodeLogicalIds the node waiting for capacity (no instance yet) is not listed
    assert len(c.list_cluster_nodes(ClusterName="demo")["ClusterNodeSummaries"]) == 3

    # 2. capacity arrives: the waiting node launches at once and joins
    status, cap = api.post("/_lab/capacity", {"instance_types": {"ml.c5.large": {"arrivals": [{"after_seconds": 0, "count": 1}]}}})
    assert status == 200
    wait_for(lambda: counts(c, "demo")["compute"][:2] == (2, 2), what="compute 2/2")
    wait_for(lambda: all(s == "InService" for *_, s in counts(c, "demo").values()), what="every group InService")
    assert c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService"

    # 3. two groups updated at once: compute +1 (no ml.c5.large left) and a new group (unlimited type)
    results: dict[str, object] = {}

    def update(key, body):
        try:
            results[key] = c.update_cluster(ClusterName="demo", InstanceGroups=[body])["ClusterArn"]
        except ClientError as e:  # pragma: no cover - reported below
            results[key] = e.response["Error"]

    threads = [threading.Thread(target=update, args=("compute", group("compute", "Compute", 3, "ml.c5.large"))),
               threading.Thread(target=update, args=("extra", group("extra", "Compute", 2, "ml.m5.large")))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"compute": arn, "extra": arn}, results
    # the shortage in one group never blocks the other
    wait_for(lambda: counts(c, "demo")["extra"] == (2, 2, "InService"), what="extra 2/2 InService")
    got = counts(c, "demo")
    assert got["compute"][:2] == (2, 3) and got["compute"][2] in ("Degraded", "Updating")
    assert c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "Updating"
    api.post("/_lab/capacity", {"InstanceType": "ml.c5.large", "Available": 3})
    wait_for(lambda: c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService"
             and counts(c, "demo")["compute"] == (3, 3, "InService"), what="compute 3/3, cluster InService")

    # validation errors name the field; nothing changes
    with pytest.raises(ClientError) as e:
        c.update_cluster(ClusterName="demo", InstanceGroups=[group("compute", "Login", 3, "ml.c5.large")])
    assert e.value.response["Error"]["Code"] == "ValidationException"
    assert "InstanceGroups[0].SlurmConfig.NodeType" in e.value.response["Error"]["Message"]
    with pytest.raises(ClientError) as e:
        c.update_cluster(ClusterName="demo", InstanceGroupsToDelete=["controller"])
    assert "InstanceGroupsToDelete[0]" in e.value.response["Error"]["Message"]
    assert counts(c, "demo")["compute"] == (3, 3, "InService")

    # 4. node deletion: by instance id and by logical id; the controller cannot go
    n = nodes(c, "demo")
    r = c.batch_delete_cluster_nodes(ClusterName="demo", NodeIds=[n["demo-extra-1"]["InstanceId"], n["demo-controller-1"]["InstanceId"]],
                                     NodeLogicalIds=["demo-compute-3"])
    assert r["Successful"] == [n["demo-extra-1"]["InstanceId"]]
    assert r["SuccessfulNodeLogicalIds"] == ["demo-compute-3"]
    assert [f["Code"] for f in r["Failed"]] == ["InvalidNodeStatus"]
    wait_for(lambda: {k: v[:2] for k, v in counts(c, "demo").items()} == {"controller": (1, 1), "login": (1, 1), "compute": (2, 2), "extra": (1, 1)}
             and set(nodes(c, "demo")) == {"demo-controller-1", "demo-login-1", "demo-compute-1", "demo-compute-2", "demo-extra-2"},
             what="two nodes gone, targets down by one")

    # reboot keeps the instance; replace gives a new one under the same logical id
    before = nodes(c, "demo")
    r = c.batch_reboot_cluster_nodes(ClusterName="demo", NodeLogicalIds=["demo-compute-1"])
    assert r["SuccessfulNodeLogicalIds"] == ["demo-compute-1"]
    r = c.batch_replace_cluster_nodes(ClusterName="demo", NodeIds=[before["demo-compute-2"]["InstanceId"]])
    assert r["Successful"] == [before["demo-compute-2"]["InstanceId"]]
    wait_for(lambda: all(x["InstanceStatus"]["Status"] == "Running" for x in nodes(c, "demo").values())
             and nodes(c, "demo")["demo-compute-2"]["InstanceId"] != before["demo-compute-2"]["InstanceId"],
             what="rebooted and replaced nodes Running again")
    assert nodes(c, "demo")["demo-compute-1"]["InstanceId"] == before["demo-compute-1"]["InstanceId"]

    # 5. deletion
    assert c.delete_cluster(ClusterName="demo")["ClusterArn"] == arn

    def gone():
        try:
            c.describe_cluster(ClusterName="demo")
            return False
        except c.exceptions.ResourceNotFound:
            return True

    wait_for(gone, what="cluster deleted")
    assert c.list_clusters()["ClusterSummaries"] == []


def test_legacy_create_rolls_back(live_api):
    api, c = live_api, live_api.client()
    api.post("/_lab/capacity", {"InstanceType": "ml.m5.large", "Available": 1})
    c.create_cluster(**create_request("old", computes=2, continuous=False, compute_type="ml.m5.large"))
    seen = set()

    def failed():
        d = c.describe_cluster(ClusterName="old")
        seen.add(d["ClusterStatus"])
        return d["ClusterStatus"] == "Failed" and d

    d = wait_for(failed, timeout=90, every=0.2, what="legacy create Failed")
    assert "InsufficientCapacity" in d["FailureMessage"]
    assert "RollingBack" in seen or any("RollingBack" in e["Description"] for e in c.list_cluster_events(ClusterName="old")["Events"])
    assert "NodeProvisioningMode" not in d
    assert c.list_cluster_nodes(ClusterName="old", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"] == []
    # a Failed cluster takes no more changes; deleting it works
    with pytest.raises(ClientError) as e:
        c.update_cluster(ClusterName="old", InstanceGroups=[group("compute", "Compute", 1, "ml.m5.large")])
    assert e.value.response["Error"]["Code"] == "ConflictException"
    c.delete_cluster(ClusterName="old")
    wait_for(lambda: not c.list_clusters()["ClusterSummaries"], what="deleted")


def test_lifecycle_with_the_aws_cli(live_api, tmp_path):
    api = live_api
    req = tmp_path / "create.json"
    req.write_text(json.dumps(create_request("cli", computes=1)))
    out = json.loads(aws(api, "create-cluster", "--cli-input-json", f"file://{req}").stdout)
    assert out["ClusterArn"].startswith("arn:aws:sagemaker:us-east-1:000000000000:cluster/")

    def describe():
        return json.loads(aws(api, "describe-cluster", "--cluster-name", "cli").stdout)

    wait_for(lambda: describe()["ClusterStatus"] == "InService", every=1, what="InService")
    listed = json.loads(aws(api, "list-cluster-nodes", "--cluster-name", "cli").stdout)["ClusterNodeSummaries"]
    assert {n["InstanceGroupName"] for n in listed} == {"controller", "login", "compute"}
    assert all(n["InstanceStatus"]["Status"] == "Running" for n in listed)

    added = json.loads(aws(api, "batch-add-cluster-nodes", "--cluster-name", "cli", "--nodes-to-add",
                           "InstanceGroupName=compute,IncrementTargetCountBy=2").stdout)
    assert [s["NodeLogicalId"] for s in added["Successful"]] == ["cli-compute-2", "cli-compute-3"]
    assert added["Failed"] == []
    wait_for(lambda: next(g for g in describe()["InstanceGroups"] if g["InstanceGroupName"] == "compute")["CurrentCount"] == 3,
             every=1, what="compute 3/3")
    deleted = json.loads(aws(api, "batch-delete-cluster-nodes", "--cluster-name", "cli", "--node-logical-ids", "cli-compute-2").stdout)
    assert deleted["SuccessfulNodeLogicalIds"] == ["cli-compute-2"]

    bad = aws(api, "update-cluster", "--cluster-name", "cli", "--instance-groups",
              json.dumps([group("compute", "Compute", 70, "ml.c5.large")]), check=False)
    assert bad.returncode != 0 and "InstanceGroups[0].InstanceCount" in bad.stderr

    events = json.loads(aws(api, "list-cluster-events", "--cluster-name", "cli", "--max-items", "5").stdout)
    assert len(events["Events"]) == 5 and events["NextToken"]

    aws(api, "delete-cluster", "--cluster-name", "cli")
    wait_for(lambda: aws(api, "describe-cluster", "--cluster-name", "cli", check=False).returncode != 0, every=1,
             what="deleted")
    gone = aws(api, "describe-cluster", "--cluster-name", "cli", check=False)
    assert "ResourceNotFound" in gone.stderr
