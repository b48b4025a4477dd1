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
