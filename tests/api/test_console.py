"""The web console in headless Chromium (Debian's `chromium` package): what it shows after its
JavaScript ran, that it follows the store live, and a screenshot.

Skips when chromium is not installed (`apt-get install chromium`). Set SLURMLAB_CONSOLE_SHOT=FILE
to keep the screenshot (docs/console.png was made that way).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
import time

import pytest

from lab.api import labctl
from tests.api.seed import seed_cluster

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (apt-get install chromium) "
                                                         "to test the console in a headless browser")


def chromium(tmp_path, url: str, *mode: str, budget_ms: int = 5000) -> subprocess.CompletedProcess:
    profile = tmp_path / f"profile-{time.monotonic_ns()}"
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
           f"--user-data-dir={profile}", "--window-size=1280,800", f"--virtual-time-budget={budget_ms}", *mode, url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def text_of(dom: str) -> str:
    dom = re.sub(r"<(script|style)[^>]*>.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def test_console_shows_the_lab_and_follows_it_live(api, tmp_path, monkeypatch):
    seed_cluster(api.store, "demo", computes=3, pending=1)
    api.store.update_cluster("demo", host="lab-b")  # placed on another host (docs/workshop.md §10)
    api.store.set_capacity("ml.c5.large", 2)

    # The first time the page polls, capacity arrives: the last compute node joins while it watches.
    polled = threading.Event()
    real_state = labctl.state

    def state(lab):
        out = real_state(lab)
        if not polled.is_set():
            polled.set()
            api.store.set_capacity("ml.c5.large", 3)
            api.store.update_node("demo", "demo-compute-3", phase="running", message="", launched_at=time.time())
            api.store.update_group("demo", "compute", status="InService")
            api.store.add_event("demo", "Instance", "Info", "1 node(s) joined Slurm with one reconfigure: demo-compute-3")
        return out

    monkeypatch.setattr(labctl, "state", state)
    dom = chromium(tmp_path, api.url + "/", "--dump-dom").stdout
    assert polled.is_set()
    text = text_of(dom)
    assert 'data-clusters="1"' in dom
    assert 'data-cluster="demo"' in dom and "Continuous" in text and "on host lab-b" in text
    # groups with current / target and status, after the live update
    row = re.search(r'<tr data-group="compute">(.*?)</tr>', dom).group(1)
    assert "3 / 3" in text_of(row) and 'data-status="InService"' in row
    assert "1 / 1" in text_of(re.search(r'<tr data-group="controller">(.*?)</tr>', dom).group(1))
    # nodes with status (and message), events newest first
    node = re.search(r'<tr data-node="demo-compute-3">(.*?)</tr>', dom).group(1)
    assert 'data-status="Running"' in node
    assert "joined Slurm with one reconfigure" in text
    assert text.index("joined Slurm") < text.index("cluster demo is InService")  # newest first
    assert "InsufficientCapacity" in text  # the earlier shortage stays in the event stream
    assert "ml.c5.large in use 3 of 3" in text
    assert re.search(r'<span id="updated">live · updated [0-9:]+</span>', dom)


def test_console_screenshot(api, tmp_path):
    seed_cluster(api.store, "demo", computes=3, pending=1)
    seed_cluster(api.store, "legacy", computes=1, request=None)
    api.store.set_capacity("ml.c5.large", 3)
    shot = tmp_path / "console.png"
    chromium(tmp_path, api.url + "/", f"--screenshot={shot}", budget_ms=3000)
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # a rendered page, not a blank one
    keep = os.environ.get("SLURMLAB_CONSOLE_SHOT")
    if keep:
        shutil.copy(shot, keep)


def test_console_without_clusters(api, tmp_path):
    text = text_of(chromium(tmp_path, api.url + "/", "--dump-dom", budget_ms=2000).stdout)
    assert "no clusters yet" in text and "every instance type is unlimited" in text


def test_console_shows_what_slurm_says_and_a_protected_group(api, tmp_path):
    """Issue 26: a node Slurm calls down shows its Slurm state, a slurmctld that does not answer and a
    protected group are named on the cluster's card."""
    seed_cluster(api.store, "demo", computes=2)
    api.store.update_node("demo", "demo-compute-2", slurm="Slurm: down* (Not responding)",
                          message="Slurm: down* (Not responding)", slurm_since=time.time())
    api.store.update_cluster("demo", slurm_problem="slurmctld on demo-controller-1 does not answer: connect failure",
                             slurm_problem_since=time.time())
    api.store.update_group("demo", "compute", status="Degraded", failures=5, protected="5 failures in a row (the last: x)")
    text = text_of(chromium(tmp_path, api.url + "/", "--dump-dom").stdout)
    assert "Slurm: down* (Not responding)" in text
    assert "Slurm does not answer: slurmctld on demo-controller-1 does not answer: connect failure" in text
    assert "instance group compute is protected: 5 failures in a row (the last: x)" in text


