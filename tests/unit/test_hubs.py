"""serve's forwards to the clusters' JupyterHubs (lab/api/hubs.py, issue 31): the console's link is a
port of serve's own address relayed to the login node's hub; the same forward while that node runs, a
new one when the node changed, none (and a reason) when there is no hub to reach, none left after
close(). The "hub" here is an HTTP server on this machine's loopback, dialed directly (no namespace)."""

from __future__ import annotations

import http.server
import threading
import urllib.request

import pytest

from lab.api import hubs as hubs_mod
from lab.control import jupyter
from lab.errors import LabError
from lab.host.registry import Host
from lab.providers import placement
from lab.store.db import NodeRow


class _Hub(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        body = f"hub at {self.path}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


@pytest.fixture
def hub(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(jupyter, "PORT", server.server_address[1])
    monkeypatch.setattr(placement, "host_of", lambda name: Host("local", "qemu:///system", netns=None))
    yield server
    server.shutdown()
    server.server_close()


def _node(address: str) -> NodeRow:
    return NodeRow("jh", "jh-login-1", "login", 1, "i-b", address, "", "running")


def test_the_link_is_a_port_of_serve_s_address_relayed_to_the_hub(hub, monkeypatch):
    at = {"node": _node("127.0.0.1")}

    def hub_node(st, name):
        if at["node"] is None:
            raise LabError("jh has no running login node yet", "wait")
        return at["node"]

    monkeypatch.setattr(jupyter, "hub_node", hub_node)
    h = hubs_mod.Hubs("127.0.0.1")
    try:
        link = h.link(None, "jh")
        assert link["Path"] == "/jh/" and link["Node"] == "jh-login-1"
        with urllib.request.urlopen(f"http://127.0.0.1:{link['Port']}/jh/hub/health", timeout=10) as r:
            assert r.read() == b"hub at /jh/hub/health"
        assert h.link(None, "jh")["Port"] == link["Port"]  # kept while the node runs
        at["node"] = _node("127.0.0.2")  # replaced: another address, another forward
        moved = h.link(None, "jh")
        assert moved["Port"] != link["Port"]
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{link['Port']}/", timeout=5)
        at["node"] = None
        assert h.link(None, "jh") == {"Waiting": "jh has no running login node yet"}
        with pytest.raises(OSError):
            urllib.request.urlopen(f"http://127.0.0.1:{moved['Port']}/", timeout=5)
        at["node"] = _node("127.0.0.1")
        last = h.link(None, "jh")["Port"]
    finally:
        h.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{last}/", timeout=5)
