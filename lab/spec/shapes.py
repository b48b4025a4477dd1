"""Check a request body against SageMaker's service model (the copy in `_service_model.py`).

This is HyperPod's own contract, field by field: unknown fields, missing required fields, types,
enums, string patterns and lengths, list sizes and integer ranges, each reported with its path.

Fields the lab does not use (ExecutionRole, VpcConfig, Tags, InstanceStorageConfigs, ...) are
accepted and kept so the API can echo them back. Their structure is checked (known keys, types,
enums, required members) but never their string patterns, lengths or ranges: a placeholder ARN is
fine in a lab. The lab does not require ExecutionRole either, although the model does.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import re
from collections.abc import Callable
from functools import cache
from typing import Any

from ._service_model import SHAPES
from .problems import Loc, Problem

# Members the lab uses, per structure: these get the full set of checks. A structure that is not
# listed is fully checked when it is reached from a checked member (SlurmConfig, LifeCycleConfig...).
LAB_USED: dict[str, frozenset[str]] = {
    "CreateClusterRequest": frozenset(
        {"ClusterName", "InstanceGroups", "NodeRecovery", "NodeProvisioningMode", "Orchestrator"}
    ),
    "UpdateClusterRequest": frozenset(
        {"ClusterName", "InstanceGroups", "NodeRecovery", "NodeProvisioningMode", "Orchestrator", "InstanceGroupsToDelete"}
    ),
    "ClusterInstanceGroupSpecification": frozenset(
        {
            "InstanceGroupName",
            "InstanceType",
            "InstanceRequirements",
            "InstanceCount",
            "MinInstanceCount",
            "SlurmConfig",
            "LifeCycleConfig",
            "ThreadsPerCore",
        }
    ),
    "ClusterOrchestrator": frozenset({"Slurm", "Eks"}),
    "ClusterOrchestratorSlurmConfig": frozenset({"SlurmConfigStrategy"}),
}

# Required by the model but not by the lab.
NOT_REQUIRED: dict[str, frozenset[str]] = {
    "ClusterInstanceGroupSpecification": frozenset({"ExecutionRole"}),
}

INSTANCE_TYPES: tuple[str, ...] = tuple(SHAPES["ClusterInstanceType"]["enum"])

# A string check that replaces the model's pattern for a shape: value -> (what, fix) or None.
StringHook = Callable[[str], "tuple[str, str | None] | None"]


def _kind(value: Any) -> str:
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
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (_dt.date, _dt.datetime)):
        return "a date"
    return type(value).__name__


_EXPECTED = {
    "structure": "a mapping",
    "list": "a list",
    "map": "a mapping",
    "string": "a string",
    "integer": "an integer",
    "long": "an integer",
    "boolean": "true or false",
    "timestamp": "a timestamp",
    "double": "a number",
    "float": "a number",
}


@cache
def _regex(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(pattern)
    except re.error:  # Java-only syntax such as \p{L}: not checked
        return None


def close_matches(word: str, choices: tuple[str, ...] | list[str], n: int = 3) -> list[str]:
    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(word.lower(), list(lowered), n=n, cutoff=0.6)
    return [lowered[h] for h in hits]


def instance_type_hint(value: str) -> str:
    near = []
    if f"ml.{value}" in INSTANCE_TYPES:
        near.append(f"ml.{value}")
    near += [c for c in close_matches(value, INSTANCE_TYPES, n=4) if c not in near]
    if not near:
        return "use one of HyperPod's instance types, e.g. ml.t3.medium, ml.c5.large, ml.m5.xlarge"
    return "close valid names: " + ", ".join(near[:4])


def _typed_ok(t: str, value: Any) -> bool:
    if t == "structure" or t == "map":
        return isinstance(value, dict)
    if t == "list":
        return isinstance(value, list)
    if t == "string":
        return isinstance(value, str)
    if t in ("integer", "long"):
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "boolean":
        return isinstance(value, bool)
    if t in ("double", "float"):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if t == "timestamp":
        return isinstance(value, (str, int, float, _dt.date)) and not isinstance(value, bool)
    return True


def check(
    value: Any,
    shape: str,
    loc: Loc = (),
    *,
    strict: bool = True,
    hooks: dict[str, StringHook] | None = None,
) -> list[Problem]:
    """Every way `value` breaks the model's `shape`. `hooks` replace the pattern check of a string
    shape (by shape name) in checked fields."""
    problems: list[Problem] = []
    hooks = hooks or {}

    def walk(value: Any, shape_name: str, loc: Loc, strict: bool) -> None:
        shape = SHAPES[shape_name]
        t = shape["type"]
        if not _typed_ok(t, value):
            problems.append(Problem(loc, f"expected {_EXPECTED.get(t, t)}, got {_describe(value)}", _type_fix(t, value)))
            return

        if t == "structure":
            members: dict[str, str] = shape["members"]
            used = LAB_USED.get(shape_name)
            optional = NOT_REQUIRED.get(shape_name, frozenset())
            for key, sub in value.items():
                if not isinstance(key, str):
                    problems.append(Problem(loc, f"field names must be strings, got {key!r}", "quote it"))
                elif key in members:
                    child_strict = strict and (used is None or key in used)
                    walk(sub, members[key], loc + (key,), child_strict)
                elif not (not loc and key == "Lab"):  # `Lab`: the lab's own top-level key (rules.py)
                    near = close_matches(key, list(members), n=1)
                    fix = f"did you mean '{near[0]}'?" if near else "remove it"
                    problems.append(Problem(loc + (key,), f"unknown field: not in HyperPod's {shape_name}", fix))
            for req in shape.get("required", ()):
                if req not in value and req not in optional:
                    problems.append(Problem(loc + (req,), "missing (required)", f"add {req}"))
            return

        if t == "list":
            n = len(value)
            if strict and "min" in shape and n < shape["min"]:
                problems.append(Problem(loc, f"has {n} items; at least {shape['min']} needed", None))
            if strict and "max" in shape and n > shape["max"]:
                many = "item" if shape["max"] == 1 else "items"
                problems.append(Problem(loc, f"has {n} items; at most {shape['max']} {many} allowed", None))
            for i, item in enumerate(value):
                walk(item, shape["member"], loc + (i,), strict)
            return

        if t == "map":
            for k, v in value.items():
                walk(k, shape["key"], loc + (str(k),), strict)
                walk(v, shape["value"], loc + (str(k),), strict)
            return

        if t == "string":
            if "enum" in shape:
                if value not in shape["enum"]:
                    choices = shape["enum"]
                    if shape_name == "ClusterInstanceType":
                        problems.append(Problem(loc, f"'{value}' is not a HyperPod instance type", instance_type_hint(value)))
                    elif len(choices) <= 8:
                        problems.append(Problem(loc, f"'{value}' is not one of: {', '.join(choices)}", _enum_fix(value, choices)))
                    else:
                        problems.append(Problem(loc, f"'{value}' is not a valid {shape_name}", _enum_fix(value, choices)))
                return
            if not strict:
                return
            n = len(value)
            if "min" in shape and n < shape["min"]:
                problems.append(Problem(loc, "must not be empty" if shape["min"] == 1 else f"is {n} characters; at least {shape['min']} needed", None))
                return
            if "max" in shape and n > shape["max"]:
                problems.append(Problem(loc, f"is {n} characters; at most {shape['max']} allowed", "shorten it"))
                return
            if shape_name in hooks:
                bad = hooks[shape_name](value)
                if bad:
                    problems.append(Problem(loc, bad[0], bad[1]))
                return
            pattern = shape.get("pattern")
            rx = _regex(pattern) if pattern else None
            if rx is not None and not rx.fullmatch(value):
                problems.append(Problem(loc, f"'{value}' does not match HyperPod's pattern {pattern}", None))
            return

        if t in ("integer", "long") and strict:
            lo, hi = shape.get("min"), shape.get("max")
            if lo is not None and value < lo:
                problems.append(Problem(loc, f"{value} is below the minimum {lo}", f"use {lo} to {hi}" if hi is not None else f"use at least {lo}"))
            elif hi is not None and value > hi:
                problems.append(Problem(loc, f"{value} is above HyperPod's maximum {hi}", f"use {lo} to {hi}" if lo is not None else f"use at most {hi}"))

    walk(value, shape, loc, strict)
    return problems


def _describe(value: Any) -> str:
    kind = _kind(value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"{kind} ({value!r})"
    return kind


def _type_fix(t: str, value: Any) -> str | None:
    if t == "string":
        if isinstance(value, bool):
            return "quote it (YAML reads yes/no/on/off/true/false as booleans)"
        if isinstance(value, (int, float)):
            return f"quote it: '{value}'"
        if isinstance(value, _dt.date):
            return "quote it (YAML reads it as a date)"
    if t == "list" and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return f"make it a list: [{value}]"
    if t in ("integer", "long") and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return f"write it without quotes: {value.strip()}"
    return None


def _enum_fix(value: str, choices: list[str]) -> str:
    near = close_matches(value, choices, n=1)
    if near:
        return f"did you mean '{near[0]}'?"
    if len(choices) <= 8:
        return "use one of them"
    return "valid values: " + ", ".join(choices[:8]) + ", ..."
