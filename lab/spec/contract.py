"""HyperPod's contract: SageMaker's service model from botocore, and the one checker of its shapes.

The model is read at run time from the installed botocore (`service_model()`); nothing is copied
from it. `check(value, shape_name)` runs botocore's own `ParamValidator` (required members, unknown
fields, types, minimum lengths and values) with the lab's hooks for what that validator leaves to
the service: enums, maximum lengths, sizes and values, string patterns, and per-shape string rules
(`STRING_HOOKS`: a node's hostname, a Slurm partition name, an ARN where a name may be given).
Both the YAML spec (lab.spec.load) and the API (lab.api.model) check requests here; every problem
comes back at once, each a `Problem` with its field path.

Fields the lab does not use (ExecutionRole, VpcConfig, Tags, InstanceStorageConfigs, ...) are
accepted and kept so the API can echo them back. Their structure is checked (known keys, types,
enums, required members) but never their lengths, patterns or ranges: a placeholder ARN is fine in
a lab (`LAB_USED` names the members that get every check). The lab does not require ExecutionRole
either, although the model does.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from functools import cache
from typing import Any

from botocore.validate import ParamValidator, ValidationErrors

from lab.osutil import epoch

from .problems import Loc, Problem
from .servicemodel import (  # noqa: F401 - re-exported: the contract's public words
    OPERATIONS,
    close_matches,
    instance_type_hint,
    instance_types,
    kind,
    pattern_problem,
    service_model,
    shape,
    short,
)


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
        {"InstanceGroupName", "InstanceType", "InstanceRequirements", "InstanceCount", "MinInstanceCount",
         "SlurmConfig", "LifeCycleConfig", "ThreadsPerCore", "ScheduledUpdateConfig", "AutoPatchConfig",
         "ImageReleaseVersion"}
    ),
    "ClusterOrchestrator": frozenset({"Slurm", "Eks"}),
    "ClusterOrchestratorSlurmConfig": frozenset({"SlurmConfigStrategy"}),
}

# Required by the model but not by the lab.
NOT_REQUIRED: frozenset[tuple[str, str]] = frozenset({("ClusterInstanceGroupSpecification", "ExecutionRole")})

# A string rule that replaces the model's pattern for a shape: (value, shape) -> (what, fix) or None.
StringHook = Callable[[str, Any], "tuple[str, str | None] | None"]


_EXPECTED = {"list": "a list", "string": "a string", "integer": "an integer", "long": "an integer",
             "boolean": "true or false", "timestamp": "a timestamp (epoch seconds or ISO 8601)",
             "double": "a number", "float": "a number", "blob": "a base64 string"}
_NUMBERS = ("integer", "long", "double", "float")


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
    return "use one of them" if len(choices) <= 8 else "valid values: " + ", ".join(choices[:8]) + ", ..."


# ----------------------------------------------------------------------------------- checking
class _Errors(ValidationErrors):
    """botocore's error collector, turned into Problems at once (see _Checker.report)."""

    def __init__(self, checker: _Checker):
        super().__init__()
        self.checker = checker

    def report(self, name, reason, **kwargs):
        self.checker.report(reason, kwargs)


