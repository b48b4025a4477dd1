"""libvirtd for the lab: reachable under systemd, or started by us inside our network namespace.

In netns mode (no systemd): `ip netns add NS`, loopback up, /dev/kvm group-writable (else
libvirt re-probes qemu on every define, ~48 s each), then virtlogd and libvirtd started with
`ip netns exec NS`. libvirt's NAT networks, their bridges and dnsmasq then live in NS; the
machine's own namespace never carries VM traffic. The libvirt socket is a file, so
libvirt-python in this process reaches the daemon without entering NS.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

from lab import paths, settings
from lab.errors import HostError
from lab.host import mode, pools
from lab.host.run import run

URI = "qemu:///system"
POOL = settings.POOL.get()  # its folder: paths.pool_dir()
SOCKET = Path("/run/libvirt/libvirt-sock")
PIDFILES = {"virtlogd": Path("/run/virtlogd.pid"), "libvirtd": Path("/run/libvirtd.pid")}
QEMU_WRAPPER = "qemu-system-x86_64-tcg"


@dataclass
class DaemonState:
    name: str
    pid: int | None
    in_netns: bool | None  # None when there is no namespace to compare with


def _pid_alive(pidfile: Path) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid
    return pid


def netns_path() -> Path:
    return Path("/run/netns") / paths.netns()


def pid_in_netns(pid: int) -> bool:
    """True when process `pid` lives in the lab's namespace (same namespace inode)."""
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(netns_path()).st_ino
    except OSError:
        return False


def daemon_state(name: str) -> DaemonState:
    pid = _pid_alive(PIDFILES[name])
    in_ns = None
    if pid and mode.uses_netns():
        in_ns = pid_in_netns(pid)
    return DaemonState(name, pid, in_ns)


def require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise HostError(f"{what} needs root", "run it with sudo (or as root)")


def ensure_netns() -> None:
    if netns_path().exists():
        return
    require_root("creating the lab's network namespace")
    run(["ip", "netns", "add", paths.netns()])
    run(["ip", "netns", "exec", paths.netns(), "ip", "link", "set", "lo", "up"])


def fix_kvm_permissions() -> None:
    dev = Path("/dev/kvm")
    if dev.exists() and os.geteuid() == 0:
        try:
            shutil.chown(dev, group="kvm")
            os.chmod(dev, 0o660)
        except (LookupError, OSError):
            pass


def _wait_socket(timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if SOCKET.exists():
            proc = run(["virsh", "-c", URI, "version"], check=False, timeout=20)
            if proc.returncode == 0:
                return
        time.sleep(0.3)
    raise HostError(
        f"libvirtd did not answer on {SOCKET} within {timeout:.0f} s",
        "look at /var/log/libvirt/libvirtd.log, or run `slurmlab host down` then `slurmlab host up`",
    )


def ensure_daemons() -> None:
    """Start virtlogd and libvirtd (netns mode) or check they answer (systemd mode)."""
    if not shutil.which("libvirtd"):
        raise HostError("libvirtd is not installed", "run `make setup` (or apt-get install libvirt-daemon-system)")
    if not mode.uses_netns():
        _wait_socket(timeout=5)
        return
    require_root("starting libvirtd in the lab's network namespace")
    ensure_netns()
    fix_kvm_permissions()
    for name in ("virtlogd", "libvirtd"):
        st = daemon_state(name)
        if st.pid and st.in_netns is False:
            raise HostError(
                f"{name} (pid {st.pid}) runs outside the lab's network namespace '{paths.netns()}'",
                f"stop it (kill {st.pid}), then run `slurmlab host up` so that it starts inside the namespace",
            )
        if not st.pid:
            run(["ip", "netns", "exec", paths.netns(), name, "-d"])
    _wait_socket()


def ensure_wrapper() -> Path:
    """qemu wrapper that caps TCG's translation cache at 128 MiB (default is 1 GiB per VM).

    vagrant-libvirt has no setting for tb-size and ignores a second -accel, so its
    `emulator_path` points here. With KVM in use the wrapper changes nothing.
    """
    d = paths.libvirt_dir()
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o755)
    w = d / QEMU_WRAPPER
    real = shutil.which("qemu-system-x86_64") or "/usr/bin/qemu-system-x86_64"
    body = (
        "#!/bin/sh\n"
        "# slurmlab: cap qemu TCG's translation cache (see docs/adr/0001)\n"
        'for a in "$@"; do\n'
        '  case "$a" in tcg|tcg,*) tcg=1 ;; esac\n'
        "done\n"
        'if [ -n "$tcg" ]; then\n'
        "  first=1\n"
        '  for a in "$@"; do\n'
        '    if [ -n "$first" ]; then set --; first=; fi\n'
        '    case "$a" in tcg) a="tcg,tb-size=128" ;; esac\n'
        '    set -- "$@" "$a"\n'
        "  done\n"
        "fi\n"
        f'exec {real} "$@"\n'
    )
    if not w.exists() or w.read_text() != body:
        tmp = w.with_suffix(".tmp")
        tmp.write_text(body)
        os.chmod(tmp, 0o755)
        tmp.replace(w)
    return w


