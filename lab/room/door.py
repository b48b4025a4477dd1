"""The room's listener and the keeper of a lab's rooms.

A Room is a forward (lab/providers/forward.py) from ADDRESS:PORT of this machine to the login node's room
port (ports.NODE_PORT), dialled where the node's network is (the lab's namespace, or a remote host):
nothing of this machine's own namespace sends to the VMs. It knows each client's address, so it can
slow one that keeps failing (guard.py) and write a line per connection to the cluster's room.log:

    2026-12-07T11:02:03 169.254.77.2 user05 logged in (password)
    2026-12-07T11:02:09 169.254.77.2 refused: Failed password for user05 (1 in 10 min)
    2026-12-07T11:02:20 169.254.77.2 waits 2 s: 4 failed logins in 10 min

The Keeper opens a room for each cluster that has student accounts and a running login node, follows
the login node when it changes (replaced, another one running), and closes the room when the cluster,
its accounts or its login nodes are gone: `slurmlab serve` runs one for all its clusters, `slurmlab room
NAME` one for a single cluster.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from lab.osutil import iso_seconds
from lab.providers.forward import Forward, relay
from lab.room import guard, ports
from lab.workspace import ClusterDir

log = logging.getLogger(__name__)

Journal = Callable[[str, float], list[str]]  # (node address, since epoch s) -> sshd's log lines


def sshd_journal(cluster: str) -> Journal:
    """sshd's lines on a node since a time, over the cluster's kept connection (lab/providers/kept.py)."""
    def read(address: str, since: float) -> list[str]:
        from lab.providers import kept

        cmd = kept.command(cluster, address, ["sudo", "-n", "journalctl", "-u", "ssh.service", "-o", "cat",
                                              "--no-pager", "--since", f"@{int(since)}"])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            return []
        return p.stdout.splitlines() if p.returncode == 0 else []
    return read


class Room(Forward):
    """ADDRESS:PORT of this machine to the room port of the login node at `address` (changeable: set
    `.address`)."""

    def __init__(self, cluster: str, address: str, dial, port: int, bind: str, journal: Journal | None = None,
                 penalties: guard.Penalties | None = None, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep):
        super().__init__(dial, address, ports.NODE_PORT, port, bind=bind)
        self.cluster = cluster
        self.journal = journal
        self.penalties = penalties or guard.Penalties()
        self.clock, self.sleep = clock, sleep
        self._log_lock = threading.Lock()

    def say(self, text: str) -> None:
        """One line in the cluster's room.log (and the process's log)."""
        log.info("room %s: %s", self.cluster, text)
        with self._log_lock:
            try:
                with open(ClusterDir(self.cluster).root / "room.log", "a") as f:
                    f.write(f"{iso_seconds(self.clock())} {text}\n")
            except OSError:
                pass

    def _one(self, client: socket.socket) -> None:
        try:
            peer = client.getpeername()[0]
        except OSError:
            client.close()
            return
        if not self.penalties.enter(peer):
            self.say(f"{peer} refused: {guard.MAX_OPEN_PER_ADDRESS} connections open already")
            client.close()
            return
        try:
            self._through(client, peer)
        finally:
            self.penalties.leave(peer)

    def _through(self, client: socket.socket, peer: str) -> None:
        wait = self.penalties.wait_s(peer, self.clock())
        if wait:
            self.say(f"{peer} waits {wait:.0f} s: {self.penalties.failures(peer, self.clock())} failed logins "
                     f"in {guard.WINDOW_S / 60:.0f} min")
            self.sleep(wait)
        address, started = self.address, self.clock()
        try:
            upstream = self.dial(address, self.target_port)
        except OSError as e:
            self.say(f"{peer} refused: the login node {address}:{self.target_port} does not answer ({e})")
            client.close()
            return
        try:
            local_port = upstream.getsockname()[1] if upstream.family in (socket.AF_INET, socket.AF_INET6) else None
        except OSError:
            local_port = None
        relay(client, upstream)
        if local_port and self.journal is not None:
            self._judge(peer, address, local_port, started)

    def _judge(self, peer: str, address: str, local_port: int, started: float) -> None:
        got = guard.outcome(self.journal(address, started - 30), local_port)
        if got.kind == "accepted":
            self.penalties.succeeded(peer)
            self.say(f"{peer} {got.detail.replace(' (', ' logged in (', 1)}")
        elif got.failed:
            n = self.penalties.failed(peer, self.clock())
            self.say(f"{peer} refused: {got.detail} ({n} in {guard.WINDOW_S / 60:.0f} min)")


@dataclass
class Wanted:
    address: str | None  # the login node's address; None: no room now
    why: str = ""  # when None


def wanted(st, name: str) -> Wanted:
    """Whether cluster `name` should have an open room now, and to which login node."""
    from lab.engine.hubwatch import running_logins

    c = st.cluster(name)
    if c is None:
        return Wanted(None, "deleted")
    if why := ports.no_room(c):
        return Wanted(None, why)
    node = next(iter(running_logins(st.groups(name), st.nodes(name))), None)
    if node is None:
        return Wanted(None, "no running login node yet")
    return Wanted(node.address)


class Keeper:
    """The open rooms of one process: all clusters of the store (`only` None), or one."""

    def __init__(self, bind: str, by: str, only: str | None = None, journal_for=sshd_journal):
        self.bind, self.by, self.only = bind, by, only
        self.journal_for = journal_for
        self.rooms: dict[str, tuple[Room, object]] = {}
        self.problems: dict[str, str] = {}  # cluster -> why its room could not open (last sync)

    def sync(self, st) -> dict[str, Wanted]:
        """Open, move and close rooms to match the store; what each cluster wants."""
        names = [self.only] if self.only else [c.name for c in st.clusters()]
        names += [n for n in self.rooms if n not in names]
        seen = {}
        for name in names:
            want = seen[name] = wanted(st, name)
            have = self.rooms.get(name)
            if want.address is None:
                if have is not None:
                    self._close(name, f"closed: {want.why}")
                continue
            if have is not None:
                if have[0].address != want.address:
                    have[0].say(f"the login node is now {want.address}")
                    have[0].address = want.address
                continue
            self._open(name, want.address)
        return seen

    def _open(self, name: str, address: str) -> None:
        from lab.providers import forward as fwd
        from lab.providers import placement

        port = ports.port_of(name)
        if port is None:
            return
        dial = fwd.dialer_for(placement.host_of(name))
        try:
            room = Room(name, address, dial, port, self.bind, journal=self.journal_for(name))
        except OSError as e:
            dial.close()
            problem = f"cannot listen on {self.bind}:{port}: {e.strerror or e}"
            if self.problems.get(name) != problem:
                log.warning("room %s: %s", name, problem)
            self.problems[name] = problem
            return
        self.problems.pop(name, None)
        room.start()
        self.rooms[name] = (room, dial)
        ports.mark_open(name, port, self.bind, self.by)
        room.say(f"open on {self.bind}:{port} -> {address}:{ports.NODE_PORT} ({self.by})")

    def _close(self, name: str, why: str) -> None:
        room, dial = self.rooms.pop(name)
        room.close()
        dial.close()
        ports.mark_closed(name)
        room.say(why)

    def close(self) -> None:
        for name in list(self.rooms):
            self._close(name, f"closed: {self.by} stopped")
