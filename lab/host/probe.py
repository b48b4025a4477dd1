"""What a libvirt host offers the lab: reachable, its memory and CPUs, the lab's storage pool, the box.

vagrant-libvirt uploads a box into a host's pool the first time a VM there needs it (its 180 MiB
image; on the simulated host the first VM, upload included, answered ssh in 71 s), so a host
"lacks the box" only when its pool is missing or has no room for the upload.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from lab.host import pools
from lab.host.libvirtd import box_volume_prefix
from lab.host.registry import Host, available_mib


@dataclass
class HostReport:
    name: str
    uri: str
    reachable: bool
    problem: str = ""
    fix: str = ""
    memory_total_mib: int = 0
    memory_free_mib: int = 0
    cpus: int = 0
    memory_limit_mib: int | None = None
    cpus_limit: int | None = None
    pool_free_gib: float = 0.0
    box: str = ""  # "present", "uploaded on first use", or why it cannot be
    domains: list[str] = field(default_factory=list)
    remote: bool = False  # reached over ssh (docs/adr/0016-remote-hosts.md)
    driver: str = ""  # a remote's domain type (kvm or qemu)
    notes: list[str] = field(default_factory=list)  # what works, but not as on this machine

    @property
    def ok(self) -> bool:
        return self.reachable and not self.problem

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def probe(host: Host, box_name: str, box_bytes: int | None) -> HostReport:
    """Ask the host's libvirtd; never raises for an unreachable host (the report says why).
    `box_bytes`: the size of the box's image (lab.box.image_bytes), None if unknown."""
    import libvirt

    rep = HostReport(host.name, host.uri, False, memory_limit_mib=host.memory_mib, cpus_limit=host.cpus)
    try:
        conn = host.connect()
    except libvirt.libvirtError as e:
        rep.problem = f"libvirt cannot open {host.uri}: {e.get_error_message()}"
        if host.simulated:
            rep.fix = f"start its libvirtd (`slurmlab host simulate {host.name}{' --remote' if host.remote else ''}`)"
        elif host.remote:
            from lab.host import sshhost

            user, address, _ = host.ssh
            rep.fix = (f"`{sshhost.to_host(host)} {user}@{address} virsh -c qemu:///system version` must answer: sshd "
                       "with your key there (host key known, or `host add --accept-host-key`), libvirtd running, "
                       "virt-ssh-helper installed (Debian: libvirt-daemon >= 8.0)")
        else:
            rep.fix = "check the URI with `virsh -c URI version`; libvirtd must run there and accept this user"
        return rep
    rep.reachable = True
    try:
        if host.remote and not _remote_ok(host, conn, rep):
            return rep
        info = conn.getInfo()  # [model, memory MiB, cpus, ...]
        rep.memory_total_mib, rep.cpus = int(info[1]), int(info[2])
        rep.memory_free_mib = available_mib(conn)
        rep.domains = sorted(d.name() for d in conn.listAllDomains())
        try:
            pool = conn.storagePoolLookupByName(host.pool)
        except libvirt.libvirtError:
            rep.problem = f"storage pool '{host.pool}' missing on {host.name}"
            rep.fix = f"define it: virsh -c '{host.uri}' pool-define-as {host.pool} dir --target DIR; pool-start; pool-autostart"
            return rep
        if not pool.isActive():
            rep.problem = f"storage pool '{host.pool}' on {host.name} is not started"
            rep.fix = f"virsh -c '{host.uri}' pool-start {host.pool}"
            return rep
        pools.refresh(pool)
        rep.pool_free_gib = round(pool.info()[3] / (1 << 30), 1)
        if any(v.startswith(box_volume_prefix(box_name)) for v in pool.listVolumes()):
            rep.box = "present"
        else:
            need = (box_bytes or 0) / (1 << 30)
            if box_bytes is not None and rep.pool_free_gib < need + 1:
                rep.box = f"missing, and the pool has {rep.pool_free_gib} GiB free for a {need:.1f} GiB box"
                rep.problem = f"host {host.name} cannot take the box {box_name}"
                rep.fix = "free space in that host's storage pool"
            else:
                rep.box = "uploaded on first use"
    except libvirt.libvirtError as e:
        rep.reachable = False
        rep.problem = f"libvirt on {host.name} stopped answering: {e.get_error_message()}"
        rep.fix = "check its libvirtd"
    finally:
        conn.close()
    return rep


MIN_REMOTE_LIBVIRT = 8_000_000  # <features><tcg><tb-cache> (lab.providers.hostside.TCG_FEATURES)


def _remote_ok(host: Host, conn, rep: HostReport) -> bool:
    """What a remote host needs beyond a libvirtd that answers; False (rep says why) when it lacks it."""
    from lab.host import caps

    rep.remote = True
    version = conn.getLibVersion()
    if version < MIN_REMOTE_LIBVIRT:
        rep.problem = f"libvirt {version // 1_000_000}.{version // 1000 % 1000} on {host.name} is older than 8.0"
        rep.fix = "upgrade libvirt there (Debian 12 has 9.0): its domain XML must cap TCG's cache"
        return False
    from lab.host import sshhost

    why = sshhost.forwards(host)
    if why:
        rep.problem = f"ssh to {host.name} does not forward connections (ssh -W), so its VMs cannot be reached: {why}"
        rep.fix = "set `AllowTcpForwarding yes` in that machine's /etc/ssh/sshd_config and restart sshd"
        return False
    rep.driver = caps.driver_of(host, conn)
    if caps.confined(conn.getCapabilities()):
        rep.notes.append("qemu is confined there (AppArmor/SELinux): nodes get the munge key from Ansible after "
                         "boot, not at boot")
    if rep.driver == "qemu":
        rep.notes.append("no KVM there: VMs run under software emulation (slow)")
    return True
