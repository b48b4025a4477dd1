"""The metrics of issue 30 outside the browser: GET /_lab/metrics (the samples the engine kept and the
extension's status), GET /_lab/assets/chart.min.js (Debian's Chart.js, kept by the browser), who may
read them under `serve --auth`, and `slurmlab metrics NAME` in the terminal."""

from __future__ import annotations

import base64
import http.client
import json

import pytest

from lab.api import console
from lab.students import Registry
from tests.api.seed import seed_cluster
from tests.api.test_console import OBS, metrics_sample, seed_metrics


def fetch(api, path: str, headers: dict | None = None, method: str = "GET") -> tuple[int, dict, bytes]:
    host, port = api.server.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=10)
    conn.request(method, path, headers=headers or {})
    r = conn.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read())
    conn.close()
    return out


# ------------------------------------------------------------------------------------ GET /_lab/metrics
def test_metrics_answers_the_kept_samples_oldest_first_and_the_extensions_status(api):
    seed_cluster(api.store, "demo", computes=3)
    seeded = seed_metrics(api.store, "demo", n=5)
    status, headers, body = fetch(api, "/_lab/metrics?ClusterName=demo")
    assert status == 200 and headers["cache-control"] == "no-store"
    m = json.loads(body)
    assert m["ClusterName"] == "demo" and m["Samples"] == seeded  # every one, oldest first, as stored
    x = m["Extension"]
    assert (x["ExtensionName"], x["ExtensionVersion"], x["Status"]) == (OBS, "1.1.0", "Active")
    assert x["NodeSummary"] == {"TotalCount": 5, "ActiveCount": 5} and "Health" not in x
    last2 = json.loads(fetch(api, "/_lab/metrics?ClusterName=demo&Last=2")[2])["Samples"]
    assert last2 == seeded[-2:]

    # a Degraded extension says why
    issue = {"Code": "ExtensionUnhealthy", "Message": "demo-compute-3 does not answer", "NodeCount": 1}
    api.store.update_extension("demo", OBS, status="Degraded", issues=[issue], unhealthy={"demo-compute-3": "timeout"})
    x = json.loads(fetch(api, "/_lab/metrics?ClusterName=demo")[2])["Extension"]
    assert x["Status"] == "Degraded" and x["Health"] == {"Issues": [issue]} and x["NodeSummary"]["ActiveCount"] == 4


def test_metrics_of_a_cluster_without_the_extension_and_bad_requests(api):
    seed_cluster(api.store, "plain", computes=1)
    assert json.loads(fetch(api, "/_lab/metrics?ClusterName=plain")[2]) == {
        "ClusterName": "plain", "Extension": None, "Samples": []}
    status, _, body = fetch(api, "/_lab/metrics?ClusterName=nope")
    assert status == 400 and json.loads(body)["__type"] == "ResourceNotFound" and "nope" in json.loads(body)["message"]
    status, _, body = fetch(api, "/_lab/metrics")
    assert status == 400 and "ClusterName" in json.loads(body)["message"]
    for bad in ("0", "121", "x", "-1"):
        status, _, body = fetch(api, f"/_lab/metrics?ClusterName=plain&Last={bad}")
        assert status == 400 and "Last" in json.loads(body)["message"], bad


# ------------------------------------------------------------------------------------ the Chart.js asset
@pytest.mark.skipif(not console.ASSETS["chart.min.js"].path.exists(),
                    reason="needs Debian's libjs-chart.js (apt-get install libjs-chart.js)")
