"""The engine watches each cluster's JupyterHub (Lab.Jupyter, issue 31): `HubWatch`, a part of
lab.engine.engine.Engine.

Every `period_s` a task asks the configurer whether each running login node's hub answers (a real
cluster: lab/configure/hubstate.py, from the controller). The next pass shows the answer: a hub
that does not answer puts a message on its login node (ListClusterNodes, DescribeClusterNode, the
console) and one Warning event naming the fix; answering again clears it with one Info event. The
lab does not restart the hub: its unit does (Restart=on-failure), and a hub that stays down needs a
person to read its journal.
"""

from __future__ import annotations

from lab.engine.backends import Backends
from lab.engine.bookkeeping import Records
from lab.engine.states import Phase
from lab.engine.tasks import Tasks
from lab.engine.watching import WATCHED, controller_up
from lab.store.db import ClusterRow

HUB_PERIOD_S = 30.0
MESSAGE = "JupyterHub does not answer"


def enabled(spec: dict | None) -> bool:
    """Lab.Jupyter of a stored spec."""
    return bool(((spec or {}).get("Lab") or {}).get("Jupyter"))


def running_logins(groups, nodes) -> list:
    """The login nodes whose hub can be reached: running, with an address, no reboot or replace pending."""
    logins = {g.name for g in groups if g.node_type == "Login"}
    return [n for n in nodes if n.grp in logins and n.phase == Phase.RUNNING and n.address and not n.pending]


class HubWatch:
    def __init__(self, rec: Records, io: Backends, tasks: Tasks, period_s: float = HUB_PERIOD_S):
        self.rec, self.io, self.tasks = rec, io, tasks
        self.store, self.clock = rec.store, rec.clock
        self.period_s = period_s
        self._seen: dict[str, dict[str, str]] = {}  # cluster -> the last answer, until the next pass
        self._asked_at: dict[str, float] = {}

    def watch(self, c: ClusterRow, groups, nodes, busy: set[str]) -> None:
        got = self._seen.pop(c.name, None)
        if got:
            self._show(c.name, nodes, got)
        if c.status not in WATCHED or "hub" in busy or not enabled(c.spec):
            return
        if not controller_up({g.name: g.node_type for g in groups}, nodes):
            return  # the hub is asked from the controller
        logins = [n.name for n in running_logins(groups, nodes)]
        now = self.clock()
        if not logins or now - self._asked_at.get(c.name, float("-inf")) < self.period_s:
            return
        conf = self.io.configurer_for(c)
        if conf is None:
            return
        self._asked_at[c.name] = now
        ctx = self.io.context_from(c, groups, nodes)
        self.tasks.start(c.name, "hub", self._ask(c.name, conf, ctx, logins))

    async def _ask(self, cluster: str, conf, ctx, logins: list[str]) -> None:
        try:
            got = await conf.hub_state_async(ctx, logins)
        except Exception:  # noqa: BLE001 - nothing known this time; the Slurm poll shows a lost controller
            return
        if got:
            self._seen[cluster] = got

    def _show(self, cluster: str, nodes, got: dict[str, str]) -> None:
        for n in nodes:
            if n.name not in got or n.phase != Phase.RUNNING:
                continue
            why = got[n.name]
            shown = n.message.startswith(MESSAGE)
            if why and not shown and not n.message:
                self.store.update_node(cluster, n.name, message=f"{MESSAGE}: {why}"[:500])
                self.store.add_event(cluster, "Instance", "Warning",
                                     f"{n.name}: {MESSAGE} ({why}); students cannot reach their notebooks "
                                     f"(fix: slurmlab ssh {cluster} {n.name} -- sudo journalctl -u jupyterhub)"[:500],
                                     grp=n.grp, node=n.name)
            elif not why and shown:
                self.store.update_node(cluster, n.name, message="")
                self.store.add_event(cluster, "Instance", "Info", f"{n.name}: JupyterHub answers again",
                                     grp=n.grp, node=n.name)
