"""ScheduledUpdateConfig on the engine (issue 32): `Schedules`, a part of lab.engine.engine.Engine.

Each group with a ScheduledUpdateConfig (not pinned with ImageReleaseVersion) has its next firing time
(lab/cron.py; kept in the store's meta, `schedule:<cluster>:<group>`, from the first pass that sees the
expression). When it comes, the engine starts the rolling update UpdateClusterSoftware starts
(lab/engine/rolling.py) for every group due in that pass: their nodes not on the newest release of
their line, with the group's DeploymentConfig, recorded as an UpdateClusterSoftware operation whose
Trigger is ScheduledUpdateConfig. A group already on the newest release, a cluster that is not
InService, or an update or auto-patch under way: an event says so, and the schedule waits for its
next firing. Quick store writes on the engine's loop; no task of its own.
"""

from __future__ import annotations

import logging
import uuid

from lab import cron
from lab.box import releases as rel
from lab.engine.bookkeeping import Records
from lab.engine.backends import Backends
from lab.engine.plan import leaving
from lab.engine.rolling import AUTOPATCH, UPDATE, deployment_batch, update_details
from lab.engine.states import Phase, Status
from lab.osutil import iso_seconds
from lab.store.db import ClusterRow, GroupRow, NodeRow
from lab.store.rows import OperationRow

log = logging.getLogger(__name__)

META = "schedule:{cluster}:{group}"  # {"expr", "next"}
TRIGGER = "ScheduledUpdateConfig"


class Schedules:
    def __init__(self, rec: Records, io: Backends):
        self.rec, self.io = rec, io
        self.store, self.clock = rec.store, rec.clock

    def step(self, c: ClusterRow, gmap: dict[str, GroupRow], nodes: list[NodeRow]) -> None:
        if c.status == Status.DELETING:
            return
        now = self.clock()
        due: dict[str, dict] = {}
        for sg in c.spec.get("InstanceGroups", []):
            g, su = sg.get("InstanceGroupName"), sg.get("ScheduledUpdateConfig")
            if not su or g not in gmap or sg.get("ImageReleaseVersion"):
                continue
            key = META.format(cluster=c.name, group=g)
            state = self.store.meta(key) or {}
            expr = su.get("ScheduleExpression")
            if state.get("expr") != expr:  # a new or changed schedule counts from now
                try:
                    nxt = cron.parse(expr).next_after(now)
                except cron.CronError as e:  # the spec checks it: only a store from an older lab can get here
                    log.warning("cluster %s group %s: %s", c.name, g, e)
                    continue
                self.store.set_meta(key, {"expr": expr, "next": nxt})
                if nxt is not None:
                    self.store.add_event(c.name, "InstanceGroup", "Info", f"ScheduledUpdateConfig {expr}: the next "
                                         f"update of {g} at {iso_seconds(nxt)}", grp=g)
                continue
            nxt = state.get("next")
            if nxt is None or now < nxt:
                continue
            after = cron.parse(expr).next_after(now)
            self.store.set_meta(key, {"expr": expr, "next": after})
            due[g] = {"deployment": su.get("DeploymentConfig"), "after": after}
        if due:
            self._fire(c, gmap, nodes, due)

    def _fire(self, c: ClusterRow, gmap: dict[str, GroupRow], nodes: list[NodeRow], due: dict[str, dict]) -> None:
        groups = ", ".join(due)
        then = "; next: " + ", ".join(f"{g} {iso_seconds(v['after']) if v['after'] else 'never'}" for g, v in due.items())
        busy = next((o.kind for o in self.store.operations(c.name, "InProgress") if o.kind in (UPDATE, AUTOPATCH)), None)
        if c.status != Status.IN_SERVICE or busy:
            why = f"an {busy} is under way" if busy else f"the cluster is {c.status}"
            self.store.add_event(c.name, "Cluster", "Warning", f"{TRIGGER}: the update of {groups} is due, but {why}: "
                                 f"skipped{then}")
            return
        try:
            releases = self.io.provider_for(c).releases()
        except Exception as e:  # noqa: BLE001
            self.store.add_event(c.name, "Cluster", "Warning", f"{TRIGGER}: the update of {groups} is due, but the "
                                 f"image releases cannot be read ({e}): skipped{then}")
            return
        images, versions, todo = {}, {}, []
        for g in due:
            members = [n for n in nodes if n.grp == g and not leaving(n)]
            top = rel.newest_of(releases, [n.release for n in members])
            if top is None:
                continue
            late = [n.name for n in members if n.phase == Phase.RUNNING and n.release != top.version]
            if late:
                images[g], versions[g] = top.box, top.version
                todo += late
        if not todo:
            self.store.add_event(c.name, "Cluster", "Info", f"{TRIGGER}: {groups} already on the newest release of "
                                 f"their line: nothing to update{then}")
            return
        chosen = list(images)
        deployment = due[chosen[0]]["deployment"] or {}
        size = deployment_batch(deployment, len(todo))
        wait = int(deployment.get("WaitIntervalInSeconds") or 0)
        by_group = {n.name: n.grp for n in nodes}
        op = OperationRow(id=str(uuid.uuid4()), cluster=c.name, kind=UPDATE, groups=sorted(chosen), nodes=todo,
                          status="InProgress", created_at=self.clock(),
                          details=update_details(images, versions, {x: by_group[x] for x in todo}, size, wait, TRIGGER))
        with self.store.tx():
            self.store.add_operation(op)
            self.store.update_cluster(c.name, status=Status.SYSTEM_UPDATING)
            self.store.add_event(c.name, "Cluster", "Info", f"{TRIGGER}: {len(todo)} node(s) of "
                                 + ", ".join(f"{g} to {versions[g]}" for g in chosen)
                                 + f", {size} at a time (the first batch: one), {wait} s between batches{then}",
                                 operation_id=op.id)
        c.status = Status.SYSTEM_UPDATING
        self.rec.ops.setdefault(c.name, []).append(op)  # this pass's rollout sees it
