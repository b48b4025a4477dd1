"""provisioning_parameters.json: the file HyperPod's own lifecycle scripts (AWS's base-config) read
beside them to learn each instance group's Slurm role. Its presence in a group's lifecycle folder asks
for HyperPod-shaped nodes (Lab.NodeEnvironment: HyperPod, unless the spec says Lab), and it gives the
groups without SlurmConfig their role, as HyperPod accepts for an older-style cluster: the
controller_group is the Controller, the login_group the Login group, every other group Compute
(worker_groups[].partition_name is its partition). A group whose SlurmConfig.NodeType says otherwise
is a contradiction, reported with both."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..problems import Loc, Problem
from .lifecycle import local_source
from .names import group_name, node_type_of

PARAMETERS = "provisioning_parameters.json"


def read_parameters(folder: Path) -> tuple[dict | None, str | None]:
    """The folder's provisioning_parameters.json as a dict (None if absent), and what is wrong with it."""
    path = folder / PARAMETERS
    if not path.is_file():
        return None, None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{path} is not valid JSON: {e}"
    if not isinstance(data, dict):
        return None, f"{path} holds a {type(data).__name__}, not a JSON object"
    return data, None


def roles(params: dict) -> dict[str, tuple[str, str | None, str]]:
    """Group name -> (NodeType, partition or None, the key that names it) for the groups the file names."""
    out: dict[str, tuple[str, str | None, str]] = {}
    for w in params.get("worker_groups") or []:
        if isinstance(w, dict) and isinstance(w.get("instance_group_name"), str):
            part = w.get("partition_name")
            out[w["instance_group_name"]] = ("Compute", part if isinstance(part, str) else None, "worker_groups")
    for key, node_type in (("login_group", "Login"), ("controller_group", "Controller")):
        if isinstance(params.get(key), str):
            out[params[key]] = (node_type, None, key)
    return out


def _folder(group: dict, base_dir: Path | None) -> Path | None:
    lc = group.get("LifeCycleConfig")
    uri = lc.get("SourceS3Uri") if isinstance(lc, dict) else None
    if not isinstance(uri, str):
        return None
    folder, _, _ = local_source(uri, base_dir)
    return folder


def apply_parameters(data: dict, *, base_dir: Path | None) -> tuple[list[Problem], dict]:
    """Read every group's provisioning_parameters.json; fill SlurmConfig of the groups that have none,
    report contradictions, and set Lab.NodeEnvironment: HyperPod when a file is found and Lab does not
    say otherwise. Returns the problems and the (copied, completed) request."""
    groups = data.get("InstanceGroups")
    if not isinstance(groups, list):
        return [], data
    problems: list[Problem] = []
    found: dict[str, tuple[str, str | None, str, Path]] = {}
    any_file = False
    for i, g in enumerate(groups):
        folder = _folder(g, base_dir) if isinstance(g, dict) else None
        if folder is None:
            continue
        params, wrong = read_parameters(folder)
        if wrong:
            problems.append(Problem(("InstanceGroups", i, "LifeCycleConfig", "SourceS3Uri"), wrong,
                                    f"fix {PARAMETERS}, or remove it to build a lab-style cluster"))
        if params is None:
            continue
        any_file = True
        for name, (node_type, part, key) in roles(params).items():
            seen = found.get(name)
            if seen is not None and seen[0] != node_type:
                problems.append(Problem(("InstanceGroups", i, "LifeCycleConfig", "SourceS3Uri"),
                                        f"{folder / PARAMETERS} names '{name}' in {key} ({node_type}), "
                                        f"{seen[3] / PARAMETERS} in {seen[2]} ({seen[0]})",
                                        "give both lifecycle folders the same provisioning_parameters.json"))
            found.setdefault(name, (node_type, part, key, folder))
    if not any_file:
        return problems, data
    new_groups = list(groups)
    for i, g in enumerate(groups):
        if not isinstance(g, dict):
            continue
        name = group_name(g)
        node_type, part, key, folder = found.get(name or "", ("Compute", None, "", None))
        loc: Loc = ("InstanceGroups", i, "SlurmConfig")
        if "SlurmConfig" not in g:
            config: dict[str, Any] = {"NodeType": node_type}
            if node_type == "Compute" and part:
                config["PartitionNames"] = [part]
            new_groups[i] = {**g, "SlurmConfig": config}
        elif folder is not None and node_type_of(g) not in (None, node_type):
            problems.append(Problem(
                loc + ("NodeType",),
                f"SlurmConfig.NodeType is {node_type_of(g)}, but {folder / PARAMETERS} names '{name}' "
                f"as its {key} ({node_type})",
                f"make them agree: set NodeType: {node_type}, or change {key} in {PARAMETERS}",
            ))
    out = {**data, "InstanceGroups": new_groups}
    lab = data.get("Lab")
    if lab is None or (isinstance(lab, dict) and "NodeEnvironment" not in lab):
        out["Lab"] = {**(lab or {}), "NodeEnvironment": "HyperPod"}
    return problems, out
