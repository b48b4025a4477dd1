"""Whether each login node's JupyterHub answers (Lab.Jupyter, issue 31), asked from the controller over
the connection the Slurm poll keeps open (lab/configure/slurmstate.py): no new ssh handshake, no
Python start-up on an emulated CPU, only bash's /dev/tcp to each login node's proxy, which answers
/NAME/hub/health for the hub behind it (a hub that is down gives the proxy's 503, or no answer)."""

from __future__ import annotations

import shlex
import subprocess

from lab.configure import slurmstate
from lab.configure.inventory import ClusterContext

PORT = 8000  # roles/jupyterhub/defaults/main.yml: jupyterhub_port
TIMEOUT_S = 60
MARK = "slurmlab-hub"


def path(cluster: str) -> str:
    """The hub's URL path on its proxy (roles/jupyterhub: jupyterhub_base_url)."""
    return f"/{cluster}/"


def command(cluster: str, logins: list[tuple[str, str]]) -> str:
    """One shell line: per (name, address), `slurmlab-hub NAME STATUS-LINE` (empty: no answer in 10 s)."""
    request = f"GET {path(cluster)}hub/health HTTP/1.0\\r\\nHost: localhost\\r\\n\\r\\n"
    parts = []
    for name, address in logins:
        probe = f'exec 3<>/dev/tcp/{address}/{PORT} && printf "{request}" >&3 && head -n 1 <&3'
        parts.append(f"echo {MARK} {shlex.quote(name)} $(timeout 10 bash -c {shlex.quote(probe)} 2>/dev/null | tr -d '\\r')")
    return "; ".join(parts)


def parse(out: str, names: list[str]) -> dict[str, str]:
    """node -> "" when its hub answered 200, else what it answered (or that it did not)."""
    got = {}
    for line in out.splitlines():
        f = line.split(maxsplit=2)
        if len(f) >= 2 and f[0] == MARK:
            got[f[1]] = f[2].strip() if len(f) == 3 else ""
    out_ = {}
    for n in names:
        status = got.get(n)
        if status is None:
            continue  # not asked (the command did not get that far): nothing known
        code = status.split()[1] if len(status.split()) > 1 else ""
        out_[n] = "" if code == "200" else (f"its proxy answers {status}" if status else f"no answer on port {PORT}")
    return out_


def read(ctx: ClusterContext, logins: list[str]) -> dict[str, str]:
    """login node -> "" (the hub answers) or why not; {} when the controller cannot be asked."""
    ctl = slurmstate.controller(ctx)
    by_name = {n.name: n for n in ctx.nodes}
    asked = [(n, by_name[n].address) for n in logins if n in by_name and by_name[n].address]
    if ctl is None or not asked:
        return {}
    try:
        p = slurmstate.run_on(ctx, ctl.address, command(ctx.name, asked), TIMEOUT_S, shared=True)
    except subprocess.TimeoutExpired:
        return {}
    if p.returncode == 255:  # ssh itself: the Slurm poll reports an unreachable controller
        return {}
    return parse(p.stdout, [n for n, _ in asked])
