"""Concurrent requests: many clients at once, the same name raced, reads during writes."""

from __future__ import annotations

import threading

from botocore.exceptions import ClientError

from tests.api.seed import create_request, seed_cluster


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