def connect():
    """A libvirt connection, with libvirt's default stderr error printer silenced."""
    import libvirt

    libvirt.registerErrorHandler(lambda *_: None, None)
    return libvirt.open(URI)


def ensure_pool() -> None:
    """A storage pool of the lab's own (box volumes and VM disks)."""
    import libvirt

    pool_dir = paths.pool_dir()
    pool_dir.mkdir(parents=True, exist_ok=True)
    conn = connect()
    try:
        try:
            pool = conn.storagePoolLookupByName(POOL)
        except libvirt.libvirtError:
            xml = f"<pool type='dir'><name>{POOL}</name><target><path>{pool_dir}</path></target></pool>"
            pool = conn.storagePoolDefineXML(xml, 0)
            pool.setAutostart(1)
        defined = re.search(r"<path>([^<]*)</path>", pool.XMLDesc(0))
        if defined and Path(defined.group(1)) != pool_dir:
            raise HostError(f"libvirt's storage pool '{POOL}' lives in {defined.group(1)}, not in {pool_dir}",
                            fix=f"set SLURMLAB_POOL to a new pool name for {pool_dir}, or unset SLURMLAB_POOL_DIR")
        if not pool.isActive():
            try:
                pool.create(0)
            except libvirt.libvirtError as e:
                raise HostError(f"libvirt cannot start its storage pool '{POOL}' in {pool_dir}: {e.get_error_message()}",
                                fix="libvirtd must see that folder: a filesystem mounted there after `slurmlab host up` "
                                    "started libvirtd is not in libvirtd's mount namespace; mount it first, "
                                    "or stop libvirtd and run `slurmlab host up` again") from None
        pools.refresh(pool)
    finally:
        conn.close()


def up() -> None:
    """Everything the host needs before a VM can start. Idempotent."""
    ensure_daemons()
    ensure_wrapper()
    ensure_pool()


def down() -> list[str]:
    """Stop what `up` started (netns mode): networks first (else dnsmasq stays), daemons, namespace.

    Refuses while slurmlab domains exist, so no VM is orphaned.
    """
    done: list[str] = []
    if not mode.uses_netns():
        return done
    require_root("stopping the lab's libvirtd")
    st = daemon_state("libvirtd")
    if st.pid and st.in_netns:
        conn = connect()
        try:
            doms = [d.name() for d in conn.listAllDomains()]
            if doms:
                raise HostError(
                    f"libvirt still has domains: {', '.join(sorted(doms))}",
                    "delete the clusters first (`slurmlab delete-cluster NAME`)",
                )
            for net in conn.listAllNetworks():
                if net.isActive():
                    net.destroy()
                done.append(f"network {net.name()} stopped")
        finally:
            conn.close()
    for name in ("libvirtd", "virtlogd"):
        st = daemon_state(name)
        if st.pid and st.in_netns:
            os.kill(st.pid, 15)
            for _ in range(50):
                if not _pid_alive(PIDFILES[name]):
                    break
                time.sleep(0.1)
            done.append(f"{name} (pid {st.pid}) stopped")
    if netns_path().exists():
        run(["ip", "netns", "del", paths.netns()], check=False)
        done.append(f"namespace {paths.netns()} removed")
    return done


def box_volume_prefix(box_name: str) -> str:
    """The start of the name of every volume vagrant-libvirt uploads `box_name` to a pool as."""
    return box_name.replace("/", "-VAGRANTSLASH-") + "_vagrant_box_image_"


def prune_box_volumes(box_name: str, keep_newest: bool = True) -> list[str]:
    """Delete copies of a box's image that vagrant-libvirt left in the pool and no VM disk uses.

    vagrant-libvirt uploads a box into the pool once per added box (the volume name carries the
    box's timestamp), so every rebuilt box leaves its predecessor behind.
    """
    import xml.etree.ElementTree as ET

    import libvirt

    prefix = box_volume_prefix(box_name)
    try:
        conn = connect()
    except libvirt.libvirtError:
        return []
    removed = []
    try:
        try:
            pool = conn.storagePoolLookupByName(POOL)
        except libvirt.libvirtError:
            return []
        pools.refresh(pool)
        vols = pool.listAllVolumes()
        backing = set()
        for v in vols:
            try:
                path = ET.fromstring(v.XMLDesc(0)).findtext("backingStore/path")
            except libvirt.libvirtError:
                continue
            if path:
                backing.add(path)
        box_vols = sorted((v for v in vols if v.name().startswith(prefix)), key=lambda v: v.name())
        # keep the newest unless the box was just re-added (then every copy in the pool is stale)
        for v in box_vols[:-1] if keep_newest else box_vols:
            if v.path() not in backing:
                v.delete(0)
                removed.append(v.name())
    finally:
        conn.close()
    return removed
