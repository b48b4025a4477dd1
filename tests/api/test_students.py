"""`slurmlab serve --auth`: three students and an instructor with their own keys (lab/students.py),
checked by SigV4 (lab/api/sigv4.py), each student seeing only their own clusters within a quota
(lab/api/tenancy.py). Real boto3 and the real AWS CLI, unmodified, with a student's key.

Every refused request is checked to have changed nothing in the store."""

from __future__ import annotations

import base64
import datetime
import json
import subprocess

import boto3
import botocore
import botocore.auth
import botocore.config
import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.exceptions import ClientError

from lab.students import Limits, Registry
from tests.api import botocheck
from tests.api.conftest import EXAMPLES
from tests.api.seed import create_request, group
from tests.api.test_read import AWS, aws_env

CFG = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30)
STUDENTS = ("alice", "bob", "carol")


class School:
    def __init__(self, api, keys: dict[str, tuple[str, str]]):
        self.api, self.keys = api, keys

    def client(self, who: str, region: str = "us-east-1", service: str = "sagemaker", config=CFG):
        akid, secret = self.keys[who]
        c = boto3.client(service, endpoint_url=self.api.url, region_name=region, aws_access_key_id=akid,
                         aws_secret_access_key=secret, config=config)
        if service == "sagemaker":
            botocheck.attach(c)
        return c

    def cli(self, who: str, *args: str, service: str = "sagemaker") -> subprocess.CompletedProcess:
        akid, secret = self.keys[who]
        env = {**aws_env(), "AWS_ACCESS_KEY_ID": akid, "AWS_SECRET_ACCESS_KEY": secret}
        cmd = [AWS, service, *args, "--endpoint-url", self.api.url] + (["--output", "json"] if service == "sagemaker" else [])
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)

    def basic(self, who: str) -> dict:
        akid, secret = self.keys[who]
        return {"Authorization": "Basic " + base64.b64encode(f"{akid}:{secret}".encode()).decode()}


@pytest.fixture
def school(api, lab_home):
    reg = Registry(lab_home)
    keys = {}
    for name in STUDENTS:
        s, secret = reg.add(name, Limits(MaxClusters=2, MaxNodes=8, MaxMemoryMiB=8192))
        keys[name] = (s.AccessKeyId, secret)
    s, secret = reg.add("teacher", instructor=True)
    keys["teacher"] = (s.AccessKeyId, secret)
    keys["stranger"] = ("AKIAAAAAAAAAAAAAAAAA", "x" * 40)
    keys["alice-wrong-secret"] = (keys["alice"][0], "y" * 40)
    api.lab.students = reg
    return School(api, keys)


def code_of(e: pytest.ExceptionInfo) -> str:
    return e.value.response["Error"]["Code"]


def state(api) -> list:
    """What a refused request must not change: every cluster with its status and group targets."""
    return [(c.name, c.status, [(g.name, g.target_count) for g in api.store.groups(c.name)]) for c in api.store.clusters()]


# ------------------------------------------------------------------------------------ keys work
def test_boto3_with_a_students_key_creates_lists_describes_deletes(school):
    c = school.client("alice")
    arn = c.create_cluster(**create_request("a1"))["ClusterArn"]
    assert arn.startswith("arn:aws:sagemaker:us-east-1:")
    assert [s["ClusterName"] for s in c.list_clusters()["ClusterSummaries"]] == ["a1"]
    assert c.describe_cluster(ClusterName=arn)["ClusterName"] == "a1"
    assert c.delete_cluster(ClusterName="a1")["ClusterArn"] == arn
    assert school.api.store.cluster("a1").status == "Deleting"


def test_the_aws_cli_with_a_students_key(school):
    p = school.cli("bob", "create-cluster", "--cli-input-json", json.dumps(create_request("b1")))
    assert p.returncode == 0, p.stderr
    listed = json.loads(school.cli("bob", "list-clusters").stdout)["ClusterSummaries"]
    assert [s["ClusterName"] for s in listed] == ["b1"]
    assert json.loads(school.cli("bob", "describe-cluster", "--cluster-name", "b1").stdout)["ClusterName"] == "b1"
    p = school.cli("alice", "describe-cluster", "--cluster-name", "b1")
    assert p.returncode != 0 and "ResourceNotFound" in p.stderr
    p = school.cli("alice-wrong-secret", "list-clusters")
    assert p.returncode != 0 and "InvalidSignatureException" in p.stderr


