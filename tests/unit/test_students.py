"""The students store (lab/students.py) and the SigV4 check (lab/api/sigv4.py), without a server."""

from __future__ import annotations

import email.message
import json
import os
import stat

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from lab.api import sigv4
from lab.errors import Conflict, LabError, NotFound, UsageError
from lab.students import NAME_RE, Limits, Registry, new_key_pair


def mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_add_makes_an_aws_shaped_key_pair_kept_encrypted_in_0600_files(tmp_path):
    r = Registry(tmp_path)
    s, secret = r.add("alice")
    assert s.AccessKeyId.startswith("AKIA") and len(s.AccessKeyId) == 20 and s.AccessKeyId.isupper()
    assert len(secret) == 40
    assert mode(r.path) == 0o600 and mode(r.key_path) == 0o600
    text = r.path.read_text()
    assert s.AccessKeyId in text and secret not in text  # the secret is not in the file in clear
    assert secret not in repr(s)
    assert r.secret_of(Registry(tmp_path).get("alice")) == secret  # another process reads it back
    assert r.by_key(s.AccessKeyId).Name == "alice" and r.by_key("AKIANOTAKEY000000000") is None


def test_a_name_clash_or_a_bad_name_changes_nothing(tmp_path):
    r = Registry(tmp_path)
    r.add("alice")
    before = r.path.read_bytes()
    with pytest.raises(Conflict) as e:
        r.add("alice", instructor=True)
    assert "already exists" in e.value.message and "students remove" in e.value.fix
    for bad in ("Alice", "1st", "a b", "-x", "x" * 33, "", "ali/ce"):
        with pytest.raises(UsageError) as e:
            r.add(bad)
        assert "lower-case letters" in e.value.fix
    assert r.path.read_bytes() == before
    assert NAME_RE.fullmatch("team-3")


def test_a_failed_write_leaves_the_old_file(tmp_path, monkeypatch):
    r = Registry(tmp_path)
    r.add("alice")
    before = r.path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        r.add("bob")
    monkeypatch.undo()
    assert r.path.read_bytes() == before
    assert [s.Name for s in Registry(tmp_path).students()] == ["alice"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".students.json.")]  # no temp file left


def test_quota_changes_remove_and_owners(tmp_path):
    r = Registry(tmp_path)
    r.add("alice", Limits(MaxClusters=1))
    assert r.set_quota("alice", MaxNodes=3, MaxMemoryMiB=-1).Quota == Limits(MaxClusters=1, MaxNodes=3, MaxMemoryMiB=None)
    r.set_owner("demo", 1000.5, "alice")
    assert r.owner("demo", 1000.5) == "alice"
    assert r.owner("demo", 2000.0) is None  # a later cluster of the same name is not hers
    r.forget_owners(set())
    assert r.owner("demo", 1000.5) is None
    r.remove("alice")
    with pytest.raises(NotFound):
        r.remove("alice")
    with pytest.raises(NotFound):
        r.set_quota("alice", MaxNodes=1)


def test_a_damaged_file_is_a_clear_error(tmp_path):
    r = Registry(tmp_path)
    r.path.write_text(json.dumps({"Students": {"x": {"Name": "x"}}}))
    with pytest.raises(LabError) as e:
        r.students()
    assert "not a students file" in e.value.message


def test_key_ids_are_unique_and_random():
    ids = {new_key_pair()[0] for _ in range(200)}
    assert len(ids) == 200


# ------------------------------------------------------------------------------------ sigv4
def _request(akid: str, secret: str, body: bytes = b"{}", service: str = "sagemaker", region: str = "us-east-1"):
    req = AWSRequest("POST", "http://lab:8008/", data=body, headers={"X-Amz-Target": "SageMaker.ListClusters"})
    SigV4Auth(Credentials(akid, secret), service, region).add_auth(req)
    m = email.message.Message()
    for k, v in req.headers.items():
        m[k] = v
    m["Host"] = "lab:8008"
    return m


