"""Preflight of a box build: root, the tools (named by Debian package), the MBR boot code and
~3 GiB free in the cache, all checked before anything is touched."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from lab.errors import HostError

GIB = 1024**3
SPACE_NEEDED = 3 * GIB
MBR_BIN = Path("/usr/lib/EXTLINUX/mbr.bin")

# tool -> Debian package that provides it
BUILD_TOOLS: dict[str, str] = {
    "mmdebstrap": "mmdebstrap",
    "dpkg-deb": "dpkg",
    "sfdisk": "fdisk",
    "losetup": "mount",
    "mount": "mount",
    "unshare": "util-linux",
    "mkfs.ext4": "e2fsprogs",
    "e2fsck": "e2fsprogs",
    "extlinux": "extlinux",
    "chroot": "coreutils",
    "qemu-img": "qemu-utils",
    "tar": "tar",
    "vagrant": "vagrant",
}
ADD_TOOLS = {"vagrant": "vagrant"}


def check_tools(tools: dict[str, str]) -> None:
    path = os.environ.get("PATH", os.defpath) + ":/usr/sbin:/sbin"
    missing = sorted({pkg for tool, pkg in tools.items() if shutil.which(tool, path=path) is None})
    if missing:
        names = ", ".join(t for t, p in tools.items() if p in missing)
        raise HostError(
            f"missing tools for the box build: {names}",
            f"apt-get install {' '.join(missing)}",
        )


def is_root() -> bool:
    return os.geteuid() == 0


def check_build_host(space_dir: Path) -> None:
    """Root, the tools (by Debian package), and ~3 GiB free in the cache: before touching anything."""
    if not is_root():
        raise HostError(
            "building the box needs root (loop devices, mount, chroot)",
            "run `sudo slurmlab box build` (or use a box that is already built)",
        )
    check_tools(BUILD_TOOLS)
    if not MBR_BIN.is_file():
        raise HostError(f"{MBR_BIN} not found (the MBR boot code)", "apt-get install extlinux")
    probe = space_dir
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if free < SPACE_NEEDED:
        raise HostError(
            f"the box build needs {SPACE_NEEDED / GIB:.1f} GiB free in {space_dir}, "
            f"only {free / GIB:.1f} GiB available",
            "free some space there, or point SLURMLAB_CACHE at a filesystem with more room",
        )
