"""Guest clocks after a checkpoint restore: each running node's clock set to the host's, over SSH in
the lab's namespace, all nodes at once. A restored guest runs on from the checkpoint's time; munge
refuses credentials more than 5 minutes off, and slurmctld would see every node silent since then."""

from __future__ import annotations

import logging
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from lab.configure.inventory import ClusterContext
from lab.providers.reach import ssh_command

log = logging.getLogger(__name__)


def set_one(cluster: str, address: str, timeout: float = 60) -> str:
    """'' when the node's clock is set; else why not. The host's time is read as the command leaves."""
    try:
        p = subprocess.run([*ssh_command(cluster, address), f"sudo date -u -s @{time.time():.3f} >/dev/null && "
                            "(sudo hwclock --systohc --utc 2>/dev/null; true)"], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"no answer within {timeout:.0f} s"
    return "" if p.returncode == 0 else f"ssh exit {p.returncode}: {p.stdout.strip()[-200:]}"


def set_all(ctx: ClusterContext) -> dict[str, str]:
    nodes = [n for n in ctx.nodes if n.address and n.phase not in ("planned", "failed", "lost")]
    with ThreadPoolExecutor(max_workers=max(1, min(8, len(nodes)))) as pool:
        found = dict(zip((n.name for n in nodes), pool.map(lambda n: set_one(ctx.name, n.address), nodes)))
    bad = {k: v for k, v in found.items() if v}
    log.info("clocks set on %d node(s)%s", len(found) - len(bad), f"; not on {bad}" if bad else "")
    return bad
