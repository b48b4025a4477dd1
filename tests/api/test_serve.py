"""`slurmlab serve` as a process: 127.0.0.1 by default, one per state directory, SIGTERM stops it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest


def _serve(home, *args):
    env = {**os.environ, "SLURMLAB_HOME": str(home)}
    return subprocess.Popen([sys.executable, "-m", "lab", "serve", "--provider", "sim", "--port", "0",
                             "--state-dir", str(home), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture
def served(lab_home):
    p = _serve(lab_home)
    info = lab_home / "serve.json"
    deadline = time.monotonic() + 30
    while not info.exists():
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            raise AssertionError(f"serve did not start: {p.communicate()}")
        time.sleep(0.1)
    yield p, json.loads(info.read_text())
    if p.poll() is None:
        p.kill()
        p.wait(10)
    from lab.engine import daemon

    daemon.stop(timeout=20)  # the engine the server started


def test_serve_defaults_lock_and_sigterm(served, lab_home):
    p, info = served
    assert info["url"].startswith("http://127.0.0.1:") and info["pid"] == p.pid
    with urllib.request.urlopen(info["url"] + "/_lab/health", timeout=10) as r:
        assert json.loads(r.read())["Ok"] is True
    with urllib.request.urlopen(info["url"] + "/", timeout=10) as r:
        assert b"slurmlab console" in r.read()

    second = _serve(lab_home)
    out, err = second.communicate(timeout=60)
    assert second.returncode == 4, err  # Conflict
    assert "another `slurmlab serve`" in err and str(p.pid) in err and str(lab_home) in err

    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 0, err
    assert "slurmlab serve: stopped" in err
    assert not (lab_home / "serve.json").exists()


def test_serve_refuses_bad_options(lab_home, tmp_path):
    bad = tmp_path / "cap.yaml"
    bad.write_text("instance_types:\n  ml.c5.larg: {available: 1}\n")
    p = _serve(lab_home, "--capacity", str(bad))
    _, err = p.communicate(timeout=60)
    assert p.returncode != 0 and "ml.c5.larg" in err
    p = subprocess.run([sys.executable, "-m", "lab", "serve", "--provider", "aws", "--state-dir", str(lab_home)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--provider: unknown provider 'aws'" in p.stderr and "sim (simulated VMs" in p.stderr
