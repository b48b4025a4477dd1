"""Cluster checkpoints through the lab's own controls (POST/GET /_lab/checkpoints, what the console's
buttons call) on the sim provider: a checkpoint, a scale-in, a restore that brings the node back; the
console's state lists the checkpoints; bad requests name the field and change nothing."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import wait_for
from tests.api.seed import create_request, seed_cluster


def _ids(c):
    return {n["NodeLogicalId"]: n["InstanceId"] for n in
            c.list_cluster_nodes(ClusterName="demo", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]}


def _events(c):
    return [e["Description"] for e in c.list_cluster_events(ClusterName="demo", SortOrder="Ascending",
                                                             MaxResults=100)["Events"]]


def test_checkpoint_scale_in_restore_through_the_lab_api(live_api):
    api, c = live_api, live_api.client()
    c.create_cluster(**create_request("demo", computes=2))
    wait_for(lambda: len(_ids(c)) == 4 and all(g["CurrentCount"] == g["TargetCount"] for g in
                                               c.describe_cluster(ClusterName="demo")["InstanceGroups"]),
             what="demo at full size")
    before = _ids(c)
    status, made = api.post("/_lab/checkpoints", {"ClusterName": "demo", "Tag": "step-1", "Action": "Create"})
    assert status == 200 and made["OperationId"], made
    wait_for(lambda: any(e.startswith("checkpoint step-1 taken") for e in _events(c)), what="the checkpoint")
    status, listed = api.get("/_lab/checkpoints?ClusterName=demo")
    assert status == 200 and [k["Tag"] for k in listed["Checkpoints"]] == ["step-1"], listed
    assert listed["Checkpoints"][0]["Simulated"] is True and sorted(listed["Checkpoints"][0]["Nodes"]) == sorted(before)
    assert listed["Checkpoints"][0]["Host"] == "local", listed
    status, state = api.get("/_lab/state")
    assert [k["Tag"] for k in state["Clusters"][0]["Checkpoints"]] == ["step-1"]

    c.batch_delete_cluster_nodes(ClusterName="demo", NodeIds=[before["demo-compute-2"]])
    wait_for(lambda: "demo-compute-2" not in _ids(c), what="compute-2 gone")
    status, back = api.post("/_lab/checkpoints", {"ClusterName": "demo", "Tag": "step-1", "Action": "Restore"})
    assert status == 200, back
    wait_for(lambda: any(e.startswith("checkpoint step-1 restored") for e in _events(c)), what="the restore")
    assert _ids(c) == before
    assert c.describe_cluster(ClusterName="demo")["ClusterStatus"] == "InService"

    status, gone = api.post("/_lab/checkpoints", {"ClusterName": "demo", "Tag": "step-1", "Action": "Delete"})
    assert status == 200 and gone["Deleted"] is True
    assert api.get("/_lab/checkpoints?ClusterName=demo")[1]["Checkpoints"] == []
    c.delete_cluster(ClusterName="demo")
    wait_for(lambda: not c.list_clusters()["ClusterSummaries"], what="demo deleted")


@pytest.mark.parametrize("body, code, says", [
    ({"ClusterName": "demo", "Tag": "Bad Tag", "Action": "Create"}, "ValidationException", "is not a checkpoint tag"),
    ({"ClusterName": "demo", "Tag": "nope", "Action": "Restore"}, "ValidationException", "has no checkpoint 'nope'"),
    ({"ClusterName": "ghost", "Tag": "a", "Action": "Create"}, "ResourceNotFound", "ghost"),
    ({"ClusterName": "demo", "Tag": "a", "Action": "Undo"}, "ValidationException", "Action"),
    ({"ClusterName": "demo", "Action": "Create"}, "ValidationException", "Tag"),
    ({"ClusterName": "demo", "Tag": "a", "Action": "Create", "Extra": 1}, "ValidationException", "Extra"),
])
def test_bad_checkpoint_requests_name_the_field(api, body, code, says):
    seed_cluster(api.store, "demo", computes=1)
    before = (api.store.nodes("demo"), api.store.operations("demo"))
    status, answer = api.post("/_lab/checkpoints", body)
    assert status == 400 and answer["__type"] == code and says in answer["message"], answer
    assert (api.store.nodes("demo"), api.store.operations("demo")) == before


def test_the_cli_lists_and_refuses_bad_tags(api):
    from typer.testing import CliRunner

    from lab.cli import app
    from lab.errors import UsageError

    seed_cluster(api.store, "demo", computes=1)
    shown = CliRunner().invoke(app, ["checkpoint", "list", "demo"]).output
    assert "no checkpoints of demo (make one: slurmlab checkpoint create demo TAG)" in shown, shown
    assert json.loads(CliRunner().invoke(app, ["checkpoint", "list", "demo", "-o", "json"]).output) == {"Checkpoints": []}
    bad = CliRunner().invoke(app, ["checkpoint", "create", "demo", "Step_3"])
    assert isinstance(bad.exception, UsageError) and "'Step_3' is not a checkpoint tag" in bad.exception.message
    missing = CliRunner().invoke(app, ["checkpoint", "restore", "demo", "step-1"])
    assert isinstance(missing.exception, UsageError) and "has no checkpoint 'step-1'" in missing.exception.message
    assert [o.kind for o in api.store.operations("demo")] == ["CreateCluster"]  # nothing recorded
