"""AWS JSON 1.1 on the wire: targets, content types, malformed and oversized bodies, missing and
mistyped fields. Every error is `{"__type", "message"}` with a 4xx status and names the field."""

from __future__ import annotations

import http.client
import json

import pytest
from botocore.exceptions import ClientError, ParamValidationError

from lab.api.server import MAX_BODY
from tests.api.seed import ROLE, create_request, seed_cluster


def err(status_body):
    status, body = status_body
    assert 400 <= status < 500, (status, body)
    assert set(body) >= {"__type", "message"}, body
    return status, body["__type"], body["message"]


def test_unknown_and_missing_targets(api):
    _, code, msg = err(api.raw("{}", target="SageMaker.DescribeClusterz"))
    assert code == "UnknownOperationException" and "did you mean DescribeCluster?" in msg
    _, code, msg = err(api.raw("{}", target="SageMaker.CreateTrainingJob"))
    assert code == "UnknownOperationException" and "not a lab's" in msg and "CreateCluster" in msg
    _, code, msg = err(api.raw("{}", target=None))
    assert code == "UnknownOperationException" and "X-Amz-Target" in msg
    _, code, msg = err(api.raw("{}", target="AmazonS3.ListBuckets"))
    assert code == "UnknownOperationException"


def test_malformed_bodies(api):
    _, code, msg = err(api.raw('{"ClusterName": "demo",'))
    assert code == "SerializationException" and "malformed JSON at line 1" in msg
    _, code, msg = err(api.raw('["ClusterName"]'))
    assert code == "SerializationException" and "expected a JSON object, got a list" in msg
    _, code, _ = err(api.raw('{"ClusterName": NaN}'))
    assert code == "SerializationException"
    _, code, _ = err(api.raw(b'{"ClusterName": "\xff"}'))
    assert code == "SerializationException"
    _, code, msg = err(api.raw("{}", content_type="text/plain"))
    assert code == "SerializationException" and "Content-Type" in msg
    _, code, _ = err(api.raw("[" * 100_000 + "]" * 100_000))
    assert code == "SerializationException"
    _, code, _ = err(api.raw('{"MaxResults": ' + "9" * 10_000 + "}", target="SageMaker.ListClusters"))
    assert code == "SerializationException"


def test_oversized_body_is_refused_unread(api):
    status, code, msg = err(api.raw(b"{" + b" " * (MAX_BODY + 10) + b"}"))
    assert status == 413 and code == "ValidationException" and str(MAX_BODY) in msg


def test_fields_are_named(api):
    _, code, msg = err(api.raw("{}"))
    assert code == "ValidationException" and "ClusterName: missing (required)" in msg
    _, code, msg = err(api.raw('{"ClusterName": 5}'))
    assert "ClusterName: expected a string, got an integer (5)" in msg
    _, code, msg = err(api.raw('{"ClusterName": "demo", "ClusterNam": "x"}'))
    assert "ClusterNam: unknown field" in msg and "did you mean 'ClusterName'?" in msg
    _, code, msg = err(api.raw(json.dumps({"ClusterName": "x" * 5000})))
    assert "ClusterName: is 5000 characters; at most 256 allowed" in msg
    _, code, msg = err(api.raw('{"MaxResults": 0, "SortOrder": "Sideways"}', target="SageMaker.ListClusters"))
    assert "MaxResults: 0 is below the minimum 1" in msg and "SortOrder: 'Sideways' is not one of: Ascending, Descending" in msg
    _, code, msg = err(api.raw('{"NextToken": "garbage"}', target="SageMaker.ListClusters"))
    assert "NextToken" in msg
    _, code, msg = err(api.raw('{"CreationTimeAfter": "yesterday"}', target="SageMaker.ListClusters"))
    assert "CreationTimeAfter: expected a timestamp" in msg
    _, code, msg = err(api.raw('{"ClusterName": "demo", "NodesToAdd": []}', target="SageMaker.BatchAddClusterNodes"))
    assert "NodesToAdd: has 0 items; at least 1 needed" in msg
    status, body = api.raw('{"ClusterName": "demo"}', target="SageMaker.DescribeCluster")
    assert status == 400 and body["__type"] == "ResourceNotFound" and "ClusterName" in body["message"]


