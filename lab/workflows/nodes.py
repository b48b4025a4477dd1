"""A cluster's running nodes, and the configure context over them (the one the playbooks get):
what `slurmlab verify` writes its inventory from and `slurmlab users` pushes accounts with."""

from __future__ import annotations

from dataclasses import dataclass

from lab.store.db import ClusterRow, NodeRow, Store


@dataclass
class Running:
    store: Store
    cluster: ClusterRow
    nodes: list[NodeRow]  # the nodes in phase running
    skipped: list[str]  # the names of the others

    def context(self):
        """The configurer's context (lab.configure) over the running nodes."""
        from lab.engine import daemon

        c = self.cluster
        return daemon.make_configurer(c.provider).context(c, self.store.groups(c.name), self.nodes)


def running(st: Store, c: ClusterRow) -> Running:
    nodes = st.nodes(c.name)
    return Running(store=st, cluster=c, nodes=[n for n in nodes if n.phase == "running"],
                   skipped=[n.name for n in nodes if n.phase != "running"])
