"""A stand-in for another machine (`slurmlab host simulate NAME --remote`): a libvirt host on this
machine that the lab reaches only as `qemu+ssh://root@ADDRESS/system`, as it would a real second
machine (docs/adr/0016-remote-hosts.md).

Beside what a simulated host has (lab.host.simulated: its own libvirtd and virtlogd, network and mount
namespaces), the rig has
- an address of its own, 10.212.K.2, on a veth pair whose other end (10.212.K.1) is in the lab's
  namespace: both ends in namespaces the lab made, nothing in this machine's own;
- its own sshd on that address (host key, root login by the lab's key only), in the same mount and
  network namespaces as its libvirtd, so that virt-ssh-helper finds its socket;
- a filesystem view without the lab: /run/libvirt is a tmpfs there (no socket the lab could open),
  none of the lab's folders (its home, cache, libvirt folder with the TCG wrapper and credentials,
  the repository, /tmp, ~/.vagrant.d, /root/.ssh) is visible, and its pool is
  /var/lib/libvirt/images/slurmlab, a path the lab never uses.
What stays shared: the kernel, the pid namespace and the machine's memory (placement sees the whole
machine, as for any simulated host).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

from lab import paths, settings
from lab.errors import HostError
from lab.host import simulated, sshhost
from lab.host.registry import Host
from lab.host.run import run

POOL_PATH = "/var/lib/libvirt/images/slurmlab"
DAEMONS = ("virtlogd", "libvirtd", "sshd")


def info(name: str) -> dict | None:
    """The rig's index and address, when `name` is one."""
    try:
        return json.loads((simulated.folder(name) / "rig.json").read_text())
    except (OSError, ValueError):
        return None


def _index(name: str) -> int:
    used = {i["index"] for d in settings.HOSTS_DIR.get().glob("*/rig.json") if d.parent.name != name
            if (i := info(d.parent.name))}
    return next(k for k in range(1, 250) if k not in used)


def host(name: str) -> Host:
    """The rig's Host entry (not recorded)."""
    from lab.host import libvirtd

    i = info(name)
    key = sshhost.folder(name) / "id_ed25519"
    return Host(name, f"qemu+ssh://root@{i['address']}/system?keyfile={key}", paths.netns(), simulated=True,
                pool=libvirtd.POOL, driver="qemu")


def _keys(name: str, d: Path, address: str) -> None:
    """The rig's host key and authorized key, the lab's client key and known_hosts line."""
    (d / "ssh").mkdir(mode=0o700, parents=True, exist_ok=True)
    hk = d / "ssh" / "ssh_host_ed25519_key"
    if not hk.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"rig-{name}", "-f", str(hk)])
    client = sshhost.folder(name) / "id_ed25519"
    client.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    if not client.exists():
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"slurmlab-to-{name}", "-f", str(client)])
    (d / "ssh" / "authorized_keys").write_text(Path(f"{client}.pub").read_text())
    os.chmod(d / "ssh" / "authorized_keys", 0o600)
    sshhost.known_hosts(name).write_text(f"{address} {' '.join(Path(f'{hk}.pub').read_text().split()[:2])}\n")
    (d / "ssh" / "sshd_config").write_text(
        f"ListenAddress {address}\nHostKey {hk}\nAuthorizedKeysFile {d / 'ssh' / 'authorized_keys'}\n"
        f"PidFile {simulated.pidfile(name, 'sshd')}\nPermitRootLogin prohibit-password\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nUsePAM no\nAllowTcpForwarding yes\nStrictModes no\nPrintMotd no\n")


def _link(name: str, k: int) -> None:
    """The veth pair: slrK in the lab's namespace, eth0 in the rig's."""
    lab_ns, ns = paths.netns(), simulated.netns(name)
    if run(["ip", "-n", ns, "link", "show", "eth0"], check=False).returncode == 0:
        return
    run(["ip", "-n", lab_ns, "link", "del", f"slr{k}"], check=False)
    run(["ip", "-n", lab_ns, "link", "add", f"slr{k}", "type", "veth", "peer", "name", "eth0", "netns", ns])
    run(["ip", "-n", lab_ns, "addr", "add", f"10.212.{k}.1/30", "dev", f"slr{k}"])
    run(["ip", "-n", ns, "addr", "add", f"10.212.{k}.2/30", "dev", "eth0"])
    run(["ip", "-n", lab_ns, "link", "set", f"slr{k}", "up"])
    run(["ip", "-n", ns, "link", "set", "eth0", "up"])


def _hidden() -> list[str]:
    """The lab's folders, deepest first (a tmpfs over each, as far as they exist)."""
    from lab.paths import REPO_ROOT

    roots = {paths.home(), paths.cache(), paths.libvirt_dir(), REPO_ROOT, Path.home() / ".vagrant.d",
             Path("/root/.ssh"), Path("/tmp")}
    return sorted({str(r) for r in roots}, key=lambda p: -p.count("/"))


def start(name: str) -> Host:
    """Start (or find running) the rig `name`; its Host entry (not recorded)."""
    from lab.host import libvirtd, mode

    if not mode.uses_netns():
        raise HostError("`host simulate --remote` needs the lab's network namespace (netns mode)",
                        "run without SLURMLAB_HOST_MODE=systemd")
    libvirtd.require_root("simulating a remote libvirt host")
    libvirtd.up()  # the lab's namespace, for the other end of the link
    d = simulated.folder(name)
    for sub in ("run", "varlib/qemu", "varlib/network", "varlib/dnsmasq", "varlib/images/slurmlab", "cache", "log"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    simulated._etc(d)
    i = info(name) or {"index": _index(name)}
    i["address"] = f"10.212.{i['index']}.2"
    (d / "rig.json").write_text(json.dumps(i))
    ns = simulated.netns(name)
    if not Path("/run/netns", ns).exists():
        run(["ip", "netns", "add", ns])
        run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])
    _link(name, i["index"])
    _keys(name, d, i["address"])
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation folder
    missing = [x for x in DAEMONS if simulated.pid(name, x) is None]
    if missing:
        starts = [f"{x} -d -p {simulated.pidfile(name, x)}" for x in missing if x != "sshd"]
        if "sshd" in missing:
            starts.append(f"/usr/sbin/sshd -f {d}/ssh/sshd_config -E {d}/log/sshd.log")
        alive = next((p for x in DAEMONS if (p := simulated.pid(name, x))), None)
        if alive:  # its mount namespace lives on in the others: start the missing daemons in there
            enter = ["nsenter", "-t", str(alive), "-m", "-n"]
            script = starts
        else:
            enter = ["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private"]
            script = [f"mount --rbind {d}/varlib /var/lib/libvirt", "mount -t tmpfs -o mode=0755 tmpfs /run/libvirt",
                      f"mount --bind {d}/etc /etc/libvirt", f"mount --bind {d}/cache /var/cache/libvirt",
                      f"mount --bind {d}/log /var/log/libvirt"]
            script += [f"if [ -d {shlex.quote(p)} ]; then mount -t tmpfs -o size=1m,mode=0700 tmpfs {shlex.quote(p)}; fi"
                       for p in _hidden()]
            script += starts
        Path("/var/cache/libvirt").mkdir(parents=True, exist_ok=True)
        run([*enter, "sh", "-ec", "\n".join(script)])
    h = host(name)
    simulated.wait_for(h, f"{d}/log/sshd.log and {d}/log/libvirtd.log", timeout=40)
    simulated.ensure_pool(h, POOL_PATH)
    return h


def on_rig(name: str, command: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Run a shell command on the rig over its ssh (what a test sees of the other machine)."""
    return sshhost.run(host(name), command, timeout)
