"""The whole provider contract: every method the engine calls on a provider, and the error taxonomy.

Sync vs async, one rule: each operation is a plain blocking method (`ensure`, `observe`, ...) that a
CLI, a script or a test may call directly, and has a coroutine twin (`ensure_async`, ...) that is the
only form the engine awaits. The twins' default runs the blocking method in a worker thread
(`in_thread`, which counts the threads still running per cluster: a thread cannot be cancelled, so
a delete waits for them). A provider whose work never blocks (the sim provider, under virtual time)
overrides the twins with real coroutines. `allocate` has no twin: the engine calls it on its loop,
so it must be quick.

Errors: `ProviderUnreachable` from `observe` means the hypervisor cannot be asked at all (the
engine waits for it, see lab/engine/sight.py). `LaunchError(transient=True)` (capacity short, a
libvirt/vagrant hiccup) is retried with backoff; `LaunchError(transient=False)` (a missing box, a bad Vagrantfile) makes the node a Failure
with its reason and is not retried until someone replaces or deletes the node. Any other exception
counts as transient.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any


class Start(str, Enum):
    """How a new VM comes up (`Lab.Start`, docs/adr/0011): Warm forks it from a saved template of its
    box and shape (no boot; the default where templates work), Cold boots it with `vagrant up`."""

    WARM = "Warm"
    COLD = "Cold"


@dataclass(frozen=True)
class MachineSpec:
    """One VM the engine wants: stable logical name, size, fixed MAC and address."""

    name: str  # <cluster>-<group>-<n>, also the hostname and the Slurm NodeName
    group: str
    cpus: int
    memory_mib: int
    mac: str
    address: str
    node_type: str = ""  # Controller | Login | Compute ("" for a bare VM: no Slurm identity at boot)
    box: str | None = None  # the box its VM is made from; None: the cluster's
    # The controller's state disk: a volume name in the lab's pool that outlives the VM (docs/adr/0007);
    # None: no state disk (other nodes, and clusters made before it)
    state_disk: str | None = None
    start: Start = Start.WARM
    # may it be forked from its role's template (docs/adr/0022)? Not a HyperPod-shaped node: its lifecycle
    # scripts set accounting and Slurm up, which a role template would have done before them
    role_template: bool = True


def role_templates_of(spec: dict) -> bool:
    """Whether the nodes of a cluster (its spec as stored) may be forked from role templates: not when
    `Lab.RoleTemplates` is false, nor for HyperPod-shaped nodes."""
    lab = spec.get("Lab") or {}
    return lab.get("RoleTemplates") is not False and (lab.get("NodeEnvironment") or "Lab") != "HyperPod"


def start_of(spec: dict) -> Start:
    """The cluster's `Lab.Start` (a spec as stored), Warm when absent."""
    return Start((spec.get("Lab") or {}).get("Start") or Start.WARM.value)


# The serial of the state disk, as the guest sees it: /dev/disk/by-id/virtio-<serial> (roles/state_disk)
STATE_DISK_SERIAL = "slurmlab-state"


def state_disk_name(cluster: str, created_at: float) -> str:
    """The controller's state disk volume: the cluster's creation time in its name, so that a cluster
    made again under the same name never finds the data of the one before (lab/providers/state_disk.py)."""
    return f"{cluster}-state-{int(created_at)}.qcow2"


DISK_FULL = "disk-full"  # paused by its hypervisor for want of disk space: waits, never replaced (disk.py)


@dataclass
class Observed:
    """What the provider sees of one VM right now."""

    name: str
    state: str  # running | shutoff | missing | DISK_FULL | other libvirt state names
    address: str | None = None
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterNet:
    name: str  # libvirt network name
    bridge: str
    cidr: str  # e.g. 10.213.7.0/24
    gateway: str


class LaunchError(Exception):
    """A VM could not be started. `transient` errors are retried with backoff; permanent ones
    (`transient=False`) leave the node a Failure with this message, not retried."""

    def __init__(self, message: str, *, transient: bool = True, log_path: Path | None = None):
        super().__init__(message)
        self.transient = transient
        self.log_path = log_path

    @property
    def permanent(self) -> bool:
        return not self.transient


class CheckpointError(Exception):
    """A checkpoint could not be taken, listed or put back; the message says why and what to do."""


class ProviderUnreachable(Exception):
    """The hypervisor cannot be asked at all (libvirtd stopped, its socket gone): nothing is known of
    the cluster's VMs. `observe` raises it; the engine then acts on nothing for that cluster, marks its
    state stale, records one event with `fix`, backs off, and resumes on its own when it answers."""

    def __init__(self, message: str, fix: str = "slurmlab host up"):
        super().__init__(message)
        self.fix = fix


