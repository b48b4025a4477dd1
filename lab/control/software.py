"""UpdateClusterSoftware: the request checked whole (nothing changed on a bad one) and recorded; the
engine rolls it out batch by batch (lab/engine/rolling.py).

The lab's "platform software" is the box: `ImageId` names one (lab/box/images.py; `default` or none:
the default box built from the current inputs). `InstanceGroups` names the groups (none: every group,
the controller's too if it has a state disk); the controller is replaced last (lab/engine/rolling.py);
`DeploymentConfig.RollingUpdatePolicy.MaximumBatchSize` is INSTANCE_COUNT or
CAPACITY_PERCENTAGE of the nodes to update (default: one at a time), `WaitIntervalInSeconds` the pause
between batches. The cluster is SystemUpdating until the update completes or is rolled back.
"""

from __future__ import annotations

from collections.abc import Callable

from lab.box import releases as rel
from lab.box.images import DEFAULT_IMAGE
from lab.control.pins import release_named
from lab.engine import daemon
from lab.control.operations import new_op
from lab.engine.plan import leaving
from lab.engine.rolling import AUTOPATCH, UPDATE, batch_size as _batch_size, cluster_box, on_target, update_details
from lab.control.views import get, named_group
from lab.errors import Conflict, UsageError
from lab.providers import registry
from lab.store.db import ClusterRow, Store


def update_software(st: Store, name: str, groups: list[str] | None = None, deployment: dict | None = None,
                    image_id: str | None = None, *, versions: dict[str, str] | None = None, release: str | None = None,
                    resolve: Callable[[str | None], str] | None = None,
                    keeps_state: Callable[[ClusterRow, str], bool] | None = None, releases: list | None = None,
                    trigger: str = "UpdateClusterSoftware", start_engine: bool = False) -> str:
    """Record the update; returns its operation id. `versions`: group -> ImageReleaseVersion (the request's
    InstanceGroups[].ImageReleaseVersion), or `release` for every group, else `image_id`; `resolve`: ImageId -> box name
    (lab.box.images); `keeps_state`: (cluster, controller) -> whether the controller has a state disk (the
    provider's answer); `releases`: the provider's image releases (lab/box/releases.py); `trigger`: who
    asks (the request, or the engine for a ScheduledUpdateConfig)."""
    if resolve is None:
        from lab.box.images import resolve
    c = get(st, name)
    if any(op.kind == UPDATE for op in st.operations(name, "InProgress")):
        raise Conflict(f"cluster '{name}' is already SystemUpdating", "wait until that update ends")
    if c.status != "InService":
        raise UsageError(f"cluster '{name}' is {c.status}: a software update needs an InService cluster",
                         "wait until describe-cluster says InService")
    patching = next((op for op in st.operations(name, "InProgress") if op.kind == AUTOPATCH), None)
    if patching is not None:
        raise Conflict(f"cluster '{name}': an auto-patch of group {', '.join(patching.groups)} is under way",
                       "wait until it ends (slurmlab list-cluster-events shows its steps)")
    versions = {g: v for g, v in (versions or {}).items() if v}
    if (versions or release) and image_id not in (None, DEFAULT_IMAGE):
        raise UsageError("ImageId and InstanceGroups[].ImageReleaseVersion: give one of them",
                         "ImageReleaseVersion picks a release of the group's line (slurmlab box list)")
    rows = {g.name: g for g in st.groups(name) if g.status != "Deleting"}
    nodes = [n for n in st.nodes(name) if n.grp in rows]
    controller = next((n for n in nodes if rows[n.grp].node_type == "Controller"), None)

    def keeps() -> bool:  # a new controller VM finds its data (docs/adr/0007)
        return controller is not None and (keeps_state or _keeps_state)(c, controller.name)

    if groups:
        for i, g in enumerate(groups):
            if named_group(rows, f"InstanceGroups[{i}].InstanceGroupName", g, name).node_type == "Controller" and not keeps():
                raise UsageError(f"InstanceGroups[{i}].InstanceGroupName: '{g}' is the controller's group, and "
                                 f"{controller.name} has no state disk (the cluster was made before slurmlab gave the "
                                 "controller one): a new controller VM would come up without /home, the accounting "
                                 "database and Slurm's state", "update the login and compute groups, or make the "
                                 "cluster again (its controller then gets a state disk)")
        chosen = list(dict.fromkeys(groups))
    else:  # every group; the controller's only if its data outlives its VM
        chosen = [g for g in rows if rows[g].node_type != "Controller" or keeps()]
    if release:
        versions = {g: release for g in chosen}
    if releases is None:
        releases = registry.releases(c.provider)
    base = cluster_box(c)
    targets: dict[str, tuple[str, str | None]] = {}  # group -> (box, release version or None)
    if versions:
        for i, g in enumerate(chosen):
            if g in versions:
                r = release_named(releases, versions[g], f"InstanceGroups[{i}].ImageReleaseVersion")
                targets[g] = (r.box, r.version)
    else:
        box = resolve(image_id)
        r = rel.of_box(releases, box)
        targets = {g: (box, r.version if r else None) for g in chosen}
    pinned = {sg["InstanceGroupName"]: sg["ImageReleaseVersion"] for sg in c.spec.get("InstanceGroups", [])
              if sg.get("ImageReleaseVersion")}
    for g in list(targets):
        if pinned.get(g) and targets[g][1] != pinned[g]:
            if groups:
                raise UsageError(f"InstanceGroups: group '{g}' is pinned to ImageReleaseVersion {pinned[g]}",
                                 f"change the pin with UpdateCluster (InstanceGroups[].ImageReleaseVersion), or leave {g} out")
            del targets[g]  # every group: a pinned one stays where it is
    _check_slurm(releases, nodes, rows, targets, controller)
    todo = [n.name for n in nodes if n.grp in targets and not leaving(n) and not on_target(n, base, *targets[n.grp])]
    policy = ((deployment or {}).get("RollingUpdatePolicy") or {}).get("MaximumBatchSize") or {}
    size = _batch_size(policy, len(todo))
    wait = int((deployment or {}).get("WaitIntervalInSeconds") or 0)
    chosen = [g for g in chosen if g in targets]
    vers = {g: targets[g][1] for g in chosen if targets[g][1]}
    with st.tx():
        if any(op.kind == UPDATE for op in st.operations(name, "InProgress")):
            raise Conflict(f"cluster '{name}' is already SystemUpdating", "wait until that update ends")
        op = new_op(name, UPDATE, chosen, todo, details=update_details(
            {g: targets[g][0] for g in chosen}, vers, {n.name: n.grp for n in nodes if n.name in todo}, size, wait,
            trigger, image_id or "default", base))
        st.add_operation(op)
        st.update_cluster(name, status="SystemUpdating")
        where = ", ".join(f"{g} to {targets[g][1] or targets[g][0]}" for g in chosen)
        st.add_event(name, "Cluster", "Info", f"{trigger}: {len(todo)} node(s) of {where or 'no group'}, {size} at a "
                     f"time (the first batch: one), {wait} s between batches"
                     + (f"; the controller {controller.name} last, alone" if controller and controller.name in todo else "")
                     + (f"; pinned group(s) left alone: {', '.join(sorted(set(pinned) - set(targets)))}"
                        if not groups and set(pinned) - set(targets) else ""), operation_id=op.id)
    if start_engine:
        daemon.ensure_running()
    return op.id


