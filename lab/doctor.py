"""`slurmlab doctor`: preflight probes kept as data, each with the exact human fix."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass

from lab import paths
from lab.osutil import meminfo_mib

BLOCKING = "blocking"
WARNING = "warning"


@dataclass(frozen=True)
class Probe:
    id: str
    title: str
    check: Callable[[], tuple[bool, str]]  # -> (ok, detail)
    fix: str
    severity: str = BLOCKING


@dataclass
class Result:
    id: str
    title: str
    ok: bool
    severity: str
    detail: str
    fix: str | None

    def as_dict(self) -> dict:
        return asdict(self)


def _tool(cmd: str, package: str) -> Probe:
    def check() -> tuple[bool, str]:
        found = shutil.which(cmd)
        return (found is not None, found or f"`{cmd}` not found on PATH")

    return Probe(f"tool:{cmd}", f"{cmd} installed", check, f"apt-get install -y {package}   (or: make setup)")


TOOLS = [
    ("vagrant", "vagrant"),
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("qemu-img", "qemu-utils"),
    ("libvirtd", "libvirt-daemon-system"),
    ("virsh", "libvirt-clients"),
    ("dnsmasq", "dnsmasq-base"),
    ("ip", "iproute2"),
    ("mmdebstrap", "mmdebstrap"),
    ("extlinux", "extlinux"),
    ("sfdisk", "fdisk"),
    ("ssh", "openssh-client"),
]


def _vagrant_libvirt() -> tuple[bool, str]:
    from lab.host.run import run

    if not shutil.which("vagrant"):
        return False, "vagrant is not installed"
    out = run(["vagrant", "plugin", "list"], check=False, timeout=60).stdout
    return ("vagrant-libvirt" in out, out.strip().splitlines()[-1] if out.strip() else "no plugins")


def _root() -> tuple[bool, str]:
    from lab.host import mode

    if not mode.uses_netns():
        return True, "systemd runs libvirtd; root not required"
    return (os.geteuid() == 0, f"uid {os.geteuid()}")


def _kvm() -> tuple[bool, str]:
    from lab.host import kvm

    st = kvm.detect()
    if st.usable:
        return True, "KVM usable: VMs run at hardware speed"
    return False, f"{st.reason}: VMs run under qemu software emulation (about 10x slower boots)"


def _mode() -> tuple[bool, str]:
    from lab.host import libvirtd, mode

    if not mode.uses_netns():
        return True, "systemd manages libvirtd: VMs use libvirt's own networks"
    ok = libvirtd.netns_path().exists()
    return ok, f"network namespace '{paths.netns()}' " + ("present" if ok else "missing")


def _libvirt() -> tuple[bool, str]:
    from lab.host import libvirtd, mode

    try:
        import libvirt
    except ImportError:
        return False, "python module libvirt (libvirt-python) not importable"
    if mode.uses_netns():
        st = libvirtd.daemon_state("libvirtd")
        if not st.pid:
            return False, "libvirtd is not running"
        if not st.in_netns:
            return False, f"libvirtd (pid {st.pid}) runs outside namespace '{paths.netns()}'"
    libvirt.registerErrorHandler(lambda *_: None, None)
    try:
        conn = libvirt.open(libvirtd.URI)
    except libvirt.libvirtError as e:
        return False, str(e)
    try:
        conn.storagePoolLookupByName(libvirtd.POOL)
        pool = "pool present"
    except libvirt.libvirtError:
        return False, f"libvirt answers (version {conn.getLibVersion()}), storage pool '{libvirtd.POOL}' missing"
    finally:
        conn.close()
    return True, f"{libvirtd.URI} answers, {pool}"


def _box() -> tuple[bool, str]:
    from lab import box

    try:
        if box.is_current(box.DEFAULT_BOX):
            return True, f"{box.DEFAULT_BOX} added and current"
        return False, f"{box.DEFAULT_BOX} missing or built from older inputs"
    except Exception as e:  # a probe never crashes doctor
        return False, f"cannot check: {e}"


def _templates() -> tuple[bool, str]:
    """Warm start (docs/adr/0011): the default shapes' templates of the default box exist, and no
    build of one failed."""
    from lab import box
    from lab.host import kvm
    from lab.providers import templates as tpl
    from lab.providers.warm import box_supports

    try:
        if (why := box_supports(box.DEFAULT_BOX)) is not None:
            return False, f"nodes boot cold: {why}"
        driver, missing = kvm.detect().driver, []
        for shape in tpl.default_shapes():
            if (why := tpl.failure(box.DEFAULT_BOX, shape, driver)) is not None:
                return False, f"the template of {shape} failed to build, its nodes boot cold: {why}"
            if tpl.find(box.DEFAULT_BOX, shape, driver) is None:
                missing.append(str(shape))
        if missing:
            return False, f"no template of {', '.join(missing)} yet: the first node of that shape builds it (~50 s)"
        return True, f"templates of {', '.join(str(s) for s in tpl.default_shapes())}: new nodes are forked, not booted"
    except Exception as e:  # a probe never crashes doctor
        return False, f"cannot check: {e}"


def _role_templates() -> tuple[bool, str]:
    """Role templates (docs/adr/0022): each role's of the default shapes exists and did not fail."""
    from lab import box
    from lab.host import kvm
    from lab.providers import roletemplates as rtpl
    from lab.providers import templates as tpl

    try:
        driver, missing = kvm.detect().driver, []
        for shape in tpl.default_shapes():
            for role in rtpl.ROLES:
                if (why := rtpl.failure(box.DEFAULT_BOX, shape, driver, role)) is not None:
                    return False, f"the {role} role template of {shape} failed to build, its nodes are fully configured: {why}"
                if rtpl.find(box.DEFAULT_BOX, shape, driver, role) is None:
                    missing.append(f"{role} {shape}")
        if missing:
            return False, (f"no role template for {', '.join(missing)} (new or changed roles): those nodes are fully "
                           "configured until one is built (~20-45 s each)")
        return True, f"role templates of {', '.join(rtpl.ROLES)}: new nodes arrive with their roles' work done"
    except Exception as e:  # a probe never crashes doctor
        return False, f"cannot check: {e}"


