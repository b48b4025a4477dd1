"""The lab's rules for a whole cluster, on top of HyperPod's model: what a Slurm cluster of local VMs
needs (one Controller, at most one Login group, node names that are hostnames, the lab's size cap).

They run on the raw request body (a dict) and tolerate parts of it being malformed, so that one
run reports every problem; the service-model check (lab.spec.contract) reports the malformed parts.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lab import settings

from ..problems import Loc, Problem
from .labkey import check_lab
from .lifecycle import check_lifecycle
from .maintenance import check_maintenance
from .provisioning import apply_parameters
from .names import HOSTNAME_MAX, cluster_name_hook, group_name, group_name_hook, node_type_of

DEFAULT_MAX_NODES_PER_GROUP = settings.MAX_NODES_PER_GROUP.default
MAX_NODES_ENV = settings.MAX_NODES_PER_GROUP.name


def max_nodes_per_group() -> int:
    """The lab's sanity cap on InstanceCount: `$SLURMLAB_MAX_NODES_PER_GROUP`, else 64."""
    return settings.MAX_NODES_PER_GROUP.get()



def _count(group: Any, key: str = "InstanceCount") -> int | None:
    if isinstance(group, dict):
        v = group.get(key)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def _ref(i: int, group: Any) -> str:
    name = group_name(group)
    return f"'{name}' (InstanceGroups[{i}])" if name else f"InstanceGroups[{i}]"