class _Checker(ParamValidator):
    """botocore's ParamValidator that knows each value's field path, and the lab's hooks on top.

    botocore names a field by a string it builds as it descends; `_validate` keeps a stack of
    (name, loc, shape, strict) so each report lands on a `Problem` with a path tuple (for YAML lines).
    """

    def __init__(self, hooks: dict[str, StringHook], mapping_word: str, null_is_absent: bool):
        self.hooks = hooks
        self.mapping_word = mapping_word
        self.null_is_absent = null_is_absent
        self.problems: list[Problem] = []
        self.stack: list[tuple[str, Loc, Any, bool]] = []

    # botocore skips scalar list members without 'min'/'required' constraints: not here (enums, ...).
    def _shape_has_constraints(self, shape):
        return True

    def add(self, loc: Loc, what: str, fix: str | None = None) -> None:
        self.problems.append(Problem(loc, what, fix))

    def report(self, reason: str, kw: dict) -> None:
        _, loc, shp, strict = self.stack[-1]
        if reason == "missing required field":
            req = kw["required_name"]
            if (shp.name, req) not in NOT_REQUIRED:
                self.add(loc + (req,), "missing (required)", f"add {req}")
        elif reason == "unknown field":
            key = kw["unknown_param"]
            if not isinstance(key, str):
                self.add(loc, f"field names must be strings, got {key!r}", "quote it")
            else:
                near = close_matches(key, kw["valid_names"], n=1)
                self.add(loc + (key,), f"unknown field: not in HyperPod's {shp.name}",
                         f"did you mean '{near[0]}'?" if near else "remove it")
        elif reason == "invalid type":
            self.type_problem(kw["param"], shp, loc)
        elif reason in ("invalid length", "invalid range"):
            if strict:
                value, lo = kw["param"], kw["min_allowed"]
                if shp.type_name == "list":
                    self.add(loc, f"has {value} items; at least {lo} needed")
                elif shp.type_name == "string":
                    self.add(loc, "must not be empty" if lo == 1 else f"is {value} characters; at least {lo} needed")
                else:
                    hi = shp.metadata.get("max")
                    self.add(loc, f"{value} is below the minimum {lo}", f"use {lo} to {hi}" if hi is not None else f"use at least {lo}")
        elif reason in ("empty input", "more than one input"):
            self.add(loc, f"give exactly one of: {', '.join(kw['members'])}")
        else:  # documents, JSON values: not in the lab's operations today
            self.add(loc, f"not a valid {shp.name} ({reason})")

    def type_problem(self, value: Any, shp, loc: Loc) -> None:
        t = shp.type_name
        expected = self.mapping_word if t in ("structure", "map") else _EXPECTED.get(t, t)
        got = kind(value, self.mapping_word)
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            got += f" ({short(value)})"
        self.add(loc, f"expected {expected}, got {got}", _type_fix(t, value))

    def _validate(self, params, shape, errors, name):
        if self.stack:
            pname, ploc, pshape, pstrict = self.stack[-1]
            step = name[len(pname):]
            if step.startswith("["):
                part: str | int = int(step[1:-1])
            elif step.startswith(" (key: "):
                part = step[7:-1]
            else:
                part = step[1:]
            loc = ploc + (part,)
            used = LAB_USED.get(pshape.name) if pshape.type_name == "structure" else None
            strict = pstrict and (used is None or part in used)
        else:
            loc, strict = (), True
        t = shape.type_name
        if (isinstance(params, bool) and t in _NUMBERS) or (t == "timestamp" and epoch(params) is None):
            self.stack.append((name, loc, shape, strict))
            self.type_problem(params, shape, loc)
            self.stack.pop()
            return
        if t == "structure" and isinstance(params, dict) and self.null_is_absent:
            params = {k: v for k, v in params.items() if v is not None}  # JSON null: as if absent
        self.stack.append((name, loc, shape, strict))
        try:
            before = len(self.problems)
            if t == "list" and strict and isinstance(params, list) and len(params) > shape.metadata.get("max", len(params)):
                hi = shape.metadata["max"]
                self.add(loc, f"has {len(params)} items; at most {hi} {'item' if hi == 1 else 'items'} allowed")
            if t == "string" and isinstance(params, str):
                if self.string(params, shape, loc, strict):
                    return  # an enum: nothing else to check
            if t == "timestamp":
                return
            super()._validate(params, shape, errors, name)
            if t == "structure" and isinstance(params, dict) and len(self.problems) > before + 1:
                # In the order of the fields as given (botocore reports missing, unknown, then each
                # field's own); missing ones last.
                order = {k: i for i, k in enumerate(params)}
                depth = len(loc)
                self.problems[before:] = sorted(self.problems[before:], key=lambda p: order.get(
                    p.loc[depth] if len(p.loc) > depth else None, len(order)))
            if len(self.problems) == before and t in _NUMBERS and strict:
                hi, lo = shape.metadata.get("max"), shape.metadata.get("min")
                if hi is not None and params > hi:
                    self.add(loc, f"{params} is above HyperPod's maximum {hi}",
                             f"use {lo} to {hi}" if lo is not None else f"use at most {hi}")
            if len(self.problems) == before and t == "string" and strict:
                self.string_rules(params, shape, loc)
        finally:
            self.stack.pop()

    def string(self, value: str, shp, loc: Loc, strict: bool) -> bool:
        """An enum value (True: checked, whatever the outcome)."""
        enum = shp.enum
        if not enum:
            return False
        if value not in enum:
            if shp.name == "ClusterInstanceType":
                self.add(loc, f"'{value}' is not a HyperPod instance type", instance_type_hint(value))
            elif len(enum) <= 8:
                self.add(loc, f"{short(value)} is not one of: {', '.join(enum)}", _enum_fix(value, enum))
            else:
                self.add(loc, f"{short(value)} is not a valid {shp.name}", _enum_fix(value, enum))
        return True

    def string_rules(self, value: str, shp, loc: Loc) -> None:
        hi = shp.metadata.get("max")
        if hi is not None and len(value) > hi:
            self.add(loc, f"is {len(value)} characters; at most {hi} allowed", "shorten it")
            return
        hook = self.hooks.get(shp.name, pattern_problem)
        bad = hook(value, shp)
        if bad:
            self.add(loc, *bad)


def check(
    value: Any,
    shape_name: str,
    *,
    hooks: dict[str, StringHook] | None = None,
    mapping_word: str = "a mapping",
    null_is_absent: bool = False,
    top_level_extra: tuple[str, ...] = (),
) -> list[Problem]:
    """Every way `value` breaks the model's `shape_name`, each a Problem with its field path.

    `hooks` replace the model's pattern check per string shape (default: STRING_HOOKS of
    lab.spec.rules); `mapping_word` is "a mapping" (YAML) or "an object" (JSON); `null_is_absent`
    reads a JSON null member as a missing one; `top_level_extra` names top-level keys that are not
    HyperPod's (the lab's own `Lab`, checked by the lab's rules)."""
    checker = _Checker(hooks if hooks is not None else _default_hooks(), mapping_word, null_is_absent)
    if isinstance(value, dict) and top_level_extra:
        value = {k: v for k, v in value.items() if k not in top_level_extra}
    checker._validate(value, shape(shape_name), _Errors(checker), "")
    return checker.problems


@cache
def _default_hooks() -> dict[str, StringHook]:
    from .rules import STRING_HOOKS

    return STRING_HOOKS


def check_input(op_name: str, body: Any) -> list[Problem]:
    """An API request body against its operation's input shape (JSON words, null = absent)."""
    if not isinstance(body, dict):
        return [Problem((), f"the request body must be a JSON object, got {kind(body, 'an object')}")]
    input_shape = service_model().operation_model(op_name).input_shape
    if input_shape is None:
        return []
    return check(body, input_shape.name, mapping_word="an object", null_is_absent=True)