def mac_for(cluster: str, node: str) -> str:
    """Stable MAC from the names (qemu's 52:54:00 prefix)."""
    h = hashlib.sha256(f"{cluster}/{node}".encode()).digest()
    return "52:54:00:%02x:%02x:%02x" % (h[0], h[1], h[2])


# ---------------------------------------------------------------- blocking calls in threads
_threads: Counter = Counter()  # cluster -> blocking provider/configurer calls running in threads
_threads_lock = threading.Lock()


_pool: ThreadPoolExecutor | None = None


def _executor() -> ThreadPoolExecutor:
    """The worker threads of blocking provider/configurer calls (asyncio's default size)."""
    global _pool
    with _threads_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="slurmlab-io")
        return _pool


async def in_thread(cluster: str, fn: Callable[..., Any], *args: Any) -> Any:
    """fn(*args) in a worker thread, counted for `cluster` from now until the thread itself ends.
    Cancelling the awaiter does not end a running thread (it stays counted); a call still queued
    for a free worker is withdrawn and uncounted: it will never run, so a delete must not wait."""
    with _threads_lock:
        _threads[cluster] += 1

    def run():
        try:
            return fn(*args)
        finally:
            with _threads_lock:
                _threads[cluster] -= 1

    cf = _executor().submit(run)
    try:
        return await asyncio.wrap_future(cf)
    except asyncio.CancelledError:
        if cf.cancel():  # True: it had not started, and now never will (False: it runs, and counts down itself)
            with _threads_lock:
                _threads[cluster] -= 1
        raise


def threads_running(cluster: str) -> int:
    """Blocking calls for the cluster still running in threads (cancelling their awaiter does not end them)."""
    with _threads_lock:
        return _threads.get(cluster, 0)


class Provider(ABC):
    """The core contract: a cluster's VMs made, observed and removed. `name` is what ClusterRow.provider
    says (lab/providers/registry.py: what each provider can do); `id_prefix` starts the instance ids of
    its nodes. Optional abilities are interfaces of their own that the engine detects with isinstance:
    `Checkpoints` (save and restore a whole cluster) and `Placement` (several hosts)."""

    name: str = "provider"
    id_prefix: str = "i-"

    # ---------------------------------------------------------------- blocking methods
    def preflight(self, box: str | None, cluster: str) -> None:
        """Make this machine ready for a new cluster `cluster` made from `box` (None: the default box):
        the host set-up, the box present, nothing left on the host under that name by a cluster this
        lab does not have (`leftovers`). Idempotent; raises a LabError naming what is wrong and its
        fix. Called once per create, before the cluster is recorded. Default: nothing to do."""

    def leftovers(self, cluster: str, remove: bool = False) -> list[str]:
        """What the provider's hosts hold under the name `cluster` (a killed run's VMs, network,
        checkpoints), for humans; removed first when `remove`. Call it only for a name no cluster of
        this lab has. Default: nothing."""
        return []

    @abstractmethod
    def allocate(self, cluster: str, name: str, used: set[str], preferred_index: int = 0) -> tuple[str, str]:
        """(address, MAC) for a new node, not among `used`. Called on the engine's loop: quick."""

    @abstractmethod
    def prepare(self, cluster: str, machines: list[MachineSpec], preferred_index: int = 0,
                box: str | None = None) -> Any:
        """Make the cluster's folder/network know every machine (idempotent)."""

    @abstractmethod
    def observe(self, cluster: str) -> dict[str, Observed]:
        """Every VM of the cluster the hypervisor shows, by name. Raises ProviderUnreachable when the
        hypervisor cannot be asked (never an empty answer: that would mean every VM is gone)."""

    @abstractmethod
    def ensure(self, cluster: str, machine: MachineSpec) -> Observed:
        """Start the VM (create it if missing); return when it answers. Raises LaunchError."""

    @abstractmethod
    def reboot(self, cluster: str, name: str) -> Observed:
        """Restart the VM (start it if it is shut off); return when it answers again. Raises LaunchError."""

    @abstractmethod
    def remove(self, cluster: str, names: list[str]) -> None:
        """The VMs gone (absent ones are fine)."""

    @abstractmethod
    def delete_cluster(self, cluster: str) -> list[str]:
        """Every VM, volume and network of the cluster gone; what was removed, for humans."""

    def stop(self, cluster: str, name: str) -> None:
        """Shut the VM down cleanly (its guest flushes its disks), if it runs; the VM stays defined."""

    def silent(self, cluster: str, names: list[str]) -> dict[str, str]:
        """Of the running VMs `names`, those whose guest does not answer (a hung VM: libvirt says it runs),
        each with what did not answer. Default: none (a provider that cannot tell)."""
        return {}

    def forks(self, cluster: str, machine: MachineSpec) -> bool:
        """Whether a new VM of `machine` would be forked from a template (seconds, little CPU) rather than
        booted: the engine gives forks slots of their own (lab/engine/slots.py)."""
        return False

    def keeps_state(self, cluster: str, name: str) -> bool:
        """Whether the VM has a state disk that outlives it (a new VM of that name finds the data)."""
        return False

    def releases(self) -> list:
        """The image releases (lab.box.releases.Release) this provider's nodes are made from, available or
        not (issue 32). Default: the slurmlab boxes of this machine's Vagrant (lab/box/releases.py)."""
        from lab.box.releases import catalog

        return catalog()

    # ---------------------------------------------------------------- what the engine awaits
    async def prepare_async(self, cluster: str, machines: list[MachineSpec], preferred_index: int = 0,
                            box: str | None = None) -> Any:
        return await in_thread(cluster, self.prepare, cluster, machines, preferred_index, box)

    async def observe_async(self, cluster: str) -> dict[str, Observed]:
        return await in_thread(cluster, self.observe, cluster)

    async def ensure_async(self, cluster: str, machine: MachineSpec) -> Observed:
        return await in_thread(cluster, self.ensure, cluster, machine)

    async def reboot_async(self, cluster: str, name: str) -> Observed:
        return await in_thread(cluster, self.reboot, cluster, name)

    async def remove_async(self, cluster: str, names: list[str]) -> None:
        return await in_thread(cluster, self.remove, cluster, names)

    async def delete_cluster_async(self, cluster: str) -> list[str]:
        return await in_thread(cluster, self.delete_cluster, cluster)

    async def stop_async(self, cluster: str, name: str) -> None:
        return await in_thread(cluster, self.stop, cluster, name)

    async def silent_async(self, cluster: str, names: list[str]) -> dict[str, str]:
        return await in_thread(cluster, self.silent, cluster, names)


