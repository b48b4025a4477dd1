"""What every command module shares: the Typer apps, the --output option, the store, the renderers."""

from __future__ import annotations

import logging

import typer

from lab import __version__
from lab.output import Output, Progress, err, out, print_json

app = typer.Typer(
    help="Real Slurm clusters from local VMs, provisioned the way SageMaker HyperPod does it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
host_app = typer.Typer(help="The host: network namespace, libvirtd, storage pool.", no_args_is_help=True)
box_app = typer.Typer(help="The VM box (Debian 13 + Slurm 24.11), built locally from Debian's mirror.",
                      no_args_is_help=True)
app.add_typer(host_app, name="host")
app.add_typer(box_app, name="box")

OutputOpt = typer.Option(Output.text, "--output", "-o", help="text for people, json for programs")
JupyterOpt = typer.Option(None, "--jupyter/--no-jupyter",
                          help="JupyterHub on the login node, notebooks as Slurm jobs (sets Lab.Jupyter)")


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="debug logging on stderr")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(name)s: %(message)s")


@app.command()
def version(output: Output = OutputOpt) -> None:
    """Print slurmlab's version."""
    if output == Output.json:
        print_json({"version": __version__})
    else:
        out.print(f"slurmlab {__version__}")


def store():
    from lab.engine import daemon

    return daemon.store()


def node_named(st, name: str, node: str):
    """The node `node` of cluster `name` (a node's name, or a group's name for its first node): its store
    row; a LabError naming the fix when there is none."""
    from lab.control.lookup import get
    from lab.errors import LabError

    get(st, name)
    nodes = st.nodes(name)
    match = next((n for n in nodes if n.name == node), None) or next((n for n in nodes if n.grp == node), None)
    if match is None:
        raise LabError(f"no node '{node}' in cluster {name}", f"list them: slurmlab list-cluster-nodes {name}")
    return match


def vm_node(st, name: str, node: str, lacks: str):
    """node_named's node, which must be a VM with an address (not of a simulated cluster, where its
    nodes `lacks`: e.g. "keep no logs")."""
    from lab.errors import LabError
    from lab.providers import registry

    match = node_named(st, name, node)
    if registry.info(st.cluster(name).provider).simulated:
        raise LabError(f"{name} is a simulated cluster: its nodes are not VMs and {lacks}",
                       "create the cluster with the default (real VM) provider")
    if not match.address:
        raise LabError(f"{match.name} has no address yet ({match.phase})", f"wait for it: slurmlab list-cluster-nodes {name}")
    return match


def box_progress(line: str) -> None:
    """The box builder's lines carry their own elapsed time."""
    err.print(line, markup=False, highlight=False)


class Watcher:
    """Prints what changed (cluster, groups, nodes) as timestamped lines on stderr."""

    def __init__(self, quiet: bool = False):
        self.progress = Progress(quiet)
        self.seen: dict[str, tuple] = {}

    def __call__(self, d: dict, nodes: list[dict]) -> None:
        groups = "  ".join(f"{g['InstanceGroupName']} {g['CurrentCount']}/{g['TargetCount']} {g['Status']}"
                           for g in d["InstanceGroups"])
        key = (d["ClusterStatus"], groups)
        if self.seen.get("_cluster") != key:
            self.seen["_cluster"] = key
            self.progress(f"[bold]{d['ClusterName']}[/bold] {d['ClusterStatus']}  {groups}")
        for n in nodes:
            st = n["InstanceStatus"]
            k = (st.get("Status"), st.get("Message"))
            if self.seen.get(n["NodeLogicalId"]) != k:
                self.seen[n["NodeLogicalId"]] = k
                msg = f" - {st['Message']}" if st.get("Message") else ""
                self.progress(f"  {n['NodeLogicalId']:<28} {st.get('Status'):<8}{msg}")


def print_cluster(d: dict) -> None:
    stale = d["Lab"].get("Stale")
    host = f", host {d['Lab']['Host']}" if d["Lab"].get("Host") else ""
    out.print(f"{d['ClusterName']}  {d['ClusterStatus']}{'  STALE' if stale else ''}  ({d['Lab']['Provider']}{host})")
    if d.get("FailureMessage"):
        out.print(f"  {'' if stale else 'failure: '}{d['FailureMessage']}", markup=False, highlight=False)
    for g in d["InstanceGroups"]:
        release = g.get("CurrentImageReleaseVersion")  # issue 32: the image release, and what is set to move it
        extra = (f"  release {release}" + (f" ({g['ImageVersionStatus']})" if g.get("ImageVersionStatus") not in
                                           (None, "UpToDate") else "") if release else "")
        extra += "".join(f"  {k} {v}" for k, v in (
            ("pinned", g.get("ImageReleaseVersion")), ("auto-patch", (g.get("AutoPatchConfig") or {}).get("PatchingStrategy")),
            ("schedule", (g.get("ScheduledUpdateConfig") or {}).get("ScheduleExpression"))) if v)
        out.print(f"  {g['InstanceGroupName']:<14} {g['InstanceType']:<14} {g['CurrentCount']}/{g['TargetCount']}  "
                  f"{g['Status']}{extra}", markup=False)
    if room := d["Lab"].get("Room"):  # the students' ssh from their laptops (lab/room)
        from lab.room.ports import describe_line

        out.print(f"  room: {describe_line(d['ClusterName'], room)}", markup=False, highlight=False)


def with_accounts(d: dict, name: str) -> dict:
    """create-cluster's and up's JSON: the student accounts (and their password) under Lab.Users."""
    from lab import users

    acc = users.load(name)
    if acc is not None:
        d = {**d, "Lab": {**d.get("Lab", {}), "Users": {"Names": acc.names, "Password": acc.password,
                                                         "Account": acc.account}}}
    return d


def print_accounts(name: str) -> None:
    from lab import users

    acc = users.load(name)
    if acc is not None and acc.users:
        out.print(f"student accounts: {users.name_range(acc.names)}  password: {acc.password}  "
                  f"(slurmlab users show {name})", markup=False)
    from lab.engine.hubwatch import enabled

    c = store().cluster(name)
    if c is not None and enabled(c.spec):  # Lab.Jupyter
        out.print(f"in a browser: slurmlab open {name}  (JupyterHub on the login node: the students log in there)",
                  markup=False)
