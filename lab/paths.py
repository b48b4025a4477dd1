"""Where slurmlab keeps its state, its cache and the files libvirt must read."""

from __future__ import annotations

from pathlib import Path

import platformdirs

from lab import settings

REPO_ROOT = Path(__file__).resolve().parent.parent
NETNS_DEFAULT = settings.NETNS.default


def home() -> Path:
    """State: clusters, keys, Vagrant projects. `$SLURMLAB_HOME` or the platform's data dir."""
    return settings.HOME.get() or Path(platformdirs.user_data_dir("slurmlab"))


def cache() -> Path:
    """Rebuildable things (the box, mmdebstrap output). `$SLURMLAB_CACHE` or the platform's cache dir."""
    return settings.CACHE.get() or Path(platformdirs.user_cache_dir("slurmlab"))


def libvirt_dir() -> Path:
    """Files libvirt's qemu processes must reach (they may run as libvirt-qemu, not as us)."""
    return settings.LIBVIRT_DIR.get()


def pool_dir() -> Path:
    """The folder of the lab's libvirt storage pool (box volumes, VM disks). `$SLURMLAB_POOL_DIR`
    (with `$SLURMLAB_POOL` naming the pool) puts them on another filesystem, e.g. a bigger disk."""
    return settings.POOL_DIR.get() or libvirt_dir() / "pool"


def netns() -> str:
    """The network namespace that holds libvirtd, the VM networks and all traffic to VMs."""
    return settings.NETNS.get()


def resource(*parts: str) -> Path:
    """A file shipped with the project (playbooks/, roles/, Vagrantfile.j2, examples/)."""
    return REPO_ROOT.joinpath(*parts)