def test_verify_names_the_student_and_refuses_the_rest(tmp_path):
    r = Registry(tmp_path)
    s, secret = r.add("alice")
    h = _request(s.AccessKeyId, secret)
    assert sigv4.verify(r, sigv4.Incoming("POST", "/", h, b"{}"), "sagemaker", "us-east-1").Name == "alice"
    cases = [
        (sigv4.Incoming("POST", "/", h, b"{ }"), {}, "mismatch"),  # another body
        (sigv4.Incoming("POST", "/?x=1", h, b"{}"), {}, "mismatch"),  # another path
        (sigv4.Incoming("GET", "/", h, b"{}"), {}, "mismatch"),  # another method
        (sigv4.Incoming("POST", "/", h, b"{}"), {"region": "eu-west-1"}, "scope"),
        (sigv4.Incoming("POST", "/", h, b"{}"), {"now": 10.0}, "expired"),
    ]
    for req, kw, kind in cases:
        with pytest.raises(sigv4.Refused) as e:
            sigv4.verify(r, req, "sagemaker", kw.get("region", "us-east-1"), now=kw.get("now"))
        assert e.value.kind == kind
    with pytest.raises(sigv4.Refused) as e:
        sigv4.verify(r, sigv4.Incoming("POST", "/", h, b"{}"), "s3", "us-east-1")
    assert e.value.code == "AuthorizationHeaderMalformed" and "correct service: 's3'" in e.value.message


@pytest.mark.parametrize("auth,says", [
    ("AWS AKIA:sig", "SigV4"),
    ("AWS4-HMAC-SHA256 Credential=AKIA/20260101/us-east-1/sagemaker/aws4_request", "SignedHeaders, Signature"),
    ("AWS4-HMAC-SHA256 Credential=AKIA/2026/us-east-1/sagemaker, SignedHeaders=host, Signature=00", "Credential should be"),
])
def test_a_malformed_authorization_header_is_named(tmp_path, auth, says):
    m = email.message.Message()
    m["Authorization"] = auth
    with pytest.raises(sigv4.Refused) as e:
        sigv4.verify(Registry(tmp_path), sigv4.Incoming("POST", "/", m, b""), "sagemaker", "us-east-1")
    assert e.value.code == "IncompleteSignatureException" and says in e.value.message


# ------------------------------------------------------------------------------------ the CLI
def _cli(home, *args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "lab", "students", *args], env={**os.environ, "SLURMLAB_HOME": str(home)},
                          capture_output=True, text=True, timeout=60)


def test_the_students_commands(tmp_path):
    p = _cli(tmp_path, "add", "alice", "--max-nodes", "4", "--output", "json")
    assert p.returncode == 0, p.stderr
    added = json.loads(p.stdout)
    assert added["Quota"] == {"MaxClusters": 2, "MaxNodes": 4, "MaxMemoryMiB": 8192} and len(added["SecretAccessKey"]) == 40
    before = (tmp_path / "students.json").read_bytes()
    p = _cli(tmp_path, "add", "alice")
    assert p.returncode == 4 and "already exists" in p.stderr and added["SecretAccessKey"] not in p.stderr
    p = _cli(tmp_path, "add", "Bad Name")
    assert p.returncode == 2 and "fix:" in p.stderr
    assert (tmp_path / "students.json").read_bytes() == before
    p = _cli(tmp_path, "list", "--output", "json")
    listed = json.loads(p.stdout)["Students"]
    assert [s["Name"] for s in listed] == ["alice"] and added["SecretAccessKey"] not in p.stdout
    assert "Secret" not in listed[0] and listed[0]["Clusters"] == []
    assert _cli(tmp_path, "set-quota", "alice").returncode == 2
    assert json.loads(_cli(tmp_path, "set-quota", "alice", "--max-clusters", "-1", "-o", "json").stdout)["Quota"]["MaxClusters"] is None
    assert _cli(tmp_path, "remove", "alice").returncode == 0
    assert _cli(tmp_path, "remove", "alice").returncode == 3