# ------------------------------------------------------------------------------------ the metrics view (issue 30)
OBS = "sagemaker-observability"


def metrics_sample(t: float, i: int, simulated: bool = True) -> dict:
    """A sample in docs/adr/0017's shape, different from one to the next (i), the last node down."""
    busy = i % 3
    return {"time": t, "simulated": simulated,
            "slurm": {"nodes": {"idle": 3 - busy, "allocated": busy, "mixed": 0, "down": 0, "drain": 0, "other": 0},
                      "jobs": {"running": busy, "pending": i % 2 + 1},
                      "cpus": {"allocated": 2 * busy, "total": 6}, "memory_mib": {"allocated": 512 * busy, "total": 12288},
                      "partitions": {"dev": {"running": busy, "pending": i % 2 + 1}},
                      "users": {"user01": {"running": busy, "pending": i % 2 + 1}}},
            "nodes": {"demo-compute-1": {"up": True, "load1": round(0.25 + busy / 2, 2), "mem_used_mib": 900 + 10 * i,
                                         "mem_total_mib": 4096},
                      "demo-compute-2": {"up": True, "load1": 0.05, "mem_used_mib": 700, "mem_total_mib": 4096},
                      "demo-compute-3": {"up": False}}}


def seed_metrics(st, name: str = "demo", n: int = 12, simulated: bool = True) -> list[dict]:
    """An Active sagemaker-observability extension on the cluster and `n` samples 30 s apart."""
    from lab.control import extensions

    extensions.create(st, name, OBS)
    st.update_extension(name, OBS, status="Active", installed=[x.name for x in st.nodes(name) if x.phase == "running"])
    t0 = time.time() - 30 * n
    out = [metrics_sample(t0 + 30 * i, i, simulated) for i in range(n)]
    for s in out:
        st.add_extension_sample(name, s)
    return out


def test_console_draws_a_clusters_metrics_and_refreshes_them(api, tmp_path, monkeypatch):
    seed_cluster(api.store, "demo", computes=3)
    seed_cluster(api.store, "plain", computes=1)  # no extension: no metrics view
    seed_metrics(api.store, "demo", n=12)
    # The first time the page asks for metrics, a new sample arrives: the next refresh (15 s on) draws it.
    asked = threading.Event()
    real = labctl.metrics

    def metrics(lab, name, last=None):
        out = real(lab, name, last)
        if not asked.is_set():
            asked.set()
            api.store.add_extension_sample("demo", metrics_sample(time.time(), 13))
        return out

    monkeypatch.setattr(labctl, "metrics", metrics)
    dom = chromium(tmp_path, api.url + "/", "--dump-dom", budget_ms=20000).stdout
    view = re.search(r'<div class="metrics"([^>]*)>(.*?)</table></div></div>', dom, re.S)
    assert view, "no metrics view in the page"
    attrs, body = view.groups()
    assert 'data-metrics="demo"' in attrs and 'data-chart="ok"' in attrs and 'data-simulated="true"' in attrs
    assert re.search(r'data-lib="3\.\d+\.\d+"', attrs)  # Debian's Chart.js drew it
    assert 'data-points="13"' in attrs  # the 12 seeded, then the one that came while the page watched
    assert dom.count('data-metrics="') == 1  # "plain" has no extension
    assert body.count("<canvas") == 4
    text = text_of(body)
    assert "simulated" in text and "sagemaker-observability 1.1.0" in text

    def cell(metric: str) -> str:
        return text_of(re.search(rf'data-metric="{metric}"[^>]*>(.*?)</td>', body).group(1)).strip()

    # the newest sample (i = 13): 1 node allocated of 3, 1 job running and 2 pending, 2 of 6 CPUs
    assert [cell(f"nodes-{k}") for k in ("idle", "allocated", "down")] == ["2", "1", "0"]
    assert (cell("jobs-running"), cell("jobs-pending")) == ("1", "2")
    assert cell("cpus") == "2 / 6 (33.3%)" and cell("memory") == "512 / 12288 MiB (4.2%)"
    node = lambda n: text_of(re.search(rf'<tr data-metric-node="{n}">(.*?)</tr>', body).group(1))  # noqa: E731
    assert "0.75" in node("demo-compute-1") and "1030 / 4096 MiB" in node("demo-compute-1")
    assert "does not answer" in node("demo-compute-3")
    assert re.search(r'<tr data-user="user01">.*?>1<.*?>2<', body)