def test_chartjs_is_served_from_the_debian_package_and_kept_by_the_browser(api):
    status, headers, body = fetch(api, "/_lab/assets/chart.min.js")
    assert status == 200 and body == console.ASSETS["chart.min.js"].path.read_bytes()
    assert headers["content-type"].startswith("text/javascript")
    assert "max-age=604800" in headers["cache-control"] and "no-store" not in headers["cache-control"]
    status, headers, body = fetch(api, "/_lab/assets/chart.min.js", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 100_000


def test_a_missing_asset_is_a_404_that_says_how_to_install_it(api, tmp_path, monkeypatch):
    monkeypatch.setitem(console.ASSETS, "chart.min.js", console.Asset(tmp_path / "gone.js", "text/javascript", "libjs-chart.js"))
    status, headers, body = fetch(api, "/_lab/assets/chart.min.js")
    assert status == 404 and headers["cache-control"] == "no-store"  # not kept: the next load finds it installed
    assert "apt-get install -y libjs-chart.js" in json.loads(body)["message"]
    status, _, body = fetch(api, "/_lab/assets/../../etc/passwd")
    assert status == 404 and "/_lab/assets/chart.min.js" in json.loads(body)["message"]


# ------------------------------------------------------------------------------------ serve --auth
def test_under_auth_only_the_instructor_reads_metrics_and_assets(api, lab_home):
    reg = Registry(lab_home)
    keys = {}
    for name, instructor in (("alice", False), ("teacher", True)):
        s, secret = reg.add(name, instructor=instructor)
        keys[name] = {"Authorization": "Basic " + base64.b64encode(f"{s.AccessKeyId}:{secret}".encode()).decode()}
    api.lab.students = reg
    seed_cluster(api.store, "demo", computes=1)
    seed_metrics(api.store, "demo", n=2)
    for path in ("/_lab/metrics?ClusterName=demo", "/_lab/assets/chart.min.js"):
        status, headers, _ = fetch(api, path)
        assert status == 401 and headers["www-authenticate"].startswith("Basic"), path
        assert fetch(api, path, keys["alice"])[0] == 403, path  # a student: the console shows everyone's clusters
    status, _, body = fetch(api, "/_lab/metrics?ClusterName=demo", keys["teacher"])
    assert status == 200 and len(json.loads(body)["Samples"]) == 2
    assert fetch(api, "/_lab/assets/chart.min.js", keys["teacher"])[0] in (200, 404)  # 404: no libjs-chart.js


def test_state_names_each_clusters_extensions(api):
    seed_cluster(api.store, "demo", computes=1)
    seed_cluster(api.store, "plain", computes=1)
    seed_metrics(api.store, "demo", n=1)
    by = {c["ClusterName"]: c["Extensions"] for c in json.loads(fetch(api, "/_lab/state")[2])["Clusters"]}
    assert by == {"demo": [{"ExtensionName": OBS, "ExtensionVersion": "1.1.0", "Status": "Active"}], "plain": []}


# ------------------------------------------------------------------------------------ slurmlab metrics
def test_slurmlab_metrics_prints_the_newest_sample_and_json_the_samples(api):
    from typer.testing import CliRunner

    from lab.cli import app
    from lab.errors import NotFound, UsageError

    run = CliRunner().invoke
    seed_cluster(api.store, "demo", computes=3)
    seed_cluster(api.store, "plain", computes=1)
    seeded = seed_metrics(api.store, "demo", n=4)  # the newest: i = 3, nothing allocated, 2 pending

    text = run(app, ["metrics", "demo"]).output
    lines = text.splitlines()
    assert lines[0].startswith("demo  sample of ") and "4 kept" in lines[0]
    assert lines[0].endswith(f"{OBS} 1.1.0 Active  simulated")
    assert "Slurm nodes  idle 3  allocated 0  mixed 0  down 0  drain 0  other 0" in text
    assert "jobs         running 0, pending 2" in text
    assert "CPUs         0 of 6 allocated (0%)" in text and "memory       0 of 12288 MiB allocated (0%)" in text
    assert "partition    dev: running 0, pending 2" in text and "user         user01: running 0, pending 2" in text
    assert any(ln.split()[:2] == ["demo-compute-1", "0.25"] and "930 of 4096 MiB (23%)" in ln for ln in lines)
    assert any(ln.split()[:2] == ["demo-compute-3", "down"] for ln in lines)
    assert "the last" not in text  # the newest only

    more = run(app, ["metrics", "demo", "--last", "3"]).output
    assert "the last 3 samples" in more
    rows = more.split("the last 3 samples", 1)[1].splitlines()[2:]
    assert [r.split()[2] for r in rows] == ["1", "2", "0"]  # allocated nodes of samples 1, 2, 3
    assert [r.split()[-3] for r in rows] == ["33%", "67%", "0%"]  # CPUs allocated

    d = json.loads(run(app, ["metrics", "demo", "-o", "json"]).output)
    assert d["Samples"] == seeded and d["Extension"]["Status"] == "Active" and d["ClusterName"] == "demo"
    assert json.loads(run(app, ["metrics", "demo", "-o", "json", "--last", "1"]).output)["Samples"] == seeded[-1:]

    # a real sample says nothing of simulation; an extension that is not Active yet says when one comes
    api.store.add_extension_sample("demo", metrics_sample(seeded[-1]["time"] + 30, 4, simulated=False))
    assert "simulated" not in run(app, ["metrics", "demo"]).output.splitlines()[0]
    assert "no metrics of plain yet: it has no sagemaker-observability extension" in run(app, ["metrics", "plain"]).output
    assert json.loads(run(app, ["metrics", "plain", "-o", "json"]).output)["Samples"] == []
    gone = run(app, ["metrics", "nope"])
    assert isinstance(gone.exception, NotFound)
    bad = run(app, ["metrics", "demo", "--last", "0"])
    assert isinstance(bad.exception, UsageError) and "--last" in bad.exception.message
