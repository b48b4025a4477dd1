"""`slurmlab up`: the whole path. Host set-up, the box if missing, the cluster (or the one that
exists, resumed), its full size, a first job on it, and the node to get in through."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lab.errors import LabError
from lab.store.db import NodeRow, Store

Progress = Callable[[str], None]


@dataclass
class Up:
    store: Store
    name: str
    first_job: dict  # run_first_job's answer
    entry: NodeRow  # the login node (or the first node): where to get in


def up(sp, *, users_given: bool, timeout: float, progress: Progress, box_progress: Progress,
       watcher: Callable[[], Callable] | None = None) -> Up:
    """Bring the cluster of spec `sp` up and run a first job; raises LabError when it fails.
    `watcher()` makes the on_change callback of the wait (made when the wait starts: its clock)."""
    from lab import box
    from lab.control import clusters
    from lab.engine import daemon
    from lab.host import libvirtd

    progress("host: namespace, libvirtd, storage pool")
    libvirtd.up()
    if not box.is_current(sp.box or box.DEFAULT_BOX):
        if sp.box and sp.box != box.DEFAULT_BOX:
            raise LabError(f"box {sp.box} is not added to Vagrant", f"vagrant box add {sp.box} ...")
        box.build(progress=box_progress)
    st = daemon.store()
    if st.cluster(sp.name) is None:
        clusters.create(st, sp)  # the host and the box are ready (above, with progress): preflight checks the name's leftovers
    else:
        progress(f"cluster {sp.name} exists: resuming")
        if users_given:
            progress(f"--users ignored: cluster {sp.name} exists (change its accounts with slurmlab users add/remove)")
        daemon.ensure_running()
    d = clusters.wait(st, sp.name, "FullSize", on_change=watcher() if watcher else None, timeout=timeout)
    if d["ClusterStatus"] == "Failed":
        raise LabError(f"cluster {sp.name} failed: {d.get('FailureMessage')}")
    result = run_first_job(st, sp.name, progress)
    login = next((n for n in st.nodes(sp.name) if any(g.name == n.grp and g.node_type == "Login" for g in st.groups(sp.name))), None)
    entry = login or next(n for n in st.nodes(sp.name))
    return Up(store=st, name=sp.name, first_job=result, entry=entry)


def run_first_job(st: Store, name: str, progress: Progress) -> dict:
    """srun -N<compute nodes> hostname from the login node (or the controller)."""
    from lab.configure.remote import run_on_node

    groups = {g.name: g for g in st.groups(name)}
    nodes = st.nodes(name)
    computes = [n for n in nodes if groups[n.grp].node_type == "Compute" and n.phase == "running"]
    login = next((n for n in nodes if groups[n.grp].node_type == "Login" and n.phase == "running"), None)
    entry = login or next(n for n in nodes if groups[n.grp].node_type == "Controller")
    cmd = f"srun -N{len(computes)} hostname"
    progress(f"first job on {entry.name}: {cmd}")
    res = run_on_node(name, entry.address, cmd, timeout=300)
    if res.returncode != 0:
        raise LabError(f"the first job failed on {entry.name}: {res.stdout.strip()}",
                       f"look at the nodes: slurmlab ssh {name} {entry.name} -- sinfo")
    return {"command": cmd, "node": entry.name, "nodes": len(computes), "output": res.stdout}
