"""`slurmlab logs NAME NODE`: a node's logs without an ssh session: the lifecycle scripts' output
(/var/log/provision/provisioning.log, where HyperPod keeps it; the default) or a unit's journal."""

from __future__ import annotations

import shlex
from typing import Optional

import typer

from lab.cmd.base import OutputOpt, app, store, vm_node
from lab.errors import LabError
from lab.output import Output, out, print_json

PROVISION_LOG = "/var/log/provision/provisioning.log"  # playbooks/lifecycle.yml's slurmlab_lifecycle_log


def log_command(unit: str | None, tail: int | None) -> str:
    """The shell command (run as the ssh user, through sudo) that prints the asked-for log."""
    if unit:
        lines = f" --lines {int(tail)}" if tail else " --lines all"
        return f"sudo journalctl --no-pager --output short-iso --unit {shlex.quote(unit)}{lines}"
    show = f"tail -n {int(tail)}" if tail else "cat"
    log = shlex.quote(PROVISION_LOG)
    return f"if sudo test -e {log}; then sudo {show} {log}; else echo 'slurmlab-logs: no {PROVISION_LOG}' >&2; exit 3; fi"


@app.command("logs")
def logs(
    name: str,
    node: str = typer.Argument(..., help="node name, or a group name for its first node"),
    lifecycle: bool = typer.Option(False, "--lifecycle", help="the lifecycle scripts' output (the default)"),
    unit: Optional[str] = typer.Option(None, "--unit", help="a systemd unit's journal instead, e.g. slurmd"),
    tail: Optional[int] = typer.Option(None, "--tail", min=1, help="only the last N lines"),
    output: Output = OutputOpt,
) -> None:
    """A node's lifecycle-script output (HyperPod's /var/log/provision/provisioning.log) or a unit's journal."""
    from lab.configure.remote import run_on_node

    if lifecycle and unit:
        raise LabError("--lifecycle and --unit name two different logs", "give one of them")
    match = vm_node(store(), name, node, "keep no logs")
    what = f"unit {unit}" if unit else PROVISION_LOG
    r = run_on_node(name, match.address, log_command(unit, tail))
    if r.returncode != 0:
        said = (r.stderr or r.stdout or "").strip().splitlines()
        if r.returncode == 3 and not unit:
            raise LabError(f"{match.name} has no {PROVISION_LOG}: no lifecycle script ran there yet",
                           f"the cluster's LifeCycleConfig runs at a node's creation; see slurmlab describe-cluster {name}")
        raise LabError(f"cannot read {what} on {match.name} (exit {r.returncode}): {said[-1] if said else ''}",
                       f"is the node up? slurmlab list-cluster-nodes {name}")
    if output == Output.json:
        print_json({"ClusterName": name, "Node": match.name, "Log": what, "Lines": r.stdout.splitlines()})
        return
    out.print(r.stdout.rstrip("\n"), markup=False, highlight=False)
