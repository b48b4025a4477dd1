"""The simulated provider (`--provider sim`): VMs that only exist as records, no Slurm inside.

For API practice in workshops and for fast tests. A simulated VM "boots" in `boot_time` seconds
(default 1 s), shows as `running` in observe() from the moment it is defined (as a libvirt domain
does while it boots), and is labelled simulated wherever it shows: each node's status message says "simulated instance",
`Observed.details["simulated"]` is true, describe output says provider sim (`Lab.Simulated`). Its
instance ids look like HyperPod's (`i-` and 17 hex digits: the model's pattern).

The VMs outlive the engine when a `path` is given (an SQLite file next to the state): a killed
engine finds them again on restart, as it finds libvirt domains. Without a path they live in the
provider object (tests keep one object across engine restarts: it plays the hypervisor).

`SimConfigurer` stands in for Ansible: configure, join and leave take a short simulated time and
record what they were asked to do.

Time: `clock` (wall time by default) and `sleep` (asyncio.sleep by default) are injectable;
`VirtualClock` gives both for tests and benchmarks, where simulated seconds pass instantly.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import random
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

from lab.providers.base import Checkpoints, LaunchError, MachineSpec, Observed, Provider, mac_for
from lab.providers.sim_checkpoints import SimCheckpoints
from lab.providers.sim_releases import SimReleases
from lab.workspace import ClusterDir

ID_PREFIX = "i-"  # as HyperPod's: a strict client checks ids against the model's pattern


class VirtualClock:
    """Simulated time: `clock()` reads it, `await clock.sleep(d)` waits until it has advanced by d.

    Nothing advances it but `advance()` / `advance_to()`: the driver of a test or benchmark moves
    time to the next wake-up (or the engine's next tick) when everything else is idle.
    """

    def __init__(self, start: float = 1000.0):
        self.t = float(start)
        self._heap: list[tuple[float, int, asyncio.Future]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.t

    async def sleep(self, delay: float) -> None:
        if delay <= 0:
            await asyncio.sleep(0)
            return
        fut = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (self.t + delay, next(self._seq), fut))
        await fut

    def next_wake(self) -> float | None:
        while self._heap and self._heap[0][2].done():  # cancelled sleepers
            heapq.heappop(self._heap)
        return self._heap[0][0] if self._heap else None

    def advance_to(self, t: float) -> int:
        """Move time to t (never back) and wake every sleeper due; returns how many woke."""
        self.t = max(self.t, t)
        woke = 0
        while self._heap and self._heap[0][0] <= self.t:
            _, _, fut = heapq.heappop(self._heap)
            if not fut.done():
                fut.set_result(None)
                woke += 1
        return woke

    def advance(self, dt: float) -> int:
        return self.advance_to(self.t + dt)


@dataclass
class SimVM:
    cluster: str
    name: str
    state: str  # running | shutoff
    ready_at: float  # when it "answers ssh"
    address: str
    cpus: int = 1
    memory_mib: int = 512
    boots: int = 1


class SimProvider(SimCheckpoints, Provider, Checkpoints):
    """Simulated VMs (the whole Provider contract). The engine's coroutine twins (`*_async`) run on
    its loop: quick record changes, and boots that wait on `sleep` (virtual time in tests), so
    thousands of simulated boots cost no thread. The blocking methods wait on wall time."""

    VM = SimVM

    name = "sim"
    id_prefix = ID_PREFIX

    def __init__(self, boot_time: float = 1.0, *, clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] | None = None, path: Path | None = None,
                 jitter: float = 0.0, seed: int = 0):
        if boot_time < 0:
            raise ValueError("boot_time must be >= 0")
        self.boot_time = boot_time
        self.jitter = jitter
        self.clock = clock
        self.sleep = sleep or asyncio.sleep
        self.rng = random.Random(seed)
        self.vms: dict[str, dict[str, SimVM]] = {}
        self.launched: list[str] = []  # every ensure that created a VM (tests read it)
        self.removed: list[str] = []
        # hung VMs (issue 45; tests set it): name -> whether the hang survives a reboot. Silent, as a hung
        # guest's agent is; a replacement (a new VM) is never hung
        self.hung: dict[str, bool] = {}
        self._lock = threading.Lock()
        self._hint: dict[str, int] = {}
        self._db = None
        self.image_releases = SimReleases(Path(path).with_name("sim-releases.json") if path is not None else None)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS vms (cluster TEXT, name TEXT, state TEXT, ready_at REAL, "
                             "address TEXT, cpus INTEGER, memory_mib INTEGER, boots INTEGER, PRIMARY KEY (cluster, name))")
            for r in self._db.execute("SELECT cluster, name, state, ready_at, address, cpus, memory_mib, boots FROM vms"):
                vm = SimVM(*r)
                self.vms.setdefault(vm.cluster, {})[vm.name] = vm

    def releases(self) -> list:
        return self.image_releases.all()

    # ------------------------------------------------------------------ persistence
    def _save(self, vm: SimVM) -> None:
        if self._db is not None:
            self._db.execute("INSERT OR REPLACE INTO vms VALUES (?,?,?,?,?,?,?,?)",
                             (vm.cluster, vm.name, vm.state, vm.ready_at, vm.address, vm.cpus, vm.memory_mib, vm.boots))

    def _drop(self, cluster: str, name: str | None = None) -> None:
        if self._db is not None:
            if name is None:
                self._db.execute("DELETE FROM vms WHERE cluster=?", (cluster,))
            else:
                self._db.execute("DELETE FROM vms WHERE cluster=? AND name=?", (cluster, name))

    # ------------------------------------------------------------------ interface
    def allocate(self, cluster: str, name: str, used: set[str], preferred_index: int = 0) -> tuple[str, str]:
        """A made-up address on the cluster's simulated 10.N.0.0/16, and the node's stable MAC."""
        net = preferred_index % 250 or 1
        size = 250 * 250
        start = self._hint.get(cluster, 0)
        for k in range(size):
            i = (start + k) % size
            addr = f"10.{net}.{i // 250}.{i % 250 + 2}"
            if addr not in used:
                self._hint[cluster] = i + 1
                return addr, mac_for(cluster, name)
        raise LaunchError(f"no simulated address left for {name}")

    def prepare(self, cluster: str, machines: list[MachineSpec], preferred_index: int = 0, box: str | None = None) -> None:
        with self._lock:
            self.vms.setdefault(cluster, {})

    async def prepare_async(self, cluster: str, machines: list[MachineSpec], preferred_index: int = 0,
                            box: str | None = None) -> None:
        self.prepare(cluster, machines, preferred_index, box)

    def _define(self, cluster: str, machine: MachineSpec) -> SimVM:
        """The VM, defined and booting (or already there). Idempotent, like `vagrant up`."""
        with self._lock:
            vms = self.vms.setdefault(cluster, {})
            vm = vms.get(machine.name)
            now = self.clock()
            if vm is None:
                boot = self.boot_time + (self.rng.uniform(0, self.jitter) if self.jitter else 0.0)
                vm = vms[machine.name] = SimVM(cluster, machine.name, "running", now + boot, machine.address,
                                               machine.cpus, machine.memory_mib)
                self.launched.append(machine.name)
                self._save(vm)
            elif vm.state != "running":  # a stopped domain is started again
                vm.state, vm.ready_at, vm.boots = "running", now + self.boot_time, vm.boots + 1
                self._save(vm)
            return vm

    def _observed(self, vm: SimVM) -> Observed:
        return Observed(vm.name, vm.state, vm.address, {"simulated": True, "ready": self.clock() >= vm.ready_at})

    async def ensure_async(self, cluster: str, machine: MachineSpec) -> Observed:
        vm = self._define(cluster, machine)
        while True:
            left = vm.ready_at - self.clock()
            if left <= 0:
                break
            await self.sleep(left)
            if self.vms.get(cluster, {}).get(machine.name) is not vm or vm.state != "running":
                raise LaunchError(f"{machine.name}: the simulated VM went away while it booted")
        return self._observed(vm)

    def ensure(self, cluster: str, machine: MachineSpec) -> Observed:
        vm = self._define(cluster, machine)
        while (left := vm.ready_at - self.clock()) > 0:
            time.sleep(min(left, 0.5))
        return self._observed(vm)

    def observe(self, cluster: str) -> dict[str, Observed]:
        with self._lock:
            return {n: self._observed(vm) for n, vm in self.vms.get(cluster, {}).items()}

    async def observe_async(self, cluster: str) -> dict[str, Observed]:
        return self.observe(cluster)

    def remove(self, cluster: str, names: list[str]) -> None:
        with self._lock:
            vms = self.vms.get(cluster, {})
            for n in names:
                if vms.pop(n, None) is not None:
                    self._drop(cluster, n)
                self.removed.append(n)
                self.hung.pop(n, None)

    async def remove_async(self, cluster: str, names: list[str]) -> None:
        self.remove(cluster, names)
        await asyncio.sleep(0)

    def _restart(self, cluster: str, name: str) -> SimVM:
        with self._lock:
            vm = self.vms.get(cluster, {}).get(name)
            if vm is None:  # the engine relaunches a missing VM itself; this is a race with a removal
                raise LaunchError(f"{name}: no simulated VM to reboot")
            if not self.hung.get(name, True):
                self.hung.pop(name)
            vm.state, vm.ready_at, vm.boots = "running", self.clock() + self.boot_time, vm.boots + 1
            self._save(vm)
        return vm

    async def reboot_async(self, cluster: str, name: str) -> Observed:
        """Restart the domain (start it if it is shut off); done when it answers again."""
        vm = self._restart(cluster, name)
        while (left := vm.ready_at - self.clock()) > 0:
            await self.sleep(left)
        return self._observed(vm)

    def silent(self, cluster: str, names: list[str]) -> dict[str, str]:
        return {n: "libvirt says it runs, its guest agent does not answer (simulated hang)" for n in names if n in self.hung}

    async def silent_async(self, cluster: str, names: list[str]) -> dict[str, str]:
        return self.silent(cluster, names)

    def reboot(self, cluster: str, name: str) -> Observed:
        vm = self._restart(cluster, name)
        while (left := vm.ready_at - self.clock()) > 0:
            time.sleep(min(left, 0.5))
        return self._observed(vm)

    def delete_cluster(self, cluster: str) -> list[str]:
        with self._lock:
            gone = sorted(self.vms.pop(cluster, {}))
            self._drop(cluster)
        ClusterDir(cluster).remove()  # what the lab keeps for it (the student accounts file), as vagrant's does
        return [f"simulated VM {n}" for n in gone]

    async def delete_cluster_async(self, cluster: str) -> list[str]:
        return self.delete_cluster(cluster)

    def stop(self, cluster: str, name: str) -> None:
        """A clean shutdown: the simulated VM is shut off (it stays defined)."""
        with self._lock:
            vm = self.vms.get(cluster, {}).get(name)
            if vm is not None and vm.state == "running":
                vm.state = "shutoff"
                self._save(vm)

    async def stop_async(self, cluster: str, name: str) -> None:
        self.stop(cluster, name)
        await asyncio.sleep(0)

    def keeps_state(self, cluster: str, name: str) -> bool:
        """Simulated: every VM "has" a state disk (nothing is stored on the sim provider)."""
        with self._lock:
            return name in self.vms.get(cluster, {})

    # ------------------------------------------------------------------ lab controls
    def crash(self, cluster: str, name: str, state: str = "shutoff") -> None:
        """Make a VM die: `shutoff` (the domain stays, stopped) or `missing` (gone)."""
        with self._lock:
            vms = self.vms.get(cluster, {})
            if name not in vms:
                raise KeyError(name)
            if state == "missing":
                vms.pop(name)
                self._drop(cluster, name)
            else:
                vms[name].state = state
                self._save(vms[name])

