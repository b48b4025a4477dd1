"""A cluster's JupyterHub (Lab.Jupyter, issue 31): which node serves it, on which port and path.

roles/jupyterhub runs the hub on every login node; its proxy listens on PORT and serves the hub
under /NAME/ (so one browser keeps the cookies of several clusters' hubs apart). `slurmlab open`
and the console forward a loopback port of this machine to the first running login node.
"""

from __future__ import annotations

from lab.configure.hubstate import PORT, path
from lab.control.views import get
from lab.engine.hubwatch import enabled, running_logins
from lab.errors import LabError
from lab.providers import registry
from lab.store.db import NodeRow, Store

__all__ = ["PORT", "hub_node", "path"]  # the port and path of lab/configure/hubstate.py: one place for both


def hub_node(st: Store, name: str) -> NodeRow:
    """The running login node whose hub a browser reaches; a LabError naming the fix when there is none."""
    c = get(st, name)
    if not enabled(c.spec):
        raise LabError(f"{name} has no JupyterHub (Lab.Jupyter is not set)",
                       "create the cluster with Lab.Jupyter: true in its spec, or with --jupyter")
    if registry.info(c.provider).simulated:
        raise LabError(f"{name} is a simulated cluster: its login node is not a VM and runs no hub",
                       "create the cluster with the default (real VM) provider")
    node = next(iter(running_logins(st.groups(name), st.nodes(name))), None)
    if node is None:
        raise LabError(f"{name} has no running login node yet", f"wait for it: slurmlab describe-cluster {name} "
                       "--wait-for InService")
    return node
