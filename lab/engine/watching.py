"""The engine watches Slurm too (docs/recovery.md): `SlurmWatch`, a part of lab.engine.engine.Engine.

Every `slurm_period_s` a task asks the cluster's configurer for Slurm's view of the compute nodes
(a real cluster: one `sinfo` on the controller); the next pass gives it to lab/engine/recovery.py
and carries out the decisions: marks and events, a slurmd restart (a task, like any node step),
a reboot or replacement (the node's `pending`, which the planner acts on as for
BatchRebootClusterNodes / BatchReplaceClusterNodes). A controller whose slurmctld does not answer
is marked on the cluster (`slurm_problem`: DescribeCluster's Lab.SlurmProblem) with one event.

A group's failures in a row are counted by lab/engine/bookkeeping.py (`group_failed`); a group that
reaches recovery.PROTECT_AFTER is protected: nothing of it is retried until `resume_group` (lab/control/commands.py).

The engine's own liveness: each pass writes a heartbeat (`engine_seen_at` in the store's meta,
at most every HEARTBEAT_S), which DescribeCluster and the console show.
"""

from __future__ import annotations

import logging
import time

from lab.engine import recovery
from lab.engine.actions import Steps
from lab.engine.backends import Backends
from lab.engine.bookkeeping import Records
from lab.engine.plan import Action, node_recovery
from lab.engine.states import Kind, Phase, Status
from lab.engine.tasks import Tasks
from lab.store.db import ClusterRow

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
ENGINE_STALE_S = 60.0  # no heartbeat this long: DescribeCluster says the engine is not running
WATCHED = (Status.IN_SERVICE, Status.UPDATING)  # the cluster statuses whose Slurm the engine reads


def controller_up(types: dict[str, str], nodes) -> bool:
    """A running controller to ask (not being replaced or rebooted); `types`: group -> node type."""
    return any(types.get(n.grp) == "Controller" and n.phase == Phase.RUNNING and not n.pending for n in nodes)


