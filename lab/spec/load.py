"""Build a ClusterSpec from a YAML file or a CreateCluster / UpdateCluster request body.

Every entry point runs the same checks, HyperPod's service model first (lab.spec.contract: botocore's
validator with the lab's hooks) and the lab's rules second (lab.spec.rules), collects every problem,
and raises one `SpecInvalid` (a `lab.errors.SpecError`) listing them all, each as
`<file>:<line>: <field path>: <what is wrong>; <fix>`. The pydantic models (lab.spec.models) are
built from the checked data: they are the spec's type, not another validator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from . import contract, rules, yamlsrc
from .models import ClusterSpec
from .problems import Problem, SpecInvalid


def load_spec(path: str | Path, *, max_nodes_per_group: int | None = None, check_files: bool = True) -> ClusterSpec:
    """Read a cluster spec from YAML. Relative lifecycle paths are resolved against the file's folder
    (and stored absolute in SourceS3Uri)."""
    path = Path(path)
    doc = yamlsrc.read(path)
    return _validate(doc.data, doc=doc, base_dir=path.resolve().parent, max_nodes=max_nodes_per_group, check_files=check_files)


def loads_spec(
    text: str,
    *,
    source: str = "<string>",
    base_dir: str | Path | None = None,
    max_nodes_per_group: int | None = None,
    check_files: bool = True,
) -> ClusterSpec:
    """Like load_spec, from a string; `source` names it in messages."""
    doc = yamlsrc.parse(text, source)
    return _validate(
        doc.data, doc=doc, base_dir=Path(base_dir) if base_dir else None, max_nodes=max_nodes_per_group, check_files=check_files
    )


def spec_from_request(
    request: dict[str, Any],
    *,
    base_dir: str | Path | None = None,
    max_nodes_per_group: int | None = None,
    check_files: bool = True,
) -> ClusterSpec:
    """A CreateCluster request body (as boto3 sends it; `Lab` is accepted too). Lifecycle paths must
    be absolute unless `base_dir` is given. `check_files=False` skips the lifecycle folder checks
    (for specs the engine stored itself, whose folders may have gone since)."""
    return _validate(
        request, doc=None, base_dir=Path(base_dir) if base_dir else None, max_nodes=max_nodes_per_group, check_files=check_files
    )


def apply_update(
    spec: ClusterSpec,
    request: dict[str, Any],
    *,
    base_dir: str | Path | None = None,
    max_nodes_per_group: int | None = None,
    check_files: bool = True,
) -> ClusterSpec:
    """The cluster after an UpdateCluster request: groups named in InstanceGroups are replaced (new
    names are added at the end), InstanceGroupsToDelete are removed, top-level fields given replace
    the old ones. The result is checked like a new cluster; problems are reported at the request's
    paths where they come from the request."""
    body = dict(request) if isinstance(request, dict) else request
    if isinstance(body, dict):
        body.setdefault("ClusterName", spec.ClusterName)
    problems = check_update(body)
    if problems:
        raise SpecInvalid(problems)

    current = spec.to_dict()
    old = {g["InstanceGroupName"]: g for g in current["InstanceGroups"]}
    updates = body.get("InstanceGroups", [])
    deletes = body.get("InstanceGroupsToDelete", [])
    for j, g in enumerate(updates):
        name = g["InstanceGroupName"]
        prev = old.get(name)
        if name in deletes:
            problems.append(Problem(("InstanceGroups", j, "InstanceGroupName"), f"'{name}' is also in InstanceGroupsToDelete", "either update the group or delete it"))
        if prev is None:
            continue
        prev_type = prev.get("SlurmConfig", {}).get("NodeType")
        new_type = g.get("SlurmConfig", {}).get("NodeType")
        if new_type is not None and new_type != prev_type:
            problems.append(Problem(("InstanceGroups", j, "SlurmConfig", "NodeType"), f"cannot change group '{name}' from {prev_type} to {new_type}", "add a new group and delete this one"))
        prev_types = [prev["InstanceType"]] if "InstanceType" in prev else prev.get("InstanceRequirements", {}).get("InstanceTypes")
        new_types = [g["InstanceType"]] if "InstanceType" in g else g.get("InstanceRequirements", {}).get("InstanceTypes")
        if new_types is not None and new_types != prev_types:
            problems.append(Problem(("InstanceGroups", j, "InstanceType" if "InstanceType" in g else "InstanceRequirements"), f"the lab cannot change the instance type of group '{name}' ({', '.join(prev_types or [])})", "add a new group and delete this one"))
    for k, name in enumerate(deletes):
        if name not in old:
            problems.append(Problem(("InstanceGroupsToDelete", k), f"no instance group named '{name}' in cluster '{spec.ClusterName}'", "use one of: " + ", ".join(old)))
        elif old[name].get("SlurmConfig", {}).get("NodeType") == "Controller":
            problems.append(Problem(("InstanceGroupsToDelete", k), f"'{name}' is the Controller group; a cluster cannot lose it", "delete the cluster instead"))
    if problems:
        raise SpecInvalid(problems)

    merged = {k: v for k, v in current.items() if k != "InstanceGroups"}
    for key, value in body.items():
        if key not in ("ClusterName", "InstanceGroups", "InstanceGroupsToDelete"):
            merged[key] = value
    by_name = {g["InstanceGroupName"]: (None, g) for g in current["InstanceGroups"] if g["InstanceGroupName"] not in deletes}
    for j, g in enumerate(updates):
        by_name[g["InstanceGroupName"]] = (j, g)
    merged["InstanceGroups"] = [g for _, g in by_name.values()]
    origin = [j for j, _ in by_name.values()]  # merged index -> request index (None: unchanged group)
    try:
        return _validate(merged, doc=None, base_dir=Path(base_dir) if base_dir else None, max_nodes=max_nodes_per_group, check_files=check_files)
    except SpecInvalid as e:
        for p in e.problems:
            if len(p.loc) >= 2 and p.loc[0] == "InstanceGroups" and isinstance(p.loc[1], int):
                j = origin[p.loc[1]] if p.loc[1] < len(origin) else None
                if j is not None:
                    p.loc = ("InstanceGroups", j) + p.loc[2:]
                else:
                    name = merged["InstanceGroups"][p.loc[1]].get("InstanceGroupName")
                    p.what = f"(existing group '{name}') {p.what}"
        raise SpecInvalid(e.problems) from None


def check_update(request: Any) -> list[Problem]:
    """An UpdateCluster request's own problems against HyperPod's model (no cluster needed)."""
    if not isinstance(request, dict):
        return [Problem((), f"expected a mapping of UpdateCluster fields, got {contract.kind(request)}")]
    return contract.check(request, "UpdateClusterRequest")


def with_instance_count(spec: ClusterSpec, group: str, count: int, **kwargs: Any) -> ClusterSpec:
    """The spec with one group's InstanceCount changed (checked like an UpdateCluster)."""
    g = spec.group(group).model_dump(exclude_none=True)
    g["InstanceCount"] = count
    if g.get("MinInstanceCount", 0) > count:
        g.pop("MinInstanceCount")
    return apply_update(spec, {"InstanceGroups": [g]}, **kwargs)