def _check_slurm(releases: list, nodes, rows, targets: dict, controller) -> None:
    """Slurm's rules for an in-place change (lab/box/releases.py): within its upgrade window, and never a
    slurmd newer than slurmctld. The rolling update replaces the controller last, so a change of Slurm
    release that reaches the controller is refused too: Slurm wants the controller first."""
    def slurm_of(version):
        r = rel.find(releases, version) if version else None
        return r.slurm_version if r else None

    ctl_now = slurm_of(controller.release) if controller else None
    for g, (box, version) in targets.items():
        to = slurm_of(version)
        for n in nodes:
            if n.grp != g:
                continue
            why = rel.slurm_step(slurm_of(n.release), to)
            if why is None and rows[g].node_type != "Controller":
                why = rel.beside_controller(to, ctl_now)
            if why is None and rows[g].node_type == "Controller" and _series_changes(slurm_of(n.release), to):
                why = (f"Slurm {slurm_of(n.release)} -> {to} on the controller: Slurm wants the controller upgraded "
                       "first and the lab's rolling update replaces it last")
            if why:
                raise UsageError(f"{g} to {version or box}: {why}", "make a new cluster from the newer line's box "
                                 "(Lab.Box), or pick a release of the same Slurm line (slurmlab box list)")


def _series_changes(a: str | None, b: str | None) -> bool:
    return bool(a and b and a.split(".")[:2] != b.split(".")[:2])


def _keeps_state(c: ClusterRow, node: str) -> bool:
    return registry.make(c.provider).keeps_state(c.name, node)
