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
may be out of its reach): `meta.json` (domains: XML and disks; `record`: the engine's record), one
`<domain>.mem` per domain, `disks/`, and `vagrant/`, the cluster's `.vagrant/machines` (the domain
ids `vagrant` acts on).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from lab import paths
from lab.host import libvirtd
from lab.providers import domains, network
from lab.providers.base import CheckpointError
from lab.workspace import ClusterDir

log = logging.getLogger(__name__)

RESERVE = 1 << 30  # bytes kept free on the host's disk beyond what a checkpoint needs


def local_only(cluster: str) -> None:
    """Checkpoints are files of this machine: a cluster on another host has none."""
    from lab.providers import placement

    host = placement.host_of(cluster)
    if not host.local:
        raise CheckpointError(f"cluster {cluster} runs on host {host.name}: checkpoints are taken and restored on the "
                              "local host only (they are files of this machine)")


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


def needed_bytes(cluster: str) -> int:
    """What a checkpoint of the cluster takes on disk now: each domain's memory and its disks' allocation."""
    conn = libvirtd.connect()
    try:
        total = 0
        for d in domains.of_cluster(conn, cluster):
            total += d.info()[2] * 1024  # memory in use, KiB
            for path in _disks(d.XMLDesc(0)):
                total += os.stat(path).st_blocks * 512
        return total
    finally:
        conn.close()


def check_space(cluster: str) -> None:
    need = needed_bytes(cluster)
    base = paths.libvirt_dir()
    base.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(base).free
    if free < need + RESERVE:
        raise CheckpointError(f"a checkpoint of {cluster} needs {_gib(need)} on {base} plus {_gib(RESERVE)} kept "
                              f"free; {_gib(free)} is free. Delete old checkpoints (slurmlab checkpoint delete) "
                              "or free space there")


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def take(cluster: str, tag: str, record: dict) -> dict:
    """Save every domain of the cluster into a new checkpoint `tag`; the domains run on afterwards.
    `record`: the engine's record of the cluster, kept in meta.json. Returns the meta (with timings).
    On a failure the domains saved so far are restored and resumed, and the folder removed."""
    import libvirt

    dest = folder(cluster, tag)
    if dest.exists():
        raise CheckpointError(f"cluster {cluster} already has a checkpoint '{tag}'")
    check_space(cluster)
    conn = libvirtd.connect()
    t0 = time.monotonic()
    saved: dict[str, str] = {}
    doms = domains.of_cluster(conn, cluster)
    try:
        if not doms:
            raise CheckpointError(f"cluster {cluster} has no VM to checkpoint")
        (dest / "disks").mkdir(parents=True)
        meta = {"tag": tag, "cluster": cluster, "created": time.time(), "record": record, "domains": {}}
        for d in doms:
            if d.isActive():
                d.suspend()
        t_pause = time.monotonic()
        for d in doms:
            xml = d.XMLDesc(libvirt.VIR_DOMAIN_XML_INACTIVE | libvirt.VIR_DOMAIN_XML_SECURE)
            meta["domains"][d.name()] = {"xml": xml, "disks": _disks(xml), "active": d.isActive()}
            if d.isActive():
                d.saveFlags(str(dest / f"{d.name()}.mem"), None, libvirt.VIR_DOMAIN_SAVE_PAUSED)
                saved[d.name()] = str(dest / f"{d.name()}.mem")
        t_saved = time.monotonic()
        for info in meta["domains"].values():
            for path in info["disks"]:
                _copy(path, dest / "disks" / Path(path).name)
        machines = ClusterDir(cluster).root / ".vagrant" / "machines"
        if machines.exists():
            shutil.copytree(machines, dest / "vagrant", symlinks=True)
        t_copied = time.monotonic()
        meta["timings"] = {"pause": round(t_pause - t0, 1), "save": round(t_saved - t_pause, 1),
                           "disks": round(t_copied - t_saved, 1)}
        (dest / "meta.json").write_text(json.dumps(meta))
    except BaseException:
        _resume_all(conn, cluster, saved)
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
            "timings": meta["timings"]}


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


def _copy(src: str | Path, dst: str | Path) -> None:
    """A sparse copy that keeps the file's owner and mode (qemu runs as another user)."""
    tmp = Path(f"{dst}.part")
    with open(src, "rb") as fi, open(tmp, "wb") as fo:
        while True:
            block = fi.read(1 << 20)
            if not block:
                break
            if block.count(0) == len(block):
                fo.seek(len(block), os.SEEK_CUR)
            else:
                fo.write(block)
        fo.truncate()
    st = os.stat(src)
    os.chmod(tmp, st.st_mode & 0o7777)
    os.chown(tmp, st.st_uid, st.st_gid)
    os.replace(tmp, dst)


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
    """{tag, created, size, nodes} of each checkpoint, oldest first."""
    out = []
    for p in listing(cluster):
        meta = json.loads((p / "meta.json").read_text())
        out.append({"tag": p.name, "created": meta["created"], "size": size(cluster, p.name),
                    "nodes": sorted(meta["domains"])})
    return sorted(out, key=lambda x: x["created"])


def size(cluster: str, tag: str) -> int:
    """Bytes the checkpoint holds on disk (sparse files counted as allocated)."""
    return sum(f.stat().st_blocks * 512 for f in folder(cluster, tag).rglob("*") if f.is_file())


def restore(cluster: str, tag: str) -> dict:
    """Put every VM of the cluster back as the checkpoint has it; returns timings."""
    import libvirt

    meta = read(cluster, tag)
    src = folder(cluster, tag)
    conn = libvirtd.connect()
    t0 = time.monotonic()
    try:
        for d in domains.of_cluster(conn, cluster):
            if d.isActive():
                d.destroyFlags(libvirt.VIR_DOMAIN_DESTROY_DEFAULT)
            if d.name() not in meta["domains"]:  # added since: it goes (its disks too)
                paths_ = _disks(d.XMLDesc(0))
                d.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)
                for p in paths_:
                    Path(p).unlink(missing_ok=True)
        t_down = time.monotonic()
        for info in meta["domains"].values():
            for path in info["disks"]:
                _copy(src / "disks" / Path(path).name, path)
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
                conn.restoreFlags(str(src / f"{name}.mem"), None, libvirt.VIR_DOMAIN_SAVE_PAUSED)
        t_restored = time.monotonic()
        _resume_paused(conn, cluster)
        return {"record": meta["record"], "timings": {
            "down": round(t_down - t0, 1), "disks": round(t_disks - t_down, 1),
            "restore": round(t_restored - t_disks, 1), "total": round(time.monotonic() - t0, 1)}}
    finally:
        conn.close()


def delete(cluster: str, tag: str) -> None:
    read(cluster, tag)
    shutil.rmtree(folder(cluster, tag))


def delete_all(cluster: str) -> list[str]:
    gone = [f"checkpoint {p.name}" for p in listing(cluster)]
    shutil.rmtree(root(cluster), ignore_errors=True)
    return gone
