"""Cluster checkpoints on real VMs (issue 14): every domain of a cluster saved at one moment, and put
back with its memory (no boot).

Take: every domain is paused first (one consistent moment for the whole cluster), then each is saved
(`virDomainSaveFlags`: memory and device state into a file; the domain stops), its writable disks (the
VM's overlay over the box, the controller's state disk) are copied, and each is restored from its file
at once, paused, and all are resumed together. The box volume below the overlays is shared, not
copied: a checkpoint of a 4-node cluster is ~1 GB, nearly all of it memory (measured on this machine:
4 domains saved in 9 s, 0.1 s of disk copies, restored in 4 s; 13 s in all).

Restore: every domain of the cluster is destroyed, the disks copied back, each domain defined again
from the checkpoint's XML (a node removed since comes back) and restored from its file, paused; then
all resume together. A domain the checkpoint does not have (a node added since) is removed. The
guests' clocks are then the checkpoint's: the caller sets them (lab/configure/clock.py).

Layout: `<libvirt dir>/checkpoints/<cluster>/<tag>/` (libvirt writes the memory files: the lab's home
may be out of its reach): `meta.json` (domains: XML and disks; `record`: the engine's record; `host`:
where the VMs were), one `<domain>.mem` per domain, `disks/`, and `vagrant/`, the cluster's
`.vagrant/machines` (the domain ids `vagrant` acts on). A cluster on another host keeps its memory
files in that host's pool instead (lab/providers/checkpoint_keep.py, ADR 0035).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from lab import paths
from lab.providers import domains, network, placement
from lab.providers.base import CheckpointError
from lab.providers.checkpoint_keep import Files, Pool
from lab.workspace import ClusterDir

log = logging.getLogger(__name__)

RESERVE = 1 << 30  # bytes kept free on the host's disk beyond what a checkpoint needs


def root(cluster: str) -> Path:
    return paths.libvirt_dir() / "checkpoints" / cluster


def folder(cluster: str, tag: str) -> Path:
    return root(cluster) / tag


def _disks(xml: str) -> list[str]:
    """The domain's writable file disks (the overlay, the state disk); not cdroms, not read-only ones."""
    out = []
    for d in ET.fromstring(xml).findall("devices/disk"):
        src = d.find("source")
        if d.get("device", "disk") == "disk" and src is not None and src.get("file") and d.find("readonly") is None:
            out.append(src.get("file"))
    return out


def _keeper(conn, host, cluster: str, tag: str):
    """Where checkpoint `tag` of the cluster keeps its memory and disks: this machine or its host's pool."""
    return Files(folder(cluster, tag)) if host.local else Pool(conn, host, cluster, tag, folder(cluster, tag))


def needed_bytes(conn, keep, cluster: str) -> int:
    """What a checkpoint of the cluster takes on disk now: each domain's memory and its disks' allocation."""
    total = 0
    for d in domains.of_cluster(conn, cluster):
        total += d.info()[2] * 1024  # memory in use, KiB
        for path in _disks(d.XMLDesc(0)):
            total += keep.disk_bytes(path)
    return total


