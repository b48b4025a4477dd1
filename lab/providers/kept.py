"""Kept ssh connections to a cluster's nodes (ControlMaster, ControlPersist): a login costs an emulated
node ~1.3 s of CPU (key exchange, PAM, a session), a command over a kept connection ~0.1 s (measured on
a login node, 2026-12-06). The engine's polls of Slurm keep one to the controller
(lab/configure/slurmstate.py), and `slurmlab ssh NODE -- COMMAND` keeps one to NODE for a minute.

A kept connection to a VM that went away (replaced, rebooted, restored from a checkpoint: its TCP
connection is dead and nothing says so) ends within ~15 s (ServerAlive), or at once when a new VM at
that address resets it; a command that finds it broken is sent over a new connection by ssh itself."""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from lab import paths
from lab.providers.reach import cluster_ssh_exe, ssh_command

PERSIST_S = 60  # how long `slurmlab ssh` keeps its connection after its command


def control_folder(cluster: str) -> Path:
    """Where the kept connections to the cluster's nodes live: one folder per lab home and way in (ssh,
    ssh-slurmlab-h2, ssh-via-far: per host), as two clusters on two hosts may have the same addresses and
    %C (a hash of address, port and user) would be the same. Short, under /tmp: a socket's path has 108
    bytes, and ssh adds 17 to %C's 40 while it sets the master up (a pytest home's ssh/ssh/%C did not fit)."""
    tag = hashlib.sha256(f"{paths.home()}|{Path(cluster_ssh_exe(cluster)).name}".encode()).hexdigest()[:10]
    folder = Path("/tmp") / f"slurmlab-cm-{os.getuid()}-{tag}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = folder.stat()
    if st.st_uid != os.getuid() or st.st_mode & 0o077:  # not ours alone: never share masters through it
        raise PermissionError(f"{folder} is not a 0700 folder of this user; remove it")
    return folder


def options(cluster: str, persist_s: int = 120) -> list[str]:
    # ServerAlive: a master whose VM went away ends within ~15 s instead of hanging every later command
    return ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_folder(cluster)}/%C",
            "-o", f"ControlPersist={persist_s}", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=3"]


def drop(cluster: str, address: str) -> None:
    """End the kept connection to `address`: the next command makes a new one."""
    try:
        subprocess.run([*ssh_command(cluster, address, *options(cluster), "-O", "exit")], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
    except (subprocess.TimeoutExpired, OSError):
        pass


def command(cluster: str, address: str, remote: Sequence[str], persist_s: int = PERSIST_S) -> list[str]:
    """ssh running `remote` on the node over a kept connection. A broken one needs nothing of ours: ssh
    says "read from master failed" and connects anew by itself (the command had not reached the node)."""
    return [*ssh_command(cluster, address, *options(cluster, persist_s)), *remote]
