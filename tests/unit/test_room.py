"""The room's way in (lab/room, issue 44): a cluster's port is given once and kept, the next cluster gets the
next free one; what sshd logged for a connection is read by the port it came from; an address that keeps
failing waits longer each time and a login clears it; the listener relays to the login node, knows each
client, writes room.log, and the keeper opens, moves and closes rooms as the store changes. The "sshd"
here is a TCP server on this machine's loopback that logs like sshd, dialled directly (no namespace)."""

from __future__ import annotations

import os
import socket
import threading
from pathlib import Path

import pytest

from lab.host.registry import Host
from lab.providers import placement
from lab.room import door, guard, ports
from lab.workspace import ClusterDir


def _free_run(n: int = 16) -> int:
    """The first of n ports in a row that nothing listens on (a CI run's own room may hold 2201), below the
    kernel's range of ephemeral ports: a client's connection (the e2e streams' ssh) may take a port of
    that range between this choice and the test that uses it (CI run I: 42211)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for base in range(12201, low - n, 97):
        try:
            held = [socket.create_server(("", p)) for p in range(base, base + n)]
        except OSError:
            continue
        for h in held:
            h.close()
        return base
    raise AssertionError("no free run of ports")


B = _free_run()


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path))
    monkeypatch.setenv("SLURMLAB_ROOM_FIRST_PORT", str(B))
    return tmp_path


# ---------------------------------------------------------------------------------------------- ports
def test_each_cluster_keeps_its_port_and_the_next_gets_the_next_free_one(home, monkeypatch):
    for n in ("a", "b", "c"):
        ClusterDir(n).create()
    assert ports.port_of("a") == B
    assert ports.port_of("b") == B + 1
    assert ports.port_of("a") == B  # kept
    ClusterDir("a").remove()  # a deleted cluster frees its port
    assert ports.port_of("c") == B
    monkeypatch.setenv("SLURMLAB_ROOM_FIRST_PORT", str(B + 10))
    ClusterDir("d").create()
    assert ports.port_of("d") == B + 10 and ports.port_of("b") == B + 1
    ClusterDir("e").create()
    with socket.create_server(("", B + 11)):  # another lab home's room, or another program
        assert ports.port_of("e") == B + 12


def test_a_cluster_without_its_folder_gets_no_port_and_nothing_is_made(home):
    assert ports.port_of("gone") is None and ports.status("gone") is None
    assert not (home / "clusters" / "gone").exists()


def test_the_room_is_open_while_the_process_that_opened_it_lives(home):
    ClusterDir("a").create()
    st = ports.status("a")
    assert st["Open"] is False and st["Port"] == B and st["Ssh"].startswith(f"ssh -p {B} STUDENT@")
    assert "closed: slurmlab room a, or slurmlab serve, opens it" in ports.describe_line("a", st)
    ports.mark_open("a", B, "169.254.77.1", "slurmlab room")
    st = ports.status("a")
    assert st["Open"] and st["Ssh"] == f"ssh -p {B} STUDENT@169.254.77.1"
    assert st["By"] == f"slurmlab room (pid {os.getpid()})"
    (ClusterDir("a").root / "room.open").write_text(f'{{"Pid": 999999999, "Port": {B}, "By": "x"}}')
    assert ports.status("a")["Open"] is False  # its process is gone (killed)
    ports.mark_closed("a")  # not ours: left as it is
    assert (ClusterDir("a").root / "room.open").exists()


# ---------------------------------------------------------------------------------------------- guard
LINES = [
    "Failed password for user05 from 192.168.121.1 port 40112 ssh2",
    "Failed password for invalid user vagrant from 192.168.121.1 port 40113 ssh2",
    "Accepted password for user05 from 192.168.121.1 port 4011 ssh2",
    "Accepted publickey for user06 from 192.168.121.1 port 40114 ssh2: ED25519 SHA256:x",
    "Failed password for user06 from 192.168.121.1 port 40114 ssh2",
    "Connection closed by 192.168.121.1 port 40115 [preauth]",
]


@pytest.mark.parametrize("port, kind, detail", [
    (40112, "refused", "Failed password for user05"),
    (40113, "refused", "Failed password for invalid user vagrant"),
    (4011, "accepted", "user05 (password)"),  # not 40112's lines: the port is a whole word
    (40114, "accepted", "user06 (publickey)"),  # a typo, then the key: a login
    (40115, "none", ""),  # a probe that tried nothing
    (40116, "none", ""),
])
def test_what_sshd_logged_for_the_port_a_connection_came_from(port, kind, detail):
    got = guard.outcome(LINES, port)
    assert (got.kind, got.detail) == (kind, detail)


def test_an_address_that_keeps_failing_waits_longer_each_time_and_a_login_clears_it():
    p = guard.Penalties()
    waits = []
    for i in range(10):
        waits.append(p.wait_s("10.1.2.3", 100.0 + i))
        p.failed("10.1.2.3", 100.0 + i)
    assert waits == [0, 0, 0, 1, 2, 4, 8, 16, 32, 60]
    assert p.wait_s("10.1.2.4", 110) == 0  # another address: nothing
    assert p.wait_s("10.1.2.3", 100 + guard.WINDOW_S + 6) == 1  # the oldest ones fell out of the window
    p.succeeded("10.1.2.3")
    assert p.wait_s("10.1.2.3", 111) == 0


def test_at_most_so_many_connections_at_once_from_one_address():
    p = guard.Penalties()
    assert all(p.enter("a") for _ in range(guard.MAX_OPEN_PER_ADDRESS))
    assert not p.enter("a") and p.enter("b")
    p.leave("a")
    assert p.enter("a")


# ---------------------------------------------------------------------------------------------- door
class FakeSshd:
    """Says a banner, reads one line: `ok` logs an Accepted line for the client's port, else a Failed one."""

    def __init__(self):
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.lines: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, (addr, port) = self.server.accept()
            except OSError:
                return
            with c:
                c.sendall(b"SSH-2.0-fake\r\n")
                said = c.makefile().readline().strip()
                self.lines.append(f"Accepted password for user05 from {addr} port {port} ssh2" if said == "ok" else
                                  f"Failed password for user05 from {addr} port {port} ssh2")

    def journal(self, address, since):
        return list(self.lines)

    def close(self):
        self.server.close()