def check_space(conn, keep, cluster: str) -> None:
    need = needed_bytes(conn, keep, cluster)
    free = keep.free()
    if free < need + RESERVE:
        raise CheckpointError(f"a checkpoint of {cluster} needs {_gib(need)} on {keep.where()} plus {_gib(RESERVE)} "
                              f"kept free; {_gib(free)} is free. Delete old checkpoints (slurmlab checkpoint delete) "
                              "or free space there")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def take(cluster: str, tag: str, record: dict) -> dict:
    """Save every domain of the cluster into a new checkpoint `tag`; the domains run on afterwards.
    `record`: the engine's record of the cluster, kept in meta.json. Returns the meta (with timings).
    On a failure the domains saved so far are restored and resumed, and what was kept removed."""
    import libvirt

    dest = folder(cluster, tag)
    if dest.exists():
        raise CheckpointError(f"cluster {cluster} already has a checkpoint '{tag}'")
    host = placement.host_of(cluster)
    conn = host.connect()
    keep = _keeper(conn, host, cluster, tag)
    t0 = time.monotonic()
    saved: dict[str, str] = {}
    try:
        check_space(conn, keep, cluster)
        doms = domains.of_cluster(conn, cluster)
        if not doms:
            raise CheckpointError(f"cluster {cluster} has no VM to checkpoint")
        (dest / "disks").mkdir(parents=True)
        meta = {"tag": tag, "cluster": cluster, "host": host.name, "created": time.time(), "record": record,
                "domains": {}}
        for d in doms:
            if d.isActive():
                d.suspend()
        t_pause = time.monotonic()
        for d in doms:
            xml = d.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE | libvirt.VIR_DOMAIN_XML_SECURE)
            meta["domains"][d.name()] = {"xml": xml, "disks": _disks(xml), "active": d.isActive()}
            if d.isActive():
                mem = keep.memory(d.name())
                d.saveFlags(mem, None, libvirt.VIR_DOMAIN_SAVE_PAUSED)
                saved[d.name()] = mem
        t_saved = time.monotonic()
        for info in meta["domains"].values():
            for path in info["disks"]:
                keep.keep_disk(path)
        machines = ClusterDir(cluster).root / ".vagrant" / "machines"
        if machines.exists():
            shutil.copytree(machines, dest / "vagrant", symlinks=True)
        t_copied = time.monotonic()
        meta["held_bytes"] = keep.held()
        meta["timings"] = {"pause": round(t_pause - t0, 1), "save": round(t_saved - t_pause, 1),
                           "disks": round(t_copied - t_saved, 1)}
        (dest / "meta.json").write_text(json.dumps(meta))
    except BaseException:
        try:
            _resume_all(conn, cluster, saved)
            keep.discard()
        finally:
            shutil.rmtree(dest, ignore_errors=True)
            conn.close()
        raise
    try:
        _resume_all(conn, cluster, saved)
    finally:
        conn.close()
    meta["timings"]["total"] = round(time.monotonic() - t0, 1)
    (dest / "meta.json").write_text(json.dumps(meta))
    return {"tag": tag, "created": meta["created"], "size": size(cluster, tag), "nodes": sorted(meta["domains"]),
            "host": host.name, "timings": meta["timings"]}


def _resume_all(conn, cluster: str, saved: dict[str, str]) -> None:
    """Restore the saved domains from their files (paused), then resume every paused domain at once."""
    import libvirt

    for name, path in saved.items():
        try:
            if not conn.lookupByName(name).isActive():
                conn.restoreFlags(path, None, libvirt.VIR_DOMAIN_SAVE_PAUSED)
        except libvirt.libvirtError as e:
            log.error("checkpoint: %s could not be restored from %s: %s", name, path, e)
    _resume_paused(conn, cluster)


def _resume_paused(conn, cluster: str) -> None:
    """Every paused domain of the cluster runs again (together: one moment for the whole cluster)."""
    import libvirt

    for d in domains.of_cluster(conn, cluster):
        if d.isActive() and d.info()[0] == libvirt.VIR_DOMAIN_PAUSED:
            d.resume()


def read(cluster: str, tag: str) -> dict:
    meta = folder(cluster, tag) / "meta.json"
    if not meta.exists():
        have = ", ".join(sorted(p.name for p in listing(cluster))) or "none"
        raise CheckpointError(f"cluster {cluster} has no checkpoint '{tag}' (its checkpoints: {have})")
    return json.loads(meta.read_text())


def listing(cluster: str) -> list[Path]:
    r = root(cluster)
    return sorted(p for p in r.iterdir() if (p / "meta.json").exists()) if r.exists() else []


def summaries(cluster: str) -> list[dict]:
    """{tag, created, size, nodes, host} of each checkpoint, oldest first."""
    out = []
    for p in listing(cluster):
        meta = json.loads((p / "meta.json").read_text())
        out.append({"tag": p.name, "created": meta["created"], "size": size(cluster, p.name),
                    "nodes": sorted(meta["domains"]), "host": meta.get("host", "local")})
    return sorted(out, key=lambda x: x["created"])


def size(cluster: str, tag: str) -> int:
    """Bytes the checkpoint holds on disk (sparse files counted as allocated), here and in its host's pool."""
    here = folder(cluster, tag)
    try:
        held = json.loads((here / "meta.json").read_text()).get("held_bytes", 0)
    except (OSError, ValueError):
        held = 0
    return held + sum(f.stat().st_blocks * 512 for f in here.rglob("*") if f.is_file())


