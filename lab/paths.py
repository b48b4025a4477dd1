"""Where slurmlab keeps its state, its cache and the files libvirt must read."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

REPO_ROOT = Path(__file__).resolve().parent.parent
NETNS_DEFAULT = "slurmlab"


def home() -> Path:
    """State: clusters, keys, Vagrant projects. `$SLURMLAB_HOME` or the platform's data dir."""
    env = os.environ.get("SLURMLAB_HOME")
    return Path(env) if env else Path(platformdirs.user_data_dir("slurmlab"))


def cache() -> Path:
    """Rebuildable things (the box, mmdebstrap output). `$SLURMLAB_CACHE` or the platform's cache dir."""
    env = os.environ.get("SLURMLAB_CACHE")
    return Path(env) if env else Path(platformdirs.user_cache_dir("slurmlab"))


def libvirt_dir() -> Path:
    """Files libvirt's qemu processes must reach (they may run as libvirt-qemu, not as us)."""
    return Path(os.environ.get("SLURMLAB_LIBVIRT_DIR", "/var/lib/libvirt/slurmlab"))


def pool_dir() -> Path:
    """The folder of the lab's libvirt storage pool (box volumes, VM disks). `$SLURMLAB_POOL_DIR`
    (with `$SLURMLAB_POOL` naming the pool) puts them on another filesystem, e.g. a bigger disk."""
    env = os.environ.get("SLURMLAB_POOL_DIR")
    return Path(env) if env else libvirt_dir() / "pool"


def netns() -> str:
    """The network namespace that holds libvirtd, the VM networks and all traffic to VMs."""
    return os.environ.get("SLURMLAB_NETNS", NETNS_DEFAULT)


def resource(*parts: str) -> Path:
    """A file shipped with the project (playbooks/, roles/, Vagrantfile.j2, examples/)."""
    return REPO_ROOT.joinpath(*parts)
