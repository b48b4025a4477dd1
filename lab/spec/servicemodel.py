"""SageMaker's service model, read at run time from the installed botocore (nothing is copied
from it), and the words every checker uses: instance type names and hints, the model's string
patterns, how a value is named in a message. The lowest layer of lab.spec (it imports nothing of
the lab), so the rules, the catalog and the contract's checker can all use it without a cycle."""

from __future__ import annotations

import datetime as _dt
import difflib
import re
from functools import cache
from typing import Any

# The operations of a HyperPod Slurm cluster that the lab serves.
OPERATIONS: tuple[str, ...] = (
    "CreateCluster",
    "UpdateCluster",
    "DescribeCluster",
    "ListClusters",
    "DeleteCluster",
    "ListClusterNodes",
    "DescribeClusterNode",
    "BatchAddClusterNodes",
    "BatchDeleteClusterNodes",
    "BatchRebootClusterNodes",
    "BatchReplaceClusterNodes",
    "ListClusterEvents",
    "DescribeClusterEvent",
    "ListClusterOperations",
    "DescribeClusterOperation",
    "StartClusterHealthCheck",
    "MoveClusterNodes",
    "UpdateClusterSoftware",
    "CreateClusterExtension",
    "DescribeClusterExtension",
    "ListClusterExtensions",
    "ListClusterExtensionVersions",
    "UpdateClusterExtension",
    "DeleteClusterExtension",
)


@cache
def service_model():
    """botocore's SageMaker model (the newest API version botocore ships)."""
    import botocore
    import botocore.loaders
    import botocore.model

    raw = botocore.loaders.Loader().load_service_model("sagemaker", "service-2")
    model = botocore.model.ServiceModel(raw, service_name="sagemaker")
    missing = [op for op in OPERATIONS if op not in model.operation_names]
    if missing:
        raise RuntimeError(f"botocore {botocore.__version__} has no {', '.join(missing)} in its SageMaker model: "
                           "pip install -U botocore")
    return model


@cache
def shape(name: str):
    """The model's shape of that name (one object per name: botocore caches its members on it)."""
    return service_model().shape_for(name)


@cache
def instance_types() -> tuple[str, ...]:
    """HyperPod's instance type names: the model's ClusterInstanceType enum, in its order."""
    return tuple(shape("ClusterInstanceType").enum)


# ------------------------------------------------------------------------------------- words
def kind(value: Any, mapping: str = "a mapping") -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, dict):
        return mapping
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (_dt.date, _dt.datetime)):
        return "a date"
    return type(value).__name__


def short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


def close_matches(word: str, choices, n: int = 3) -> list[str]:
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[h] for h in hits]


def instance_type_hint(value: str) -> str:
    types = instance_types()
    near = [f"ml.{value}"] if f"ml.{value}" in types else []
    near += [c for c in close_matches(value, types, n=4) if c not in near]
    if not near:
        return "use one of HyperPod's instance types, e.g. ml.t3.medium, ml.c5.large, ml.m5.xlarge"
    return "close valid names: " + ", ".join(near[:4])


@cache
def _regex(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(pattern)
    except re.error:  # Java-only syntax such as \p{L}: not checked
        return None


def pattern_problem(value: str, shp) -> tuple[str, str | None] | None:
    """The model's own pattern check of a string shape."""
    pattern = shp.metadata.get("pattern")
    rx = _regex(pattern) if pattern else None
    if rx is not None and not rx.fullmatch(value):
        return f"{short(value)} does not match HyperPod's pattern {pattern}", None
    return None
