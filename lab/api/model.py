"""SageMaker's service model as the API uses it: operation names, error replies, response shaping.

The model is botocore's, read at run time by lab.spec.contract, which also checks every request
(`check_input`: botocore's ParamValidator with the lab's hooks; the same checker as the YAML spec).
Here every response is cut to its operation's output shape (members the model does not know are
dropped, timestamps become epoch seconds as AWS JSON 1.1 sends them), and errors become replies.
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from typing import Any

from lab.osutil import epoch
from lab.spec.contract import OPERATIONS, check_input, kind, service_model
from lab.spec.problems import Problem, path_str

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


def target_prefix() -> str:
    return service_model().metadata.get("targetPrefix", "SageMaker")


def operation(name: str):
    return service_model().operation_model(name)


def op_errors(name: str) -> set[str]:
    return {s.name for s in operation(name).error_shapes}


def close_operation(name: str) -> str | None:
    hits = difflib.get_close_matches(name, OPERATIONS, n=1, cutoff=0.6)
    return hits[0] if hits else None


def json_kind(value: Any) -> str:
    """'an object', 'a list', 'a string', ... for a JSON value in a message."""
    return kind(value, "an object")


# ------------------------------------------------------------------------------------ outputs
def timestamp(v: Any) -> float | None:
    """Epoch seconds of a timestamp (lab.osutil.epoch), memoised for text: a listing reads the same
    stored launch and event times again on every page."""
    return _text_epoch(v) if isinstance(v, str) else epoch(v)


@lru_cache(maxsize=8192)
def _text_epoch(v: str) -> float | None:
    return epoch(v)


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
        e = timestamp(value)
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


__all__ = ["ApiError", "OPERATIONS", "check_input", "close_operation", "json_kind", "op_errors", "operation",
           "path_str", "service_model", "shape_named", "shape_output", "target_prefix", "timestamp",
           "validation_error"]
