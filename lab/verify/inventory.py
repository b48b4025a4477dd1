"""The inventory `slurmlab verify` checks a lab cluster through: its running nodes, written fresh
from the store (the one the playbooks leave behind can name a node removed since)."""

from __future__ import annotations

from pathlib import Path

from lab.errors import LabError
from lab.store.db import Store
from lab.workflows.nodes import running


def write(st: Store, name: str) -> tuple[Path, list[str]]:
    """clusters/NAME/verify-inventory.yml over the cluster's running nodes (written when the cluster
    folder exists). Returns its path and the nodes left out (not running)."""
    import yaml

    from lab.configure import inventory as inv_mod
    from lab.control import clusters
    from lab.osutil import atomic_write
    from lab.providers import registry
    from lab.workspace import ClusterDir

    c = clusters.get(st, name)
    if registry.info(c.provider).simulated:
        raise LabError(f"cluster '{name}' is simulated (provider {c.provider}): it has no VMs and no Slurm to verify",
                       "verify a cluster of real VMs (create-cluster without --provider sim)")
    r = running(st, c)
    ctx = r.context()
    cd = ClusterDir(name)
    path = cd.root / "verify-inventory.yml"
    if cd.root.is_dir():
        atomic_write(path, yaml.safe_dump(inv_mod.build(ctx), sort_keys=True), 0o600)
    return path, r.skipped
