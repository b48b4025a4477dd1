"""An independent check of every response against botocore's output shape: types, enums, required
members, no unknown members, timestamps as epoch-second numbers (AWS JSON 1.1)."""

from __future__ import annotations

import json

# Required by the model, absent in HyperPod too for nodes still being provisioned
# (listed only with IncludeNodeLogicalIds): no instance has been launched for them yet.
MAY_BE_ABSENT = {("ClusterNodeSummary", "LaunchTime"), ("ClusterNodeSummary", "InstanceId")}


def problems(value, shape, path="") -> list[str]:
    out: list[str] = []
    t = shape.type_name
    if t == "structure":
        if not isinstance(value, dict):
            return [f"{path}: expected object, got {type(value).__name__}"]
        for k, v in value.items():
            if k not in shape.members:
                out.append(f"{path}.{k}: not in {shape.name}")
            else:
                out += problems(v, shape.members[k], f"{path}.{k}")
        for r in shape.required_members:
            if r not in value and (shape.name, r) not in MAY_BE_ABSENT:
                out.append(f"{path}.{r}: required by {shape.name}, missing")
    elif t == "list":
        if not isinstance(value, list):
            return [f"{path}: expected list"]
        for i, v in enumerate(value):
            out += problems(v, shape.member, f"{path}[{i}]")
    elif t == "map":
        if not isinstance(value, dict):
            return [f"{path}: expected map"]
        for k, v in value.items():
            out += problems(k, shape.key, f"{path}<{k}>") + problems(v, shape.value, f"{path}.{k}")
    elif t == "string":
        if not isinstance(value, str):
            out.append(f"{path}: expected string, got {value!r}")
        elif shape.enum and value not in shape.enum:
            out.append(f"{path}: {value!r} not in enum {shape.name}")
    elif t in ("integer", "long"):
        if not isinstance(value, int) or isinstance(value, bool):
            out.append(f"{path}: expected integer, got {value!r}")
    elif t == "boolean":
        if not isinstance(value, bool):
            out.append(f"{path}: expected boolean, got {value!r}")
    elif t == "timestamp":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            out.append(f"{path}: expected epoch seconds, got {value!r}")
    return out


def check_response(op_model, raw: bytes) -> None:
    body = json.loads(raw) if raw else {}
    if "__type" in body:
        assert isinstance(body.get("message"), str) and body["message"], body
        return
    shape = op_model.output_shape
    found = problems(body, shape, op_model.name) if shape is not None else []
    assert not found, "response breaks the model:\n  " + "\n  ".join(found)


def attach(client) -> None:
    def hook(http_response, parsed, model, **kwargs):
        check_response(model, http_response.content)

    client.meta.events.register("after-call.sagemaker", hook)
