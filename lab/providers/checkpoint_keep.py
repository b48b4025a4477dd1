"""Where a checkpoint's memory and disks are kept (lab/providers/checkpoint.py takes and restores; ADR 0035).

- `Files`: the cluster runs on this machine. Each domain's memory file and a copy of each writable
  disk lie in the checkpoint's folder.
- `Pool`: the cluster runs on another host, reached only through libvirt (qemu+ssh). libvirt saves each
  domain's memory there into a file of the host's pool, `<cluster>-ckpt.<tag>.<domain>.mem` (a cluster's
  volume: delete-cluster, a lost host's sweep and `--leftovers` take it), and restores it from there:
  the memory, nearly all of a checkpoint, never crosses the link. The writable disks (a fork's overlay
  of a few MiB over the template volumes, the controller's state disk) come down through libvirt's
  stream into the checkpoint's folder and go back up at a restore: libvirt's own copy of a volume
  (`createXMLFrom`) runs `qemu-img convert`, which flattens an overlay into the whole box.

Both answer the same calls: memory(domain) is the path libvirt saves to and restores from, on the
domain's host.
"""

from __future__ import annotations

import logging
import os
import shutil
from functools import cached_property
from pathlib import Path

from lab.host import pools
from lab.providers import volstream

log = logging.getLogger(__name__)


def copy_sparse(src: str | Path, dst: str | Path) -> None:
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


class Files:
    """A checkpoint of a cluster on this machine: every file in its folder `dest`."""

    def __init__(self, dest: Path) -> None:
        self.dest = dest

    def where(self) -> str:
        return str(self.dest.parent.parent)

    def free(self) -> int:
        base = self.dest.parent.parent
        base.mkdir(parents=True, exist_ok=True)
        return shutil.disk_usage(base).free

    def disk_bytes(self, path: str) -> int:
        return os.stat(path).st_blocks * 512

    def memory(self, domain: str) -> str:
        return str(self.dest / f"{domain}.mem")

    def keep_disk(self, path: str) -> None:
        copy_sparse(path, self.dest / "disks" / Path(path).name)

    def put_disk(self, path: str) -> None:
        copy_sparse(self.dest / "disks" / Path(path).name, path)

    def drop_disk(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)

    def held(self) -> int:
        """Bytes kept outside the folder: none."""
        return 0

    def has_memory(self, domains: list[str]) -> list[str]:
        """The domains whose memory file is missing."""
        return [d for d in domains if not Path(self.memory(d)).is_file()]

    def discard(self) -> list[str]:
        return []


def volume_prefix(cluster: str, tag: str) -> str:
    """The start of the name of every pool volume of checkpoint `tag` (a tag holds no '.')."""
    return f"{cluster}-ckpt.{tag}."


class Pool:
    """A checkpoint of a cluster on another host: memory in the host's pool, disks in the folder `dest`."""

    def __init__(self, conn, host, cluster: str, tag: str, dest: Path) -> None:
        self.conn, self.host, self.cluster, self.tag, self.dest = conn, host, cluster, tag, dest

    def _pool(self):
        return self.conn.storagePoolLookupByName(self.host.pool)

    @cached_property
    def _dir(self) -> str:
        """The pool's folder on the host (asked once: every domain's memory path is in it)."""
        import xml.etree.ElementTree as ET

        return ET.fromstring(self._pool().XMLDesc(0)).findtext("target/path")

    def where(self) -> str:
        return f"host {self.host.name}'s pool {self.host.pool}"

    def free(self) -> int:
        pool = self._pool()
        pools.refresh(pool)
        return pool.info()[3]

    def disk_bytes(self, path: str) -> int:
        return self.conn.storageVolLookupByPath(path).info()[2]

    def memory(self, domain: str) -> str:
        return f"{self._dir}/{volume_prefix(self.cluster, self.tag)}{domain}.mem"

    def keep_disk(self, path: str) -> None:
        vol = self.conn.storageVolLookupByPath(path)
        out = self.dest / "disks" / Path(path).name
        tmp = Path(f"{out}.part")
        with open(tmp, "wb") as f:
            volstream.receive_file(self.conn, vol, f)
        os.replace(tmp, out)

    def put_disk(self, path: str) -> None:
        """The disk at `path` on the host made again from the kept copy (a new volume of that name)."""
        from lab.host.caps import qemu_owner

        src = self.dest / "disks" / Path(path).name
        size = src.stat().st_size
        pool = self._pool()
        pools.refresh(pool)
        # holds nothing: the volume of that name now (the disk as the VM left it) is deleted first
        vol, _ = volstream.kept_or_new(pool, Path(path).name, size, qemu_owner(self.conn.getCapabilities()), 0o600,
                                       lambda v: False)
        with open(src, "rb") as f:
            volstream.send_file(self.conn, vol, 0, size, f)

    def drop_disk(self, path: str) -> None:
        import libvirt

        try:
            self.conn.storageVolLookupByPath(path).delete(0)
        except libvirt.libvirtError:
            pass

    def _mine(self) -> list:
        pool = self._pool()
        pools.refresh(pool)
        return [v for v in pool.listAllVolumes() if v.name().startswith(volume_prefix(self.cluster, self.tag))]

    def held(self) -> int:
        """Bytes the checkpoint's memory takes in the host's pool."""
        return sum(v.info()[2] for v in self._mine())

    def has_memory(self, domains: list[str]) -> list[str]:
        names = {v.name() for v in self._mine()}
        return [d for d in domains if f"{volume_prefix(self.cluster, self.tag)}{d}.mem" not in names]

    def discard(self) -> list[str]:
        """Delete the checkpoint's volumes on the host; their names."""
        gone = []
        for v in self._mine():
            v.delete(0)
            gone.append(v.name())
        return gone
