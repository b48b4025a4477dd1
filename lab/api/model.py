"""SageMaker's service model, read at run time from botocore: operation names, input checks,
response shaping, error codes.

Nothing here is retyped from the model: the operations the lab serves are looked up in it, every
request is checked against its input shape, and every response is cut to its output shape (members
the model does not know are dropped, timestamps become epoch seconds as AWS JSON 1.1 sends them).
"""

from __future__ import annotations

import datetime as dt
import difflib
import math
import re
from functools import cache, lru_cache
from typing import Any

from lab.spec.problems import Problem, path_str

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
)

# String shapes whose model pattern the lab's own identifiers need not follow: the lab's node ids
# come from its provider (a real VM's id in a lab is not an EC2 id). Checked for type and length only.
UNPATTERNED = frozenset({"ClusterNodeId"})


class ApiError(Exception):
    """An error reply: `code` becomes `__type`, `status` the HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400, problems: list[Problem] | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status
        self.problems = problems or []

    def body(self) -> dict:
        out: dict[str, Any] = {"__type": self.code, "message": self.message}
        if self.problems:
            out["Problems"] = [{"Field": p.path, "Message": p.what + (f"; {p.fix}" if p.fix else "")} for p in self.problems]
        return out


def validation_error(problems: list[Problem], code: str = "ValidationException") -> ApiError:
    n = len(problems)
    lines = [p.format() for p in problems]
    if code == "ValidationException":
        head = f"{n} validation error{'s' if n != 1 else ''} detected: "
    else:
        head = f"{n} problem{'s' if n != 1 else ''}: "
    return ApiError(code, head + "; ".join(lines), 400, problems)


@cache
def service_model():
    """botocore's SageMaker model (the newest API version botocore ships)."""
    import botocore.loaders
    import botocore.model

    loader = botocore.loaders.Loader()
    raw = loader.load_service_model("sagemaker", "service-2")
    model = botocore.model.ServiceModel(raw, service_name="sagemaker")
    missing = [op for op in OPERATIONS if op not in model.operation_names]
    if missing:
        import botocore

        raise RuntimeError(f"botocore {botocore.__version__} has no {', '.join(missing)} in its SageMaker model: "
                           "pip install -U botocore")
    return model


def target_prefix() -> str:
    return service_model().metadata.get("targetPrefix", "SageMaker")


def operation(name: str):
    return service_model().operation_model(name)


def op_errors(name: str) -> set[str]:
    return {s.name for s in operation(name).error_shapes}


def close_operation(name: str) -> str | None:
    hits = difflib.get_close_matches(name, OPERATIONS, n=1, cutoff=0.6)
    return hits[0] if hits else None


# ------------------------------------------------------------------------------------- inputs
@cache
def _regex(pattern: str) -> re.Pattern | None:
    try:
        return re.compile(pattern)
    except re.error:  # Java-only syntax (\p{L}): not checked
        return None


def _kind(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, dict):
        return "an object"
    if isinstance(v, list):
        return "a list"
    return type(v).__name__


_EXPECT = {"structure": "an object", "map": "an object", "list": "a list", "string": "a string",
           "integer": "an integer", "long": "an integer", "boolean": "true or false",
           "timestamp": "a timestamp (epoch seconds or ISO 8601)", "double": "a number", "float": "a number",
           "blob": "a base64 string"}


def _short(v: Any) -> str:
    r = repr(v)
    return r if len(r) <= 60 else r[:57] + "..."


def parse_timestamp(v: Any) -> float | None:
    """Epoch seconds from a JSON timestamp (a number, or an ISO 8601 string); None if it is neither."""
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        f = float(v)
        return f if math.isfinite(f) else None
    if isinstance(v, str):
        return _parse_text_time(v) if len(v) <= 64 else None
    return None


@lru_cache(maxsize=8192)
def _parse_text_time(v: str) -> float | None:
    s = v.strip()
    if s[:1].isdigit() and ("-" in s[1:] or "T" in s):
        try:
            t = dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
        except ValueError:
            return None
        if t.tzinfo is None:
            t = t.replace(tzinfo=dt.timezone.utc)
        return t.timestamp()
    try:
        f = float(s)
    except ValueError:
        return None
    return f if math.isfinite(f) else None


