"""A loopback port of this machine forwarded to a port of a node, as `kubectl port-forward` does.

The listener is on 127.0.0.1 in this machine's own namespace; every connection to the node is made
where the node's network is reached, never from this namespace (SANDBOX.md's network rule):

- a local host in netns mode: from a thread that entered the lab's namespace (setns(2) moves only
  the calling thread; a socket keeps the namespace it was made in, so the relay threads use it here);
- a remote host: through the host, `ssh-to-NAME -W ADDRESS:PORT` (the way its VMs' ssh goes);
- no namespace (a machine without netns mode): directly.

Bytes are relayed both ways until either side closes. Nothing binds beyond loopback.
"""

from __future__ import annotations

import ctypes
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

CLONE_NEWNET = 0x40000000
CHUNK = 1 << 16

Dial = Callable[[str, int], socket.socket]


def enter_netns(name: str) -> None:
    """Move the calling thread into network namespace `name` (/run/netns/NAME); needs CAP_SYS_ADMIN."""
    fd = os.open(f"/run/netns/{name}", os.O_RDONLY)
    try:
        if sys.version_info >= (3, 12):
            os.setns(fd, CLONE_NEWNET)
            return
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into network namespace {name}: {os.strerror(err)}")
    finally:
        os.close(fd)


class NetnsDialer:
    """TCP connections made inside network namespace `netns` (None: this one), by one worker thread
    that entered it once."""

    def __init__(self, netns: str | None, timeout: float = 10):
        self.netns, self.timeout = netns, timeout
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dial")
        self._inside = netns is None

    def _dial(self, address: str, port: int) -> socket.socket:
        if not self._inside:  # the pool's one thread, once: its error reaches the caller as it is
            enter_netns(self.netns)
            self._inside = True
        return socket.create_connection((address, port), self.timeout)

    def __call__(self, address: str, port: int) -> socket.socket:
        return self._pool.submit(self._dial, address, port).result()

    def close(self) -> None:
        self._pool.shutdown(wait=False)


class SshDialer:
    """Connections through a remote host: lab.host.sshhost.stdio_to per connection (`ssh-to-NAME -W
    ADDRESS:PORT`), its stdin and stdout one end of a socket pair."""

    def __init__(self, host):
        self.host = host
        self.procs: list[subprocess.Popen] = []

    def __call__(self, address: str, port: int) -> socket.socket:
        from lab.host import sshhost

        ours, theirs = socket.socketpair()
        proc = subprocess.Popen(sshhost.stdio_to(self.host, address, port), stdin=theirs, stdout=theirs,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        theirs.close()
        self.procs = [p for p in self.procs if p.poll() is None] + [proc]
        return ours

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()


def dialer_for(host) -> NetnsDialer | SshDialer:
    """How to reach the VMs of `host` (a lab.host.registry.Host) from this machine."""
    if host.remote:
        return SshDialer(host)
    return NetnsDialer(host.netns)


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def relay(a: socket.socket, b: socket.socket) -> None:
    """Copy bytes both ways until both directions ended; then close both."""
    back = threading.Thread(target=_pump, args=(b, a), daemon=True)
    back.start()
    _pump(a, b)
    back.join()
    a.close()
    b.close()


class Forward:
    """127.0.0.1:`port` (0: a free one) of this machine to `address`:`target_port`, made by `dial` (its
    owner closes it)."""

    def __init__(self, dial: Dial, address: str, target_port: int, port: int = 0, bind: str = "127.0.0.1"):
        self.dial, self.address, self.target_port = dial, address, target_port
        self.listener = socket.create_server((bind, port))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self._closed = threading.Event()

    def _one(self, client: socket.socket) -> None:
        try:
            upstream = self.dial(self.address, self.target_port)
        except OSError as e:
            log.warning("forward: %s:%s does not answer: %s", self.address, self.target_port, e)
            client.close()
            return
        relay(client, upstream)

    def serve_forever(self) -> None:
        """Accept connections until close(); each is relayed in a thread of its own."""
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                if self._closed.is_set():
                    return
                raise
            self.connections += 1
            threading.Thread(target=self._one, args=(client,), daemon=True).start()

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, daemon=True, name=f"forward-{self.port}")
        t.start()
        return t

    def close(self) -> None:
        self._closed.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
