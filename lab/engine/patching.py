"""AutoPatchConfig on the engine (issue 32, docs/adr/0019): `Patching`, a part of lab.engine.engine.Engine.

A group with AutoPatchConfig (not pinned with ImageReleaseVersion, not the controller's) is patched
when a newer release of its nodes' line is available (lab/box/releases.py): at once, or at the
PatchSchedule.NextPatchDate the user gave. One auto-patch runs at a time per cluster, never beside an
UpdateClusterSoftware. It is an operation of kind AutoPatch (in the events; HyperPod lists no such
operation type) whose details carry the run:

1. cordon: every node to patch is drained in Slurm with a `slurmlab: auto-patch ...` reason (its jobs go
   on, no new job starts there): a task, one `scontrol update` on the controller;
2. a node is patched when Slurm shows it DRAINED (drained and no job left), read from the engine's Slurm
   poll (lab/engine/watching.py), and squeue then finds no job on it (a node state read while slurmctld
   restarts for a reconfigure once showed a busy node drained):
   - WhenIdle: each node as soon as it is idle;
   - WhenAllIdle: all of them once every one is idle;
   - DrainFirst: idle ones, MaximumBatchSize at a time; at DrainTimeoutInSeconds (default 3600) the
     nodes still busy are patched anyway (OnDrainTimeout Force: DOWN in Slurm first, so their jobs end
     and a batch job is requeued) or resumed and left on their release (Skip, the default);
   patching is the rolling update's node step (lab/engine/rolling.py): out of Slurm, the VM replaced
   with the new release's box, configured, joined again (the join resumes it: uncordoned);
3. WhenIdle and WhenAllIdle give up at IdleWaitWindowInSeconds (default 86400): the nodes not patched
   are resumed and stay on their release (UpdateClusterSoftware can take them later).
Every step is an event. A run ends Completed with what it did; the same release is not tried again for
the group until a newer one appears or the user sets another NextPatchDate. Running jobs are never
killed except by DrainFirst + Force.
"""

from __future__ import annotations

import logging

from lab.box import releases as rel
from lab.engine.bookkeeping import Records
from lab.engine.backends import Backends
from lab.engine.plan import UPDATE_DRAIN, failed_for_good, leaving
from lab.engine.rolling import AUTOPATCH, UPDATE, deployment_batch
from lab.engine.states import Phase, Status
from lab.engine.tasks import Tasks
from lab.osutil import epoch, iso_seconds
from lab.store.db import ClusterRow, GroupRow, NodeRow
from lab.store.rows import OperationRow

log = logging.getLogger(__name__)

META = "autopatch:{cluster}:{group}"  # the group's last run: {"release", "asked", "next"}
IDLE_WAIT_S = 86400  # IdleWaitWindowInSeconds' default
DRAIN_TIMEOUT_S = 3600  # DrainPolicy.DrainTimeoutInSeconds' default
# node states in the run's details
CORDONED, PATCHING, PATCHED, SKIPPED, FAILED = "cordoned", "patching", "patched", "skipped", "failed"