def test_console_metrics_without_chartjs_shows_the_table(api, tmp_path, monkeypatch):
    from lab.api import console

    missing = console.Asset(tmp_path / "no-chart.min.js", "text/javascript", "libjs-chart.js")
    monkeypatch.setitem(console.ASSETS, "chart.min.js", missing)
    seed_cluster(api.store, "demo", computes=3)
    seed_metrics(api.store, "demo", n=3, simulated=False)
    dom = chromium(tmp_path, api.url + "/", "--dump-dom").stdout
    attrs = re.search(r'<div class="metrics"([^>]*)>', dom).group(1)
    assert 'data-chart="table"' in attrs and 'data-lib=""' in attrs and 'data-points="3"' in attrs
    assert 'data-simulated="false"' in attrs and "<canvas" not in dom
    assert "apt-get install -y libjs-chart.js" in text_of(dom)
    assert re.search(r'data-metric="nodes-allocated"[^>]*>2<', dom)  # the newest sample (i = 2)


class _Hubs:
    """serve's hub forwards (lab/api/hubs.py) as the console sees them: a port, or why there is none yet."""

    def __init__(self, links: dict[str, dict]):
        self.links, self.asked = links, []

    def link(self, st, name):
        self.asked.append(name)
        return self.links[name]

    def close(self):
        pass


def test_console_links_each_cluster_s_jupyterhub(api, tmp_path):
    """Issue 31: a cluster with Lab.Jupyter gets a JupyterHub link on the page's own host name and the
    port serve forwards to its hub; one whose hub is not reachable yet says so; one without Lab.Jupyter
    gets nothing (and serve is not asked for it)."""
    from tests.api.seed import create_request

    for name in ("hubbed", "waiting"):
        seed_cluster(api.store, name, computes=1, request={**create_request(name, 1), "Lab": {"Jupyter": True}})
    seed_cluster(api.store, "plain", computes=1)
    api.server.lab.hubs = _Hubs({"hubbed": {"Port": 45678, "Path": "/hubbed/", "Node": "hubbed-login-1"},
                                 "waiting": {"Waiting": "waiting has no running login node yet"}})
    dom = chromium(tmp_path, api.url + "/", "--dump-dom", budget_ms=3000).stdout
    links = dict(re.findall(r'<a [^>]*href="([^"]+)"[^>]*data-jupyter="([^"]+)"', dom))
    assert links == {"http://127.0.0.1:45678/hubbed/": "hubbed"}, re.findall(r"<a [^>]*data-jupyter[^>]*>", dom)
    assert re.search(r'data-jupyter="waiting"[^>]*>JupyterHub: not yet<', dom) or \
        re.search(r'title="waiting has no running login node yet"[^>]*>JupyterHub: not yet<', dom), dom[-2000:]
    assert "plain" not in api.server.lab.hubs.asked and 'data-jupyter="plain"' not in dom
