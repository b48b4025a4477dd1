"""ssh to a remote host, and through it to its VMs (docs/adr/0016-remote-hosts.md).

A remote host is reached by ssh alone: libvirt's own qemu+ssh transport, Vagrant's communicator and
every ssh or Ansible run to one of its VMs go through one authenticated connection to the host, a
control master kept per host. Two small scripts in `$SLURMLAB_HOME/bin` do it:

- `ssh-to-NAME`: ssh to the host itself, with the host's key, its known host keys checked, the
  master; inside the network namespace where the host's address is reached (the rig's), if any.
  libvirt's URI names it as `command=`, so libvirt's connections ride the master too.
- `ssh-via-NAME`: ssh to a VM of that host, ProxyCommand `ssh-to-NAME -W %h:%p`: the VM's address is
  reached from the host, never from this machine. ProxyCommand and not `-J`: options given on the
  command line (the cluster's key) would apply to the jump too.

The host's known keys are `$SLURMLAB_HOME/hosts/NAME/known_hosts` (written by `host add
--accept-host-key` or the rig), then the user's ~/.ssh/known_hosts.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from lab import paths
from lab.osutil import atomic_write

SSH = shutil.which("ssh") or "/usr/bin/ssh"
# The host answers within seconds or is taken for lost (ConnectTimeout, ServerAlive*): a dead host
# must fail a libvirt call fast, not after TCP's minutes.
HOST_OPTS = ["-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
             "-o", "ServerAliveCountMax=3", "-o", "StrictHostKeyChecking=yes", "-o", "LogLevel=ERROR",
             "-o", "ControlMaster=auto", "-o", "ControlPersist=120"]


def folder(name: str) -> Path:
    """The lab's files about host `name`: its known host keys (and the rig's client key)."""
    return paths.home() / "hosts" / name


def known_hosts(name: str) -> Path:
    return folder(name) / "known_hosts"


def control_path(name: str) -> str:
    """The master's socket: short (a unix socket path has 108 bytes), one per lab home and host."""
    tag = hashlib.sha256(str(paths.home()).encode()).hexdigest()[:8]
    return f"/tmp/slurmlab-host-{tag}-{name}"


def _target(host) -> tuple[str, str | None]:
    user, address, key = host.ssh
    return f"{user}@{address}", key


def _write(path: Path, body: str) -> str:
    if not path.exists() or path.read_text() != body:
        atomic_write(path, body, 0o755)
    return str(path)


def to_host(host) -> str:
    """The `ssh-to-NAME` script (see the module's text); writes it when missing or changed."""
    _, key = _target(host)
    opts = [*HOST_OPTS, "-o", f"ControlPath={control_path(host.name)}",
            "-o", f"UserKnownHostsFile={known_hosts(host.name)} ~/.ssh/known_hosts"]
    if key:
        opts += ["-i", key, "-o", "IdentitiesOnly=yes"]
    ns = f"ip netns exec {host.netns} " if host.netns else ""
    body = f'#!/bin/sh\nexec {ns}{SSH} {shlex.join(opts)} "$@"\n'
    return _write(paths.home() / "bin" / f"ssh-to-{host.name}", body)


def proxy_command(host) -> str:
    """ssh's ProxyCommand (and vagrant-libvirt's proxy_command) to a VM of `host`."""
    target, _ = _target(host)
    return f"{to_host(host)} -W %h:%p {target}"


def stdio_to(host, address: str, port: int) -> list[str]:
    """ssh through the host to ADDRESS:PORT as seen from the host, its stdin and stdout the connection
    (`-W`: how the host's VMs are reached)."""
    target, _ = _target(host)
    return [to_host(host), "-W", f"{address}:{port}", target]


def via_host(host) -> str:
    """The `ssh-via-NAME` script: ssh to a VM of `host`, through the host."""
    body = f'#!/bin/sh\nexec {SSH} -o {shlex.quote("ProxyCommand=" + proxy_command(host))} "$@"\n'
    return _write(paths.home() / "bin" / f"ssh-via-{host.name}", body)


def libvirt_uri(host) -> str:
    """The host's URI with libvirt's ssh transport set to `ssh-to-NAME` (no_tty, virt-ssh-helper there)."""
    parts = urlsplit(host.uri)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k not in ("command", "no_tty")]
    query += [("command", to_host(host)), ("no_tty", "1")]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query, safe="/"), parts.fragment))


def run(host, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run a shell command on the host itself (a probe); never raises for a failure (see returncode)."""
    target, _ = _target(host)
    try:
        return subprocess.run([to_host(host), target, command], capture_output=True, text=True, timeout=timeout,
                              stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess([], 124, "", f"no answer from {target} in {timeout:g} s")


def forwards(host, timeout: float = 15) -> str:
    """'' when the host forwards a connection (`ssh -W`, how its VMs are reached) to its own sshd, else
    what ssh said."""
    target, _ = _target(host)
    try:
        p = subprocess.run(stdio_to(host, host.ssh[1], 22), capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return f"no answer through {target} in {timeout:g} s"
    if p.stdout.startswith(b"SSH-"):
        return ""
    return p.stderr.decode(errors="replace").strip() or f"ssh -W exited {p.returncode} without a banner"


def accept_key(host, timeout: float = 20) -> str:
    """Record the host's current key in the lab's known_hosts (`host add --accept-host-key`); its line."""
    _, address, _ = host.ssh
    ns = ["ip", "netns", "exec", host.netns] if host.netns else []
    try:
        p = subprocess.run([*ns, "ssh-keyscan", "-T", "10", "-t", "ed25519,ecdsa,rsa", address], capture_output=True,
                           text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return ""
    lines = "".join(line + "\n" for line in p.stdout.splitlines() if line and not line.startswith("#"))
    if lines:
        folder(host.name).mkdir(parents=True, exist_ok=True)
        atomic_write(known_hosts(host.name), lines, 0o644)
    return lines


def close(host) -> None:
    """End the host's control master (its removal); nothing when there is none."""
    if not Path(control_path(host.name)).exists():
        return
    target, _ = _target(host)
    subprocess.run([SSH, "-o", f"ControlPath={control_path(host.name)}", "-O", "exit", target],
                   capture_output=True, timeout=10, stdin=subprocess.DEVNULL)


def forget(name: str) -> None:
    """Remove the lab's files about host `name` (its scripts, known keys, rig key)."""
    for f in (paths.home() / "bin" / f"ssh-to-{name}", paths.home() / "bin" / f"ssh-via-{name}"):
        f.unlink(missing_ok=True)
    shutil.rmtree(folder(name), ignore_errors=True)
    if os.path.exists(control_path(name)):
        os.unlink(control_path(name))
