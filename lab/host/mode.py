"""How this host runs libvirt: under systemd, or by hand inside a network namespace of ours.

Where systemd is PID 1 and manages libvirtd, slurmlab uses it as it is. Where there is no
systemd (containers, CI sandboxes), slurmlab creates its own network namespace, starts virtlogd
and libvirtd inside it, and runs every VM-facing command there (see docs/adr/0001).
`SLURMLAB_HOST_MODE=netns|systemd` overrides the detection.
"""

from __future__ import annotations

from pathlib import Path

from lab import settings


def detect() -> str:
    forced = settings.HOST_MODE.get()
    if forced:
        return forced
    return "systemd" if Path("/run/systemd/system").is_dir() else "netns"


def uses_netns() -> bool:
    return detect() == "netns"
