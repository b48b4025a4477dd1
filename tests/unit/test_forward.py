"""slurmlab forward: a loopback port of this machine relayed to a port reached in another network
namespace (lab/providers/forward.py). The namespace test makes its own namespace with a server on
that namespace's loopback, which this namespace cannot reach: only the forward's dial can."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading

import pytest

from lab.providers import forward as fwd

ECHO = """
import socket, sys
s = socket.create_server(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
while True:
    c, _ = s.accept()
    data = b""
    while chunk := c.recv(65536):
        data += chunk
    c.sendall(b"got " + str(len(data)).encode() + b" " + data[:8])
    c.close()
"""


def _echo_server() -> tuple[socket.socket, int]:
    """An in-process server: reads until the client's half-close, answers with what it got."""
    s = socket.create_server(("127.0.0.1", 0))

    def serve():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            data = b""
            while chunk := c.recv(65536):
                data += chunk
            c.sendall(b"got " + str(len(data)).encode() + b" " + data[:8])
            c.close()

    threading.Thread(target=serve, daemon=True).start()
    return s, s.getsockname()[1]


def _ask(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        c.sendall(payload)
        c.shutdown(socket.SHUT_WR)  # the half-close reaches the far side through the relay
        got = b""
        while chunk := c.recv(65536):
            got += chunk
        return got


def test_bytes_go_both_ways_and_a_half_close_passes():
    server, port = _echo_server()
    dial = fwd.NetnsDialer(None)
    f = fwd.Forward(dial, "127.0.0.1", port)
    f.start()
    try:
        assert f.listener.getsockname()[0] == "127.0.0.1"
        big = os.urandom(3 << 20)  # more than one chunk each way of the relay
        assert _ask(f.port, big) == b"got " + str(len(big)).encode() + b" " + big[:8]
        assert _ask(f.port, b"again") == b"got 5 again"  # one forward, many connections
        assert f.connections == 2
    finally:
        f.close()
        dial.close()
        server.close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", f.port), timeout=2)  # closed: nothing listens any more


def test_a_target_that_does_not_answer_closes_the_client_and_the_forward_goes_on():
    dead = socket.create_server(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()
    server, live = _echo_server()
    targets = iter([port, live])
    f = fwd.Forward(lambda a, p: socket.create_connection((a, next(targets)), timeout=5), "127.0.0.1", 1)
    f.start()
    try:
        try:  # refused upstream: the client sees its connection end (reset: its bytes were never read;
            assert _ask(f.port, b"lost") == b""  # not connected: it ended before the client's half-close)
        except (ConnectionResetError, BrokenPipeError):
            pass
        except OSError as e:
            assert e.errno == errno.ENOTCONN, e
        assert _ask(f.port, b"kept") == b"got 4 kept"
    finally:
        f.close()
        server.close()


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/sbin/ip") and not os.path.exists("/usr/bin/ip"),
                    reason="needs root and iproute2 to make a network namespace")
def test_the_dial_is_made_inside_the_namespace():
    ns = f"slurmlab-fwdtest-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    server = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
        server = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", ECHO], stdout=subprocess.PIPE,
                                  text=True, stdin=subprocess.DEVNULL)
        port = int(server.stdout.readline())
        # this namespace's 127.0.0.1 has no such server (or another one): the namespace's own loopback
        # is reached only from inside it
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        dial = fwd.NetnsDialer(ns)
        f = fwd.Forward(dial, "127.0.0.1", port)
        f.start()
        try:
            assert _ask(f.port, b"inside") == b"got 6 inside"
        finally:
            f.close()
            dial.close()
    finally:
        if server is not None:
            server.kill()
            server.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_entering_a_namespace_that_does_not_exist_says_so():
    d = fwd.NetnsDialer("slurmlab-no-such-namespace")
    try:
        with pytest.raises(FileNotFoundError):
            d("127.0.0.1", 9)
    finally:
        d.close()
