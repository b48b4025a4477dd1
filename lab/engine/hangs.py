"""The engine watches for hung VMs (issue 45): `HangWatch`, a part of lab.engine.engine.Engine.

A VM can hang while libvirt says it runs: its vCPU spins in a panicked or frozen kernel, and it answers
neither ssh, nor ARP, nor its guest agent (seen in CI: a login VM that every later join then failed to
reach, "No route to host"). Slurm notices a compute node after SlurmdTimeout; nothing noticed a
controller or a login node. So every `period_s` a task asks the provider which running nodes are
silent (the vagrant provider pings each VM's guest agent over virtio-serial: no network, an answer
in milliseconds even on a loaded machine). A node silent for `hung_after_s` in a row is hung. That is
well before Slurm's ladder (lab/engine/recovery.py) would try a slurmd restart over ssh on a hung compute
node (its mark after SlurmdTimeout, then RECOVER_AFTER_S), and a restart under way does not start the
count again:

- its message and one Warning event say what did not answer, and for how long;
- NodeRecovery Automatic: it is rebooted (its VM destroyed and started: a hung kernel takes no ACPI
  shutdown); hung again within REHANG_WINDOW_S of that reboot, it is replaced. Both count as the
  group's failures (protected mode, lab/engine/recovery.py). NodeRecovery None: the mark only;
- a node that answers again loses the mark, with one Info event.

Nodes with work in flight, or not running, are not asked; nor is a cluster that is not InService or
Updating, or whose checkpoint is being taken (its VMs are paused for it).
"""

from __future__ import annotations

import logging

from lab.engine.backends import Backends
from lab.engine.bookkeeping import Records
from lab.engine.plan import node_recovery
from lab.engine.states import Phase
from lab.engine.tasks import Tasks
from lab.engine.watching import WATCHED
from lab.store.db import ClusterRow

HANG_PERIOD_S = 10.0
HUNG_AFTER_S = 30.0
REHANG_WINDOW_S = 900.0
MESSAGE = "hung"

log = logging.getLogger(__name__)


class HangWatch:
    def __init__(self, rec: Records, io: Backends, tasks: Tasks, period_s: float = HANG_PERIOD_S,
                 hung_after_s: float = HUNG_AFTER_S):
        self.rec, self.io, self.tasks = rec, io, tasks
        self.store, self.clock = rec.store, rec.clock
        self.period_s, self.hung_after_s = period_s, hung_after_s
        self._answers: dict[str, tuple[float, list[str], dict[str, str]]] = {}  # cluster -> (asked at, asked, silent)
        self._asked_at: dict[str, float] = {}
        self._silent_since: dict[tuple[str, str], float] = {}
        self._rebooted_at: dict[tuple[str, str], float] = {}

    def watch(self, c: ClusterRow, groups, nodes, busy: set[str]) -> None:
        got = self._answers.pop(c.name, None)
        if got:
            self._show(c, nodes, busy, *got)
        if c.status not in WATCHED or "hang" in busy or "checkpoint" in busy:
            return
        asked = [n.name for n in nodes if n.phase == Phase.RUNNING and not n.pending and n.name not in busy]
        now = self.clock()
        if not asked or now - self._asked_at.get(c.name, float("-inf")) < self.period_s:
            return
        self._asked_at[c.name] = now
        prov = self.io.provider_for(c)
        self.tasks.start(c.name, "hang", self._ask(c.name, prov, asked, now))

    async def _ask(self, cluster: str, prov, asked: list[str], at: float) -> None:
        try:
            silent = await prov.silent_async(cluster, asked)
        except Exception as e:  # noqa: BLE001 - nothing known this time (libvirt down: lab/engine/sight.py says so)
            log.info("cluster %s: the guest agents could not be asked: %s", cluster, e)
            return
        if silent:
            log.info("cluster %s: silent guest agents: %s", cluster, silent)
        self._answers[cluster] = (at, asked, silent)

    def _show(self, c: ClusterRow, nodes, busy: set[str], at: float, asked: list[str], silent: dict[str, str]) -> None:
        name, now = c.name, self.clock()
        by_name = {n.name: n for n in nodes}
        for node in asked:
            n = by_name.get(node)
            key = (name, node)
            if n is None or n.phase != Phase.RUNNING or n.pending:
                self._silent_since.pop(key, None)  # rebooted, replaced, gone: starts again
                continue
            if node in busy:
                continue  # at work (a slurmd restart over ssh, say): still silent or not, it is judged after
            why = silent.get(node)
            if why is None:
                self._silent_since.pop(key, None)
                if n.message.startswith(MESSAGE):
                    self.store.update_node(name, node, message="")
                    self.store.add_event(name, "Instance", "Info", f"{node}: answers again", grp=n.grp, node=node)
                continue
            since = self._silent_since.setdefault(key, at)
            if now - since < self.hung_after_s:
                continue
            self._hung(c, n, f"for {now - since:.0f} s: {why}", now)

    def _hung(self, c: ClusterRow, n, text: str, now: float) -> None:
        name, key = c.name, (c.name, n.name)
        if node_recovery(c) != "Automatic":
            text = f"{MESSAGE} {text}"
            if not n.message.startswith(MESSAGE):
                self.store.update_node(name, n.name, message=text[:500])
                self.store.add_event(name, "Instance", "Warning", f"{n.name}: {text}; NodeRecovery None: shown, "
                                     f"not recovered (fix: slurmlab batch-reboot-cluster-nodes {name} {n.name})"[:500],
                                     grp=n.grp, node=n.name)
            return
        again = now - self._rebooted_at.get(key, float("-inf")) < REHANG_WINDOW_S
        kind = "replace" if again else "reboot"
        why = f"{MESSAGE}{' again after its reboot' if again else ''} {text}"
        self._rebooted_at[key] = now
        self._silent_since.pop(key, None)
        self.store.update_node(name, n.name, pending=kind, message=f"{why}: {kind}"[:500])
        self.store.add_event(name, "Instance", "Warning", f"{n.name}: {why}: {'replacing' if again else 'rebooting'} it"[:500],
                             grp=n.grp, node=n.name)
        self.rec.group_failed(name, n.grp, f"{n.name}: {why}")
