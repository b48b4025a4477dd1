"""The image release a node's VM was made from, read from its host (issue 47, docs/adr/0026).

On this machine a node's release is its box's available one (the box was just used). On another host
that is a guess: the node is a fork of a template volume uploaded there, or a cold boot over a box
volume vagrant-libvirt uploaded there, maybe of an older image. So the domain's first disk is followed
down its backing chain, from the domain's XML (a running domain's carries the chain) or else each
volume's XML (`backingStore/path`), to the first volume the release registry knows on that host
(lab/box/releases.py `on_host`: the template volumes hosttemplates.ensure recorded), or to a
vagrant-libvirt box volume (`<box>_vagrant_box_image_0_<mtime of box.img>_box.img`): one whose mtime
is the added box's is its available release (recorded then, so it stays known after a rebuild).
When nothing tells, today's guess stays, with a warning.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import PurePosixPath

from lab.box import releases as rel
from lab.box import vagrant as vg
from lab.host.libvirtd import box_volume_prefix
from lab.providers.base import Placement, in_thread

log = logging.getLogger(__name__)

BOX_MARK = "_vagrant_box_image_"
DEPTH = 8  # a node's chain is 2-4 files deep (overlay, role template, template, base)


def _first_disk(dom_xml: str):
    disks = [d for d in ET.fromstring(dom_xml).findall("devices/disk") if d.get("device", "disk") == "disk"]
    return next((d for d in disks if (d.find("target") is not None and d.find("target").get("dev") == "vda")),
                disks[0] if disks else None)


def chain(conn, domain: str) -> Iterator[str]:
    """The volume names of the domain's first disk and its backing files, the disk first; lazily (a
    volume's XML is asked for only where the domain's XML does not carry the chain on)."""
    import libvirt

    disk = _first_disk(conn.lookupByName(domain).XMLDesc(0))
    src = disk.find("source") if disk is not None else None
    path, node = (src.get("file") if src is not None else None), disk  # node: where the domain's XML is
    for _ in range(DEPTH):
        if not path:
            return
        yield PurePosixPath(path).name  # a directory pool's volume is named as its file
        below = node.find("backingStore") if node is not None else None
        src = below.find("source") if below is not None else None
        if src is not None and src.get("file"):
            path, node = src.get("file"), below
            continue
        node = None
        try:
            path = ET.fromstring(conn.storageVolLookupByPath(path).XMLDesc(0)).findtext("backingStore/path")
        except libvirt.libvirtError:
            return


def box_volume(name: str, releases: list) -> rel.Release | None:
    """The release a vagrant-libvirt box volume holds when it is the added box's image (its name carries
    box.img's mtime); None: another box image, or not a box volume."""
    box, mark, rest = name.partition(BOX_MARK)
    box = box.replace("-VAGRANTSLASH-", "/")
    version, _, tail = rest.partition("_")
    stamp = tail.partition("_")[0]
    if not mark or not name.startswith(box_volume_prefix(box)) or version != "0" or not stamp.isdigit():
        return None
    d = vg.box_dir(box, "0")
    try:
        if d is None or int((d / "box.img").stat().st_mtime) != int(stamp):
            return None
    except OSError:
        return None
    return rel.of_box(releases, box)


def on_host(conn, host: str, domain: str, releases: list) -> str | None:
    """The release version domain `domain` of host `host` was made from (None: nothing tells)."""
    known = rel.on_host(host)
    for name in chain(conn, domain):
        if name in known:
            return known[name]
        if BOX_MARK in name:
            r = box_volume(name, releases)
            if r is not None:
                return rel.record_on_host(host, r.box, r.inputs_hash, [name]) or r.version
            return None  # a box volume is the chain's end
    return None


def _read(host, domain: str, releases: list) -> str | None:
    conn = host.connect()
    try:
        return on_host(conn, host.name, domain, releases)
    finally:
        conn.close()


async def of_node(prov, cluster: str, node: str, releases: list, box: str) -> str | None:
    """The release the node's VM was just made from: its box's available one on this machine; on
    another host the one its disk was made from there (one libvirt call chain, in a thread), else that
    guess with a warning."""
    from lab.host import registry

    guess = rel.of_box(releases, box)
    guessed = guess.version if guess else None
    name = prov.host_of(cluster) if isinstance(prov, Placement) else None
    if not name or name == registry.LOCAL:
        return guessed
    try:
        found = await in_thread(cluster, _read, registry.get(name), node, releases)
        why = "its disk's backing chain reaches no volume the release registry knows there"
    except Exception as e:  # noqa: BLE001 - the host, the domain or a volume cannot be read: the guess then
        found, why = None, str(e) or type(e).__name__
    if found is None:
        log.warning("%s: its image release on host %s is not known (%s): recorded as box %s's current one, %s",
                    node, name, why, box, guessed)
        return guessed
    return found
