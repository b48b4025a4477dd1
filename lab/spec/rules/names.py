"""Names the lab turns into hostnames and Slurm names: ClusterName, InstanceGroupName, PartitionName.

Their checks replace the model's pattern check of those shapes (`STRING_HOOKS`, used by
lab.spec.contract), so a bad name gets one problem that says how to fix it.
"""

from __future__ import annotations

import re
from typing import Any

from ..servicemodel import pattern_problem

DEFAULT_PARTITION = "dev"
HOSTNAME_MAX = 63

_LABEL = re.compile(r"[a-z0-9](-*[a-z0-9])*")
_SERVICE_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")  # ClusterName, InstanceGroupName, PartitionName


def suggest_label(value: str) -> str:
    """'Workers_1' -> 'workers-1': the closest name a hostname can take."""
    s = re.sub(r"[^a-z0-9-]+", "-", value.lower())
    s = re.sub(r"-{2,}", "-", s).strip("-")
    return s or "group"


def _label_problem(value: str, kind: str) -> tuple[str, str | None] | None:
    """Why `value` cannot be part of a node's hostname / Slurm NodeName, or None if it can."""
    if _LABEL.fullmatch(value) and not (kind == "ClusterName" and value[0].isdigit()):
        return None
    bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c == "-"))})
    fix = f"use '{suggest_label(value)}'"
    why = "node names <ClusterName>-<InstanceGroupName>-<n> are hostnames"
    if bad:
        shown = " ".join(f"'{c}'" for c in bad)
        return f"'{value}': {shown} cannot be used in a hostname ({why})", fix
    if value != value.lower():
        return f"'{value}': {why}, which the lab keeps lowercase", fix
    if value.startswith("-") or value.endswith("-"):
        return f"'{value}': cannot start or end with '-' ({why})", fix
    if kind == "ClusterName" and value[0].isdigit():
        return f"'{value}': cannot start with a digit: it starts every node's hostname", f"use 'c{suggest_label(value)}'"
    return f"'{value}' cannot be used in a hostname", fix


def cluster_name_hook(value: str) -> tuple[str, str | None] | None:
    return _label_problem(value, "ClusterName")


def group_name_hook(value: str) -> tuple[str, str | None] | None:
    return _label_problem(value, "InstanceGroupName")


def partition_name_hook(value: str) -> tuple[str, str | None] | None:
    if not _SERVICE_NAME.fullmatch(value):
        bad = sorted({c for c in value if not (c.isascii() and (c.isalnum() or c == "-"))})
        if bad:
            shown = " ".join(f"'{c}'" for c in bad)
            return f"'{value}': {shown} not allowed in a partition name (letters, digits and '-')", f"use '{suggest_label(value)}'"
        return f"'{value}': a partition name starts and ends with a letter or digit", f"use '{suggest_label(value)}'"
    if value.lower() == "default":
        return f"'{value}' is reserved by Slurm (PartitionName=DEFAULT sets defaults)", f"use another name, e.g. '{DEFAULT_PARTITION}'"
    return None


def _cluster_name_or_arn(value: str, shape: Any) -> tuple[str, str | None] | None:
    if value.startswith("arn:"):
        return None  # an ARN: resolved (or not found) against the lab's clusters
    return pattern_problem(value, shape)


# Shape name -> the check that replaces the model's pattern for it: (value, shape) -> (what, fix) | None.
STRING_HOOKS = {
    "ClusterName": lambda value, shape: cluster_name_hook(value),
    "ClusterInstanceGroupName": lambda value, shape: group_name_hook(value),
    "ClusterPartitionName": lambda value, shape: partition_name_hook(value),
    "S3Uri": lambda value, shape: None,  # a lab takes local folders too; see lifecycle.check_lifecycle
    "ClusterNodeId": lambda value, shape: None,  # the lab's node ids come from its provider, not EC2
    "ClusterNameOrArn": _cluster_name_or_arn,
}


def node_type_of(group: Any) -> str | None:
    if isinstance(group, dict) and isinstance(group.get("SlurmConfig"), dict):
        t = group["SlurmConfig"].get("NodeType")
        return t if isinstance(t, str) else None
    return None


def group_name(group: Any) -> str | None:
    if isinstance(group, dict) and isinstance(group.get("InstanceGroupName"), str):
        return group["InstanceGroupName"]
    return None