def _memory() -> tuple[bool, str]:
    avail = meminfo_mib("MemAvailable")
    return avail >= 3072, f"{avail} MiB available (a 4-node lab needs about 3 GiB)"


def _disk() -> tuple[bool, str]:
    for p in (paths.cache(), paths.home(), paths.libvirt_dir(), paths.pool_dir()):
        q = p
        while not q.exists():
            q = q.parent
        free = shutil.disk_usage(q).free // 2**30
        if free < 5:
            return False, f"{free} GiB free under {p}"
    return True, "at least 5 GiB free for the box, the cache and the VM disks"


def probes() -> list[Probe]:
    ps = [Probe("root", "running as root (needed to run libvirtd in a namespace)", _root, "run with sudo, or as root")]
    ps += [_tool(cmd, pkg) for cmd, pkg in TOOLS]
    ps += [
        Probe("vagrant-libvirt", "vagrant-libvirt plugin", _vagrant_libvirt,
              "apt-get install -y vagrant-libvirt   (or: make setup)"),
        Probe("kvm", "hardware virtualisation (KVM)", _kvm,
              "none needed: slurmlab uses software emulation; for 10x faster boots use a host with KVM", WARNING),
        Probe("netns", "lab network namespace", _mode, "slurmlab host up"),
        Probe("libvirt", "libvirt reachable", _libvirt, "slurmlab host up"),
        Probe("box", "slurmlab box", _box, "slurmlab box build"),
        Probe("templates", "warm-start templates", _templates,
              "slurmlab box build   (after a failed build: slurmlab box templates --rebuild)", WARNING),
        Probe("role-templates", "role templates", _role_templates,
              "slurmlab box build   (it builds them, and tries a failed one again)", WARNING),
        Probe("memory", "free memory", _memory, "stop other VMs or programs; use smaller instance types", WARNING),
        Probe("disk", "free disk", _disk,
              "free space, or point SLURMLAB_CACHE / SLURMLAB_HOME / SLURMLAB_POOL_DIR (with SLURMLAB_POOL) elsewhere"),
    ]
    return ps + _host_probes()


def _host_probes() -> list[Probe]:
    """One probe per host `slurmlab host add` listed (not the local one: the probes above check it)."""
    from lab import box
    from lab.host import probe, registry

    out = []
    for h in registry.all_hosts()[1:]:
        def check(h=h) -> tuple[bool, str]:
            rep = probe.probe(h, box.DEFAULT_BOX, box.image_bytes())
            if not rep.ok:
                return False, f"{rep.problem}; fix: {rep.fix}" if h.remote else rep.problem
            return True, (f"{h.uri} answers{' over ssh, domain type ' + rep.driver if rep.remote else ''}: "
                          f"{rep.memory_free_mib}/{rep.memory_total_mib} MiB free, {rep.cpus} cpus, "
                          f"pool {rep.pool_free_gib} GiB free, box {rep.box}" + "".join(f"; {n}" for n in rep.notes))
        fix = (f"slurmlab host simulate {h.name}{' --remote' if h.remote else ''}" if h.simulated else
               f"start libvirtd there, or `slurmlab host remove {h.name}`; clusters are placed on the other hosts meanwhile")
        out.append(Probe(f"host:{h.name}", f"host {h.name}", check, fix, WARNING))
    return out


def run_probes(selected: list[Probe] | None = None) -> list[Result]:
    out = []
    for p in selected or probes():
        try:
            ok, detail = p.check()
        except Exception as e:  # noqa: BLE001 - a probe reports, never crashes doctor
            ok, detail = False, f"probe failed: {e}"
        out.append(Result(p.id, p.title, ok, p.severity, detail, None if ok else p.fix))
    return out


def blocking_failures(results: list[Result]) -> list[Result]:
    return [r for r in results if not r.ok and r.severity == BLOCKING]