def check_input(op_name: str, body: Any) -> list[Problem]:
    """Every way `body` breaks the operation's input shape, each with its field path."""
    shape = operation(op_name).input_shape
    problems: list[Problem] = []
    if shape is None:
        return problems

    def walk(value: Any, shape, loc: tuple) -> None:
        t = shape.type_name
        meta = shape.metadata
        ok = {
            "structure": isinstance(value, dict), "map": isinstance(value, dict), "list": isinstance(value, list),
            "string": isinstance(value, str), "blob": isinstance(value, str),
            "integer": isinstance(value, int) and not isinstance(value, bool),
            "long": isinstance(value, int) and not isinstance(value, bool),
            "boolean": isinstance(value, bool),
            "double": isinstance(value, (int, float)) and not isinstance(value, bool),
            "float": isinstance(value, (int, float)) and not isinstance(value, bool),
            "timestamp": parse_timestamp(value) is not None,
        }.get(t, True)
        if not ok:
            problems.append(Problem(loc, f"expected {_EXPECT.get(t, t)}, got {_kind(value)}"
                                         + (f" ({_short(value)})" if isinstance(value, (str, int, float)) and not isinstance(value, bool) else "")))
            return
        if t == "structure":
            members = shape.members
            for k, v in value.items():
                if k not in members:
                    near = difflib.get_close_matches(k, list(members), n=1, cutoff=0.6)
                    problems.append(Problem(loc + (k,), f"unknown field: not in {shape.name}",
                                            f"did you mean '{near[0]}'?" if near else "remove it"))
                elif v is None:
                    continue  # JSON null: as if absent
                else:
                    walk(v, members[k], loc + (k,))
            for req in shape.required_members:
                if value.get(req) is None:
                    problems.append(Problem(loc + (req,), "missing (required)", f"add {req}"))
            return
        if t == "list":
            n = len(value)
            if "min" in meta and n < meta["min"]:
                problems.append(Problem(loc, f"has {n} items; at least {meta['min']} needed"))
            if "max" in meta and n > meta["max"]:
                problems.append(Problem(loc, f"has {n} items; at most {meta['max']} allowed"))
                return
            for i, item in enumerate(value):
                walk(item, shape.member, loc + (i,))
            return
        if t == "map":
            for k, v in value.items():
                walk(k, shape.key, loc + (str(k)[:40],))
                walk(v, shape.value, loc + (str(k)[:40],))
            return
        if t == "string":
            enum = meta.get("enum")
            if enum:
                if value not in enum:
                    near = difflib.get_close_matches(value, enum, n=1, cutoff=0.6)
                    choices = ", ".join(enum) if len(enum) <= 8 else ", ".join(enum[:8]) + ", ..."
                    problems.append(Problem(loc, f"{_short(value)} is not one of: {choices}",
                                            f"did you mean '{near[0]}'?" if near else None))
                return
            n = len(value)
            if "min" in meta and n < meta["min"]:
                problems.append(Problem(loc, "must not be empty" if meta["min"] == 1 else f"is {n} characters; at least {meta['min']} needed"))
                return
            if "max" in meta and n > meta["max"]:
                problems.append(Problem(loc, f"is {n} characters; at most {meta['max']} allowed", "shorten it"))
                return
            pattern = meta.get("pattern")
            if pattern and shape.name not in UNPATTERNED:
                if shape.name == "ClusterNameOrArn" and value.startswith("arn:"):
                    return  # an ARN: resolved (or not found) against the lab's clusters
                rx = _regex(pattern)
                if rx is not None and not rx.fullmatch(value):
                    problems.append(Problem(loc, f"{_short(value)} does not match the pattern {pattern}"))
            return
        if t in ("integer", "long"):
            lo, hi = meta.get("min"), meta.get("max")
            if lo is not None and value < lo:
                problems.append(Problem(loc, f"{value} is below the minimum {lo}"))
            elif hi is not None and value > hi:
                problems.append(Problem(loc, f"{value} is above the maximum {hi}"))

    if not isinstance(body, dict):
        return [Problem((), f"the request body must be a JSON object, got {_kind(body)}")]
    walk(body, shape, ())
    return problems


# ------------------------------------------------------------------------------------ outputs
def _epoch(v: Any) -> float | None:
    if isinstance(v, dt.datetime):
        return v.timestamp()
    return parse_timestamp(v)


def shape_value(value: Any, shape) -> Any:
    """`value` cut to `shape`: unknown members and None dropped, timestamps as epoch seconds."""
    t = shape.type_name
    if value is None:
        return None
    if t == "structure":
        if not isinstance(value, dict):
            return None
        out = {}
        for k, sub in shape.members.items():
            if k in value:
                v = shape_value(value[k], sub)
                if v is not None:
                    out[k] = v
        return out
    if t == "list":
        if not isinstance(value, (list, tuple)):
            return None
        return [x for x in (shape_value(v, shape.member) for v in value) if x is not None]
    if t == "map":
        if not isinstance(value, dict):
            return None
        return {k: shape_value(v, shape.value) for k, v in value.items() if v is not None}
    if t == "timestamp":
        e = _epoch(value)
        return round(e, 3) if e is not None else None
    if t in ("integer", "long"):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if t == "boolean":
        return value if isinstance(value, bool) else None
    if t in ("double", "float"):
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if t == "string":
        return value if isinstance(value, str) else str(value)
    return value


def shape_output(op_name: str, value: dict) -> dict:
    shape = operation(op_name).output_shape
    if shape is None:
        return {}
    return shape_value(value, shape) or {}


def shape_named(name: str, value: Any) -> Any:
    """`value` cut to the named shape (for the lab's own endpoints that reuse SageMaker's shapes)."""
    return shape_value(value, service_model().shape_for(name))


__all__ = ["ApiError", "OPERATIONS", "check_input", "close_operation", "op_errors", "operation",
           "parse_timestamp", "path_str", "service_model", "shape_named", "shape_output", "target_prefix",
           "validation_error"]