@pytest.fixture
def sshd(home, monkeypatch):
    s = FakeSshd()
    monkeypatch.setattr(ports, "NODE_PORT", s.port)
    monkeypatch.setattr(placement, "host_of", lambda name: Host("local", "qemu:///system", netns=None))
    ClusterDir("class").create()
    yield s
    s.close()


def _login(port: int, say: str) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c:
        banner = c.recv(100)
        c.sendall(say.encode() + b"\n")
        c.recv(100)  # until the "node" closed
    return banner


def _judged(room, n: int) -> None:
    """Until room.log has n lines that judged a connection (the room reads sshd's lines after it closed)."""
    import time

    for _ in range(250):
        if sum(" refused: " in ln or " logged in " in ln for ln in room.log_lines()) >= n:
            return
        time.sleep(0.02)
    raise AssertionError(room.log_lines())


def test_the_room_relays_to_the_login_node_and_slows_an_address_that_keeps_failing(sshd):
    from lab.providers.forward import NetnsDialer

    slept = []
    dial = NetnsDialer(None)
    room = door.Room("class", "127.0.0.1", dial, 0, "127.0.0.1", journal=sshd.journal, sleep=slept.append)
    log = ClusterDir("class").root / "room.log"
    room.log_lines = lambda: log.read_text().splitlines() if log.exists() else []
    room.start()
    try:
        for i in range(1, 6):
            assert _login(room.port, "bad") == b"SSH-2.0-fake\r\n"
            _judged(room, i)
        assert slept == [1.0, 2.0]  # three failures were free; the 4th and 5th connections waited
        _login(room.port, "ok")
        _judged(room, 6)
        assert slept == [1.0, 2.0, 4.0]
        _login(room.port, "bad")  # the login cleared the count: no wait
        _judged(room, 7)
        assert slept == [1.0, 2.0, 4.0]
    finally:
        room.close()
        dial.close()
    lines = room.log_lines()
    assert lines[0].endswith("127.0.0.1 refused: Failed password for user05 (1 in 10 min)"), lines
    assert any(ln.endswith("127.0.0.1 waits 1 s: 3 failed logins in 10 min") for ln in lines), lines
    assert any(ln.endswith("127.0.0.1 user05 logged in (password)") for ln in lines), lines
    assert lines[-1].endswith("127.0.0.1 refused: Failed password for user05 (1 in 10 min)"), lines


