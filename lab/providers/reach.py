"""How the lab reaches a host's VMs: ssh and vagrant run inside the network namespace where that
host's VM networks live (the lab's namespace for this machine in netns mode, a simulated host's
own), with the cluster's key; a remote host's VMs through ssh to that host (lab.host.sshhost)."""

from __future__ import annotations

import shutil

from lab import paths
from lab.host import registry
from lab.host.registry import Host
from lab.osutil import atomic_write
from lab.providers import placement
from lab.workspace import ClusterDir


def _netns_wrapper(tool: str, host: Host | None = None) -> str:
    """`tool`, or a two-line script that runs it inside the namespace where the VMs of `host` (default:
    the local host) are reached: the lab's namespace in netns mode, a simulated host's own."""
    real = shutil.which(tool) or f"/usr/bin/{tool}"
    ns = (host or registry.get(registry.LOCAL)).netns
    if not ns:
        return real
    w = paths.home() / "bin" / (tool if ns == paths.netns() else f"{tool}-{ns}")
    body = f'#!/bin/sh\nexec ip netns exec {ns} {real} "$@"\n'
    if not w.exists() or w.read_text() != body:
        atomic_write(w, body, 0o755)
    return str(w)


def vagrant_exe(host: Host | None = None) -> str:
    """python-vagrant's executable and ours: `vagrant` inside the namespace of the VMs' host."""
    return _netns_wrapper("vagrant", host)


def ssh_exe(host: Host | None = None) -> str:
    """`ssh` inside the namespace of the VMs' host (Ansible's ssh_executable, `slurmlab ssh`); for a
    remote host, `ssh-via-NAME` (through the host)."""
    if host is not None and host.remote:
        from lab.host import sshhost

        return sshhost.via_host(host)
    return _netns_wrapper("ssh", host)


def cluster_ssh_exe(cluster: str) -> str:
    """`ssh` for the VMs of `cluster` (on the host it was placed on)."""
    return ssh_exe(placement.host_of(cluster))


# Options for every non-interactive ssh to a node (ssh keeps the first value of an option, so a
# caller may put its own -o before these to override one).
SSH_OPTS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
            "-o", "ConnectTimeout=20", "-o", "LogLevel=ERROR"]


def ssh_command(cluster: str, address: str, *options: str) -> list[str]:
    """`ssh` to vagrant@ADDRESS with the cluster's key, inside the namespace of its host; add the remote
    command. `options` come first and so win over SSH_OPTS."""
    return [cluster_ssh_exe(cluster), "-i", str(ClusterDir(cluster).ssh_key), *options, *SSH_OPTS, f"vagrant@{address}"]


def ssh_answers(cluster: str, address: str, connect_timeout: float = 5, timeout: float = 20) -> bool:
    """Does the VM take an ssh login with the cluster's key (what `vagrant up` waits for)?"""
    import subprocess

    cmd = [*ssh_command(cluster, address, "-o", f"ConnectTimeout={connect_timeout:g}"), "true"]
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              timeout=timeout).returncode == 0
    except (subprocess.TimeoutExpired, OSError):
        return False
