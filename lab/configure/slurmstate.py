"""Slurm's view of a real cluster, and the small Slurm-side steps of recovery, over ssh inside the
lab's namespace (lab/engine/recovery.py decides; this only asks and acts).

- `read`: one `sinfo` on the controller (every compute node: name, state with Slurm's suffixes,
  reason). The ssh connection is kept open between polls (lab/providers/kept.py): a new handshake
  costs an emulated controller ~2.5 s of CPU, a poll over the open connection ~0.5 s.
- `restart_slurmd`: the cheap repair, on the node itself.
- `take_down`: before the lab reboots or replaces a node Slurm knows, `scontrol update state=down`
  with a `slurmlab:` reason, so its jobs end at once (NODE_FAIL; a batch job is requeued) instead of
  after SlurmdTimeout. The join that brings the node back resumes it (roles/slurm_node slurmd.yml).
- `cordon` / `uncordon`: auto-patching (lab/engine/patching.py) drains nodes with a `slurmlab:` reason
  (jobs run on, none starts) and resumes the ones it drained and did not patch; a user's drain stays.
"""

from __future__ import annotations

import shlex
import subprocess
import time

from lab.configure.inventory import ClusterContext
from lab.configure.sinfo import SlurmNode, parse_sinfo
from lab.providers import kept
from lab.providers.reach import ssh_command

SINFO = "sinfo --all --noheader --Node --format='%N|%T|%E'"
READ_TIMEOUT_S = 60


class SlurmUnreachable(Exception):
    """slurmctld did not answer (or the controller could not be reached): the message says which."""


def controller(ctx: ClusterContext):
    types = {g.name: g.node_type for g in ctx.groups}
    return next((n for n in ctx.nodes if types.get(n.grp) == "Controller"), None)


def _shared_connection(cluster: str) -> list[str]:
    return kept.options(cluster)


def _drop_master(ctx: ClusterContext, address: str) -> None:
    """End the kept connection to `address` (a poll over it hung): the next poll makes a new one."""
    kept.drop(ctx.name, address)


def run_on(ctx: ClusterContext, address: str, command: str, timeout: float, shared: bool = False):
    opts = _shared_connection(ctx.name) if shared else []
    return subprocess.run([*ssh_command(ctx.name, address, *opts), command], stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=timeout)


def read(ctx: ClusterContext) -> tuple[dict[str, SlurmNode], float]:
    """(Slurm's compute nodes, the time the question was asked). Raises SlurmUnreachable."""
    ctl = controller(ctx)
    if ctl is None:
        raise SlurmUnreachable("the cluster has no controller node")
    asked = time.time()
    try:
        p = run_on(ctx, ctl.address, SINFO, READ_TIMEOUT_S, shared=True)
    except subprocess.TimeoutExpired:
        _drop_master(ctx, ctl.address)
        raise SlurmUnreachable(f"sinfo on {ctl.name} did not return within {READ_TIMEOUT_S} s") from None
    if p.returncode == 255:
        _drop_master(ctx, ctl.address)
        raise SlurmUnreachable(f"cannot ssh to the controller {ctl.name}: {p.stderr.strip()[-200:]}")
    if p.returncode != 0:
        said = (p.stderr or p.stdout).strip().splitlines()
        raise SlurmUnreachable(f"slurmctld on {ctl.name} does not answer: {said[-1] if said else f'sinfo exit {p.returncode}'}")
    return parse_sinfo(p.stdout), asked


def restart_slurmd(ctx: ClusterContext, node: str) -> str:
    """Restart slurmd on the node; returns what went wrong ("" when it is active again)."""
    n = next((x for x in ctx.nodes if x.name == node), None)
    if n is None:
        return f"no node {node}"
    try:
        p = run_on(ctx, n.address, "sudo systemctl restart slurmd && systemctl is-active slurmd", 120)
    except subprocess.TimeoutExpired:
        return "systemctl restart slurmd did not return within 120 s"
    if p.returncode != 0:
        return (p.stderr or p.stdout).strip()[-300:] or f"exit {p.returncode}"
    return _resume_if(ctx, node, SLURMS_OWN)


# Reasons Slurm itself gives a node it took down; after a slurmd restart such a node is resumed.
# (ReturnToService=1 returns a node that was not responding by itself; not one that rebooted.)
SLURMS_OWN = ("Not responding", "Node unexpectedly rebooted")