def test_errors_through_boto3(api):
    seed_cluster(api.store, "demo", computes=1)
    c = api.client()
    with pytest.raises(c.exceptions.ResourceNotFound):
        c.describe_cluster(ClusterName="nope")
    with pytest.raises(c.exceptions.ResourceInUse):
        c.create_cluster(**create_request("demo"))
    bad = create_request("other")
    bad["InstanceGroups"][2]["InstanceType"] = "ml.c5.larg"
    bad["InstanceGroups"][0]["InstanceCount"] = 2
    with pytest.raises(ClientError) as e:
        c.create_cluster(**bad)
    error = e.value.response["Error"]
    assert error["Code"] == "ValidationException"
    assert "InstanceGroups[2].InstanceType: 'ml.c5.larg' is not a HyperPod instance type" in error["Message"]
    assert "InstanceGroups[0].InstanceCount" in error["Message"]
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    big = create_request("other")
    big["InstanceGroups"][2]["InstanceCount"] = 500
    with pytest.raises(c.exceptions.ResourceLimitExceeded) as e:
        c.create_cluster(**big)
    assert "InstanceGroups[2].InstanceCount" in e.value.response["Error"]["Message"]
    eks = create_request("other")
    eks["Orchestrator"] = {"Eks": {"ClusterArn": "arn:aws:eks:us-east-1:000000000000:cluster/x"}}
    with pytest.raises(ClientError) as e:
        c.create_cluster(**eks)
    assert "Orchestrator.Eks" in e.value.response["Error"]["Message"]
    # boto3 itself checks what the model requires (ExecutionRole included) before sending
    with pytest.raises(ParamValidationError):
        c.create_cluster(ClusterName="x", InstanceGroups=[{"InstanceGroupName": "c", "InstanceCount": 1}])
    # nothing was created by any of it
    assert [s["ClusterName"] for s in c.list_clusters()["ClusterSummaries"]] == ["demo"]


def test_create_accepts_fields_without_meaning(api):
    c = api.client()
    req = create_request("echo")
    req["VpcConfig"] = {"SecurityGroupIds": ["sg-1"], "Subnets": ["subnet-1"]}
    req["Tags"] = [{"Key": "k", "Value": "v"}]
    req["ClusterRole"] = ROLE
    req["InstanceGroups"][1]["InstanceStorageConfigs"] = [{"EbsVolumeConfig": {"VolumeSizeInGB": 100}}]
    req["InstanceGroups"][1]["TrainingPlanArn"] = "arn:aws:sagemaker:us-east-1:000000000000:training-plan/x"
    arn = c.create_cluster(**req)["ClusterArn"]
    d = c.describe_cluster(ClusterName="echo")
    assert d["ClusterArn"] == arn and d["ClusterStatus"] == "Creating"
    assert d["VpcConfig"] == req["VpcConfig"] and d["ClusterRole"] == ROLE
    login = next(g for g in d["InstanceGroups"] if g["InstanceGroupName"] == "login")
    assert login["InstanceStorageConfigs"] == [{"EbsVolumeConfig": {"VolumeSizeInGB": 100}}]
    assert login["TrainingPlanArn"].endswith("training-plan/x") and login["ExecutionRole"] == ROLE


def test_lifecycle_folder_must_exist(api, tmp_path):
    c = api.client()
    req = create_request("lc")
    req["InstanceGroups"][0]["LifeCycleConfig"] = {"SourceS3Uri": str(tmp_path / "missing"), "OnCreate": "on_create.sh"}
    with pytest.raises(ClientError) as e:
        c.create_cluster(**req)
    assert "InstanceGroups[0].LifeCycleConfig" in e.value.response["Error"]["Message"]


