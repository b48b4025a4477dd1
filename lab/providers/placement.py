"""Which libvirt host a cluster lives on: chosen once, when its folder is first written, on the host
with the most room (free memory first, then free cores); remembered in the cluster's folder (`host`).

A cluster stays on one host: its VM network (bridge, dnsmasq) is that host's, so its machines
could not reach a machine elsewhere. Room on a host = what libvirt reports free there, less the
reserve the host keeps for itself, capped by the lab's limit for it (`slurmlab host limit`) less
the memory of the lab's domains already there and what the clusters placed there claim and have not
started yet (the second line of their `host` file: a room of students creating at once must not all
land on the host that looked emptiest before any of them booted). A host's free cores are its own
(libvirt's node info) less the vCPUs of its running domains: with no CPU limit for the lab there, they
still decide between hosts with as much memory free. The cluster's boot and fork slots then come
from that host's cores and memory too (lab/engine/slots.py).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass

from lab.errors import NotFound
from lab.host import registry
from lab.host.registry import HOST_RESERVE_MIB, Host, available_mib
from lab.providers.base import cluster_of
from lab.workspace import ClusterDir

log = logging.getLogger(__name__)
_placing = threading.Lock()  # one choice at a time: each sees the claims of the ones before


@dataclass
class Room:
    host: str
    memory_mib: int  # free for the lab's VMs
    cpus: int | None  # vCPUs the lab may still start (None: no limit)
    reachable: bool = True
    why: str = ""
    free_cpus: int | None = None  # the host's cores less the vCPUs of its running domains (None: not known)


def choose(memory_mib: int, cpus: int, rooms: Sequence[Room]) -> str | None:
    """The host for a cluster needing `memory_mib` and `cpus`: among the reachable hosts with room
    for all of it (a room's `cpus` None: no CPU limit), the one with the most free memory, then the
    most cores (`_cores`), then the first listed; None when no host has room. Pure: tested on tables."""
    fits = [r for r in rooms if r.reachable and r.memory_mib >= memory_mib and (r.cpus is None or r.cpus >= cpus)]
    if not fits:
        return None
    order = {r.host: i for i, r in enumerate(rooms)}
    return max(fits, key=lambda r: (r.memory_mib, _cores(r), -order[r.host])).host


def _cores(r: Room) -> int:
    """The cores a host has for one more cluster: the fewer of its limit's vCPUs left and its free
    cores, whichever are known (neither: as many as any)."""
    known = [n for n in (r.cpus, r.free_cpus) if n is not None]
    return min(known) if known else 1 << 20


def room(host: Host, cluster: str | None = None) -> Room:
    """What the lab may still start on `host` (asks its libvirtd); for `cluster`, its own claim left out
    (what it claimed is what its nodes take when they start)."""
    import libvirt

    try:
        conn = host.connect()
    except libvirt.libvirtError as e:
        return Room(host.name, 0, 0, reachable=False, why=e.get_error_message())
    try:
        free = available_mib(conn) - HOST_RESERVE_MIB
        cores = int(conn.getInfo()[2])  # [model, memory MiB, cpus, ...]
        used_mib = used_cpus = 0
        started: dict[str | None, int] = {}  # cluster -> MiB of its running domains
        claims = {c: mib for c, mib in _claims(host.name).items() if c != cluster}
        for dom in conn.listAllDomains():
            if dom.isActive():
                _, _, mem_kib, vcpus, _ = dom.info()
                used_mib += mem_kib // 1024
                used_cpus += vcpus
                if claims:
                    c = cluster_of(dom)
                    started[c] = started.get(c, 0) + mem_kib // 1024
        pending = sum(max(0, mib - started.get(c, 0)) for c, mib in claims.items())
        free -= pending
        mem = free if host.memory_mib is None else min(free, host.memory_mib - used_mib - pending)
        cpus = None if host.cpus is None else host.cpus - used_cpus
        return Room(host.name, max(mem, 0), cpus, free_cpus=cores - used_cpus)
    except libvirt.libvirtError as e:
        return Room(host.name, 0, 0, reachable=False, why=e.get_error_message())
    finally:
        conn.close()


def _file(cluster: str):
    return ClusterDir(cluster).root / "host"


def placed(cluster: str) -> str | None:
    try:
        return (_file(cluster).read_text().split() or [None])[0]
    except OSError:
        return None


def _record(cluster: str, host: str, memory_mib: int) -> None:
    from lab.osutil import atomic_write

    atomic_write(_file(cluster), f"{host}\n{memory_mib}\n")


def _claims(host: str) -> dict[str, int]:
    """MiB each cluster placed on `host` was placed for (its `host` file's second line)."""
    from lab import paths

    out = {}
    root = paths.home() / "clusters"
    for f in root.glob("*/host") if root.exists() else []:
        try:
            words = f.read_text().split()
        except OSError:
            continue
        if len(words) == 2 and words[0] == host and words[1].isdigit():
            out[f.parent.name] = int(words[1])
    return out


def host_of(cluster: str) -> Host:
    """The host the cluster was placed on (the local host for a cluster made before hosts, or not
    placed yet)."""
    name = placed(cluster)
    if name is None:
        return registry.get(registry.LOCAL)
    try:
        return registry.get(name)
    except NotFound:  # a host removed from the list: its name still tells where (libvirt cannot open it)
        return Host(name, f"unknown-host:{name}")


def place(cluster: str, memory_mib: int, cpus: int) -> Host:
    """The cluster's host: the recorded one, else the one `choose` picks (recorded now). With no
    host that has room, the one with the most free memory: its nodes then wait for room as
    capacity shortages do (InsufficientCapacity, retried)."""
    with _placing:
        if placed(cluster) is not None:
            host = host_of(cluster)
            if _claims(host.name).get(cluster) != memory_mib:  # the cluster grew or shrank: its claim follows
                _record(cluster, host.name, memory_mib)
            return host
        chosen = _choose_host(cluster, memory_mib, cpus)
        _record(cluster, chosen.name, memory_mib)
        return chosen


def _choose_host(cluster: str, memory_mib: int, cpus: int) -> Host:
    hosts = registry.all_hosts()
    if len(hosts) == 1:
        chosen = hosts[0]
    else:
        rooms = [room(h) for h in hosts]
        pick = choose(memory_mib, cpus, rooms)
        if pick is None:
            reachable = [r for r in rooms if r.reachable] or rooms
            pick = max(reachable, key=lambda r: r.memory_mib).host
            log.warning("no host has %d MiB free for cluster %s; placed on %s to wait for room", memory_mib, cluster, pick)
        chosen = next(h for h in hosts if h.name == pick)
    return chosen


def rehome(cluster: str, memory_mib: int, cpus: int) -> Host | None:
    """The cluster's host is lost: the other reachable host with room for all of it (recorded now,
    the old one noted in `abandoned` for its VMs to be removed when it answers), or None."""
    from lab.osutil import atomic_write

    old = placed(cluster) or registry.LOCAL
    others = [h for h in registry.all_hosts() if h.name != old]
    pick = choose(memory_mib, cpus, [room(h) for h in others])
    if pick is None:
        return None
    left = abandoned(cluster)
    atomic_write(_file(cluster).with_name("abandoned"), "".join(f"{h}\n" for h in sorted({*left, old})))
    _record(cluster, pick, memory_mib)
    return next(h for h in others if h.name == pick)


def abandoned(cluster: str) -> list[str]:
    """Hosts the cluster left behind when they were lost: its VMs there still wait to be removed."""
    try:
        return [x for x in _file(cluster).with_name("abandoned").read_text().split() if x]
    except OSError:
        return []


def forget_abandoned(cluster: str, host: str) -> None:
    from lab.osutil import atomic_write

    left = [h for h in abandoned(cluster) if h != host]
    f = _file(cluster).with_name("abandoned")
    if left:
        atomic_write(f, "".join(f"{h}\n" for h in left))
    else:
        f.unlink(missing_ok=True)


def clusters_on(name: str) -> list[str]:
    """Clusters placed on host `name` (by their folders)."""
    from lab import paths

    root = paths.home() / "clusters"
    out = []
    for d in sorted(root.iterdir()) if root.exists() else []:
        f = d / "host"
        hname = (f.read_text().split() or [registry.LOCAL])[0] if f.exists() else registry.LOCAL
        if d.is_dir() and hname == name and (d / "Vagrantfile").exists():
            out.append(d.name)
    return out
