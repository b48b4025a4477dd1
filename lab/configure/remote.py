"""One command on one node over SSH (inside the lab's namespace), with the cluster's key."""

from __future__ import annotations

import subprocess

from lab.providers.vagrant import ssh_exe
from lab.workspace import ClusterDir

SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR"]


def run_on_node(cluster: str, address: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [ssh_exe(), "-i", str(ClusterDir(cluster).ssh_key), *SSH_OPTS, f"vagrant@{address}", command]
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)