def test_connection_survives_errors(api):
    """HTTP/1.1 keep-alive: an error reply leaves the connection usable (bodies are always read).
    Every request goes over the one TCP connection: http.client would quietly open a new one after
    a reply that closed it, so the socket is compared, not only the last status."""
    host, port = api.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    h = {"X-Amz-Target": "SageMaker.ListClusters", "Content-Type": "application/x-amz-json-1.1"}
    conn.connect()
    sock, local = conn.sock, conn.sock.getsockname()
    statuses = []
    for body in ["{bad json", '{"MaxResults": "x"}', "{}", "{}"]:
        conn.request("POST", "/", body=body, headers=h)
        r = conn.getresponse()
        r.read()
        statuses.append(r.status)
        assert not r.will_close and r.getheader("Connection") != "close", (body, r.status)
        assert conn.sock is sock and conn.sock.getsockname() == local, f"a new connection after {body!r}"
    assert statuses == [400, 400, 200, 200]
    conn.close()


def test_other_paths_and_methods(api):
    status, body = api.get("/nope")
    assert status == 404 and body["__type"] == "ResourceNotFound"
    status, body = api.raw("{}", method="PUT")
    assert status == 405 and body["__type"] == "UnknownOperationException"
    status, body = api.raw("{}", path="/2017-07-24/clusters")
    assert status == 404
    status, body = api.get("/_lab/health")
    assert status == 200 and body["Ok"] is True


def test_lab_capacity_controls(api):
    status, body = api.get("/_lab/capacity")
    assert status == 200 and body["Capacity"] == [] and body["Arrivals"] == []
    status, body = api.post("/_lab/capacity", {"InstanceType": "ml.c5.large", "Available": 1})
    assert status == 200 and body["Capacity"] == [{"InstanceType": "ml.c5.large", "Available": 1, "InUse": 0}]
    status, body = api.post("/_lab/capacity", "instance_types:\n  ml.c5.large:\n    available: 2\n"
                                              "    arrivals: [{after_seconds: 60, count: 3}]\n",
                            content_type="application/yaml")
    assert status == 200 and body["Capacity"][0]["Available"] == 2
    assert body["Arrivals"][0]["Count"] == 3 and 55 <= body["Arrivals"][0]["InSeconds"] <= 60
    _, code, msg = err(api.post("/_lab/capacity", {"InstanceType": "ml.c5.larg", "Available": -1}))
    assert code == "ValidationException" and "InstanceType" in msg and "Available" in msg
    _, code, msg = err(api.post("/_lab/capacity", {"instance_types": {"ml.c5.large": {"availble": 1}}}))
    assert "unknown key 'availble'" in msg
    _, code, _ = err(api.post("/_lab/capacity", "{not json"))
    status, body = api.post("/_lab/capacity", {"Reset": True})
    assert status == 200 and all(r["Available"] is None for r in body["Capacity"])
    # never inside SageMaker's operations
    _, code, _ = err(api.raw("{}", target="SageMaker.SetCapacity"))
    assert code == "UnknownOperationException"


def test_batch_delete_needs_nodes(api):
    seed_cluster(api.store, "demo", computes=1)
    _, code, msg = err(api.raw('{"ClusterName": "demo"}', target="SageMaker.BatchDeleteClusterNodes"))
    assert code == "ValidationException" and "NodeIds" in msg



def test_garbage_on_the_socket(api):
    """Broken HTTP itself (request line, headers) gets an AWS-shaped error too, and the server lives on."""
    import socket

    host, port = api.server.server_address[:2]
    for raw in [b"GARBAGE\r\n\r\n", b"POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n{}",
                b"POST / HTTP/1.1\r\nX-Amz-Target: SageMaker.ListClusters\r\nContent-Length: 5\r\n\r\n{}",
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
                b"GET / HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n", b"\x00\xff" * 100 + b"\r\n\r\n"]:
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(raw)
            s.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        head, _, body = reply.partition(b"\r\n\r\n")
        assert head.split(b" ")[1][:1] == b"4", reply[:200]
        assert b"__type" in body, reply[:300]
    assert api.get("/_lab/health")[0] == 200