def with_users(spec: ClusterSpec, count: int, **kwargs: Any) -> ClusterSpec:
    """The spec with Lab.Users.Count set to `count` (a Prefix and Password given stay), checked like
    a new spec (lifecycle folders are not looked at again: `spec` has been checked)."""
    users = {**((spec.to_dict().get("Lab") or {}).get("Users") or {}), "Count": count}
    return with_lab(spec, {"Users": users}, **kwargs)


def with_lab(spec: ClusterSpec, fields: dict[str, Any], **kwargs: Any) -> ClusterSpec:
    """The spec with the Lab keys `fields` set (a command line's --users, --jupyter), checked like a new
    spec (lifecycle folders are not looked at again: `spec` has been checked)."""
    data = spec.to_dict()
    data["Lab"] = {**(data.get("Lab") or {}), **fields}
    kwargs.setdefault("check_files", False)
    return spec_from_request(data, **kwargs)


def _validate(
    data: Any,
    *,
    doc: yamlsrc.YamlDoc | None,
    base_dir: Path | None,
    max_nodes: int | None,
    check_files: bool,
) -> ClusterSpec:
    source = doc.source if doc else None
    problems: list[Problem] = list(doc.duplicates) if doc else []
    if data is None and doc is not None:
        problems.append(Problem((), "the file is empty", "write a cluster spec; see examples/cluster.yaml"))
    elif not isinstance(data, dict):
        problems.append(Problem((), f"expected a mapping of CreateCluster fields, got {contract.kind(data)}", "see examples/cluster.yaml"))
    else:
        model_problems = contract.check(data, "CreateClusterRequest", top_level_extra=("Lab",))
        lab_problems, data = rules.check_cluster(
            data, base_dir=base_dir, max_nodes=max_nodes or rules.max_nodes_per_group(), check_files=check_files
        )
        # One report per field: HyperPod's complaint wins over the lab's about the same field.
        taken = {p.loc for p in model_problems}
        problems += model_problems + [p for p in lab_problems if p.loc not in taken]
    if not problems:
        try:
            return ClusterSpec.model_validate(data)
        except ValidationError as e:  # should not happen: the checks above cover the types (a bug if it does)
            problems = [Problem(tuple(err["loc"]), err["msg"]) for err in e.errors()]
    if doc is not None:
        doc.place(problems)
    raise SpecInvalid(problems, source)