class Checkpoints(ABC):
    """A provider that can save a whole running cluster at one moment and put it back (docs/adr/0008)."""

    @abstractmethod
    def checkpoint(self, cluster: str, tag: str, record: dict) -> dict:
        """Save every VM of the cluster at one moment (memory and disks) as checkpoint `tag`, with
        `record` (the engine's rows of the cluster); the VMs run on. Returns {tag, created, size,
        timings}. Raises CheckpointError (a duplicate tag, no room)."""

    @abstractmethod
    def restore(self, cluster: str, tag: str) -> dict:
        """Put every VM back as checkpoint `tag` has it (VMs added since go, removed ones come back,
        each with its memory: no boot); returns {record, timings}. The guests' clocks are the
        checkpoint's: the configurer sets them."""

    @abstractmethod
    def checkpoints(self, cluster: str) -> list[dict]:
        """The cluster's checkpoints, oldest first: {tag, created, size, nodes}."""

    @abstractmethod
    def delete_checkpoint(self, cluster: str, tag: str) -> None:
        """Remove one checkpoint (CheckpointError if there is none of that tag)."""

    async def checkpoint_async(self, cluster: str, tag: str, record: dict) -> dict:
        return await in_thread(cluster, self.checkpoint, cluster, tag, record)

    async def restore_async(self, cluster: str, tag: str) -> dict:
        return await in_thread(cluster, self.restore, cluster, tag)


class Placement(ABC):
    """A provider with several hosts (docs/adr/0010): a cluster is placed whole on one, and moved to
    another when its host is lost. Blocking calls (they ask every host): the engine runs them in threads."""

    @abstractmethod
    def place(self, cluster: str, memory_mib: int, cpus: int) -> str | None:
        """Choose the host of a new cluster needing `memory_mib` and `cpus` in all (once: later calls
        return the same); its name."""

    @abstractmethod
    def host_of(self, cluster: str) -> str | None:
        """The host the cluster was placed on (None: not placed yet)."""

    @abstractmethod
    def rehome(self, cluster: str, memory_mib: int, cpus: int) -> str | None:
        """The cluster's host is lost: place it on another host with room for all of it (its VMs there are
        made anew; the old host's are removed when it answers again). The new host's name, or None
        when no other host has room."""


# The engine's coroutine face, and the blocking methods behind it (tests check both providers).
ENGINE_METHODS = ("allocate", "prepare_async", "observe_async", "ensure_async", "reboot_async", "remove_async",
                  "delete_cluster_async", "stop_async", "silent_async")


def cluster_of(dom) -> str | None:
    """The cluster a domain belongs to, from the description slurmlab's Vagrantfile sets."""
    import xml.etree.ElementTree as ET

    try:
        desc = ET.fromstring(dom.XMLDesc(0)).findtext("description") or ""
    except Exception:  # noqa: BLE001 - a domain vanishing mid-listing
        return None
    prefix = "slurmlab cluster="
    return desc[len(prefix):].strip() if desc.startswith(prefix) else None
