"""`slurmlab reframe-config NAME`: the cluster's ReFrame site configuration (lab/verify/reframe.py; docs/
verification.md "A regression suite: ReFrame"), printed, written to a file, or installed on the login nodes:
/etc/slurmlab/reframe/NAME.py, readable by every account, with /etc/profile.d/slurmlab-reframe.sh setting
RFM_CONFIG_FILES to it (a student's login shell then runs `reframe -c CHECK -r` with no -C)."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from lab.cmd.base import app, store
from lab.errors import LabError
from lab.output import err


def cluster_context(st, name: str):
    """The configure context of cluster `name` over its running nodes, as the playbooks get it (a
    NotFound naming the fix for an unknown cluster). Any provider: the records alone, no ssh."""
    from lab.configure.ansible import AnsibleConfigurer
    from lab.control.lookup import get

    import dataclasses

    from lab.engine.plan import leaving

    c = get(st, name)
    # the nodes Slurm has or is about to have again: running ones, and those being made, replaced or joined
    # (a node just replaced by `lifecycle rerun` is joining: it counts), not the failed or leaving ones
    nodes = [dataclasses.replace(n, phase="running") for n in st.nodes(name)
             if not leaving(n) and n.phase not in ("planned", "failed", "lost")]
    return AnsibleConfigurer("ssh").context(c, st.groups(name), nodes)


def install_command(name: str) -> str:
    """The shell command (run as the ssh user, with sudo) that takes the file on stdin and installs it;
    its last line says `reframe VERSION` or `reframe missing`."""
    from lab.verify import reframe

    path, tmp = shlex.quote(reframe.install_path(name)), shlex.quote(reframe.install_path(name) + ".new")
    profile = shlex.quote(reframe.PROFILE_FILE)
    line = shlex.quote(f"export RFM_CONFIG_FILES={reframe.install_path(name)}")
    return (f"set -e; sudo install -d -m 0755 {shlex.quote(reframe.INSTALL_DIR)}; "
            f"sudo tee {tmp} >/dev/null; sudo chmod 0644 {tmp}; sudo mv -f {tmp} {path}; "
            f"echo '# Managed by slurmlab reframe-config: ReFrame finds the cluster configuration here.' "
            f"| sudo tee {profile}.new >/dev/null; echo {line} | sudo tee -a {profile}.new >/dev/null; "
            f"sudo chmod 0644 {profile}.new; sudo mv -f {profile}.new {profile}; "
            "if command -v reframe >/dev/null; then echo \"reframe $(reframe -V)\"; else echo 'reframe missing'; fi")


def install(st, name: str, text: str) -> dict[str, str]:
    """Install the configuration on every running login node: node -> `reframe VERSION` or `reframe missing`."""
    from lab.providers import kept, registry

    c = st.cluster(name)
    if registry.info(c.provider).simulated:
        raise LabError(f"{name} is a simulated cluster: it has no login node to install ReFrame's configuration on",
                       "create the cluster with the default (real VM) provider; without --install the file is printed")
    login = {g.name for g in st.groups(name) if g.node_type == "Login"}
    nodes = [n for n in st.nodes(name) if n.grp in login and n.phase == "running" and n.address]
    if not nodes:
        raise LabError(f"{name} has no running login node", f"wait for one: slurmlab list-cluster-nodes {name}")
    done: dict[str, str] = {}
    for n in nodes:
        try:
            r = subprocess.run(kept.command(name, n.address, [install_command(name)]), input=text, text=True,
                               capture_output=True, timeout=120)
        except subprocess.TimeoutExpired:
            raise LabError(f"installing ReFrame's configuration on {n.name} took over 120 s",
                           f"is the node up? slurmlab list-cluster-nodes {name}") from None
        if r.returncode != 0:
            said = (r.stderr or r.stdout or "").strip().splitlines()
            raise LabError(f"cannot install ReFrame's configuration on {n.name} (exit {r.returncode}): "
                           f"{said[-1] if said else ''}", f"is the node up? slurmlab list-cluster-nodes {name}")
        done[n.name] = (r.stdout.strip().splitlines() or ["reframe missing"])[-1]
    return done


@app.command("reframe-config")
def reframe_config(
    name: str = typer.Argument(..., help="cluster name"),
    output_file: Optional[Path] = typer.Option(None, "--output-file", "-o", help="write the file here instead of stdout"),
    install_it: bool = typer.Option(False, "--install", help="also install it on the login nodes as "
                                    "/etc/slurmlab/reframe/NAME.py (readable by all; RFM_CONFIG_FILES in login shells)"),
) -> None:
    """The cluster's ReFrame site configuration (a Python file): its partitions, CPUs, memory and modules,
    for `reframe -C FILE -c CHECK -r` on the login node."""
    from lab.verify import reframe

    st = store()
    text = reframe.render(cluster_context(st, name))
    if output_file is not None:
        output_file.write_text(text)
        err.print(f"wrote {output_file}", markup=False, highlight=False)
    if install_it:
        path = reframe.install_path(name)
        for node, said in install(st, name, text).items():
            warn = ("  (no reframe there: the box lacks the workshop's wheels; rebuild it: slurmlab box build)"
                    if said == "reframe missing" else f"  ({said})")
            err.print(f"installed {path} on {node}{warn}", markup=False, highlight=False)
    if output_file is None:
        sys.stdout.write(text)  # as it is: no console markup, emoji or wrapping
        sys.stdout.flush()
