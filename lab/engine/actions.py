"""The engine's steps (`Steps`): one coroutine per planned action kind (lab/engine/plan.py Action.kind)
that runs as a task, calling the provider and configurer through their coroutine faces
(lab/providers/base.py, lab/configure/base.py); `ACTIONS` maps each kind to its method. `run` is the
guard every task goes through: a failing step raises, and `run` records the failure on its nodes."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from lab.capacity import launch_fault
from lab.configure.base import ConfigureError, warnings_of
from lab.engine.backends import Backends
from lab.engine.bookkeeping import HEALTH_CHECK, Records, health_outcome
from lab.engine.plan import (HEALTH_CHECKING, HEALTH_MARKS, MOVE_ATTACH, MOVE_DETACH, NO_RETRY, UPDATE_DRAIN, Action,
                             node_recovery)
from lab.engine.rolling import Rollout, cluster_box
from lab.engine.states import Kind, Phase, Status
from lab.engine.tasks import Tasks
from lab.providers import imagerelease
from lab.providers.base import LaunchError, Observed, threads_running
from lab.store.db import ClusterRow, NodeRow

log = logging.getLogger(__name__)

NOW = object()  # in _slurm_batch's `after`: the time the configurer returned


class Steps:
    def __init__(self, rec: Records, io: Backends, tasks: Tasks, rollout: Rollout):
        self.rec, self.io, self.tasks, self.rollout = rec, io, tasks, rollout
        self.store, self.clock = rec.store, rec.clock
        self.stats: Counter = Counter()  # joins, leaves, launches, ... (benchmarks read it)

    async def run(self, cluster: str, a: Action, ctx=None) -> None:
        """The step of `a` as a task body: a failure is recorded on its nodes (Failure with the reason,
        retried after a backoff; counted for protected mode), never raised."""
        try:
            await ACTIONS[a.kind](self, cluster, a, ctx)
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            log.exception("%s %s", a.kind, a.node or a.batch)
            if a.kind in (Kind.DELETE_CLUSTER, Kind.ROLLBACK_CLUSTER, Kind.ORPHAN, Kind.REPAIR):  # no node step failed
                self.store.add_event(cluster, "Cluster", "Error", f"{a.kind} {a.node or cluster} failed: {e}"[:500])
                return
            failures = e.failures if isinstance(e, ConfigureError) else {}
            permanent = isinstance(e, LaunchError) and e.permanent
            counted: set[str] = set()  # a batch that failed is one failure of each of its groups (protected mode)
            for node in ([a.node] if a.node else list(a.batch)):
                n = self.store.node(cluster, node)
                self.rec.fail(cluster, node, f"{a.kind} failed: {failures.get(node) or e}",
                              keep_phase=a.kind in (Kind.REMOVE, Kind.LEAVE), permanent=permanent,
                              counted=n is not None and n.grp not in counted)
                if n is not None:
                    counted.add(n.grp)
            if a.kind == Kind.CONFIGURE and " unreachable" in str(failures.get(a.node) or e):
                self.rec.unreachable(cluster, a.node)

    async def _do_launch(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None or n.phase not in (Phase.PLANNED, Phase.FAILED, Phase.LAUNCHING):
            return
        c = self.rec.snap[cluster][0]
        self.store.update_node(cluster, a.node, phase=Phase.LAUNCHING, launched_at=self.clock(), message="launching VM")
        self.stats["launches"] += 1
        fault = launch_fault(self.rec.faults, cluster, n.name, n.generation, n.attempts)
        if fault:
            self.rec.fail(cluster, a.node, f"launch failed: {fault}")
            return
        try:
            obs = await self.io.provider_for(c).ensure_async(cluster, self.rec.machine(cluster, n))
        except Exception as e:  # noqa: BLE001 - a LaunchError says transient or permanent; others are transient
            # the host short of memory or disk waits like a capacity shortage: a Warning, not a failure of the
            # group (5 in a row under a memory hog protected it: issue 45's fault run)
            short = isinstance(e, LaunchError) and str(e).startswith("InsufficientCapacity")
            self.rec.fail(cluster, a.node, f"launch failed: {e}", permanent=isinstance(e, LaunchError) and e.permanent,
                          level="Warning" if short else "Error")
            return
        op = self.rec.op_of(cluster, a.node, a.group)
        details = obs.details if isinstance(obs, Observed) else {}
        if details.get("warning"):  # e.g. no warm-start template: the node booted cold (docs/adr/0011)
            self.store.add_event(cluster, "Instance", "Warning", f"{a.node}: {details['warning']}"[:500], grp=a.group,
                                 node=a.node, operation_id=op)
        if details.get("notice"):  # e.g. no role template yet: full configuration (docs/adr/0022)
            self.store.add_event(cluster, "Instance", "Info", f"{a.node}: {details['notice']}"[:500], grp=a.group,
                                 node=a.node, operation_id=op)
        how = (f" (forked from {'role ' if details.get('role_template') else ''}template {details['template']} "
               f"in {details['seconds']} s)"
               if details.get("template") else "")
        self._booted(cluster, a, "VM answers ssh", "VM up" + how, op, release=await self._release(c, n))

    async def _release(self, c: ClusterRow, n: NodeRow) -> str | None:
        """The image release the node's VM was just made from (its box's; on another host what its disk was
        made from there: lab/providers/imagerelease.py)."""
        try:
            prov = self.io.provider_for(c)
            return await imagerelease.of_node(prov, c.name, n.name, prov.releases(), n.image or cluster_box(c))
        except Exception as e:  # noqa: BLE001 - not knowing the release must not fail a launch
            log.warning("%s: its image release is not known: %s", n.name, e)
            return None

    def _booted(self, cluster: str, a: Action, message: str, event: str, op: str | None, **vals) -> None:
        """The node's VM answers (launched or rebooted): it is configured again from scratch."""
        self.store.update_node(cluster, a.node, phase=Phase.BOOTED, booted_at=self.clock(), configured_at=None,
                               message=message, **vals)
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: {event}", grp=a.group, node=a.node,
                             operation_id=op)

    async def _do_configure(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None or n.phase not in (Phase.BOOTED, Phase.CONFIGURING, Phase.CONFIGURED, Phase.FAILED):
            return
        c = self.rec.snap[cluster][0]
        node_type = self.rec.group(cluster, n.grp).node_type
        self.store.update_node(cluster, a.node, phase=Phase.CONFIGURING, message="configuring (Ansible)")
        results = await self.io.configurer_for(c).configure_async(ctx, n.name, node_type)
        warnings = warnings_of(results)  # e.g. a boot-time setup that failed: Ansible did it instead
        for w in warnings:
            self.store.add_event(cluster, "Instance", "Warning", f"{a.node}: {w}"[:500], grp=a.group, node=a.node,
                                 operation_id=self.rec.op_of(cluster, a.node, a.group))
        said = f" ({'; '.join(warnings)})"[:400] if warnings else ""
        if node_type == "Compute":
            # configured_at starts the join batching window (plan.join_wait)
            self.store.update_node(cluster, a.node, phase=Phase.CONFIGURED, configured_at=self.clock(),
                                   message="configured, waiting to join" + said)
            # when configuring ended and waiting for the join began (bench/cluster_timeline.py reads it)
            self.store.add_event(cluster, "Instance", "Info", f"{a.node}: compute configured, waiting to join Slurm",
                                 grp=a.group, node=a.node, operation_id=self.rec.op_of(cluster, a.node, a.group))
        else:
            self.store.update_node(cluster, a.node, phase=Phase.RUNNING, joined_at=self.clock(), message=said.strip(" ()"),
                                   attempts=0)
            self.rec.group_succeeded(cluster, n.grp)
            self.store.add_event(cluster, "Instance", "Info", f"{a.node}: {node_type.lower()} ready",
                                 grp=a.group, node=a.node, operation_id=self.rec.op_of(cluster, a.node, a.group))

    async def _slurm_batch(self, cluster: str, a: Action, ctx, before: dict, after: dict, verb: str) -> list[str]:
        """A join or a leave: rows before, the one slurm.conf change, rows after (NOW: when it returned), for the
        nodes still on their VM (one replaced meanwhile joins once its new VM is configured): those nodes."""
        conf = self.io.configurer_for(self.rec.snap[cluster][0])
        batch = list(a.batch)
        with self.store.tx():
            for n in batch:
                self.store.update_node(cluster, n, **before)
        generation = {n: r.generation for n in batch if (r := self.store.node(cluster, n)) is not None}
        self.stats[verb + "s"] += 1
        await (conf.join_async if verb == "join" else conf.leave_async)(ctx, batch)
        now = self.clock()
        after = {k: now if v is NOW else v for k, v in after.items()}
        same = [n for n in batch if (r := self.store.node(cluster, n)) is not None and r.generation == generation.get(n)]
        with self.store.tx():
            for n in same:
                self.store.update_node(cluster, n, **after)
        return same

    async def _do_join(self, cluster: str, a: Action, ctx=None) -> None:
        self.stats["joined_nodes"] += len(a.batch)
        batch = await self._slurm_batch(cluster, a, ctx, {"phase": Phase.JOINING, "message": "joining Slurm"},
                                        {"phase": Phase.RUNNING, "joined_at": NOW, "message": "", "attempts": 0}, "join")
        if not batch:
            return
        rows = [r for r in (self.store.node(cluster, n) for n in batch) if r is not None]
        for r in rows:
            if r.pending == MOVE_ATTACH:  # a moved node's attach ends with its join
                self.store.update_node(cluster, r.name, pending=None)
        shown = ", ".join(batch[:20]) + (f" and {len(batch) - 20} more" if len(batch) > 20 else "")
        groups = {r.grp for r in rows}
        for g in {r.grp for r in rows if not r.slurm}:  # a node under recovery succeeds when Slurm says so
            self.rec.group_succeeded(cluster, g)
        one = next(iter(groups)) if len(groups) == 1 else None
        self.store.add_event(cluster, "InstanceGroup", "Info",
                             f"{len(batch)} node(s) joined Slurm with one reconfigure: {shown}",
                             grp=one, operation_id=self.rec.op_of(cluster, batch[0], one))

    async def _do_leave(self, cluster: str, a: Action, ctx=None) -> None:
        """Scale-in, Slurm side, for a batch: drain, wait for jobs, out of slurm.conf, one reconfigure."""
        batch = await self._slurm_batch(cluster, a, ctx,
                                        {"phase": Phase.REMOVING, "message": "draining (Slurm) before removal"},
                                        {"joined_at": None, "message": "out of Slurm; removing the VM"}, "leave")
        if not batch:
            return
        self.store.add_event(cluster, "InstanceGroup", "Info",
                             f"{len(batch)} node(s) drained and removed from slurm.conf: {', '.join(batch[:20])}")

    async def _do_detach(self, cluster: str, a: Action, ctx=None) -> None:
        """The batch leaves Slurm (drain, jobs end, slurmd stops, out of slurm.conf, one reconfigure).
        A moving node keeps its VM and is configured again for its new group (attach); a node under
        UpdateClusterSoftware has its VM replaced with the new box (lab/engine/rolling.py)."""
        marks = {x: (n.pending if (n := self.store.node(cluster, x)) else None) for x in a.batch}
        targets = self.rollout.targets(cluster)
        for x, mark in marks.items():
            self.store.update_node(cluster, x, message="DetachInProgress: draining (Slurm)" if mark == MOVE_DETACH
                                   else "SystemUpdating: draining (Slurm); running jobs end first")
        batch = await self._slurm_batch(cluster, a, ctx, {"joined_at": None}, {"configured_at": None}, "leave")
        for x in batch:
            if marks.get(x) == UPDATE_DRAIN:
                self.store.update_node(cluster, x, pending="replace", image=targets.get(x),
                                       message=f"SystemUpdating: out of Slurm; its VM is replaced with box {targets.get(x)}")
            else:
                self.store.update_node(cluster, x, phase=Phase.BOOTED, pending=MOVE_ATTACH,
                                       message="AttachInProgress: configuring for its new group")
        self.rec.dirty.add(cluster)  # a new box for some: the Vagrantfile is written again before a launch
        self.store.add_event(cluster, "InstanceGroup", "Info", f"{len(batch)} node(s) left Slurm (drained, out of "
                             f"slurm.conf) to move or to be updated: {', '.join(batch[:20])}",
                             operation_id=self.rec.op_of(cluster, batch[0]))

    def _type_of(self, cluster: str, n: NodeRow) -> str | None:
        g = self.rec.snap[cluster][2].get(n.grp)
        return g.instance_type if g else None

    async def _do_remove(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        c = self.rec.snap[cluster][0]
        self.store.update_node(cluster, a.node, phase=Phase.REMOVING, message="removing the VM")
        await self.io.provider_for(c).remove_async(cluster, [a.node])
        self.store.delete_node(cluster, a.node)
        self.rec.dirty.add(cluster)
        self.rec.capacity_released(self._type_of(cluster, n))
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: removed", grp=n.grp, node=a.node,
                             operation_id=self.rec.op_of(cluster, a.node, n.grp), instance_id=n.instance_id)

    async def _do_orphan(self, cluster: str, a: Action, ctx=None) -> None:
        c = self.rec.snap[cluster][0]
        await self.io.provider_for(c).remove_async(cluster, [a.node])
        self.store.add_event(cluster, "Cluster", "Warning",
                             f"VM {a.node} belongs to cluster {cluster} but has no record: removed (orphan)")

    async def _do_lost(self, cluster: str, a: Action, ctx=None) -> None:
        """NodeRecovery Automatic: the VM died; a fresh instance replaces it under the same name."""
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        prov = self.io.provider_for(self.rec.snap[cluster][0])
        await self._take_down(cluster, a.node, f"its VM is {a.reason}: replacing it")
        if a.reason != "missing":  # a stopped domain: remove it first
            await prov.remove_async(cluster, [a.node])
        self.rec.new_instance(cluster, n, prov, f"VM lost ({a.reason}): replacing it (NodeRecovery Automatic)")
        self.rec.group_failed(cluster, n.grp, f"{a.node}: VM {a.reason}")
        self.store.add_event(cluster, "Instance", "Warning",
                             f"{a.node}: VM is {a.reason}; NodeRecovery is Automatic: replacing it",
                             grp=a.group, node=a.node)

    async def _do_reboot(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        prov = self.io.provider_for(self.rec.snap[cluster][0])
        op = self.rec.op_of(cluster, a.node)
        await self._take_down(cluster, a.node, "rebooting its VM")  # its jobs end now
        self.store.update_node(cluster, a.node, phase=Phase.REBOOTING, pending=None, message="rebooting")
        if a.reason == "missing":  # nothing to reboot: launch it again
            self.store.update_node(cluster, a.node, phase=Phase.PLANNED, booted_at=None, configured_at=None,
                                   message="no VM to reboot: launching")
            return
        await prov.reboot_async(cluster, a.node)
        self._booted(cluster, a, "rebooted; configuring again", "rebooted", op, attempts=0)

    async def _do_replace(self, cluster: str, a: Action, ctx=None) -> None:
        n = self.store.node(cluster, a.node)
        if n is None:
            return
        prov = self.io.provider_for(self.rec.snap[cluster][0])
        op = self.rec.op_of(cluster, a.node)
        await self._take_down(cluster, a.node, "replacing its VM")
        self.store.update_node(cluster, a.node, phase=Phase.REPLACING, pending=None, message="replacing: removing the old VM")
        if self.rec.group(cluster, n.grp).node_type == "Controller":
            # a clean shutdown first: slurmctld saves its state, MariaDB and the NFS server stop, and the
            # state disk (kept for the new VM) is unmounted clean
            self.store.update_node(cluster, a.node, message="replacing: shutting the controller down cleanly")
            await prov.stop_async(cluster, a.node)
        await prov.remove_async(cluster, [a.node])
        self.rec.new_instance(cluster, n, prov, "replaced: a new instance launches")
        self.rec.capacity_released(self._type_of(cluster, n))
        self.store.add_event(cluster, "Instance", "Info", f"{a.node}: old instance {n.instance_id} removed; "
                             "a new one launches", grp=a.group, node=a.node, operation_id=op)

    async def _do_healthcheck(self, cluster: str, a: Action, ctx=None) -> None:
        """Deep health checks of the marked nodes, one operation at a time (each its own Slurm
        maintenance reservation); then each node passes, is rebooted or replaced, or stays Failure."""
        c = self.rec.snap[cluster][0]
        for op in self.store.operations(cluster, "InProgress"):  # a DeepHealthCheck, or an update's batch
            wanted = (op.details or {}).get("Checks", {})
            targets = {}
            for x in a.batch:
                n = self.store.node(cluster, x)
                if x in wanted and n is not None and n.pending in HEALTH_MARKS:
                    targets[x] = wanted[x]
            if not targets:
                continue
            with self.store.tx():
                for x, checks in targets.items():
                    self.store.update_node(cluster, x, pending=HEALTH_CHECKING, message=f"deep health check: {', '.join(checks)}")
            self.store.add_event(cluster, "Cluster", "Info", f"deep health check running on {', '.join(targets)}",
                                 operation_id=op.id)
            try:
                results = await self.io.configurer_for(c).health_check_async(ctx, targets, op.id, self.rec.faults)
            except Exception as e:  # noqa: BLE001 - a node that cannot be checked is not healthy: recovery decides
                results = {x: [f"{checks[0]}: the checks could not run: {e}"] for x, checks in targets.items()}
            for x, checks in targets.items():
                failures = (results or {}).get(x) or []
                if op.kind == HEALTH_CHECK:
                    self._health_result(cluster, op.id, x, checks, failures, node_recovery(c))
                else:
                    self.rollout.checked(cluster, op.id, x, failures)

    def _health_result(self, cluster: str, op: str, node: str, checks: list[str], failures: list[str],
                       recovery: str) -> None:
        n = self.store.node(cluster, node)
        if n is None or n.pending != HEALTH_CHECKING:
            return  # something else took the node over meanwhile (a delete, a reboot, a lost VM)
        what, why = health_outcome(failures, recovery), "; ".join(failures)[:300]
        if what == "passed":
            self.store.update_node(cluster, node, pending=None, message="")
            self.store.add_event(cluster, "Instance", "Info", f"{node}: passed the deep health check ({', '.join(checks)})",
                                 grp=n.grp, node=node, operation_id=op)
        elif what == "failed":
            msg = (f"deep health check failed: {why}; NodeRecovery is None: BatchRebootClusterNodes or "
                   "BatchReplaceClusterNodes recovers it")
            self.store.update_node(cluster, node, pending=None, phase=Phase.FAILED, retry_at=NO_RETRY, message=msg[:500])
            self.store.add_event(cluster, "Instance", "Error", f"{node}: {msg}"[:500], grp=n.grp, node=node, operation_id=op)
        else:
            verb = "rebooting" if what == "reboot" else "replacing"
            msg = f"deep health check failed: {why}; {verb} it (NodeRecovery Automatic)"
            self.store.update_node(cluster, node, pending=what, message=msg[:500])
            self.store.add_event(cluster, "Instance", "Warning", f"{node}: {msg}"[:500], grp=n.grp, node=node, operation_id=op)

    async def _do_rollback_cluster(self, cluster: str, a: Action, ctx=None) -> None:
        """Legacy create that failed: remove every VM (and the cluster's network), then Failed."""
        c = self.rec.snap[cluster][0]
        types = await self._teardown(c)
        with self.store.tx():
            self.store.delete_nodes(cluster)
            for g in self.store.groups(cluster):
                self.store.update_group(cluster, g.name, status=Status.FAILED)
            self.store.update_cluster(cluster, status=Status.FAILED)
        self.rec.capacity_released(*types)
        self.store.add_event(cluster, "Cluster", "Error",
                             f"cluster {cluster} is Failed: rolled back, every VM removed ({c.failure_message})")

    async def _do_delete_cluster(self, cluster: str, a: Action, ctx=None) -> None:
        types = await self._teardown(self.rec.snap[cluster][0])
        self.store.delete_cluster(cluster)
        self.rec.capacity_released(*types)
        for d in (self.rec.snap, self.rec.ops):
            d.pop(cluster, None)

    async def _teardown(self, c: ClusterRow) -> set[str]:
        """Every VM, volume and network of the cluster gone, even those a thread still creates;
        returns the instance types its groups had (their capacity is free again)."""
        types = {g.instance_type for g in self.store.groups(c.name)}
        prov = self.io.provider_for(c)
        had_threads = threads_running(c.name) > 0
        await prov.delete_cluster_async(c.name)
        if had_threads:
            await self.tasks.wait_threads(c.name)
            await prov.delete_cluster_async(c.name)
        self.rec.forget(c.name)
        return types


    async def _do_repair(self, cluster: str, a: Action, ctx=None) -> None:
        c = self.rec.snap[cluster][0]
        conf = self.io.configurer_for(c)
        if ctx is None:
            ctx = self.io.context(cluster)
        try:
            why = await conf.restart_slurmd_async(ctx, a.node)
        except Exception as e:  # noqa: BLE001 - the node stays marked; the next step of the ladder follows
            why = str(e) or type(e).__name__
        if why:
            self.store.add_event(cluster, "Instance", "Warning", f"{a.node}: slurmd restart failed: {why}"[:500],
                                 grp=a.group, node=a.node)

    async def _take_down(self, cluster: str, node: str, why: str) -> None:
        """A compute node Slurm knows goes DOWN before its VM is rebooted or replaced: its jobs end now
        (and a batch job is requeued) instead of after SlurmdTimeout."""
        n = self.store.node(cluster, node)
        g = self.rec.group(cluster, n.grp) if n else None
        if n is None or n.joined_at is None or g.node_type != "Compute":
            return
        conf = self.io.configurer_for(self.rec.snap[cluster][0])
        try:
            said = await conf.take_down_async(self.io.context(cluster), node, why)
        except Exception as e:  # noqa: BLE001 - best effort: Slurm finds out by itself later
            said = str(e)
        if said:
            log.warning("%s: could not set it DOWN in Slurm first: %s", node, said)


# The actions that run as tasks (the others are quick store writes in the pass: Engine.SYNC_ACTIONS).
ACTIONS = {Kind.LAUNCH: Steps._do_launch, Kind.CONFIGURE: Steps._do_configure, Kind.JOIN: Steps._do_join,
           Kind.LEAVE: Steps._do_leave, Kind.REMOVE: Steps._do_remove, Kind.ORPHAN: Steps._do_orphan,
           Kind.LOST: Steps._do_lost, Kind.REBOOT: Steps._do_reboot, Kind.REPLACE: Steps._do_replace,
           Kind.HEALTHCHECK: Steps._do_healthcheck, Kind.DETACH: Steps._do_detach,
           Kind.ROLLBACK_CLUSTER: Steps._do_rollback_cluster, Kind.DELETE_CLUSTER: Steps._do_delete_cluster,
           Kind.REPAIR: Steps._do_repair}
