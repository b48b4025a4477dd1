"""`slurmlab lifecycle rerun`: a node's or a group's lifecycle scripts run again, edited, on new forks
(BatchReplaceClusterNodes: the same names, new VMs), the rest of the cluster left running (issue 46,
docs/verification.md). `--from DIR` makes DIR the groups' LifeCycleConfig.SourceS3Uri first."""

from __future__ import annotations

import copy
from pathlib import Path

from lab.control.batches import replace_nodes
from lab.control.views import get
from lab.engine.plan import leaving
from lab.errors import Conflict, NotFound, UsageError
from lab.spec.rules.lifecycle import local_source
from lab.store.db import NodeRow, Store

REPLACE = "BatchReplaceClusterNodes"


def targets(st: Store, name: str, ref: str) -> list[NodeRow]:
    """The nodes `ref` names: a node, or every node of a group (but those being deleted)."""
    get(st, name)
    nodes = st.nodes(name)
    one = [n for n in nodes if n.name == ref]
    if one:
        return one
    group = [n for n in nodes if n.grp == ref and not leaving(n)]
    if not group:
        groups = sorted({n.grp for n in nodes})
        raise NotFound(f"cluster {name} has no node or group named '{ref}' (groups: {', '.join(groups)})",
                       f"list the nodes: slurmlab list-cluster-nodes {name}")
    return sorted(group, key=lambda n: n.ordinal)


def scripts_of(st: Store, name: str, group: str) -> tuple[str, str] | None:
    """(SourceS3Uri, OnCreate) of the group's LifeCycleConfig; None when it has none."""
    lc = st.cluster(name).group_spec(group).get("LifeCycleConfig") or {}
    src = lc.get("SourceS3Uri")
    return (src, lc.get("OnCreate") or "on_create.sh") if src else None


def check_folder(folder: str, on_create: str) -> Path:
    """`folder` as a lifecycle source with `on_create` in it: its absolute path, or a UsageError saying
    what is wrong and how to fix it."""
    path, problem, fix = local_source(folder, Path.cwd())
    if path is None:
        raise UsageError(f"--from {folder}: {problem}", fix or "")
    if not (path / on_create).is_file():
        raise UsageError(f"--from {folder}: {path} has no {on_create} (the group's OnCreate script)",
                         f"put {on_create} in {path}, or point --from at the folder that holds it")
    return path


def rerun(st: Store, name: str, ref: str, source: str | None = None, *, start_engine: bool = True) -> dict:
    """Replace the nodes of `ref` with new forks, whose configuration runs the groups' lifecycle scripts
    again (from `source` when given). Nothing changes when a check fails. Returns {"Nodes": [names],
    "Generations": {name: generation before}, "OperationId": the replace's, "Source": {group: folder}}."""
    c = get(st, name)
    if c.status in ("Deleting", "Failed", "RollingBack"):
        raise Conflict(f"cluster {name} is {c.status}: nothing of it runs again",
                       "create it again: slurmlab create-cluster --spec FILE")
    nodes = targets(st, name, ref)
    groups = sorted({n.grp for n in nodes})
    sources: dict[str, str] = {}
    for g in groups:
        has = scripts_of(st, name, g)
        if has is None and source is None:
            raise UsageError(f"group {g} of {name} has no LifeCycleConfig: no scripts to run again",
                             f"name the scripts' folder: slurmlab lifecycle rerun {name} {ref} --from DIR")
        on_create = has[1] if has else "on_create.sh"
        if source is not None:
            sources[g] = str(check_folder(source, on_create))
        else:
            path, problem, fix = local_source(has[0], None)
            if path is None:
                raise UsageError(f"group {g}'s lifecycle scripts: {problem}", fix or "")
            sources[g] = str(path)
    busy = [n.name for n in nodes if n.pending or n.phase not in ("running", "configured", "failed", "lost")]
    if busy:
        raise Conflict(f"{', '.join(busy)} of {name} is busy (being made, changed or removed)",
                       f"wait until it is Running: slurmlab list-cluster-nodes {name}")
    if source is not None:
        _use_source(st, name, sources)
    before = {n.name: n.generation for n in nodes}
    res = replace_nodes(st, name, [n.name for n in nodes], start_engine=start_engine)
    failed = res.get("FailedNodeLogicalIds") or []
    if failed:
        raise Conflict("; ".join(f"{f['NodeLogicalId']}: {f['Message']}" for f in failed),
                       f"slurmlab list-cluster-nodes {name}")
    op = next((o for o in reversed(st.operations(name)) if o.kind == REPLACE and set(o.nodes) == set(before)), None)
    return {"Nodes": list(before), "Generations": before, "OperationId": op.id if op else None, "Source": sources}


def _use_source(st: Store, name: str, sources: dict[str, str]) -> None:
    """The groups' LifeCycleConfig.SourceS3Uri set to their new folders, with an event."""
    with st.tx():
        c = st.cluster(name)
        spec = copy.deepcopy(c.spec)
        for g in spec.get("InstanceGroups", []):
            if g.get("InstanceGroupName") in sources:
                lc = g.setdefault("LifeCycleConfig", {})
                lc["SourceS3Uri"] = sources[g["InstanceGroupName"]]
                lc.setdefault("OnCreate", "on_create.sh")
        st.update_cluster(name, spec=spec)
        for g, folder in sources.items():
            st.add_event(name, "InstanceGroup", "Info", f"{g}: lifecycle scripts now from {folder} "
                         "(slurmlab lifecycle rerun --from)", grp=g)
