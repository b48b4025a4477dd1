"""`slurmlab users add|remove`: the change in users.json, then users.yml over the running nodes."""

from __future__ import annotations

from dataclasses import dataclass, field

from lab.errors import Conflict, LabError
from lab.store.db import ClusterRow, Store
from lab.workflows.nodes import running


@dataclass
class Pushed:
    cluster: ClusterRow
    change: object  # lab.users.Change
    nodes: list[str] = field(default_factory=list)  # the nodes that got the accounts now


def push(st: Store, c: ClusterRow, verb: str, names: list[str]) -> list[str]:
    """users.yml over the cluster's running nodes; returns their names. A failed run is a LabError
    naming the nodes (users.json keeps the change: the same command again retries)."""
    from lab.configure import runner
    from lab.workspace import ClusterDir

    r = running(st, c)
    if not r.nodes:
        return []
    try:
        runner.run_playbook(r.context(), "users.yml", workdir=ClusterDir(c.name).root)
    except runner.PlaybookFailed as e:
        failures = e.result.failures
        detail = "\n".join(f"  {h}: {m}" for h, m in sorted(failures.items()))
        raise LabError(f"users {verb}: the accounts were not changed on {', '.join(sorted(failures))}:\n{detail}",
                       f"users.json has the change; run the same command again to retry: slurmlab users {verb} "
                       f"{c.name} {' '.join(names)}") from None
    return [n.name for n in r.nodes]


def change(st: Store, name: str, verb: str, names: list[str]) -> Pushed:
    """Add (verb "add") or remove ("remove") student accounts of cluster `name`, on its running nodes
    too (a simulated cluster has none)."""
    from lab import users
    from lab.control import clusters
    from lab.providers import registry

    c = clusters.get(st, name)
    if c.status in ("Deleting", "Failed", "RollingBack"):
        raise Conflict(f"users {verb}: cluster '{name}' is {c.status}", "change the accounts of a cluster that is "
                       "Creating, InService or Updating")
    done = users.add(name, names) if verb == "add" else users.remove(name, names)
    nodes = [] if registry.info(c.provider).simulated else push(st, c, verb, names)
    return Pushed(cluster=c, change=done, nodes=nodes)