def _resume_if(ctx: ClusterContext, node: str, reasons: tuple[str, ...]) -> str:
    """Resume the node when it is DOWN and its Slurm reason starts with one of `reasons` (scontrol
    refuses to resume a node that is not down or drained); what went wrong ("": done)."""
    ctl = controller(ctx)
    if ctl is None:
        return "no controller"
    cases = "|".join(shlex.quote(r) + "*" for r in reasons)
    q = shlex.quote(node)
    cmd = (f"s=$(sinfo --noheader --Node --nodes {q} --format='%T|%E' | head -n 1); r=${{s#*|}}; "
           f"case \"${{s%%|*}}\" in down*) case \"$r\" in {cases}) "
           f"sudo scontrol update nodename={q} state=resume;; esac;; esac")
    try:
        p = run_on(ctx, ctl.address, cmd, 60, shared=True)
    except subprocess.TimeoutExpired:
        return "resuming it in Slurm did not return within 60 s"
    return "" if p.returncode == 0 else ((p.stderr or p.stdout).strip()[-300:] or f"exit {p.returncode}")


def take_down(ctx: ClusterContext, node: str, why: str) -> str:
    """`scontrol update state=down` with a slurmlab: reason; returns what went wrong ("": done)."""
    ctl = controller(ctx)
    if ctl is None:
        return "no controller"
    cmd = f"sudo scontrol update nodename={shlex.quote(node)} state=down reason={shlex.quote('slurmlab: ' + why)}"
    try:
        p = run_on(ctx, ctl.address, cmd, 60, shared=True)
    except subprocess.TimeoutExpired:
        return "scontrol update did not return within 60 s"
    return "" if p.returncode == 0 else ((p.stderr or p.stdout).strip()[-300:] or f"exit {p.returncode}")


def _on_controller(ctx: ClusterContext, nodes: list[str], cmd: str, what: str) -> dict[str, str]:
    ctl = controller(ctx)
    if ctl is None:
        return {n: "no controller" for n in nodes}
    try:
        p = run_on(ctx, ctl.address, cmd, 60, shared=True)
    except subprocess.TimeoutExpired:
        return {n: f"{what} did not return within 60 s" for n in nodes}
    if p.returncode == 0:
        return {}
    said = (p.stderr or p.stdout).strip()[-300:] or f"exit {p.returncode}"
    return {n: said for n in nodes}


def cordon(ctx: ClusterContext, nodes: list[str], why: str) -> dict[str, str]:
    """DRAIN the nodes with a slurmlab: reason (running jobs go on, no new one starts); node -> what failed."""
    if not nodes:
        return {}
    cmd = (f"sudo scontrol update nodename={shlex.quote(','.join(nodes))} state=drain "
           f"reason={shlex.quote('slurmlab: ' + why)}")
    return _on_controller(ctx, nodes, cmd, "scontrol update state=drain")


def uncordon(ctx: ClusterContext, nodes: list[str]) -> dict[str, str]:
    """Resume each node whose drain reason is the lab's (a user's drain, or a node already resumed, stays)."""
    if not nodes:
        return {}
    steps = []
    for n in nodes:
        q = shlex.quote(n)
        steps.append(f"r=$(sinfo --noheader --Node --nodes {q} --format='%E' | head -n 1); "
                     f"case \"$r\" in {shlex.quote(LAB_REASON)}*) sudo scontrol update nodename={q} state=resume;; esac")
    return _on_controller(ctx, nodes, " && ".join(f"{{ {s}; }}" for s in steps), "scontrol update state=resume")


def jobs_on(ctx: ClusterContext, nodes: list[str]) -> dict[str, int]:
    """node -> the jobs squeue lists on it (running, completing, suspended, configuring); {} when
    slurmctld does not answer (nothing is known)."""
    ctl = controller(ctx)
    if ctl is None or not nodes:
        return {}
    try:
        p = run_on(ctx, ctl.address, jobs_on_command(nodes), 60, shared=True)
    except subprocess.TimeoutExpired:
        return {}
    return parse_jobs_on(p.stdout)


def jobs_on_command(nodes: list[str]) -> str:
    """One squeue per node; a node whose squeue failed prints nothing (the count and the answer are one call)."""
    return "; ".join(f"j=$(squeue -h -w {shlex.quote(n)} -t R,CG,S,CF -o %i) && echo {shlex.quote(n)} "
                     f"$(printf '%s' \"$j\" | grep -c .)" for n in nodes)


def parse_jobs_on(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            out[parts[0]] = int(parts[1])
    return out


LAB_REASON = "slurmlab:"