class Patching:
    def __init__(self, rec: Records, io: Backends, tasks: Tasks, slurm_view):
        self.rec, self.io, self.tasks = rec, io, tasks
        self.store, self.clock = rec.store, rec.clock
        self.slurm_view = slurm_view  # cluster -> (view, taken_at) or None: the engine's last Slurm poll

    def op(self, cluster: str) -> OperationRow | None:
        return next((o for o in self.store.operations(cluster, "InProgress") if o.kind == AUTOPATCH), None)

    # ------------------------------------------------------------------ a pass
    def step(self, c: ClusterRow, gmap: dict[str, GroupRow], nodes: list[NodeRow]) -> None:
        if c.status == Status.DELETING:
            return
        op = self.op(c.name)
        if op is not None:
            self._advance(c, op, {n.name: n for n in nodes})
        elif c.status == Status.IN_SERVICE and not any(o.kind == UPDATE for o in self.rec.ops.get(c.name) or ()):
            self._maybe_start(c, gmap, nodes)

    # ------------------------------------------------------------------ starting
    def _maybe_start(self, c: ClusterRow, gmap: dict[str, GroupRow], nodes: list[NodeRow]) -> None:
        wanted = [g for g in sorted(gmap) if c.group_spec(g).get("AutoPatchConfig")]
        if not wanted:
            return
        try:
            releases = self.io.provider_for(c).releases()
        except Exception as e:  # noqa: BLE001 - no releases to compare: nothing to patch this pass
            log.warning("cluster %s: image releases not readable: %s", c.name, e)
            return
        now = self.clock()
        for g in wanted:
            sg = c.group_spec(g)
            if sg.get("ImageReleaseVersion") or gmap[g].node_type == "Controller" or gmap[g].status == Status.DELETING:
                continue  # pinned: left alone; the controller: UpdateClusterSoftware only
            members = [n for n in nodes if n.grp == g and n.phase == Phase.RUNNING and not n.pending
                       and not leaving(n) and n.release]
            top = rel.newest_of(releases, [n.release for n in members])
            todo = [n for n in members if top and rel.version_key(n.release) < rel.version_key(top.version)]
            if not todo:
                continue
            cfg = sg["AutoPatchConfig"]
            asked = epoch((cfg.get("PatchSchedule") or {}).get("NextPatchDate"))
            key = META.format(cluster=c.name, group=g)
            state = self.store.meta(key) or {}
            if state.get("release") == top.version and state.get("asked") == asked:
                continue  # this release was tried for the group already; a new date or release re-arms it
            if asked is not None and now < asked:
                if state.get("next") != asked:
                    self.store.set_meta(key, {**state, "next": asked})
                    self.store.add_event(c.name, "InstanceGroup", "Info", f"AutoPatch: release {top.version} is "
                                         f"available for {g}; patching at {iso_seconds(asked)} (PatchSchedule)", grp=g)
                continue
            self._start(c, g, gmap[g].node_type, cfg, top, todo, asked, now)
            return  # one at a time per cluster

    def _start(self, c: ClusterRow, g: str, node_type: str, cfg: dict, top, todo: list[NodeRow], asked,
               now: float) -> None:
        strategy = cfg["PatchingStrategy"]
        drain = cfg.get("DrainPolicy") or {}
        if strategy == "DrainFirst":
            until = now + int(drain.get("DrainTimeoutInSeconds", DRAIN_TIMEOUT_S))
            batch = deployment_batch(cfg.get("DeploymentConfig"), len(todo))
        else:
            until = now + int(cfg.get("IdleWaitWindowInSeconds", IDLE_WAIT_S))
            batch = len(todo)
        names = [n.name for n in todo]
        details = {"Group": g, "NodeType": node_type, "Strategy": strategy, "Image": top.box, "Release": top.version, "Started": now,
                   "Until": until, "BatchSize": batch, "OnTimeout": drain.get("OnDrainTimeout", "Skip"),
                   "Cordoned": False, "Nodes": {x: CORDONED for x in names}, "Targets": {},
                   "NodeReleases": {x: top.version for x in names}}
        op = OperationRow(id=_op_id(), cluster=c.name, kind=AUTOPATCH, groups=[g], nodes=names, status="InProgress",
                          created_at=now, details=details)
        with self.store.tx():
            self.store.add_operation(op)
            self.store.set_meta(META.format(cluster=c.name, group=g), {"release": top.version, "asked": asked, "next": now})
            self.store.add_event(c.name, "InstanceGroup", "Info", f"AutoPatch {strategy}: {len(names)} node(s) of {g} "
                                 f"to release {top.version} ({top.box}); cordoning them (Slurm drain: running jobs go "
                                 f"on) until {iso_seconds(until)}", grp=g, operation_id=op.id)
        for x in names:
            self.store.update_node(c.name, x, message=f"AutoPatch: cordoned; patched to {top.version} once it is idle")

    # ------------------------------------------------------------------ a run
    def _advance(self, c: ClusterRow, op: OperationRow, by: dict[str, NodeRow]) -> None:
        d = dict(op.details)
        states: dict[str, str] = dict(d["Nodes"])
        for x in [x for x in states if x not in by]:
            states[x] = SKIPPED  # deleted meanwhile
        if not d["Cordoned"]:
            if not self.tasks.active(c.name, "patch"):
                self.tasks.start(c.name, "patch", self._cordon(c, op.id, [x for x, s in states.items() if s == CORDONED]))
            return
        now = self.clock()
        changed = self._finished(c, op, d, states, by)
        if not self.tasks.active(c.name, "patch"):  # a forced patch whose task died with an engine: mark it again
            for x in [x for x, s in states.items() if s == PATCHING]:
                n = by.get(x)
                if n is not None and n.phase == Phase.RUNNING and not n.pending and n.image != d["Image"]:
                    self.store.update_node(c.name, x, pending=UPDATE_DRAIN,
                                           message=f"AutoPatch: out of Slurm, its VM replaced with release {d['Release']}")
        waiting = [x for x, s in states.items() if s == CORDONED]
        if waiting and not self.tasks.active(c.name, "patch"):
            idle = self._idle(c.name, d, waiting)
            late = now >= d["Until"]
            take: list[str] = []
            if d["Strategy"] == "WhenAllIdle":
                if len(idle) == len(waiting):
                    take = waiting
                elif late:
                    self._timeout(c, op.id, d, states, waiting)
                    changed = True
            else:
                room = d["BatchSize"] - sum(1 for s in states.values() if s == PATCHING)
                take = idle if d["Strategy"] == "WhenIdle" else idle[:max(0, room)]
                busy = [x for x in waiting if x not in idle]
                if late and busy:
                    self._timeout(c, op.id, d, states, busy)
                    changed = True
            if take and d.get("NodeType") == "Login":  # no Slurm job runs there
                self._patch(c, op.id, d, states, take, "idle")
                changed = True
            elif take:  # Slurm's job records have the last word: a node state read mid-reconfigure can lie
                self.tasks.start(c.name, "patch", self._confirm(c, op.id, take, d["Strategy"] == "WhenAllIdle"))
        if changed:
            d["Nodes"] = states
            self.store.set_operation_details(op.id, d)
        if all(s in (PATCHED, SKIPPED, FAILED) for s in states.values()):
            self._done(c, op, d, states)

    def _idle(self, cluster: str, d: dict, names: list[str]) -> list[str]:
        """The nodes Slurm shows drained with no job left, in a view taken after the cordon. A login node
        runs no Slurm job: it counts as idle (its users' sessions end with the patch)."""
        if d.get("NodeType") == "Login":
            return list(names)
        got = self.slurm_view(cluster)
        if not got:
            return []
        view, taken_at = got
        if taken_at < (d.get("CordonedAt") or 0.0):
            return []
        return [x for x in names if (sn := view.get(x)) is not None and sn.base == "drained"]

    def _patch(self, c: ClusterRow, op_id: str, d: dict, states: dict, names: list[str], why: str) -> None:
        for x in names:
            states[x] = PATCHING
            d["Targets"][x] = d["Image"]
            self.store.update_node(c.name, x, pending=UPDATE_DRAIN,
                                   message=f"AutoPatch: {why}; out of Slurm, its VM replaced with release {d['Release']}")
        self.store.add_event(c.name, "InstanceGroup", "Info", f"AutoPatch: {', '.join(names)} {why}: patching to "
                             f"release {d['Release']}", grp=d["Group"], operation_id=op_id)

    def _finished(self, c: ClusterRow, op: OperationRow, d: dict, states: dict, by: dict[str, NodeRow]) -> bool:
        changed = False
        for x, s in states.items():
            n = by.get(x)
            if s != PATCHING or n is None:
                continue
            if failed_for_good(n):
                states[x], changed = FAILED, True
                self.store.add_event(c.name, "Instance", "Error", f"{x}: AutoPatch to {d['Release']} failed: {n.message}",
                                     grp=n.grp, node=x, operation_id=op.id)
            elif (n.phase == Phase.RUNNING and not n.pending and n.image == d["Image"]
                  and (n.joined_at or d.get("NodeType") != "Compute")):  # a login node joins no slurm.conf
                states[x], changed = PATCHED, True
                self.store.add_event(c.name, "Instance", "Info", f"{x}: patched to release {n.release or d['Release']}; "
                                     "back in Slurm (uncordoned)", grp=n.grp, node=x, operation_id=op.id)
        return changed

    def _timeout(self, c: ClusterRow, op_id: str, d: dict, states: dict, busy: list[str]) -> None:
        if d["Strategy"] == "DrainFirst" and d["OnTimeout"] == "Force":
            for x in busy:
                states[x] = PATCHING
                d["Targets"][x] = d["Image"]
            self.store.add_event(c.name, "InstanceGroup", "Warning", f"AutoPatch DrainFirst: DrainTimeoutInSeconds "
                                 f"passed with jobs on {', '.join(busy)}; OnDrainTimeout Force: their jobs end now "
                                 "(a batch job is requeued) and they are patched", grp=d["Group"], operation_id=op_id)
            self.tasks.start(c.name, "patch", self._force(c, op_id, d, busy))
            return
        for x in busy:
            states[x] = SKIPPED
        what = ("DrainTimeoutInSeconds passed (OnDrainTimeout Skip)" if d["Strategy"] == "DrainFirst"
                else "IdleWaitWindowInSeconds passed" + (" and not every node became idle"
                                                         if d["Strategy"] == "WhenAllIdle" else ""))
        self.store.add_event(c.name, "InstanceGroup", "Warning", f"AutoPatch {d['Strategy']}: {what}: "
                             f"{', '.join(busy)} stay on their release, resumed in Slurm (UpdateClusterSoftware can "
                             "update them)", grp=d["Group"], operation_id=op_id)
        for x in busy:
            self.store.update_node(c.name, x, message="")
        if d.get("NodeType") != "Login":
            self.tasks.start(c.name, "patch", self._uncordon(c, busy))

    def _done(self, c: ClusterRow, op: OperationRow, d: dict, states: dict) -> None:
        count = {k: sum(1 for s in states.values() if s == k) for k in (PATCHED, SKIPPED, FAILED)}
        message = (f"{count[PATCHED]} node(s) patched to {d['Release']}, {count[SKIPPED]} left on their release, "
                   f"{count[FAILED]} failed")
        status = "Failed" if count[FAILED] else "Completed"
        self.store.finish_operation(op.id, status, message, when=self.clock())
        self.store.add_event(c.name, "InstanceGroup", "Info" if status == "Completed" else "Error",
                             f"AutoPatch {status.lower()}: {message}", grp=d["Group"], operation_id=op.id)

    # ------------------------------------------------------------------ the Slurm-side tasks
    async def _cordon(self, c: ClusterRow, op_id: str, names: list[str]) -> None:
        conf = self.io.configurer_for(c)
        op = self.op(c.name)
        d = dict(op.details) if op is not None and op.id == op_id else None
        if d is None:
            return
        try:  # login nodes are no Slurm nodes: nothing to drain
            failed = (await conf.cordon_async(self.io.context(c.name), names, f"auto-patch to release {d['Release']}")
                      if d.get("NodeType") != "Login" else {})
        except Exception as e:  # noqa: BLE001 - tried again next pass
            failed = {x: str(e) or type(e).__name__ for x in names}
        if failed:
            self.store.add_event(c.name, "InstanceGroup", "Warning", f"AutoPatch: cordoning failed ({next(iter(failed.values()))}); "
                                 "trying again", grp=d["Group"], operation_id=op_id)
            return
        d.update(Cordoned=True, CordonedAt=self.clock())
        self.store.set_operation_details(op_id, d)
        self.store.add_event(c.name, "InstanceGroup", "Info", f"AutoPatch: cordoned {', '.join(names)} (Slurm: DRAIN; "
                             "running jobs go on, no new job starts there)", grp=d["Group"], operation_id=op_id)

    async def _confirm(self, c: ClusterRow, op_id: str, names: list[str], all_or_none: bool) -> None:
        """Patch the nodes that squeue says run no job (all of them or none for WhenAllIdle)."""
        try:
            jobs = await self.io.configurer_for(c).jobs_on_async(self.io.context(c.name), names)
        except Exception as e:  # noqa: BLE001 - not known: not idle; the next pass asks again
            log.warning("cluster %s: the jobs on %s not known: %s", c.name, ", ".join(names), e)
            return
        free = [x for x in names if jobs.get(x) == 0]
        op = self.op(c.name)
        if not free or (all_or_none and len(free) != len(names)) or op is None or op.id != op_id:
            return
        d = dict(op.details)
        states = dict(d["Nodes"])
        free = [x for x in free if states.get(x) == CORDONED]
        if free:
            self._patch(c, op_id, d, states, free, "idle")
            d["Nodes"] = states
            self.store.set_operation_details(op_id, d)

    async def _uncordon(self, c: ClusterRow, names: list[str]) -> None:
        try:
            failed = await self.io.configurer_for(c).uncordon_async(self.io.context(c.name), names)
        except Exception as e:  # noqa: BLE001
            failed = {x: str(e) for x in names}
        if failed:
            self.store.add_event(c.name, "Cluster", "Warning", f"AutoPatch: could not resume {', '.join(failed)} in "
                                 f"Slurm ({next(iter(failed.values()))}): scontrol update nodename=... state=resume")

    async def _force(self, c: ClusterRow, op_id: str, d: dict, names: list[str]) -> None:
        conf = self.io.configurer_for(c)
        ctx = self.io.context(c.name)
        for x in names:
            try:
                said = await conf.take_down_async(ctx, x, f"auto-patch to release {d['Release']}: OnDrainTimeout Force")
            except Exception as e:  # noqa: BLE001 - the detach drains it anyway, after its jobs
                said = str(e)
            if said:
                log.warning("%s: could not set it DOWN before its forced patch: %s", x, said)
            self.store.update_node(c.name, x, pending=UPDATE_DRAIN,
                                   message=f"AutoPatch: forced (DrainFirst, OnDrainTimeout Force) to release {d['Release']}")


def _op_id() -> str:
    import uuid

    return str(uuid.uuid4())
