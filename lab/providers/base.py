"""The narrow provider interface: preflight, observe, ensure, remove, collect_logs."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


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


@dataclass
class Observed:
    """What the provider sees of one VM right now."""

    name: str
    state: str  # running | shutoff | missing | other libvirt state names
    address: str | None = None
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterNet:
    name: str  # libvirt network name
    bridge: str
    cidr: str  # e.g. 10.213.7.0/24
    gateway: str


class LaunchError(Exception):
    """A VM could not be started. `transient` errors are retried with backoff."""

    def __init__(self, message: str, *, transient: bool = True, log_path: Path | None = None):
        super().__init__(message)
        self.transient = transient
        self.log_path = log_path


def mac_for(cluster: str, node: str) -> str:
    """Stable MAC from the names (qemu's 52:54:00 prefix)."""
    h = hashlib.sha256(f"{cluster}/{node}".encode()).digest()
    return "52:54:00:%02x:%02x:%02x" % (h[0], h[1], h[2])


class Provider(Protocol):
    name: str

    def preflight(self) -> list[str]: ...

    def observe(self, cluster: str) -> dict[str, Observed]: ...

    def ensure(self, cluster: str, machine: MachineSpec) -> Observed: ...

    def remove(self, cluster: str, names: list[str]) -> None: ...

    def delete_cluster(self, cluster: str) -> None: ...

    def collect_logs(self, cluster: str, dest: Path) -> list[Path]: ...
