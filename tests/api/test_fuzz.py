"""Bounded fuzzing: a few hundred generated requests (random JSON, wrong types, near-valid bodies built
from the model's input shapes, huge strings, broken bytes, odd targets). Every one gets a 2xx or 4xx
reply in the AWS error shape, and the server stays up. Seeded: a failure replays."""

from __future__ import annotations

import http.client
import json
import random
import time

from lab.api import model
from lab.control import extensions
from lab.spec.extensions import EXAMPLE, OBSERVABILITY
from tests.api.seed import seed_cluster

COUNT = 400
BUDGET_S = 20.0
SEED = 20261129
# Plausible values of the shapes whose random strings would all fail validation (the ClusterExtension
# operations): the seeded cluster's ARN and its extension's, filled in by the test.
KNOWN: dict[str, list] = {
    "ExtensionName": [OBSERVABILITY, OBSERVABILITY, "eks-other", "Bad_Name"],
    "ExtensionVersion": ["1.0.0", "1.1.0", "9.9.9", "1.0"],
    "ExtensionConfigurationValues": ["{}", EXAMPLE, '{"scrapeIntervalSeconds": 30}', '{"levl": 1}', "nope", "[1]",
                                     '{"metricsProvider": {"slurmMetrics": {"level": null}}}'],
}


def rand_scalar(rng: random.Random):
    return rng.choice([
        None, True, False, 0, -1, 7, 2**31, 2**63, 3.5, -0.0, 1e308, "", "demo", "demo-compute-1",
        "i-0123456789abcdef0", "x" * rng.choice([1, 64, 257, 5000]), "ü€\u0000\ud7ff", "<script>", "../../etc/passwd",
        "arn:aws:sagemaker:us-east-1:000000000000:cluster/abcdefabcdef", "2026-01-01T00:00:00Z",
    ])


def rand_json(rng: random.Random, depth: int = 0):
    r = rng.random()
    if depth >= 4 or r < 0.5:
        return rand_scalar(rng)
    if r < 0.75:
        return [rand_json(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(["ClusterName", "InstanceGroups", "MaxResults", "NodeIds", "x", ""]): rand_json(rng, depth + 1)
            for _ in range(rng.randint(0, 4))}


def from_shape(shape, rng: random.Random, depth: int = 0):
    """A value for `shape`: mostly right, sometimes wrong in one place."""
    if rng.random() < 0.08 or depth > 6:
        return rand_json(rng, 3)
    t = shape.type_name
    if t == "structure":
        out = {}
        for name, sub in shape.members.items():
            if name in shape.required_members or rng.random() < 0.4:
                out[name] = from_shape(sub, rng, depth + 1)
        if rng.random() < 0.05:
            out["Bogus"] = 1
        return out
    if t == "list":
        return [from_shape(shape.member, rng, depth + 1) for _ in range(rng.choice([0, 1, 1, 2, 3]))]
    if t == "map":
        return {"k": from_shape(shape.value, rng, depth + 1)}
    if t == "string":
        if shape.enum:
            return rng.choice(list(shape.enum) + ["Nope"])
        if shape.name in ("ClusterNameOrArn", "ClusterName"):
            return rng.choice(["demo", "demo", "fuzz", "Bad Name"])
        if "InstanceGroupName" in shape.name:
            return rng.choice(["controller", "login", "compute", "ghost"])
        if shape.name in KNOWN:
            return rng.choice(KNOWN[shape.name])
        if shape.name == "ClusterInstanceType":
            return rng.choice(["ml.c5.large", "ml.t3.medium"])
        return rng.choice(["demo-compute-1", "i-0123456789abcdef0", "x", "x" * 300])
    if t in ("integer", "long"):
        return rng.choice([0, 1, 2, 50, 101, -3])
    if t == "boolean":
        return rng.choice([True, False])
    if t == "timestamp":
        return rng.choice([0, time.time(), "2026-01-01T00:00:00Z"])
    return rand_scalar(rng)


def bodies(rng: random.Random):
    ops = list(model.OPERATIONS)
    for i in range(COUNT):
        kind = i % 8
        op = rng.choice(ops)
        target = f"SageMaker.{op}"
        if kind == 0:
            yield target, json.dumps(rand_json(rng)).encode()
        elif kind == 1:
            raw = json.dumps(from_shape(model.operation(op).input_shape, rng)).encode()
            cut = rng.randint(0, len(raw))
            yield target, raw[:cut]  # truncated JSON
        elif kind == 2:
            yield target, bytes(rng.randrange(256) for _ in range(rng.randint(1, 200)))
        elif kind == 3:
            yield rng.choice(["SageMaker.", "SageMaker", "sagemaker.DescribeCluster", "SageMaker.Describe\u00e9",
                              "X" * 300, "SageMaker.DeleteModel", ""]), b"{}"
        elif kind == 4:
            yield target, json.dumps({"ClusterName": "demo", "x": "y" * rng.choice([10_000, 200_000])}).encode()
        else:
            yield target, json.dumps(from_shape(model.operation(op).input_shape, rng)).encode()


def test_fuzz_never_breaks_the_server(api):
    seed_cluster(api.store, "demo", computes=2, pending=1)
    cluster = api.store.cluster("demo").arn
    ext = extensions.create(api.store, "demo", OBSERVABILITY).arn
    KNOWN["ClusterArn"] = [cluster, cluster, "arn:aws:sagemaker:us-east-1:000000000000:cluster/abcdefabcdef"]
    KNOWN["ExtensionArn"] = [ext, ext, ext[:-12] + "0" * 12]
    rng = random.Random(SEED)
    host, port = api.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    t0 = time.monotonic()
    seen: dict[int, int] = {}
    for n, (target, body) in enumerate(bodies(rng)):
        headers = {"Content-Type": "application/x-amz-json-1.1"}
        if target:
            headers["X-Amz-Target"] = target.encode("utf-8").decode("latin-1")
        try:
            conn.request("POST", "/", body=body, headers=headers)
            r = conn.getresponse()
        except (http.client.HTTPException, OSError):
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=10)
            conn.request("POST", "/", body=body, headers=headers)
            r = conn.getresponse()
        payload = r.read()
        seen[r.status] = seen.get(r.status, 0) + 1
        reply = json.loads(payload)
        ctx = f"#{n} {target!r} {body[:120]!r} -> {r.status} {payload[:300]!r}"
        assert isinstance(reply, dict), ctx
        if r.status >= 400:
            assert isinstance(reply.get("__type"), str) and isinstance(reply.get("message"), str), ctx
        assert r.status < 500, ctx  # every operation the lab serves is implemented: a 5xx is a bug
        if r.getheader("Connection") == "close":
            conn.close()
            conn = http.client.HTTPConnection(host, port, timeout=10)
    elapsed = time.monotonic() - t0
    conn.close()
    assert elapsed < BUDGET_S, f"{COUNT} requests took {elapsed:.1f} s"
    # some bodies are valid by chance (fewer as operations are added: 8 in 400 at least), most are refused
    assert seen.get(200, 0) >= COUNT // 50 and sum(v for k, v in seen.items() if 400 <= k < 500) > COUNT // 2, seen
    # still up, still right
    c = api.client()
    assert c.describe_cluster(ClusterName="demo")["ClusterStatus"] in ("InService", "Deleting")