def restore(cluster: str, tag: str) -> dict:
    """Put every VM of the cluster back as the checkpoint has it; returns timings. Refused, with nothing
    changed, when the cluster moved to another host since or the memory files are gone."""
    import libvirt

    meta = read(cluster, tag)
    src = folder(cluster, tag)
    host = placement.host_of(cluster)
    if meta.get("host", "local") != host.name:
        raise CheckpointError(f"checkpoint {tag} of {cluster} was taken on host {meta.get('host', 'local')}; the "
                              f"cluster runs on host {host.name} now, and a checkpoint is restored where it was taken")
    conn = host.connect()
    keep = _keeper(conn, host, cluster, tag)
    t0 = time.monotonic()
    try:
        if missing := keep.has_memory([n for n, i in meta["domains"].items() if i.get("active", True)]):
            raise CheckpointError(f"checkpoint {tag} of {cluster} has lost the memory of {', '.join(missing)} "
                                  f"({keep.where()}); delete it: slurmlab checkpoint delete {cluster} {tag}")
        for d in domains.of_cluster(conn, cluster):
            if d.isActive():
                d.destroyFlags(libvirt.VIR_DOMAIN_DESTROY_DEFAULT)
            if d.name() not in meta["domains"]:  # added since: it goes (its disks too)
                paths_ = _disks(d.XMLDesc(0))
                d.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
                for p in paths_:
                    keep.drop_disk(p)
        t_down = time.monotonic()
        for info in meta["domains"].values():
            for path in info["disks"]:
                keep.put_disk(path)
        machines = ClusterDir(cluster).root / ".vagrant" / "machines"
        if (src / "vagrant").exists():
            shutil.rmtree(machines, ignore_errors=True)
            shutil.copytree(src / "vagrant", machines, symlinks=True)
        for n in meta["record"].get("nodes", []):  # the network's fixed addresses (a removed node's went with it)
            if n.get("address") and n.get("mac"):
                network.add_host(cluster, n["mac"], n["name"], n["address"])
        t_disks = time.monotonic()
        for name, info in meta["domains"].items():
            conn.defineXML(info["xml"])
            if info.get("active", True):
                conn.restoreFlags(keep.memory(name), None, libvirt.VIR_DOMAIN_SAVE_PAUSED)
        t_restored = time.monotonic()
        _resume_paused(conn, cluster)
        missed = _set_clocks(conn, cluster)
        _drop_kept(cluster, meta["record"].get("nodes", []))
        return {"record": meta["record"], "clocks_missed": missed, "timings": {
            "down": round(t_down - t0, 1), "disks": round(t_disks - t_down, 1),
            "restore": round(t_restored - t_disks, 1), "total": round(time.monotonic() - t0, 1)}}
    finally:
        conn.close()


def _set_clocks(conn, cluster: str) -> list[str]:
    """Each restored guest's clock set to now through its guest agent (virtio-serial, through libvirt: no
    ssh, on any host); the names whose agent did not set it (the engine then sets every clock over ssh)."""
    import libvirt

    from lab.providers import agent

    missed = []
    for d in domains.of_cluster(conn, cluster):
        if not d.isActive():
            continue
        try:
            agent.set_time(d)
        except (agent.AgentError, libvirt.libvirtError) as e:
            log.info("checkpoint restore: %s's clock not set by its guest agent: %s", d.name(), e)
            missed.append(d.name())
    return missed


def _drop_kept(cluster: str, nodes: list[dict]) -> None:
    """The kept ssh connections to the restored nodes end (lab/providers/kept.py): their TCP state died
    with the guests' (the guests run on from the checkpoint's), and the next `slurmlab ssh` would print
    ssh's "read from master failed" before connecting anew."""
    from lab.providers import kept

    for n in nodes:
        if n.get("address"):
            kept.drop(cluster, n["address"])


def _discard(cluster: str, tag: str) -> None:
    """What checkpoint `tag` keeps outside its folder (a host's pool) goes; a host that does not answer
    keeps it, logged: delete-cluster and `--leftovers` find those volumes later (a cluster's volumes)."""
    import libvirt

    try:
        where = json.loads((folder(cluster, tag) / "meta.json").read_text()).get("host", "local")
    except (OSError, ValueError):
        return
    if where == "local":
        return
    from lab.errors import NotFound
    from lab.host import registry

    try:
        host = registry.get(where)
        conn = host.connect()
    except (libvirt.libvirtError, NotFound) as e:  # a host removed or silent
        log.warning("checkpoint %s of %s: its memory stays on host %s: %s", tag, cluster, where, e)
        return
    try:
        Pool(conn, host, cluster, tag, folder(cluster, tag)).discard()
    except libvirt.libvirtError as e:
        log.warning("checkpoint %s of %s: its memory stays on host %s: %s", tag, cluster, where, e.get_error_message())
    finally:
        conn.close()


def delete(cluster: str, tag: str) -> None:
    read(cluster, tag)
    _discard(cluster, tag)
    shutil.rmtree(folder(cluster, tag))


def delete_all(cluster: str) -> list[str]:
    gone = []
    for p in listing(cluster):
        _discard(cluster, p.name)
        gone.append(f"checkpoint {p.name}")
    shutil.rmtree(root(cluster), ignore_errors=True)
    return gone