class SlurmWatch:
    """Reads Slurm's view of each cluster (a task per cluster, at most every `slurm_period_s`) and acts
    on it the next pass: marks, events, and recovery steps (a slurmd restart is a task of `steps`; a
    reboot or replace is the node's `pending`, which the planner acts on)."""

    def __init__(self, rec: Records, io: Backends, tasks: Tasks, steps: Steps, *,
                 slurm_period_s: float = recovery.SLURM_PERIOD_S, recover_after_s: float = recovery.RECOVER_AFTER_S):
        self.rec, self.io, self.tasks, self.steps = rec, io, tasks, steps
        self.store, self.clock = rec.store, rec.clock
        self.slurm_period_s = slurm_period_s
        self.recover_after_s = recover_after_s
        self._views: dict = {}  # cluster -> (view, taken_at) or an exception, until the next pass
        self.last: dict = {}  # cluster -> the last (view, taken_at) applied (auto-patching reads it)
        self._polled_at: dict[str, float] = {}
        self._beat_at = float("-inf")

    # ------------------------------------------------------------------ heartbeat
    def heartbeat(self) -> None:
        now = time.time()  # wall time, whatever clock the engine plans with: readers compare it to theirs
        if now - self._beat_at >= HEARTBEAT_S:
            self._beat_at = now
            self.store.set_meta("engine_seen_at", now)

    # ------------------------------------------------------------------ the poll
    def watch(self, c: ClusterRow, groups, nodes, busy: set[str]) -> None:
        polled = self._polled_at
        got = self._views.pop(c.name, None)
        if got is not None:
            self._apply_view(c, groups, nodes, busy, got)
        if c.status not in WATCHED or "slurm" in busy:
            return
        types = {g.name: g.node_type for g in groups}
        if not controller_up(types, nodes):
            return  # no controller to ask (being replaced, rebooted, not up yet)
        if not any(types.get(n.grp) == "Compute" and n.joined_at for n in nodes) and c.slurm_problem is None:
            return  # nothing in Slurm to watch yet
        now = self.clock()
        if now - polled.get(c.name, float("-inf")) < self.slurm_period_s:
            return
        conf = self.io.configurer_for(c)
        if conf is None:
            return
        polled[c.name] = now
        ctx = self.io.context_from(c, groups, nodes)
        self.tasks.start(c.name, "slurm", self._poll_slurm(c.name, conf, ctx))

    async def _poll_slurm(self, cluster: str, conf, ctx) -> None:
        try:
            got = await conf.slurm_nodes_async(ctx, self.rec.faults)
        except Exception as e:  # noqa: BLE001 - the next pass shows it (slurmctld does not answer)
            got = e
        if got is not None:
            self._views[cluster] = got

    def _apply_view(self, c: ClusterRow, groups, nodes, busy: set[str], got) -> None:
        name = c.name
        if isinstance(got, Exception):
            why = str(got) or type(got).__name__
            if c.slurm_problem is None:
                self.store.update_cluster(name, slurm_problem=why, slurm_problem_since=self.clock())
                self.store.add_event(name, "Cluster", "Error", f"Slurm does not answer: {why}. The lab cannot see "
                                     "the nodes' Slurm states until it does (fix: slurmlab ssh "
                                     f"{name} controller -- sudo systemctl status slurmctld)"[:500])
            return
        view, taken_at = got
        self.last[name] = got
        if c.slurm_problem is not None:
            self.store.update_cluster(name, slurm_problem=None, slurm_problem_since=None)
            self.store.add_event(name, "Cluster", "Info", "Slurm answers again")
        now = self.clock()
        for d in recovery.assess(nodes, groups, view, taken_at, now, busy, node_recovery(c), self.recover_after_s):
            self._decide(c, d, now)

    def _decide(self, c: ClusterRow, d: recovery.Decision, now: float) -> None:
        name = c.name
        n = self.store.node(name, d.node)
        if n is None:
            return
        if d.kind == "mark":
            self.store.update_node(name, d.node, slurm=d.text, message=d.text,
                                   slurm_since=n.slurm_since if n.slurm_since is not None else now)
            what = ("" if "Action:" in d.text else
                    f"; NodeRecovery Automatic: recovered if still down in {self.recover_after_s:.0f} s"
                    if node_recovery(c) == "Automatic" else "; NodeRecovery None: shown, not recovered")
            self.store.add_event(name, "Instance", "Warning", f"{d.node}: {d.text}{what}"[:500], grp=d.group, node=d.node)
        elif d.kind == "clear":
            self.store.update_node(name, d.node, slurm=None, slurm_since=None, repairs=0, message="")
            self.rec.group_succeeded(name, d.group)
            self.store.add_event(name, "Instance", "Info", f"{d.node}: usable in Slurm again ({d.text})",
                                 grp=d.group, node=d.node)
        elif d.kind == "wait":
            if n.message != d.text:
                self.store.update_node(name, d.node, message=d.text)
        elif d.kind == "repair":
            self.store.update_node(name, d.node, repairs=n.repairs + 1, slurm_since=now,
                                   message=f"{n.slurm}: restarting slurmd")
            self.store.add_event(name, "Instance", "Warning", f"{d.node}: {d.text}: restarting slurmd",
                                 grp=d.group, node=d.node)
            self.tasks.start(name, d.node, self.steps.run(name, Action(Kind.REPAIR, node=d.node, group=d.group)))
        elif d.kind in ("reboot", "replace"):
            self.store.update_node(name, d.node, pending=d.kind, repairs=n.repairs + (not d.by_user), slurm_since=now,
                                   message=f"{d.kind} ({d.text})"[:500])
            self.store.add_event(name, "Instance", "Warning", f"{d.node}: {d.text}: {d.kind}", grp=d.group,
                                 node=d.node)
            if not d.by_user:
                self.rec.group_failed(name, d.group, f"{d.node}: {d.text}")
