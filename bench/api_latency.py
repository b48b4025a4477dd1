"""Benchmark: request latency of the local SageMaker API with a 1,000-node cluster (sim provider).

A private $SLURMLAB_HOME gets one cluster of 1,000 nodes (controller, login, 998 compute), written
into the store as the engine leaves a full cluster (no VMs, no engine running, so nothing moves while
it measures). The server runs in its own process; the client is boto3 (what users run: it includes
botocore's request signing and response parsing) and, for the server's share alone, raw HTTP on one
kept-alive connection. Per operation, p50 / p99 / max in milliseconds:

  DescribeCluster                          the whole cluster with its groups
  ListClusterNodes (MaxResults=100)        one page of 100 nodes
  ListClusterNodes (all 1,000, 10 pages)   a whole listing, as the AWS CLI's paginator does it

Output: JSON on stdout and bench/results/api_latency-<time>.json.

    .venv/bin/python bench/api_latency.py [--nodes 1000] [--requests 300] [--results DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def seed(st, nodes: int) -> None:
    from lab.control import clusters
    from lab.engine.bookkeeping import instance_id
    from lab.spec import spec_from_request
    from lab.store.db import NodeRow

    lc = {"SourceS3Uri": str(REPO / "examples" / "lifecycle"), "OnCreate": "on_create.sh"}
    role = "arn:aws:iam::000000000000:role/lab"

    def group(name, kind, n, t):
        g = {"InstanceGroupName": name, "InstanceType": t, "InstanceCount": n, "ExecutionRole": role,
             "SlurmConfig": {"NodeType": kind}, "LifeCycleConfig": lc}
        return g

    req = {"ClusterName": "bench", "NodeProvisioningMode": "Continuous",
           "InstanceGroups": [group("controller", "Controller", 1, "ml.t3.medium"), group("login", "Login", 1, "ml.t3.medium"),
                              group("compute", "Compute", nodes - 2, "ml.c5.large")]}
    spec = spec_from_request(req, max_nodes_per_group=nodes)
    row = clusters.create(st, spec, provider="sim", start_engine=False)
    now = time.time()
    k = 0
    for g in st.groups("bench"):
        for i in range(1, g.target_count + 1):
            k += 1
            name = f"bench-{g.name}-{i}"
            st.add_node(NodeRow(cluster="bench", name=name, grp=g.name, ordinal=i, instance_id=instance_id("bench", name),
                                address=f"10.{row.net_index}.{k // 250}.{k % 250 + 2}", mac=f"52:54:00:00:{k // 256:02x}:{k % 256:02x}",
                                phase="running", launched_at=now, booted_at=now, joined_at=now))
        st.update_group("bench", g.name, status="InService")
    st.update_cluster("bench", status="InService", in_service_at=now, full_size_at=now)


def serve(home: str, port_q) -> None:
    os.environ["SLURMLAB_HOME"] = home
    from lab.api import Lab, make_server
    from lab.engine import daemon

    srv = make_server(Lab(store=daemon.store(), provider="sim"), "127.0.0.1", 0)
    port_q.put(srv.server_address[1])
    srv.serve_forever()


def stats(samples: list[float]) -> dict:
    s = sorted(samples)
    q = statistics.quantiles(s, n=100, method="inclusive")
    return {"n": len(s), "p50_ms": round(q[49] * 1000, 2), "p99_ms": round(q[98] * 1000, 2), "max_ms": round(s[-1] * 1000, 2),
            "mean_ms": round(statistics.fmean(s) * 1000, 2)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=1000, help="nodes of the cluster (controller, login, the rest compute)")
    ap.add_argument("--requests", type=int, default=300, help="timed requests per operation")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results", metavar="DIR",
                    help="where the JSON goes (default bench/results)")
    args = ap.parse_args(argv)
    if args.nodes < 3:
        ap.error("--nodes is at least 3 (controller, login, one compute node)")
    if args.requests < 2:
        ap.error("--requests is at least 2 (percentiles need two samples)")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)

    home = tempfile.mkdtemp(prefix="slurmlab-bench-api-")
    os.environ["SLURMLAB_HOME"] = home
    from lab.engine import daemon

    t = time.perf_counter()
    seed(daemon.store(), args.nodes)
    seed_s = time.perf_counter() - t

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    proc = ctx.Process(target=serve, args=(home, q), daemon=True)
    proc.start()
    port = q.get(timeout=30)
    url = f"http://127.0.0.1:{port}"

    import boto3
    import botocore.config

    c = boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1", aws_access_key_id="x", aws_secret_access_key="x",
                     config=botocore.config.Config(retries={"max_attempts": 1}))
    assert len(c.list_cluster_nodes(ClusterName="bench", MaxResults=100)["ClusterNodeSummaries"]) == min(100, args.nodes)

    def timed(fn, n):
        for _ in range(min(20, n)):  # warm-up
            fn()
        out = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    def all_pages():
        pages = c.get_paginator("list_cluster_nodes").paginate(ClusterName="bench", PaginationConfig={"PageSize": 100})
        got = sum(len(p["ClusterNodeSummaries"]) for p in pages)
        assert got == args.nodes, got

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

    def raw(op, body):
        data = json.dumps(body).encode()

        def go():
            conn.request("POST", "/", body=data, headers={"X-Amz-Target": f"SageMaker.{op}",
                                                          "Content-Type": "application/x-amz-json-1.1"})
            r = conn.getresponse()
            r.read()
            assert r.status == 200, r.status
        return go

    n = args.requests
    results = {
        "boto3": {
            "DescribeCluster": stats(timed(lambda: c.describe_cluster(ClusterName="bench"), n)),
            "ListClusterNodes_page100": stats(timed(lambda: c.list_cluster_nodes(ClusterName="bench", MaxResults=100), n)),
            "ListClusterNodes_all_pages": stats(timed(all_pages, max(20, n // 10))),
        },
        "raw_http": {
            "DescribeCluster": stats(timed(raw("DescribeCluster", {"ClusterName": "bench"}), n)),
            "ListClusterNodes_page100": stats(timed(raw("ListClusterNodes", {"ClusterName": "bench", "MaxResults": 100}), n)),
        },
    }
    conn.close()
    proc.terminate()
    proc.join(10)

    out = {
        "benchmark": "api_latency",
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "nodes": args.nodes,
        "requests_per_op": n,
        "provider": "sim (nodes written into the store; no engine running while measuring)",
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "machine": platform.machine()},
        "seed_seconds": round(seed_s, 2),
        "results": results,
    }
    text = json.dumps(out, indent=2)
    print(text)
    res = args.results
    res.mkdir(parents=True, exist_ok=True)
    (res / f"api_latency-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(text + "\n")


if __name__ == "__main__":
    main()
