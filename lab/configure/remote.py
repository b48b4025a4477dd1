"""One command on one node over SSH (inside the lab's namespace), with the cluster's key."""

from __future__ import annotations

import subprocess

from lab.providers.reach import ssh_command


def run_on_node(cluster: str, address: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([*ssh_command(cluster, address), command], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
