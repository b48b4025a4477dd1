"""The API server on a free port of 127.0.0.1, in a private state directory, driven by real boto3.

`api` serves clusters inserted into the store (no engine); `live_api` also runs the engine process
with the sim provider (skipped while the sim provider is missing).
"""

from __future__ import annotations

import http.client
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import boto3
import botocore.config
import pytest

from lab.api import Lab, make_server
from lab.api.server import ApiServer
from lab.store.db import Store
from tests.api import botocheck

ROLE = "arn:aws:iam::000000000000:role/lab"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def sim_available() -> str | None:
    """None when the sim provider and the engine functions the lifecycle needs exist, else why not."""
    import importlib.util

    from lab.control import clusters

    if importlib.util.find_spec("lab.providers.sim") is None:
        return "the engine has no sim provider yet (lab/providers/sim.py)"
    missing = [f for f in ("update", "add_nodes", "delete_nodes") if not hasattr(clusters, f)]
    if missing:
        return "lab.control.clusters lacks " + ", ".join(missing)
    return None


@dataclass
class Api:
    url: str
    server: ApiServer
    store: Store
    lab: Lab

    def client(self, region: str = "us-east-1", **kw):
        cfg = botocore.config.Config(retries={"max_attempts": 1, "mode": "standard"}, connect_timeout=5, read_timeout=30)
        c = boto3.client("sagemaker", endpoint_url=self.url, region_name=region, aws_access_key_id="x",
                         aws_secret_access_key="x", config=cfg, **kw)
        botocheck.attach(c)  # every response is also checked against the output shape
        return c

    def raw(self, body: bytes | str | None, target: str | None = "SageMaker.DescribeCluster",
            content_type: str | None = "application/x-amz-json-1.1", method: str = "POST", path: str = "/",
            headers: dict | None = None) -> tuple[int, dict]:
        """One request on a fresh connection: (status, parsed JSON body)."""
        host, port = self.server.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=10)
        h = dict(headers or {})
        if target:
            h["X-Amz-Target"] = target
        if content_type:
            h["Content-Type"] = content_type
        data = body.encode() if isinstance(body, str) else body
        conn.request(method, path, body=data, headers=h)
        r = conn.getresponse()
        payload = r.read()
        conn.close()
        try:
            return r.status, json.loads(payload) if payload else {}
        except ValueError:
            return r.status, {"_raw": payload[:200]}

    def get(self, path: str) -> tuple[int, dict | str]:
        host, port = self.server.server_address[:2]
        conn = http.client.HTTPConnection(host, port, timeout=10)
        conn.request("GET", path)
        r = conn.getresponse()
        payload = r.read()
        conn.close()
        if "json" in (r.getheader("Content-Type") or ""):
            return r.status, json.loads(payload)
        return r.status, payload.decode()

    def post(self, path: str, body, content_type: str = "application/json") -> tuple[int, dict]:
        return self.raw(json.dumps(body) if not isinstance(body, (bytes, str)) else body, target=None,
                        content_type=content_type, path=path)


def _start(home: Path, engine: bool) -> tuple[Api, threading.Thread]:
    from lab.engine import daemon

    st = daemon.store()
    lab = Lab(store=st, provider="sim", base_dir=EXAMPLES, ensure_engine=daemon.ensure_running if engine else None)
    srv = make_server(lab, "127.0.0.1", 0)
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    t.start()
    return Api(srv.url, srv, st, lab), t


@pytest.fixture
def api(lab_home):
    a, t = _start(lab_home, engine=False)
    yield a
    a.server.shutdown()
    a.server.server_close()
    t.join(5)


@pytest.fixture
def live_api(lab_home, monkeypatch):
    why = sim_available()
    if why:
        pytest.skip(f"needs the sim provider: {why}")
    from lab.engine import daemon

    # The engine process inherits these: quick simulated boots, and a legacy create gives up
    # (and rolls back) after its first failed attempt instead of the third.
    monkeypatch.setenv("SLURMLAB_SIM_BOOT_TIME", "0.2")
    monkeypatch.setenv("SLURMLAB_LEGACY_ATTEMPTS", "1")

    a, t = _start(lab_home, engine=True)
    yield a
    a.server.shutdown()
    a.server.server_close()
    t.join(5)
    daemon.stop(timeout=20)  # the engine process this test started


def wait_for(fn, timeout: float = 60, every: float = 0.3, what: str = "condition"):
    """Poll fn() until it returns something truthy; its last value on timeout is in the message."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}; last: {last!r}")
