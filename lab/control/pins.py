"""ImageReleaseVersion on an instance group (issue 32): the group stays on that release. Checked when
a cluster is made or updated (a version the lab does not have is a ValidationException naming the ones
it has; a release whose Slurm cannot serve the controller's is refused with the reason); the engine
makes the group's new nodes from the release's box (lab/engine/bookkeeping.py create_node), and
auto-patching and scheduled updates leave the group alone (lab/engine/patching.py). Also what an
UpdateCluster changed in a group's maintenance fields, for its event (`maintenance_changes`)."""

from __future__ import annotations

from lab.box import releases as rel
from lab.errors import UsageError


def known(releases: list) -> str:
    have = [r for r in releases if r.available]
    return ", ".join(f"{r.version} ({r.line}, Slurm {r.slurm_version or '?'}, box {r.box})" for r in have) or "none"


def release_named(releases: list, version: str, where: str):
    """The available release `version`, else UsageError naming the known ones."""
    r = rel.find(releases, version)
    if r is None or not r.available:
        what = "is no longer in Vagrant" if r is not None else "names no image release of this lab"
        raise UsageError(f"{where}: '{version}' {what} (the releases: {known(releases)})",
                         "slurmlab box list shows them; slurmlab box build or slurmlab box tag NAME makes one")
    return r


def check_pins(groups: list[dict], releases: list, cluster_box: str) -> None:
    """Every group's ImageReleaseVersion names an available release whose Slurm can serve the controller's."""
    ctl = rel.of_box(releases, cluster_box)
    pins = {g.get("InstanceGroupName"): g.get("ImageReleaseVersion") for g in groups}
    ctl_group = next((g.get("InstanceGroupName") for g in groups
                      if (g.get("SlurmConfig") or {}).get("NodeType") == "Controller"), None)
    if pins.get(ctl_group):
        ctl = release_named(releases, pins[ctl_group], f"{_where(groups, ctl_group)}.ImageReleaseVersion")
    for i, g in enumerate(groups):
        v = g.get("ImageReleaseVersion")
        if not v:
            continue
        where = f"InstanceGroups[{i}].ImageReleaseVersion"
        r = release_named(releases, v, where)
        why = rel.beside_controller(r.slurm_version, ctl.slurm_version) if ctl is not None else None
        if why:
            raise UsageError(f"{where}: '{v}' runs Slurm {r.slurm_version} and the controller Slurm "
                             f"{ctl.slurm_version}: {why}", "pin a release of the controller's line (slurmlab box list)")


def _where(groups: list[dict], name) -> str:
    i = next(i for i, g in enumerate(groups) if g.get("InstanceGroupName") == name)
    return f"InstanceGroups[{i}]"



MAINTENANCE = ("ImageReleaseVersion", "AutoPatchConfig", "ScheduledUpdateConfig")


def maintenance_changes(old_spec: dict, new_spec: dict) -> list[str]:
    """What UpdateCluster changed in the groups' maintenance fields, for its event."""
    before = {g.get("InstanceGroupName"): g for g in old_spec.get("InstanceGroups", [])}
    out = []
    for g in new_spec.get("InstanceGroups", []):
        name, was = g.get("InstanceGroupName"), before.get(g.get("InstanceGroupName"), {})
        for k in MAINTENANCE:
            if g.get(k) != was.get(k):
                what = "removed" if g.get(k) is None else f"set ({_short(g[k])})"
                out.append(f"group {name} {k} {what}")
    return out


def _short(v) -> str:
    if isinstance(v, dict):
        return v.get("PatchingStrategy") or v.get("ScheduleExpression") or "..."
    return str(v)
