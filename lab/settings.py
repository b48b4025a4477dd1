"""Every `SLURMLAB_*` environment variable: its name, its default and what it means, in one table.

The lab's Python reads them only through this module, at use (tests set them with monkeypatch):
`settings.HOME.get()` is the parsed value, or the default when the variable is unset, empty or
does not parse. A default of None means "computed by the caller" (`default_doc` says how). Code that
sets a variable, for itself or for a child process, names it as `settings.HOME.name`.

Variables read outside the lab's Python (by the guests, shell scripts or tests) are listed too
(`reader` other than "lab"), so that one table documents them all: docs/settings.md is generated
from it (`python -m lab.settings > docs/settings.md`; tests/unit/test_settings.py compares).
This module imports nothing of the lab: every module may use it.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in allowed:
            raise ValueError(text)
        return text
    return parse


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def _count(text: str) -> int:
    """0, 1, 2, ... written as digits only (no sign)."""
    text = text.strip()
    if not text.isdigit():
        raise ValueError(text)
    return int(text)


def _stripped(text: str) -> str:
    return text.strip()


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    meaning: str
    parse: Callable[[str], Any] = str
    default_doc: str = ""  # how the default is found, when it is None (computed by the caller)
    reader: str = "lab"  # who reads it: lab (this package), or guest, script, test (documented only)

    def get(self) -> Any:
        """The value now: parsed from the environment, or the default (unset, empty, unparsable)."""
        text = os.environ.get(self.name, "")
        if not text.strip():
            return self.default
        try:
            return self.parse(text)
        except ValueError:
            return self.default

    def is_set(self) -> bool:
        return bool(os.environ.get(self.name, "").strip())

    def shown_default(self) -> str:
        if self.default is None:
            return self.default_doc
        return str(self.default)


# Where things are.
HOME = Setting("SLURMLAB_HOME", None, "state: the store, the engine's log, clusters, keys, students, S3 files",
               Path, "the platform's data dir (~/.local/share/slurmlab)")
CACHE = Setting("SLURMLAB_CACHE", None, "rebuildable things: the box and its build files", Path,
                "the platform's cache dir (~/.cache/slurmlab)")
LIBVIRT_DIR = Setting("SLURMLAB_LIBVIRT_DIR", Path("/var/lib/libvirt/slurmlab"),
                      "files libvirt's qemu must read (it may run as another user)", Path)
POOL_DIR = Setting("SLURMLAB_POOL_DIR", None, "the folder of the lab's libvirt storage pool (box volumes, VM disks)",
                   Path, "$SLURMLAB_LIBVIRT_DIR/pool")
POOL = Setting("SLURMLAB_POOL", "slurmlab", "the name of the lab's libvirt storage pool (read when lab.host.libvirtd "
               "is imported)")
HOSTS_DIR = Setting("SLURMLAB_HOSTS_DIR", Path("/var/lib/slurmlab-hosts"), "the folders of simulated libvirt hosts",
                    Path)
# How this host runs VMs.
NETNS = Setting("SLURMLAB_NETNS", "slurmlab", "the network namespace of libvirtd and the VMs (netns mode)")
HOST_MODE = Setting("SLURMLAB_HOST_MODE", None, "netns or systemd: how libvirtd runs", _choice("netns", "systemd"),
                    "detected: systemd if /run/systemd/system exists, else netns")
DRIVER = Setting("SLURMLAB_DRIVER", None, "kvm or qemu: the VMs' libvirt domain type", _choice("kvm", "qemu"),
                 "detected: kvm if /dev/kvm is usable, else qemu (emulation)")
CONTROLLER_NICE = Setting("SLURMLAB_CONTROLLER_NICE", -5, "the nice value of the controller VM's qemu (0: no priority)",
                          int)
DEBIAN_MIRROR = Setting("SLURMLAB_DEBIAN_MIRROR", "http://deb.debian.org/debian",
                        "the Debian mirror the box is built from (part of the box's inputs hash)", _stripped)
# The engine and the API.
MAX_NODES_PER_GROUP = Setting("SLURMLAB_MAX_NODES_PER_GROUP", 64, "the lab's cap on an instance group's InstanceCount",
                              _positive_int)
BOOT_SLOTS = Setting("SLURMLAB_BOOT_SLOTS", None, "how many VMs of a cluster boot at once (0: no limit)", _count,
                     "detected: one per core of the cluster's host under emulation, no limit with KVM there")
FORK_SLOTS = Setting("SLURMLAB_FORK_SLOTS", None, "how many VMs of a cluster are forked from templates at once (0: no "
                     "limit); forks take no boot slot", _count,
                     "detected: two per core of the cluster's host under emulation, at most one per GiB of its "
                     "memory; no limit with KVM there")
LEGACY_ATTEMPTS = Setting("SLURMLAB_LEGACY_ATTEMPTS", 3, "attempts of a legacy (non-continuous) create before it "
                          "rolls back", int)
HOST_LOST_S = Setting("SLURMLAB_HOST_LOST_S", 60.0, "seconds a silent libvirt host is waited for before its nodes "
                      "fail (read when the engine process starts)", float)
SIM_BOOT_TIME = Setting("SLURMLAB_SIM_BOOT_TIME", 1.0, "seconds a simulated VM takes to boot (--provider sim)", float)
REGION = Setting("SLURMLAB_REGION", "us-east-1", "the region in ARNs of clusters created by unsigned requests "
                 "(serve --region wins)")
ACCOUNT_ID = Setting("SLURMLAB_ACCOUNT_ID", "000000000000", "the account in ARNs (serve --account-id wins)")
ROOM_ADDRESS = Setting("SLURMLAB_ROOM_ADDRESS", "0.0.0.0", "the address of this machine the rooms' ssh ports listen "
                      "on (slurmlab serve, slurmlab room; 0.0.0.0: every address)", _stripped)
ROOM_FIRST_PORT = Setting("SLURMLAB_ROOM_FIRST_PORT", 2201, "the first port a cluster's room can get (the next free "
                          "one is kept for the cluster's life)", _positive_int)
VERIFY_BACKEND = Setting("SLURMLAB_VERIFY_BACKEND", "ansible", "ansible or ssh: how the verify suite runs its "
                         "commands (slurmlab verify sets ssh)", _choice("ansible", "ssh"))

# Read by others: documented here, never read by the lab's Python.
OTHERS = (
    Setting("SLURMLAB_AUTO_RESUME_MAX", 3, "restarts of an `srun --auto-resume=1` step "
            "(roles/common/files/srun-auto-resume)", reader="guest"),
    Setting("SLURMLAB_NODE_TYPE", None, "set for a lifecycle script: the node's type", default_doc="set by the lab",
            reader="guest"),
    Setting("SLURMLAB_NODE_NAME", None, "set for a lifecycle script: the node's name", default_doc="set by the lab",
            reader="guest"),
    Setting("SLURMLAB_CLUSTER", None, "set for a lifecycle script: the cluster's name", default_doc="set by the lab",
            reader="guest"),
    Setting("SLURMLAB_ROOT", None, "tests: the directory tree lab/box/customize.sh works on",
            default_doc="none", reader="script"),
    Setting("SLURMLAB_SYSTEMCTL", "systemctl", "tests: the systemctl lab/box/customize.sh calls", reader="script"),
    Setting("SLURMLAB_CHOWN", "chown", "tests: the chown lab/box/customize.sh calls", reader="script"),
    Setting("SLURMLAB_VENV", None, "the virtualenv scripts/host-setup.sh makes", default_doc="./.venv",
            reader="script"),
    Setting("SLURMLAB_PYTHON", "python3", "the interpreter scripts/host-setup.sh makes it with", reader="script"),
    Setting("SLURMLAB_CONSOLE_SHOT", None, "tests/api/test_console.py keeps its screenshot there",
            default_doc="not kept", reader="test"),
    Setting("SLURMLAB_E2E_TWIN", None, "tests/e2e/fullconfig.py: `build` makes the fully configured twin even "
            "when an earlier run kept its fingerprints for the same inputs", default_doc="kept ones used", reader="test"),
)

LAB = (HOME, CACHE, LIBVIRT_DIR, POOL_DIR, POOL, HOSTS_DIR, NETNS, HOST_MODE, DRIVER, CONTROLLER_NICE, DEBIAN_MIRROR,
       MAX_NODES_PER_GROUP, BOOT_SLOTS, FORK_SLOTS, LEGACY_ATTEMPTS, HOST_LOST_S, SIM_BOOT_TIME, REGION, ACCOUNT_ID, VERIFY_BACKEND,
       ROOM_ADDRESS, ROOM_FIRST_PORT)
ALL = LAB + OTHERS
BY_NAME = {s.name: s for s in ALL}


def markdown() -> str:
    """docs/settings.md: the table, generated from ALL."""
    lines = [
        "# Settings: the `SLURMLAB_*` environment variables",
        "",
        "Generated from `lab/settings.py` by `python -m lab.settings > docs/settings.md`; a unit test",
        "compares. Unset, empty or unparsable: the default. Reader: lab (slurmlab's Python, through",
        "`lab.settings`), guest (the VMs), script (shell scripts), test (the test suite).",
        "",
        "| Variable | Default | Meaning | Reader |",
        "|---|---|---|---|",
    ]
    for s in ALL:
        lines.append(f"| `{s.name}` | {s.shown_default()} | {s.meaning} | {s.reader} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown(), end="")