def check_cluster(
    data: dict, *, base_dir: Path | None, max_nodes: int, check_files: bool = True
) -> tuple[list[Problem], dict]:
    """The lab's rules for a whole cluster. Returns the problems and a copy of `data` whose local
    lifecycle paths are absolute. `check_files=False` leaves the lifecycle folders unchecked."""
    problems: list[Problem] = []
    if check_files:
        # provisioning_parameters.json beside the lifecycle scripts: roles of groups without
        # SlurmConfig, and HyperPod-shaped nodes (rules/provisioning.py)
        problems, data = apply_parameters(data, base_dir=base_dir)
    out = dict(data)

    # Orchestrator: Slurm only (absent means Slurm: the lab builds nothing else).
    orch = data.get("Orchestrator")
    if isinstance(orch, dict):
        if "Eks" in orch:
            problems.append(Problem(("Orchestrator", "Eks"), "the lab builds Slurm clusters only", "use Orchestrator: {Slurm: {SlurmConfigStrategy: Managed}}"))
        elif "Slurm" not in orch:
            problems.append(Problem(("Orchestrator",), "names no orchestrator", "use Orchestrator: {Slurm: {SlurmConfigStrategy: Managed}}, or leave Orchestrator out"))

    # The lab's own key.
    if "Lab" in data:
        problems += check_lab(data["Lab"], data.get("InstanceGroups"))

    groups = data.get("InstanceGroups")
    if "InstanceGroups" not in data:
        problems.append(Problem(("InstanceGroups",), "missing: a Slurm cluster needs at least a Controller group", "add InstanceGroups with a group whose SlurmConfig.NodeType is Controller"))
        return problems, out
    if not isinstance(groups, list):
        return problems, out

    cluster = data.get("ClusterName")
    cluster_ok = isinstance(cluster, str) and cluster_name_hook(cluster) is None and len(cluster) <= HOSTNAME_MAX
    digits = len(str(max_nodes))
    seen: dict[str, int] = {}
    new_groups = list(groups)

    for i, g in enumerate(groups):
        loc: Loc = ("InstanceGroups", i)
        if not isinstance(g, dict):
            continue
        name = group_name(g)
        # duplicate names
        if name is not None:
            if name in seen:
                j = seen[name]
                problems.append(Problem(loc + ("InstanceGroupName",), f"'{name}' is also the name of InstanceGroups[{j}]", "give every instance group its own name"))
            else:
                seen[name] = i
        # node names must stay hostnames
        if name is not None and cluster_ok and group_name_hook(name) is None:
            longest = f"{cluster}-{name}-{'9' * digits}"
            if len(longest) > HOSTNAME_MAX:
                problems.append(Problem(
                    loc + ("InstanceGroupName",),
                    f"node names like '{longest}' would be {len(longest)} characters; a hostname has at most {HOSTNAME_MAX}",
                    f"shorten ClusterName or InstanceGroupName by {len(longest) - HOSTNAME_MAX}",
                ))
        # instance type: exactly one of InstanceType / InstanceRequirements
        has_type, has_req = "InstanceType" in g, "InstanceRequirements" in g
        if not has_type and not has_req:
            problems.append(Problem(loc + ("InstanceType",), "missing: the lab sizes each VM by its instance type", "add InstanceType, e.g. InstanceType: ml.c5.large"))
        elif has_type and has_req:
            problems.append(Problem(loc + ("InstanceRequirements",), "InstanceType and InstanceRequirements cannot both be given", "keep one of them"))
        # Slurm role
        node_type = node_type_of(g)
        if "SlurmConfig" not in g:
            problems.append(Problem(
                loc + ("SlurmConfig",),
                "missing: the lab needs each group's Slurm role",
                "add SlurmConfig: {NodeType: Compute} (or Controller, or Login), or name the groups in a "
                "provisioning_parameters.json in the lifecycle folder",
            ))
        count = _count(g)
        if count is not None and count > max_nodes and node_type != "Controller":
            problems.append(Problem(
                loc + ("InstanceCount",),
                f"{count} is more than the lab's limit of {max_nodes} nodes per group",
                f"lower it, or raise the limit with {MAX_NODES_ENV}",
            ))
        min_count = _count(g, "MinInstanceCount")
        if count is not None and min_count is not None and min_count > count:
            problems.append(Problem(loc + ("MinInstanceCount",), f"{min_count} is more than InstanceCount ({count})", f"use at most {count}"))
        if node_type == "Controller":
            if count is not None and count != 1:
                problems.append(Problem(loc + ("InstanceCount",), f"the Controller group must have exactly 1 instance, not {count} (the lab runs one slurmctld, no backup controllers)", "set InstanceCount: 1"))
            if min_count is not None and min_count != 1:
                problems.append(Problem(loc + ("MinInstanceCount",), f"the Controller group's MinInstanceCount must be 1, not {min_count}", "set it to 1, or leave it out"))
        if node_type == "Login" and count == 0:
            problems.append(Problem(loc + ("InstanceCount",), "a Login group needs at least 1 instance (the cluster waits for one login node)", "set InstanceCount: 1, or remove the group"))
        sc = g.get("SlurmConfig")
        if node_type in ("Controller", "Login") and isinstance(sc, dict) and sc.get("PartitionNames"):
            problems.append(Problem(loc + ("SlurmConfig", "PartitionNames"), f"only Compute groups belong to partitions, this is a {node_type} group", "remove PartitionNames"))
        problems += check_maintenance(g, loc, node_type)  # ScheduledUpdateConfig, AutoPatchConfig
        # lifecycle scripts
        if "LifeCycleConfig" in g and check_files:
            lp, uri = check_lifecycle(g["LifeCycleConfig"], loc + ("LifeCycleConfig",), base_dir)
            problems += lp
            if uri is not None and uri != g["LifeCycleConfig"].get("SourceS3Uri"):
                new_groups[i] = {**g, "LifeCycleConfig": {**g["LifeCycleConfig"], "SourceS3Uri": uri}}

    out["InstanceGroups"] = new_groups

    # Exactly one Controller group, at most one Login group.
    for role, limit in (("Controller", 1), ("Login", 1)):
        idx = [i for i, g in enumerate(groups) if node_type_of(g) == role]
        if role == "Controller" and not idx and groups:
            problems.append(Problem(("InstanceGroups",), "no group has SlurmConfig.NodeType: Controller", "add a group with SlurmConfig.NodeType: Controller and InstanceCount: 1"))
        if len(idx) > limit:
            refs = [_ref(i, groups[i]) for i in idx]
            names = ", ".join(refs[:-1]) + " and " + refs[-1]
            both = "both" if len(idx) == 2 else "all"
            if role == "Controller":
                why, fix = "a cluster has exactly one", "make the others Login or Compute groups"
            else:
                why, fix = "the lab allows one Login group", "put all login nodes in one group (raise its InstanceCount)"
            for i in idx[limit:]:
                problems.append(Problem(("InstanceGroups", i, "SlurmConfig", "NodeType"), f"{names} are {both} {role} groups; {why}", fix))
    return problems, out

