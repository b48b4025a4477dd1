"""The build VMs' addresses on the templates' network (below its DHCP range, .200-.250): one per build,
held by a file lock while it runs (builds of several roles and shapes run at once, from several engines).

The address's last build VM is named in a file beside its lock. A builder that dies without ending its VM
(a SIGKILLed engine runs no atexit) leaves it running at that address, and the next build given the
address would share it with that VM (its ssh then answers "Connection reset by peer"): whoever takes a
free address ends the VM named there first, and an engine that starts ends them all (`end_left`)."""

from __future__ import annotations

import logging
from pathlib import Path

from lab.providers.templates import TemplateError

log = logging.getLogger(__name__)

ADDRESS_HOSTS = range(20, 200)


def take(folder: Path, conn=None, name: str = ""):
    """(address, lock) for the build VM `name`: the first address no other build holds, after the VM a dead
    build left there is ended (`conn`: libvirt)."""
    import ipaddress

    from filelock import FileLock, Timeout

    from lab.providers import templates

    net = ipaddress.ip_network(templates.NET_SUBNET)
    for i in ADDRESS_HOSTS:
        lock = FileLock(str(folder / f"address-{i}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        _end_left(folder, conn, i)
        if name:
            _holder(folder, i).write_text(f"{name}\n")
        return str(net.network_address + i), lock
    raise TemplateError(f"every build address of {templates.NET_SUBNET} is taken")


def _holder(folder: Path, i: int) -> Path:
    return folder / f"address-{i}.domain"


def _end_left(folder: Path, conn, i: int) -> str | None:
    """The build VM named for address `i`, whose lock the caller holds (so no build runs it): ended."""
    name = _holder(folder, i).read_text().strip() if _holder(folder, i).exists() else ""
    _holder(folder, i).unlink(missing_ok=True)
    if not name or conn is None:
        return None
    import libvirt

    from lab.providers.domains import end_named

    try:
        conn.lookupByName(name)
    except libvirt.libvirtError:
        return None
    log.warning("ended %s: its build had died (its engine was killed) and left it running", name)
    end_named(conn, name)
    return name


def end_left(folder: Path) -> list[str]:
    """Every build VM whose builder died (the engine calls this when it starts): the ones it ended."""
    from filelock import FileLock, Timeout

    held = sorted(folder.glob("address-*.domain")) if folder.is_dir() else []
    if not held:
        return []
    from lab.host import libvirtd

    conn = libvirtd.connect()
    ended = []
    try:
        for h in held:
            i = int(h.name.split("-")[1].split(".")[0])
            lock = FileLock(str(folder / f"address-{i}.lock"))
            try:
                lock.acquire(timeout=0)
            except Timeout:
                continue  # a build runs there
            try:
                if (name := _end_left(folder, conn, i)) is not None:
                    ended.append(name)
            finally:
                lock.release()
    finally:
        conn.close()
    return ended


def give_back(folder: Path, address: str, lock) -> None:
    """The build at `address` is over (its VM ended): the address is free, with no VM named for it."""
    _holder(folder, int(address.rsplit(".", 1)[1])).unlink(missing_ok=True)
    lock.release()
