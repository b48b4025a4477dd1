"""A second libvirt host on this machine (`slurmlab host simulate NAME`): a libvirtd of its own in a
network namespace and a mount namespace of its own (docs/adr/0010-hosts.md).

libvirtd keeps its state in fixed places (/etc/libvirt, /run/libvirt, /var/lib/libvirt); a
second daemon gets its own copies by bind mounts in a private mount namespace, so it sees none of
the first one's domains, networks or pools. Its VM networks, bridges and dnsmasq live in its
network namespace, which the lab made; ssh and vagrant reach its VMs from inside that namespace.
The engine reaches the daemon over its socket, a file under the host's folder:
`qemu+unix:///system?socket=<folder>/run/libvirt-sock`. The lab's files that qemu reads (the
TCG wrapper, the munge key credentials) stay visible: /var/lib/libvirt/slurmlab is bound back in.
A host that looks like another machine, reached over ssh only, is lab.host.rig's (`--remote`).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

from lab import paths, settings
from lab.errors import HostError
from lab.host import pools
from lab.host.registry import Host
from lab.host.run import run


def folder(name: str) -> Path:
    return settings.HOSTS_DIR.get() / name


def netns(name: str) -> str:
    return f"{paths.netns()}-{name}"


def uri(name: str) -> str:
    return f"qemu+unix:///system?socket={folder(name) / 'run' / 'libvirt-sock'}"


def pidfile(name: str, daemon: str) -> Path:
    return folder(name) / f"{daemon}.pid"


def pid(name: str, daemon: str = "libvirtd") -> int | None:
    try:
        p = int(pidfile(name, daemon).read_text().strip())
        os.kill(p, 0)
        return p
    except (OSError, ValueError):
        return None


def _etc(d: Path) -> None:
    """libvirt's configuration without the first daemon's domains, networks and pools."""
    if (d / "etc" / "libvirtd.conf").exists():
        return
    shutil.copytree("/etc/libvirt", d / "etc", symlinks=True, dirs_exist_ok=True)
    for sub in ("qemu", "qemu/networks", "qemu/networks/autostart", "storage", "storage/autostart"):
        for f in (d / "etc" / sub).glob("*.xml"):
            f.unlink()


def start(name: str) -> Host:
    """Start (or find running) the simulated host's libvirtd; return its Host entry (not recorded)."""
    from lab.host import libvirtd

    libvirtd.require_root("simulating a second libvirt host")
    d = folder(name)
    for sub in ("run", "varlib/slurmlab", "varlib/qemu", "varlib/network", "varlib/dnsmasq", "cache", "log", "pool"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    _etc(d)
    ns = netns(name)
    if not Path("/run/netns", ns).exists():
        run(["ip", "netns", "add", ns])
        run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"])
    libvirtd.fix_kvm_permissions()
    paths.libvirt_dir().mkdir(parents=True, exist_ok=True)
    if pid(name) is None:  # the same bind mounts as the running virtlogd's (if it still runs): the same files
        mounts = [
            f"mount --bind {paths.libvirt_dir()} {d}/varlib/slurmlab",
            f"mount --rbind {d}/varlib /var/lib/libvirt",
            f"mount --bind {d}/run /run/libvirt",
            f"mount --bind {d}/etc /etc/libvirt",
            f"mount --bind {d}/cache /var/cache/libvirt",
            f"mount --bind {d}/log /var/log/libvirt",
        ] + [f"{daemon} -d -p {pidfile(name, daemon)}" for daemon in ("virtlogd", "libvirtd") if pid(name, daemon) is None]
        Path("/var/cache/libvirt").mkdir(parents=True, exist_ok=True)
        run(["ip", "netns", "exec", ns, "unshare", "--mount", "--propagation", "private", "sh", "-ec", "\n".join(mounts)])
    host = Host(name, uri(name), ns, simulated=True, pool=libvirtd.POOL)
    wait_for(host, f"{d}/log/libvirtd.log")
    ensure_pool(host, d / "pool")
    return host


def wait_for(host: Host, logs: str, timeout: float = 30.0) -> None:
    """Until the simulated host's libvirtd answers; HostError naming `logs` after `timeout` s."""
    import libvirt

    deadline = time.monotonic() + timeout
    while True:
        try:
            host.connect().close()
            return
        except libvirt.libvirtError as e:
            if time.monotonic() > deadline:
                raise HostError(f"the simulated host {host.name}'s libvirtd did not answer on {host.uri}: "
                                f"{e.get_error_message()}", f"look at {logs}") from None
            time.sleep(0.3)


def ensure_pool(host: Host, pool_dir: Path | str) -> None:
    """The lab's storage pool on the host, at `pool_dir` (a path as that host sees it), started."""
    import libvirt

    conn = host.connect()
    try:
        try:
            pool = conn.storagePoolLookupByName(host.pool)
        except libvirt.libvirtError:
            pool = conn.storagePoolDefineXML(
                f"<pool type='dir'><name>{host.pool}</name><target><path>{pool_dir}</path></target></pool>", 0)
            pool.setAutostart(1)
        if not pool.isActive():
            pool.create(0)
        pools.refresh(pool)
    finally:
        conn.close()


def stop(name: str, *, force: bool = False, host: Host | None = None) -> list[str]:
    """Stop the simulated host's daemons (`host`: its entry, default the one `start` makes). Refuses while
    it has domains unless `force` (a test that takes the host away from under its clusters; their VMs are
    then ended by `purge`)."""
    done = []
    host = host or Host(name, uri(name), netns(name), simulated=True)
    if pid(name) and not force:
        conn = host.connect()
        try:
            names = sorted(d.name() for d in conn.listAllDomains())
            if names:
                raise HostError(f"host {name} still has domains: {', '.join(names)}",
                                "delete the clusters placed there first (`slurmlab host list` names them)")
            for net in conn.listAllNetworks():
                if net.isActive():
                    net.destroy()
        finally:
            conn.close()
    for daemon in ("sshd", "libvirtd", "virtlogd"):
        p = pid(name, daemon)
        if p:
            os.kill(p, signal.SIGTERM)
            for _ in range(100):
                if pid(name, daemon) is None:
                    break
                time.sleep(0.1)
            done.append(f"{daemon} of {name} (pid {p}) stopped")
    return done


def remove(name: str, host: Host | None = None) -> list[str]:
    """Stop the daemons (refused while domains exist), end what is left in the namespace (dnsmasq,
    qemu of a host stopped by force), remove the namespace and the folder (and a remote's ssh files)."""
    from lab.host import sshhost

    done = stop(name, host=host)
    if host is not None and host.remote:
        sshhost.close(host)
    sshhost.forget(name)
    ns = netns(name)
    if Path("/run/netns", ns).exists():
        left = _pids_in(ns)
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if left:
            done.append(f"ended {len(left)} process(es) left in {ns}")
        run(["ip", "netns", "del", ns], check=False)
        done.append(f"namespace {ns} removed")
    shutil.rmtree(folder(name), ignore_errors=True)
    return done


def _pids_in(ns: str) -> list[int]:
    """Processes whose network namespace is `ns` (the lab made it; nothing else runs there)."""
    try:
        ino = os.stat(Path("/run/netns", ns)).st_ino
    except OSError:
        return []
    out = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.stat(p / "ns" / "net").st_ino == ino:
                    out.append(int(p.name))
            except OSError:
                continue
    return out
