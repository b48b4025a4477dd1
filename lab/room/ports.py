"""A cluster's room port, and who has it open.

The port is given once, the first time anything asks for it, and kept for the cluster's life in
$SLURMLAB_HOME/clusters/NAME/room.json ({"Port": 2201}): the same whether `slurmlab serve` or `slurmlab
room NAME` opens it, so the line written on the room's whiteboard stays true. It is the first port from
$SLURMLAB_ROOM_FIRST_PORT (2201) that no other cluster of this lab home holds and nothing listens on. The process that listens
on it writes room.open ({"Pid", "By", "Address", "Port"}) and removes it when it closes; a file whose
process is gone (killed) counts as closed. Deleting the cluster deletes both (its folder goes).
"""

from __future__ import annotations

import json
import os
import subprocess
import time

from filelock import FileLock

from lab import paths, settings
from lab.osutil import atomic_write, running
from lab.workspace import ClusterDir

NODE_PORT = 2222  # the login node's sshd port for the room: students only (roles/users/files/sshd.sh)
ANY = ("0.0.0.0", "::", "")


SIMULATED = "simulated (no VMs, no sshd)"
NO_ACCOUNTS = "no student accounts"


def no_room(c) -> str | None:
    """Why the cluster (a store row) has no room at all: SIMULATED, NO_ACCOUNTS; None: it has one. A damaged
    accounts file raises lab.users' LabError (with its fix)."""
    from lab import users
    from lab.providers import registry

    if registry.info(c.provider).simulated:
        return SIMULATED
    acc = users.load(c.name)
    return NO_ACCOUNTS if acc is None or not acc.users else None


def _port_file(cluster: str):
    return ClusterDir(cluster).root / "room.json"


def _open_file(cluster: str):
    return ClusterDir(cluster).root / "room.open"


def _read(path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def held_ports(exclude: str = "") -> set[int]:
    """The ports the other clusters of this lab home hold."""
    root = paths.home() / "clusters"
    out = set()
    for d in root.glob("*/room.json") if root.is_dir() else ():
        if d.parent.name != exclude and isinstance(port := _read(d).get("Port"), int):
            out.add(port)
    return out


def _free(port: int) -> bool:
    """Nothing listens on `port` now (another lab home's room, another program): a bind that is undone."""
    import socket

    address = settings.ROOM_ADDRESS.get()
    try:
        with socket.create_server(("" if address in ANY else address, port)):
            return True
    except OSError:
        return False


def port_of(cluster: str) -> int | None:
    """The cluster's room port: the one it holds, or the first free one from ROOM_FIRST_PORT (kept); None
    when the cluster has no folder (being deleted: nothing is made again)."""
    have = _read(_port_file(cluster)).get("Port")
    if isinstance(have, int):
        return have
    if not ClusterDir(cluster).root.is_dir():
        return None
    home = paths.home()
    home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home / "rooms.lock"), mode=0o600):
        have = _read(_port_file(cluster)).get("Port")
        if isinstance(have, int):
            return have
        taken, port = held_ports(exclude=cluster), settings.ROOM_FIRST_PORT.get()
        while port in taken or not _free(port):
            port += 1
        atomic_write(_port_file(cluster), json.dumps({"Port": port}) + "\n", 0o644)
        return port


def mark_open(cluster: str, port: int, address: str, by: str) -> None:
    atomic_write(_open_file(cluster), json.dumps({"Pid": os.getpid(), "By": by, "Address": address,
                                                  "Port": port}) + "\n", 0o644)


def mark_closed(cluster: str) -> None:
    """Remove the open mark if this process wrote it."""
    path = _open_file(cluster)
    if _read(path).get("Pid") == os.getpid():
        path.unlink(missing_ok=True)


def _alive(pid) -> bool:
    return isinstance(pid, int) and pid > 0 and running(pid)


_addresses: tuple[float, list[str]] = (0.0, [])


def machine_addresses() -> list[str]:
    """This machine's global IPv4 addresses (its own namespace; read, never dialled), cached for a minute."""
    global _addresses
    at, found = _addresses
    if time.monotonic() - at < 60 and at:
        return found
    try:
        p = subprocess.run(["ip", "-j", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True,
                           timeout=5)
        found = [a["local"] for i in json.loads(p.stdout or "[]") for a in i.get("addr_info", []) if a.get("local")]
    except (OSError, ValueError, subprocess.TimeoutExpired):
        found = []
    _addresses = (time.monotonic(), found)
    return found


def status(cluster: str) -> dict | None:
    """{"Port", "Open", "By", "Address", "Ssh"} of the cluster's room (the port is given if it had none);
    None when the cluster has no folder."""
    port = port_of(cluster)
    if port is None:
        return None
    mark = _read(_open_file(cluster))
    is_open = _alive(mark.get("Pid")) and mark.get("Port") == port
    address = mark.get("Address") if is_open else None
    where = address if address and address not in ANY else (machine_addresses() or ["LAB-MACHINE"])[0]
    out = {"Port": port, "Open": is_open, "Ssh": f"ssh -p {port} STUDENT@{where}"}
    if is_open:
        out |= {"By": f"{mark.get('By')} (pid {mark.get('Pid')})", "Address": address}
    return out


def describe_line(cluster: str, st: dict) -> str:
    """The one line describe-cluster and `users show` print."""
    if st["Open"]:
        return f"{st['Ssh']}  (open: {st['By']}; students only)"
    return f"{st['Ssh']}  (closed: slurmlab room {cluster}, or slurmlab serve, opens it)"