# ------------------------------------------------------------------------------------ refused requests
def _signed(school, who: str, body: dict, service: str = "sagemaker", region: str = "us-east-1",
            target: str = "SageMaker.CreateCluster") -> tuple[bytes, dict]:
    """A request signed by botocore's signer, as a client would send it: (body, headers)."""
    akid, secret = school.keys[who]
    host, port = school.api.server.server_address[:2]
    data = json.dumps(body).encode()
    req = AWSRequest("POST", f"http://{host}:{port}/", data=data,
                     headers={"X-Amz-Target": target, "Content-Type": "application/x-amz-json-1.1"})
    SigV4Auth(Credentials(akid, secret), service, region).add_auth(req)
    return data, dict(req.headers.items())


def _send(school, data: bytes, headers: dict) -> tuple[int, dict]:
    return school.api.raw(data, target=None, content_type=None, headers=headers)


@pytest.mark.parametrize("who,kw,code,says", [
    ("alice", {"config": CFG.merge(botocore.config.Config(signature_version=botocore.UNSIGNED))},
     "UnrecognizedClientException", "not signed"),
    ("alice-wrong-secret", {}, "InvalidSignatureException", "signature we calculated does not match"),
    ("stranger", {}, "UnrecognizedClientException", "The security token included in the request is invalid"),
    ("alice", {"region": "eu-west-1"}, "InvalidSignatureException", "Credential should be scoped to a valid region"),
])
def test_bad_signatures_are_refused_and_change_nothing(school, who, kw, code, says):
    school.client("carol").create_cluster(**create_request("c1"))
    before = state(school.api)
    with pytest.raises(ClientError) as e:
        school.client(who, **kw).create_cluster(**create_request("x1"))
    assert code_of(e) == code and says in str(e.value)
    with pytest.raises(ClientError) as e:
        school.client(who, **kw).delete_cluster(ClusterName="c1")
    assert code_of(e) == code
    assert state(school.api) == before


def test_an_expired_signature_is_refused(school, monkeypatch):
    old = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None) - datetime.timedelta(minutes=20)
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: old)  # the client's clock, 20 min slow
    with pytest.raises(ClientError) as e:
        school.client("alice").create_cluster(**create_request("late"))
    assert code_of(e) == "InvalidSignatureException" and "Signature expired" in str(e.value)
    assert state(school.api) == []


def test_a_request_signed_for_another_service_or_tampered_with_is_refused(school):
    data, headers = _signed(school, "alice", create_request("ec2ish"), service="ec2")
    status, body = _send(school, data, headers)
    assert status == 400 and body["__type"] == "InvalidSignatureException"
    assert "Credential should be scoped to correct service: 'sagemaker'" in body["message"]
    data, headers = _signed(school, "alice", create_request("tampered"))
    status, body = _send(school, data.replace(b'"tampered"', b'"tamperex"'), headers)
    assert status == 400 and body["__type"] == "InvalidSignatureException"
    data, headers = _signed(school, "alice", create_request("ok"))
    assert _send(school, data, headers)[0] == 200  # the same request, untouched, passes
    assert [c.name for c in school.api.store.clusters()] == ["ok"]


def test_a_removed_students_key_stops_working(school):
    c = school.client("carol")
    assert c.list_clusters()["ClusterSummaries"] == []
    school.api.lab.students.remove("carol")  # as `slurmlab students remove carol` does, while the server runs
    with pytest.raises(ClientError) as e:
        c.list_clusters()
    assert code_of(e) == "UnrecognizedClientException"


