"""Cluster checkpoints (issue 14): save a whole running cluster at one moment and put it back.

The requests are checked whole and recorded as operations of the lab (kinds Checkpoint and
RestoreCheckpoint, not in ListClusterOperations: HyperPod has no such type); the engine carries them
out (lab/engine/checkpointing.py) when nothing else of the cluster is in flight.

A checkpoint holds the provider's VMs (memory and disks, lab/providers/checkpoint.py) and the engine's
record of the cluster (its row, groups and nodes), so that after a restore the engine, the VMs and
Slurm agree: nodes added since are gone, removed ones are back, a group short of capacity is short
again and the engine carries on. After a restore the configurer sets every guest's clock to now.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from lab.engine import daemon
from lab.engine.checkpointing import CHECKPOINT, KINDS, RESTORE
from lab.control.operations import new_op
from lab.control.views import get
from lab.errors import Conflict, UsageError
from lab.providers import registry
from lab.providers.base import Checkpoints
from lab.store.db import ClusterRow, Store

TAG = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
# a cluster in one of these takes no checkpoint and no restore
REFUSED = {"Deleting": "being deleted", "RollingBack": "rolling back", "Failed": "Failed",
           "SystemUpdating": "in a rolling software update"}


def _provider(c: ClusterRow) -> Checkpoints:
    prov = registry.make(c.provider)
    if not isinstance(prov, Checkpoints):
        raise UsageError(f"cluster '{c.name}' is made by provider {c.provider}, which keeps no checkpoints")
    return prov


def request(st: Store, name: str, tag: str, kind: str = CHECKPOINT, *,
            checkpoints: Callable[[ClusterRow], list[dict]] | None = None, start_engine: bool = False) -> str:
    """Record a checkpoint (kind CHECKPOINT) or a restore (RESTORE) of cluster `name`; returns the
    operation id. `checkpoints`: the provider's list of the cluster's checkpoints (tests pass one)."""
    if not TAG.match(tag or ""):
        raise UsageError(f"TAG: '{tag}' is not a checkpoint tag", "use 1-40 lower-case letters, digits and '-', "
                         "starting with a letter or digit (e.g. step-3)")
    c = get(st, name)
    if c.status in REFUSED:
        raise UsageError(f"cluster '{name}' is {REFUSED[c.status]}: it takes no checkpoint and no restore now",
                         "wait until describe-cluster says InService")
    have = [x["tag"] for x in (checkpoints or (lambda c: _provider(c).checkpoints(c.name)))(c)]
    if kind == CHECKPOINT and tag in have:
        raise UsageError(f"TAG: cluster '{name}' already has a checkpoint '{tag}'",
                         f"choose another tag, or delete it first: slurmlab checkpoint delete {name} {tag}")
    if kind == RESTORE and tag not in have:
        raise UsageError(f"TAG: cluster '{name}' has no checkpoint '{tag}' (its checkpoints: {', '.join(have) or 'none'})",
                         f"slurmlab checkpoint list {name}")
    with st.tx():
        if any(op.kind in KINDS for op in st.operations(name, "InProgress")):
            raise Conflict(f"cluster '{name}' is already taking or restoring a checkpoint", "wait until it ends")
        op = new_op(name, kind, [], details={"Tag": tag})
        st.add_operation(op)
        st.add_event(name, "Cluster", "Info", f"{'checkpoint' if kind == CHECKPOINT else 'restore of checkpoint'} "
                     f"{tag} asked for; it starts once no other work of the cluster is in flight", operation_id=op.id)
    if start_engine:
        daemon.ensure_running()
    return op.id


def listing(st: Store, name: str) -> list[dict]:
    """The cluster's checkpoints, oldest first: {tag, created, size, nodes}."""
    return _provider(get(st, name)).checkpoints(name)


def as_json(r: dict) -> dict:
    """One checkpoint of listing() as the CLI's --output json and GET /_lab/checkpoints show it."""
    from lab.osutil import iso

    return {"Tag": r["tag"], "CreationTime": iso(r["created"]), "SizeBytes": r["size"], "Nodes": r["nodes"],
            "Host": r.get("host", "local"), **({"Simulated": True} if r.get("simulated") else {})}


def delete(st: Store, name: str, tag: str) -> None:
    """Remove one checkpoint; refused while a checkpoint or restore of the cluster is under way."""
    c = get(st, name)
    if any(op.kind in KINDS for op in st.operations(name, "InProgress")):
        raise Conflict(f"cluster '{name}' is taking or restoring a checkpoint", "wait until it ends")
    prov = _provider(c)
    if tag not in [x["tag"] for x in prov.checkpoints(name)]:
        raise UsageError(f"TAG: cluster '{name}' has no checkpoint '{tag}'", f"slurmlab checkpoint list {name}")
    prov.delete_checkpoint(name, tag)
    st.add_event(name, "Cluster", "Info", f"checkpoint {tag} deleted")