def test_the_keeper_opens_moves_and_closes_the_room_as_the_store_changes(sshd, monkeypatch):
    want = {"class": door.Wanted("127.0.0.2")}
    monkeypatch.setattr(door, "wanted", lambda st, name: want.get(name, door.Wanted(None, "deleted")))

    class St:
        def clusters(self):
            return [type("C", (), {"name": n})() for n in want]

    k = door.Keeper("127.0.0.1", "slurmlab serve", journal_for=lambda name: sshd.journal)
    try:
        k.sync(St())
        room = k.rooms["class"][0]
        assert room.port == B and ports.status("class")["Open"]
        want["class"] = door.Wanted("127.0.0.1")  # the login node was replaced
        k.sync(St())
        assert k.rooms["class"][0] is room and room.address == "127.0.0.1"
        assert _login(B, "ok") == b"SSH-2.0-fake\r\n"
        want["class"] = door.Wanted(None, "no running login node yet")
        k.sync(St())
        assert "class" not in k.rooms and not ports.status("class")["Open"]
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", B), timeout=5)
        want["class"] = door.Wanted("127.0.0.1")
        k.sync(St())
        assert ports.status("class")["Open"]
        del want["class"]  # deleted
        k.sync(St())
        assert not k.rooms
    finally:
        k.close()
    log = (ClusterDir("class").root / "room.log").read_text()
    assert f"open on 127.0.0.1:{B} -> 127.0.0.2:" in log and "the login node is now 127.0.0.1" in log
    assert "closed: no running login node yet" in log and "closed: deleted" in log


def test_a_port_in_use_is_named_and_nothing_is_marked_open(sshd, monkeypatch):
    monkeypatch.setattr(door, "wanted", lambda st, name: door.Wanted("127.0.0.1"))
    assert ports.port_of("class") == B  # the cluster's port since before: something else took it since
    blocker = socket.create_server(("127.0.0.1", B))
    k = door.Keeper("127.0.0.1", "slurmlab room", only="class")
    try:
        k.sync(None)
        assert k.problems["class"].startswith(f"cannot listen on 127.0.0.1:{B}") and not k.rooms
        assert not ports.status("class")["Open"]
    finally:
        k.close()
        blocker.close()


def test_the_node_side_and_the_lab_side_agree_on_the_room_s_port():
    import yaml

    from lab.paths import REPO_ROOT

    defaults = yaml.safe_load((REPO_ROOT / "roles" / "users" / "defaults" / "main.yml").read_text())
    assert defaults["users_room_port"] == ports.NODE_PORT


def test_a_room_where_a_real_cluster_has_students_and_a_running_login_node(home):
    """door.wanted, and describe's Lab.Room (views.room_of): none for a simulated cluster, none without
    accounts, none before the login node runs."""
    from lab import users
    from lab.control import views
    from lab.spec import LabUsers
    from tests.unit.test_jupyter_wiring import _rows, _Store

    rows = _rows({})
    assert door.wanted(_Store(rows), "jh") == door.Wanted(None, "no student accounts")
    assert views.room_of(rows[0]) is None
    ClusterDir("jh").create()
    users.create("jh", LabUsers(Count=2))
    assert door.wanted(_Store(rows), "jh") == door.Wanted("10.0.0.11")
    assert views.room_of(rows[0]) == {"Port": B, "Open": False, "Ssh": views.room_of(rows[0])["Ssh"]}
    assert door.wanted(_Store(_rows({}, login_phase="configuring")), "jh").why == "no running login node yet"
    sim = _rows({}, provider="sim")
    assert door.wanted(_Store(sim), "jh").why.startswith("simulated") and views.room_of(sim[0]) is None
    assert door.wanted(_Store(rows), "other") == door.Wanted(None, "deleted")
