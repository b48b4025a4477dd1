"""What a libvirt host's capabilities say about running the lab's VMs there: the domain type, whether
qemu is confined, the qemu user (read from the host's own libvirt, never from this machine for a
remote host). `domain_type` is the one choice of kvm or qemu per host: the Vagrantfile's
(lab.providers.hostside) and the host's boot and fork slots (lab.engine.slots) both ask it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from lab import settings


def driver_of(host, conn) -> str:
    """The domain type on `host`: the host's setting, SLURMLAB_DRIVER, else kvm when its libvirt offers it."""
    if host.driver or settings.DRIVER.get():
        return host.driver or settings.DRIVER.get()
    import libvirt

    try:
        conn.getDomainCapabilities(None, "x86_64", None, "kvm", 0)
        return "kvm"
    except libvirt.libvirtError:
        return "qemu"


def domain_type(host, conn) -> str:
    """The domain type the lab's VMs get on `host`: on this machine (the local host, a simulated one)
    what this machine's /dev/kvm allows (lab.host.kvm, SLURMLAB_DRIVER first); on a remote host what
    its own libvirt offers (`driver_of`, `conn` is that host's connection)."""
    if not host.remote:
        from lab.host import kvm

        return kvm.detect().driver
    return driver_of(host, conn)


def confined(caps_xml: str) -> bool:
    """Whether the host's qemu runs under AppArmor or SELinux (its capabilities' secmodels)."""
    return any((m.findtext("model") or "") in ("apparmor", "selinux") for m in ET.fromstring(caps_xml).iter("secmodel"))


def qemu_owner(caps_xml: str) -> tuple[int, int]:
    """uid, gid of the host's qemu processes: the dac secmodel's `<baselabel type='qemu'>+UID:+GID`."""
    for m in ET.fromstring(caps_xml).iter("secmodel"):
        if m.findtext("model") == "dac":
            for b in m.findall("baselabel"):
                if b.get("type") == "qemu" and b.text:
                    u, g = b.text.split(":")
                    return int(u.lstrip("+")), int(g.lstrip("+"))
    return 0, 0
