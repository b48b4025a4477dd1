"""Concurrent requests: many clients at once, the same name raced, reads during writes."""

from __future__ import annotations

import subprocess
import sys
import threading

from botocore.exceptions import ClientError

from tests.api.conftest import wait_for
from tests.api.seed import create_request, group, seed_cluster


def run_all(fns):
    out = [None] * len(fns)

    def go(i, fn):
        try:
            out[i] = fn()
        except ClientError as e:
            out[i] = e.response["Error"]["Code"]
        except Exception as e:  # noqa: BLE001 - reported by the assertions
            out[i] = repr(e)

    threads = [threading.Thread(target=go, args=(i, fn)) for i, fn in enumerate(fns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_concurrent_creates_reads_and_a_raced_name(api):
    seed_cluster(api.store, "base", computes=20, pending=2)
    clients = [api.client() for _ in range(6)]
    fns = []
    for i in range(6):
        c = clients[i]
        fns.append(lambda c=c, i=i: c.create_cluster(**create_request(f"c{i}"))["ClusterArn"])
        fns.append(lambda c=c: c.create_cluster(**create_request("same"))["ClusterArn"])
        fns.append(lambda c=c: len(c.list_cluster_nodes(ClusterName="base", IncludeNodeLogicalIds=True)["ClusterNodeSummaries"]))
        fns.append(lambda c=c: c.describe_cluster(ClusterName="base")["ClusterStatus"])
    out = run_all(fns)
    created, same, listed, described = out[0::4], out[1::4], out[2::4], out[3::4]
    assert all(isinstance(a, str) and a.startswith("arn:aws:sagemaker:") for a in created), created
    assert sorted(x.startswith("arn:") for x in same) == [False] * 5 + [True], same  # exactly one wins the name
    assert [x for x in same if not x.startswith("arn:")] == ["ResourceInUse"] * 5
    assert listed == [22] * 6 and described == ["InService"] * 6
    rows = api.store.clusters()
    assert len(rows) == 8 and len({r.net_index for r in rows}) == 8  # every cluster its own network


def test_concurrent_changes_to_one_cluster(api):
    seed_cluster(api.store, "demo", computes=2)
    clients = [api.client() for _ in range(4)]
    fns = [lambda c=c: c.batch_add_cluster_nodes(ClusterName="demo", NodesToAdd=[
        {"InstanceGroupName": "compute", "IncrementTargetCountBy": 2}])["Successful"] for c in clients]
    out = run_all(fns)
    ids = [s["NodeLogicalId"] for r in out for s in r]
    assert len(ids) == 8 and len(set(ids)) == 8, out  # no node handed out twice
    g = next(g for g in clients[0].describe_cluster(ClusterName="demo")["InstanceGroups"] if g["InstanceGroupName"] == "compute")
    assert g["TargetCount"] == 10


def test_cli_and_api_change_one_cluster_at_once_and_nothing_is_lost(live_api):
    """Three API clients keep updating the cluster (each its own group, 1 -> 2 -> 1 ... nodes) while
    three CLI processes each add a compute node, with the engine building: every change stays.
    Bounded: each client stops when the CLI processes are done, or after 150 updates."""
    c = live_api.client()
    c.create_cluster(**create_request("demo", computes=1, extra_computes={f"extra{i}": 1 for i in range(3)}))
    cli = [sys.executable, "-m", "lab", "batch-add-cluster-nodes", "demo", "compute", "--output", "json"]
    done = threading.Event()

    def api_writer(i: int) -> int:
        n = 0
        while n < 150 and not done.is_set():
            n += 1
            c.update_cluster(ClusterName="demo", InstanceGroups=[group(f"extra{i}", "Compute", 1 + n % 2, "ml.c5.large")])
        c.update_cluster(ClusterName="demo", InstanceGroups=[group(f"extra{i}", "Compute", 1, "ml.c5.large")])
        return n

    def cli_writers() -> list[int]:
        procs = [subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) for _ in range(3)]
        try:
            return [p.wait(timeout=60) for p in procs]
        finally:
            done.set()

    out = run_all([lambda i=i: api_writer(i) for i in range(3)] + [cli_writers])
    assert out[3] == [0, 0, 0] and all(isinstance(n, int) and n > 1 for n in out[:3]), out
    want = {"controller": 1, "login": 1, "compute": 4, "extra0": 1, "extra1": 1, "extra2": 1}
    targets = {g["InstanceGroupName"]: g["TargetCount"] for g in c.describe_cluster(ClusterName="demo")["InstanceGroups"]}
    assert targets == want  # a lost change shows here: compute below 4

    def settled():
        d = c.describe_cluster(ClusterName="demo")
        got = {g["InstanceGroupName"]: (g["TargetCount"], g["CurrentCount"]) for g in d["InstanceGroups"]}
        return got if got == {k: (n, n) for k, n in want.items()} else None

    wait_for(settled, timeout=120, what="every change built")
    spec = {g["InstanceGroupName"]: g["InstanceCount"] for g in live_api.store.cluster("demo").spec["InstanceGroups"]}
    assert spec == want