# ------------------------------------------------------------------------------------ isolation
def test_a_student_cannot_see_describe_change_or_delete_anothers_cluster(school):
    alice, bob = school.client("alice"), school.client("bob")
    arn = alice.create_cluster(**create_request("a1"))["ClusterArn"]
    bob.create_cluster(**create_request("b1"))
    before = state(school.api)
    assert [s["ClusterName"] for s in bob.list_clusters()["ClusterSummaries"]] == ["b1"]
    with pytest.raises(ClientError) as missing:
        bob.describe_cluster(ClusterName="nope")
    for call in (lambda: bob.describe_cluster(ClusterName="a1"),
                 lambda: bob.delete_cluster(ClusterName="a1"),
                 lambda: bob.list_cluster_nodes(ClusterName="a1"),
                 lambda: bob.list_cluster_events(ClusterName="a1"),
                 lambda: bob.batch_add_cluster_nodes(ClusterName="a1", NodesToAdd=[
                     {"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}]),
                 lambda: bob.update_cluster(ClusterName="a1", InstanceGroups=[group("compute", "Compute", 1, "ml.c5.large")])):
        with pytest.raises(ClientError) as e:
            call()
        assert code_of(e) == "ResourceNotFound"
    with pytest.raises(ClientError) as e:
        bob.describe_cluster(ClusterName="a1")
    assert str(e.value) == str(missing.value).replace("'nope'", "'a1'")  # the very message a missing cluster gets
    with pytest.raises(ClientError) as e:
        bob.describe_cluster(ClusterName=arn)
    assert code_of(e) == "ResourceNotFound"
    assert state(school.api) == before
    assert alice.describe_cluster(ClusterName="a1")["ClusterStatus"] != "Deleting"


def test_the_instructor_sees_and_changes_every_cluster(school):
    school.client("alice").create_cluster(**create_request("a1"))
    school.client("bob").create_cluster(**create_request("b1"))
    t = school.client("teacher")
    assert sorted(s["ClusterName"] for s in t.list_clusters()["ClusterSummaries"]) == ["a1", "b1"]
    assert t.describe_cluster(ClusterName="b1")["ClusterName"] == "b1"
    t.delete_cluster(ClusterName="a1")
    assert school.api.store.cluster("a1").status == "Deleting"


def test_the_console_needs_the_instructors_key(school):
    school.client("alice").create_cluster(**create_request("a1"))
    school.client("bob").create_cluster(**create_request("b1"))
    host, port = school.api.server.server_address[:2]
    import http.client

    def get(path: str, headers: dict) -> tuple[int, dict, bytes]:
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", path, headers=headers)
        r = conn.getresponse()
        out = (r.status, dict(r.getheaders()), r.read())
        conn.close()
        return out

    status, headers, _ = get("/_lab/state", {})
    assert status == 401 and headers["WWW-Authenticate"].startswith("Basic")  # the browser asks
    assert get("/", {})[0] == 401
    assert get("/_lab/state", school.basic("alice"))[0] == 403
    assert get("/_lab/state", school.basic("alice-wrong-secret"))[0] == 401
    status, _, body = get("/_lab/state", school.basic("teacher"))
    assert status == 200
    assert sorted((c["ClusterName"], c["Lab"]["Student"]) for c in json.loads(body)["Clusters"]) == [("a1", "alice"), ("b1", "bob")]
    assert get("/", school.basic("teacher"))[0] == 200
    assert get("/_lab/health", {})[0] == 200
    status, body = school.api.post("/_lab/capacity", {"Reset": True})
    assert status == 401


# ------------------------------------------------------------------------------------ quotas
def test_quota_on_clusters(school):
    school.api.lab.students.set_quota("carol", MaxClusters=1)
    c = school.client("carol")
    c.create_cluster(**create_request("c1"))
    before = state(school.api)
    with pytest.raises(ClientError) as e:
        c.create_cluster(**create_request("c2"))
    assert code_of(e) == "ResourceLimitExceeded"
    assert "MaxClusters" in str(e.value) and "holds 1 (c1)" in str(e.value) and "set-quota carol" in str(e.value)
    assert state(school.api) == before
    school.client("alice").create_cluster(**create_request("a1"))  # another student's quota is their own


def test_quota_on_nodes_counts_creates_updates_and_adds(school):
    school.api.lab.students.set_quota("carol", MaxNodes=5)
    c = school.client("carol")
    c.create_cluster(**create_request("c1"))  # 1 controller + 1 login + 2 compute = 4
    c.update_cluster(ClusterName="c1", InstanceGroups=[group("compute", "Compute", 3, "ml.c5.large")])  # 5
    before = state(school.api)
    for call in (lambda: c.update_cluster(ClusterName="c1", InstanceGroups=[group("compute", "Compute", 4, "ml.c5.large")]),
                 lambda: c.batch_add_cluster_nodes(ClusterName="c1", NodesToAdd=[
                     {"InstanceGroupName": "compute", "IncrementTargetCountBy": 1}]),
                 lambda: c.create_cluster(**create_request("c2", computes=1, login=False))):
        with pytest.raises(ClientError) as e:
            call()
        assert code_of(e) == "ResourceLimitExceeded" and "MaxNodes" in str(e.value) and "holds 5" in str(e.value)
    assert state(school.api) == before
    school.api.lab.students.set_quota("carol", MaxNodes=2)  # lowered below what she holds: shrinking still works
    c.update_cluster(ClusterName="c1", InstanceGroups=[group("compute", "Compute", 1, "ml.c5.large")])
    assert {g.name: g.target_count for g in school.api.store.groups("c1")}["compute"] == 1


def test_quota_on_memory(school):
    school.api.lab.students.set_quota("bob", MaxMemoryMiB=3000)  # 4 nodes x 768 MiB = 3072
    with pytest.raises(ClientError) as e:
        school.client("bob").create_cluster(**create_request("b1"))
    assert code_of(e) == "ResourceLimitExceeded"
    assert "MaxMemoryMiB" in str(e.value) and "3072 MiB" in str(e.value)
    assert state(school.api) == []
    school.client("bob").create_cluster(**create_request("b1", computes=1))  # 2304 MiB fits


def test_the_instructor_has_no_quota(school):
    t = school.client("teacher")
    for i in range(3):
        t.create_cluster(**create_request(f"t{i}", computes=4))
    assert len(state(school.api)) == 3


# ------------------------------------------------------------------------------------ S3 under --auth
def test_s3_needs_a_valid_signature_too(school, lab_home):
    assert school.cli("alice", "mb", "s3://scripts", service="s3").returncode == 0
    lifecycle = str(EXAMPLES / "lifecycle")
    p = school.cli("alice", "sync", lifecycle, "s3://scripts/v1", service="s3")
    assert p.returncode == 0, p.stderr
    assert (lab_home / "s3" / "scripts" / "v1" / "on_create.sh").is_file()
    p = school.cli("alice-wrong-secret", "sync", lifecycle, "s3://scripts/v2", service="s3")
    assert p.returncode != 0 and "SignatureDoesNotMatch" in p.stderr and not (lab_home / "s3" / "scripts" / "v2").exists()
    s3 = school.client("alice", service="s3")
    s3.put_object(Bucket="scripts", Key="run me.sh", Body=b"echo hi\n")
    assert (lab_home / "s3" / "scripts" / "run me.sh").read_bytes() == b"echo hi\n"
    assert "run me.sh" in [o["Key"] for o in s3.list_objects_v2(Bucket="scripts")["Contents"]]
    for who, code in (("alice-wrong-secret", "SignatureDoesNotMatch"), ("stranger", "InvalidAccessKeyId")):
        with pytest.raises(ClientError) as e:
            school.client(who, service="s3").put_object(Bucket="scripts", Key="evil.sh", Body=b"rm -rf /\n")
        assert code_of(e) == code
    with pytest.raises(ClientError) as e:
        school.client("alice", region="eu-west-1", service="s3").list_objects_v2(Bucket="scripts")
    assert code_of(e) == "AuthorizationHeaderMalformed"
    assert not (lab_home / "s3" / "scripts" / "evil.sh").exists()


# ------------------------------------------------------------------------------------ serve
def test_serve_without_auth_binds_loopback_only(lab_home):
    from lab import api
    from lab.errors import UsageError

    with pytest.raises(UsageError) as e:
        api.run(host="0.0.0.0", port=0, provider="sim")
    assert "without --auth" in e.value.message and "--auth" in e.value.fix
    assert not (lab_home / "serve.lock").exists()  # refused before it took the state directory
    assert api.is_loopback("127.0.0.1") and api.is_loopback("::1") and api.is_loopback("localhost")
    assert not api.is_loopback("10.0.0.5") and not api.is_loopback("example.org")


def test_serve_with_auth_binds_any_address_and_tells_how_to_connect(lab_home):
    """The real `slurmlab serve --auth --host 0.0.0.0`: the banner says how students connect, never a secret."""
    import os
    import sys
    import time

    from lab.engine import daemon

    s, secret = Registry(lab_home).add("alice")
    env = {**os.environ, "SLURMLAB_HOME": str(lab_home)}
    p = subprocess.Popen([sys.executable, "-m", "lab", "serve", "--provider", "sim", "--port", "0", "--auth",
                          "--host", "0.0.0.0", "--state-dir", str(lab_home)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not (lab_home / "serve.json").exists():
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.1)
        port = json.loads((lab_home / "serve.json").read_text())["url"].rsplit(":", 1)[1]
        c = boto3.client("sagemaker", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                         aws_access_key_id=s.AccessKeyId, aws_secret_access_key=secret, config=CFG)
        assert c.list_clusters()["ClusterSummaries"] == []
        with pytest.raises(ClientError) as e:
            boto3.client("sagemaker", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                         aws_access_key_id=s.AccessKeyId, aws_secret_access_key="y" * 40, config=CFG).list_clusters()
        assert code_of(e) == "InvalidSignatureException"
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
        daemon.stop(timeout=20)
    assert "auth:" in err and "alice" in err and "region us-east-1" in err and "<this machine's address>" in err
    assert secret not in err and s.Secret not in err
