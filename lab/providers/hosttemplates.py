"""Templates on a host that is not this machine (issue 47, docs/adr/0026): a fork there, as a fork here.

A template (and a role template) is built on this machine (lab/providers/templates.py, roletemplates.py)
and its files become volumes of the host's pool, uploaded once through libvirt's stream API:

    slurmlab_tpl_<folder>_<file>   base.img, disk.qcow2, mem.save (and a controller's state.qcow2)

`<folder>` is the template's key: a rebuilt template has new names, and the volumes of templates this
machine no longer has are removed from the host at the next upload (`prune`). A qcow2 file whose backing
file is another file of the chain goes up rebased onto that volume's path on the host (`qemu-img rebase
-u` on a local copy of its few MiB), so the host's qemu reads only its own files. Each file's first
4 KiB go up last: a volume whose first 4 KiB differ from the file's was cut off (a killed engine) or is
another file, and is uploaded again.

A fork there (`PoolStore`, used by lab/providers/fork.py) makes volumes only: its overlay
`<node>.img` (libvirt's own qemu-img, backed by the host's disk volume), a copy of the save image made
by libvirt on the host (`<node>-fork.save`) whose header is then rewritten in place with the fork's XML
(one small upload at offset 0: the header keeps its length), and its state disk. Nothing runs on the
host beyond libvirt, and its volumes go with the node like any other (lab.providers.domains.purge).

The release registry (lab/box/releases.py) records which host holds which template volumes under the
release of the template's box (`ensure`), and forgets them when they are removed (`prune`,
`remove_all`): lab/providers/imagerelease.py reads a remote node's release from them.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from lab.box import releases
from lab.host import pools
from lab.providers import savefile, templates, volstream

log = logging.getLogger(__name__)

PREFIX = "slurmlab_tpl_"  # no cluster name holds "_" (HyperPod's ClusterName pattern): never a cluster's volume
HEAD = 4096  # a file's first bytes, sent last: a volume without them was cut off
_locks: dict[tuple[str, str], threading.Lock] = {}
_locks_guard = threading.Lock()


def volume_name(path: Path) -> str:
    """The host volume of one template file: its folder (the template's key) and its name."""
    return f"{PREFIX}{path.parent.name}_{path.name}"


def _lock(host: str, volume: str) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault((host, volume), threading.Lock())


def chain(disk: Path) -> list[Path]:
    """`disk` and its backing files, the disk first (qemu-img's --backing-chain)."""
    r = subprocess.run(["qemu-img", "info", "-U", "--backing-chain", "--output", "json", str(disk)],
                       capture_output=True, text=True)
    if r.returncode:
        raise templates.TemplateError(f"qemu-img info {disk}: {r.stderr.strip()[-300:]}")
    return [Path(i["filename"]) for i in json.loads(r.stdout)]


@dataclass(frozen=True)
class OnHost:
    """A template's files as the host's paths."""
    disk: str
    memory: str
    state: str | None = None  # a controller role template's state disk


def _upload(conn, pool, name: str, src: Path, uid: int, gid: int, sent: list[str]) -> str:
    """`src` as the volume `name` (sent again when cut off or another file's: then its name goes to
    `sent`); its path on the host."""
    size = src.stat().st_size
    with open(src, "rb") as f:
        head = f.read(HEAD)
    # (not its size: libvirt's refresh reports a qcow2 file's virtual size as the volume's capacity)
    vol, new = volstream.kept_or_new(pool, name, size, (uid, gid), 0o644,
                                     lambda v: volstream.read(conn, v, len(head)) == head)
    if not new:
        return vol.path()
    with open(src, "rb") as f:
        f.seek(len(head))
        volstream.send_file(conn, vol, len(head), size - len(head), f)  # the rest first,
        volstream.send(conn, vol, 0, head)  # then the first bytes: a cut-off upload has none
    sent.append(name)
    return vol.path()


def _rebased(qcow2: Path, backing: str, tmp: Path) -> Path:
    """A copy of the overlay `qcow2` that names `backing` (the host's path) as its backing file."""
    out = tmp / qcow2.name
    shutil.copyfile(qcow2, out)
    r = subprocess.run(["qemu-img", "rebase", "-u", "-f", "qcow2", "-F", "qcow2", "-b", backing, str(out)],
                       capture_output=True, text=True)
    if r.returncode:
        raise templates.TemplateError(f"qemu-img rebase {qcow2}: {r.stderr.strip()[-300:]}")
    return out


def ensure(host, conn, tpl: templates.Template) -> OnHost:
    """The template's files on `host` (uploaded when missing or cut off; then the volumes of templates
    this machine no longer has are removed there). Raises TemplateError."""
    import libvirt

    from lab.host.caps import qemu_owner
    from lab.providers.roletemplates import RoleTemplate

    sent: list[str] = []
    names: list[str] = []  # every volume of the template (kept or sent)
    try:
        uid, gid = qemu_owner(conn.getCapabilities())
        pool = conn.storagePoolLookupByName(host.pool)
        pools.refresh(pool)

        def up(src: Path, local: Path | None = None) -> str:
            name = volume_name(local or src)
            names.append(name)
            with _lock(host.name, name):  # two templates share their plain template's files: one upload
                return _upload(conn, pool, name, src, uid, gid, sent)

        files = chain(tpl.disk)[::-1]  # base first: each file's backing is up before it
        with tempfile.TemporaryDirectory(prefix="slurmlab-hosttpl-") as d:
            on_host: dict[Path, str] = {}
            for i, f in enumerate(files):
                on_host[f] = up(f) if i == 0 else up(_rebased(f, on_host[files[i - 1]], Path(d)), f)
        memory = up(tpl.memory)
        state_path = up(tpl.state) if isinstance(tpl, RoleTemplate) and tpl.state.is_file() else None
        if sent:
            log.info("template %s uploaded to host %s: %s", tpl.key, host.name, ", ".join(sent))
            if gone := prune(conn, host.pool, local_keys(), host=host.name):
                log.info("host %s: removed the volumes of templates this machine no longer has: %s", host.name, ", ".join(gone))
        _record(host.name, tpl, names)
        return OnHost(on_host[files[-1]], memory, state_path)
    except libvirt.libvirtError as e:
        raise templates.TemplateError(f"template {tpl.key} on host {host.name}: {e.get_error_message()}") from None
    except OSError as e:
        raise templates.TemplateError(f"template {tpl.key} on host {host.name}: {e}") from None


def _record(host: str, tpl: templates.Template, names: list[str]) -> None:
    """The release of the template's box: host `host` holds it as `names` (lab/box/releases.py). Never
    fails a fork: a release not recorded is only a node's release read as its box's current one."""
    try:
        meta = tpl.meta
        marker = templates.box_marker(meta["box"])
        # a template built before its meta named the box's inputs: ensure is asked for current templates
        # only, so its box as added now is what it was built from (the key hashes the box's slurmlab.json)
        inputs = meta.get("box_inputs_hash") or marker.get("inputs_hash")
        if not inputs or releases.record_on_host(host, meta["box"], inputs, names, marker) is None:
            log.warning("template %s on host %s: the release of its box %s is not known", tpl.key, host, meta["box"])
    except (OSError, ValueError, KeyError, templates.TemplateError) as e:
        log.warning("template %s on host %s: its release is not recorded: %s", tpl.key, host, e)


def listing(conn, pool_name: str) -> list[dict]:
    """The template volumes of a host's pool: [{"volume", "template", "bytes"}]."""
    pool = conn.storagePoolLookupByName(pool_name)
    pools.refresh(pool)
    out = []
    for v in pool.listAllVolumes():
        if v.name().startswith(PREFIX):
            key, _, _file = v.name()[len(PREFIX):].rpartition("_")
            out.append({"volume": v.name(), "template": key, "bytes": v.info()[2]})
    return sorted(out, key=lambda x: x["volume"])


def prune(conn, pool_name: str, keep: set[str], host: str | None = None) -> list[str]:
    """Remove the host's template volumes of folders not in `keep` (templates this machine no longer has);
    the release registry forgets that host `host` holds them."""
    from lab.providers.domains import _delete_volumes

    def stale(vol) -> bool:
        name = vol.name()
        return name.startswith(PREFIX) and name[len(PREFIX):].rpartition("_")[0] not in keep

    gone = _delete_volumes(conn, pool_name, stale)
    if host is not None and gone:
        releases.forget_on_host(host, gone)
    return gone


def remove_all(host) -> list[str]:
    """What a host that leaves the lab keeps of it: none of its template volumes (for humans: what went,
    or why they stay). The release registry forgets the host either way."""
    import libvirt

    releases.forget_on_host(host.name)
    try:
        conn = host.connect()
    except libvirt.libvirtError as e:
        return [f"the template volumes ({PREFIX}*) stay on host {host.name}: {e.get_error_message()}"]
    try:
        return [f"volume {v} on host {host.name}" for v in prune(conn, host.pool, set(), host=host.name)]
    except libvirt.libvirtError as e:
        return [f"the template volumes ({PREFIX}*) stay on host {host.name}: {e.get_error_message()}"]
    finally:
        conn.close()


def local_keys() -> set[str]:
    """The folders of the templates this machine has (plain and role templates)."""
    root = templates.root()
    keys = {p.name for p in root.iterdir() if p.is_dir()} if root.is_dir() else set()
    roles = root / "roles"
    return keys | ({p.name for p in roles.iterdir() if p.is_dir()} if roles.is_dir() else set())


# ------------------------------------------------------------------------------------ a fork's volumes
class PoolStore:
    """What a fork makes on a host that is not this machine: volumes of its pool (fork.fork's `store`)."""

    def __init__(self, conn, pool_name: str, on_host: OnHost, template: templates.Template) -> None:
        """`template`: the local template whose files `on_host` are (the same bytes: ensure)."""
        self.conn, self.pool_name, self.on_host, self.template = conn, pool_name, on_host, template

    def _pool(self):
        return self.conn.storagePoolLookupByName(self.pool_name)

    def overlay(self, name: str) -> str:
        """`<name>.img` over the template's disk; its path on the host."""
        self.drop(f"{name}.img")
        virtual = self.conn.storageVolLookupByPath(self.on_host.disk).info()[1]
        vol = self._pool().createXML(
            f"<volume><name>{name}.img</name><capacity unit='bytes'>{virtual}</capacity>"
            f"<target><format type='qcow2'/></target><backingStore><path>{self.on_host.disk}</path>"
            f"<format type='qcow2'/></backingStore></volume>", 0)
        return vol.path()

    def image(self, name: str, xml: str) -> str:
        """A copy of the template's save image with `xml` in its header, on the host; its path."""
        self.drop(f"{name}-fork.save")
        src = self.conn.storageVolLookupByPath(self.on_host.memory)
        vol = self._pool().createXMLFrom(f"<volume><name>{name}-fork.save</name><capacity unit='bytes'>"
                                         f"{src.info()[1]}</capacity><target><format type='raw'/></target></volume>", src, 0)
        # the header read here: the host's copy holds the same bytes (ensure), no download needed
        volstream.send(self.conn, vol, 0, savefile.with_xml(savefile.head(self.template.memory), xml))
        return vol.path()

    def state_disk(self, name: str, size: str) -> str:
        """The cluster's state disk `name` on the host: kept if there, else the role template's copy or
        an empty one of `size`; its path."""
        import libvirt

        pool = self._pool()
        try:
            return pool.storageVolLookupByName(name).path()
        except libvirt.libvirtError:
            pass
        xml = (f"<volume><name>{name}</name><capacity unit='bytes'>{_bytes(size)}</capacity>"
               f"<target><format type='qcow2'/></target></volume>")
        if self.on_host.state:
            return pool.createXMLFrom(xml, self.conn.storageVolLookupByPath(self.on_host.state), 0).path()
        return pool.createXML(xml, 0).path()

    def drop_image(self, name: str) -> None:
        self.drop(f"{name}-fork.save")

    def drop_overlay(self, name: str) -> None:
        self.drop(f"{name}.img")

    def drop(self, name: str) -> None:
        import libvirt

        try:
            self._pool().storageVolLookupByName(name).delete(0)
        except libvirt.libvirtError:
            pass


def _bytes(size: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    s = size.strip().upper().rstrip("B").rstrip("I")
    return int(s[:-1]) * units[s[-1]] if s[-1] in units else int(s)
