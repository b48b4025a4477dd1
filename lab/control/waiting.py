"""Waiting for a cluster: poll the store until it is InService, at full size, deleted or failed,
telling the caller each time what it looks like changed (the CLI prints it)."""

from __future__ import annotations

import time
from collections.abc import Callable

from lab.engine import daemon
from lab.control.views import describe, list_nodes
from lab.errors import NotFound
from lab.store.db import Store


def _at_target(st: Store, name: str, d: dict) -> bool:
    """Every group at its target and no node with work still to do (after a scale-out, a scale-in,
    a reboot or a replacement, not just once after the create)."""
    return (all(g["CurrentCount"] == g["TargetCount"] and not g.get("ActiveOperations") for g in d["InstanceGroups"])
            and all(n.phase == "running" and not n.pending for n in st.nodes(name)))


def wait(st: Store, name: str, until: str, on_change: Callable[[dict, list[dict]], None] | None = None,
         timeout: float = 3600, poll: float = 1.0) -> dict:
    """Poll until `until` (InService | FullSize | Deleted | Failed) holds; raise TimeoutError else."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        c = st.cluster(name)
        if c is None:
            if until == "Deleted":
                return {}
            raise NotFound(f"cluster '{name}' disappeared")
        d, nodes = describe(st, name), list_nodes(st, name)
        snap = (d["ClusterStatus"], [(g["InstanceGroupName"], g["CurrentCount"], g["Status"]) for g in d["InstanceGroups"]],
                [(n["NodeLogicalId"], n["InstanceStatus"].get("Status"), n["InstanceStatus"].get("Message")) for n in nodes])
        if snap != last and on_change:
            on_change(d, nodes)
        last = snap
        if d["ClusterStatus"] == "Failed":
            return d
        if until == "InService" and d["ClusterStatus"] == "InService":
            return d
        if until == "FullSize" and c.full_size_at and _at_target(st, name, d):
            return d
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster {name} did not reach {until} in {timeout:.0f} s")
        if not daemon.running_pid():
            daemon.ensure_running()
        time.sleep(poll)
