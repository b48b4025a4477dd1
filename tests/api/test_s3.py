"""Lifecycle scripts through S3, as HyperPod users upload them: `aws s3 mb`, `aws s3 sync`, `aws s3 ls`
and boto3's S3 client against the lab's endpoint (moto's S3 in the server, lab/api/s3.py), mirrored to
$SLURMLAB_HOME/s3/, then a CreateCluster naming the s3:// prefix. Bad keys are refused and change nothing."""

from __future__ import annotations

import json
import os
import subprocess

import boto3
import pytest
from botocore.exceptions import ClientError

from tests.api.seed import create_request
from tests.api.test_read import AWS, aws, aws_env

LIFECYCLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "lifecycle")


def s3cli(api, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([AWS, "s3", *args, "--endpoint-url", api.url], env=aws_env(), capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stdout + p.stderr
    return p


def s3client(api):
    return boto3.client("s3", endpoint_url=api.url, region_name="us-east-1", aws_access_key_id="x",
                        aws_secret_access_key="x")


def test_aws_s3_sync_then_create_cluster_from_that_uri(api, lab_home):
    s3cli(api, "mb", "s3://workshop")
    s3cli(api, "sync", LIFECYCLE, "s3://workshop/lifecycle/v1")
    listed = s3cli(api, "ls", "s3://workshop/lifecycle/v1/").stdout
    assert "on_create.sh" in listed
    mirrored = lab_home / "s3" / "workshop" / "lifecycle" / "v1" / "on_create.sh"
    assert mirrored.read_bytes() == open(os.path.join(LIFECYCLE, "on_create.sh"), "rb").read()
    req = create_request("froms3")
    for g in req["InstanceGroups"]:
        g["LifeCycleConfig"] = {"SourceS3Uri": "s3://workshop/lifecycle/v1", "OnCreate": "on_create.sh"}
    p = aws(api, "create-cluster", "--cli-input-json", json.dumps(req))
    assert json.loads(p.stdout)["ClusterArn"]
    assert api.store.cluster("froms3") is not None


def test_boto3_s3_objects_are_files_and_deletes_follow(api, lab_home):
    c = s3client(api)
    c.create_bucket(Bucket="lab")
    c.put_object(Bucket="lab", Key="a/b/run.sh", Body=b"echo one\n")
    c.put_object(Bucket="lab", Key="a/keep.sh", Body=b"echo two\n")
    assert (lab_home / "s3" / "lab" / "a" / "b" / "run.sh").read_text() == "echo one\n"
    assert [o["Key"] for o in c.list_objects_v2(Bucket="lab", Prefix="a/")["Contents"]] == ["a/b/run.sh", "a/keep.sh"]
    assert c.get_object(Bucket="lab", Key="a/keep.sh")["Body"].read() == b"echo two\n"
    c.delete_object(Bucket="lab", Key="a/b/run.sh")
    assert not (lab_home / "s3" / "lab" / "a" / "b").exists() and (lab_home / "s3" / "lab" / "a" / "keep.sh").exists()


def test_the_buckets_outlive_the_server(api, lab_home):
    """A new server (a restart) finds the mirror and serves it again."""
    from lab.api.s3 import S3

    s3client(api).create_bucket(Bucket="kept")
    s3client(api).put_object(Bucket="kept", Key="x.sh", Body=b"x")
    fresh = S3(lab_home / "s3")  # starts from the mirror alone (it resets moto's global backend)
    status, _, body = fresh.handle("GET", "/kept?list-type=2", {}, b"")
    assert status == 200 and b"<Key>x.sh</Key>" in body


@pytest.mark.parametrize("key", ["../escape.sh", "a/../../escape.sh", "./x", "dir/"])
def test_keys_that_cannot_be_files_are_refused(api, lab_home, key):
    c = s3client(api)
    c.create_bucket(Bucket="safe")
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="safe", Key=key, Body=b"x")
    assert e.value.response["Error"]["Code"] == "InvalidArgument"
    assert "nothing was changed" in e.value.response["Error"]["Message"]
    assert c.list_objects_v2(Bucket="safe").get("KeyCount", 0) == 0
    assert not (lab_home / "escape.sh").exists() and not (lab_home / "s3" / "escape.sh").exists()


def test_an_oversized_object_is_refused(api):
    c = s3client(api)
    c.create_bucket(Bucket="big")
    with pytest.raises(ClientError) as e:
        c.put_object(Bucket="big", Key="huge.bin", Body=b"x" * (2 << 20))
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 413
    assert c.list_objects_v2(Bucket="big").get("KeyCount", 0) == 0


def test_unsigned_requests_are_not_s3(api):
    status, body = api.raw(None, method="GET", path="/lab?list-type=2", target=None, content_type=None)
    assert status == 404 and "nothing here" in body["message"]


def test_fuzzed_s3_requests_never_break_the_server(api, lab_home):
    """Seeded random S3 requests, signed for s3 as the AWS CLI signs them: every one gets an answer
    below 500, no file lands outside the mirror, and the SageMaker API still answers afterwards."""
    import http.client
    import random

    rng = random.Random(12)
    auth = "AWS4-HMAC-SHA256 Credential=x/20261202/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"
    pieces = ["..", ".", "", "a", "b%20c", "%2e%2e", "%c3%bc", "x" * 300, "%3f", "%23", "%5c", "%00", "lab", "k.sh"]
    host, port = api.server.server_address[:2]
    before = set(lab_home.parent.rglob("*"))
    for n in range(150):
        path = "/" + "/".join(rng.choice(pieces) for _ in range(rng.randint(0, 4)))
        if rng.random() < 0.3:
            path += "?" + rng.choice(["list-type=2", "uploads", "delete", "acl", "prefix=..", "x=%ff"])
        method = rng.choice(["GET", "PUT", "PUT", "DELETE", "HEAD", "POST"])
        body = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64)))
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request(method, path, body=body, headers={"Authorization": auth})
        r = conn.getresponse()
        r.read()
        conn.close()
        assert r.status < 500, f"#{n} {method} {path!r} -> {r.status}"
    made = {p for p in set(lab_home.parent.rglob("*")) - before if p.is_file()}
    assert all((lab_home / "s3") in p.parents for p in made), made
    assert api.client().list_clusters()["ClusterSummaries"] == []
