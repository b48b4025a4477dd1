"""A cluster's JupyterHub (Lab.Jupyter, issue 31): which node serves it, on which port and path.

roles/jupyterhub runs the hub on every login node; its proxy listens on PORT and serves the hub
under /NAME/ (so one browser keeps the cookies of several clusters' hubs apart). `slurmlab open`
and the console forward a loopback port of this machine to the first running login node.
"""

from __future__ import annotations

from lab.control.views import get
from lab.engine.hubwatch import enabled
from lab.engine.states import Phase
from lab.errors import LabError
from lab.providers import registry
from lab.store.db import NodeRow, Store

PORT = 8000  # roles/jupyterhub/defaults/main.yml: jupyterhub_port


def path(name: str) -> str:
    """The hub's URL path on the proxy (roles/jupyterhub: jupyterhub_base_url)."""
    return f"/{name}/"


def hub_node(st: Store, name: str) -> NodeRow:
    """The running login node whose hub a browser reaches; a LabError naming the fix when there is none."""
    c = get(st, name)
    if not enabled(c.spec):
        raise LabError(f"{name} has no JupyterHub (Lab.Jupyter is not set)",
                       "create the cluster with Lab.Jupyter: true in its spec, or with --jupyter")
    if registry.info(c.provider).simulated:
        raise LabError(f"{name} is a simulated cluster: its login node is not a VM and runs no hub",
                       "create the cluster with the default (real VM) provider")
    logins = {g.name for g in st.groups(name) if g.node_type == "Login"}
    node = next((n for n in st.nodes(name) if n.grp in logins and n.phase == Phase.RUNNING and n.address
                 and not n.pending), None)
    if node is None:
        raise LabError(f"{name} has no running login node yet", f"wait for it: slurmlab describe-cluster {name} "
                       "--wait-for InService")
    return node
