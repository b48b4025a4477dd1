"""Warm-start templates: one booted and saved VM per box and shape (vCPUs, memory), forked into nodes.

Why (docs/adr/0011): under software emulation a cold boot is the floor of every launch (a Debian VM
takes 40-120 s to answer ssh on 2 cores, and several booting at once starve the controller's
configuration). A template is booted once, with no identity (no node name, no keys, no munge key, no
Slurm daemon), and saved with its memory; every node is then a restore of it under its own name
(lab/providers/fork.py), which skips the boot.

A template is three files under `<libvirt dir>/templates/<key>/`:
    base.img    a copy of the box's image (the template does not depend on the box volume in the pool)
    disk.qcow2  an overlay over base.img: the disk as the saved memory expects it; frozen after the save
                (every fork gets its own overlay over it)
    mem.save    libvirt's save image (lab/providers/savefile.py), its XML padded so that a fork's fits
    meta.json   what it was built from (the box and its inputs hash: its image release), when, and what it took
The key hashes the box image (path, size, mtime, slurmlab.json), the shape, the domain type (kvm or
qemu) and TEMPLATE_REVISION: `slurmlab box build` re-adding a box makes new keys, and old templates
are pruned (`prune`). Built under a file lock: two clusters asking for one shape build it once.

The template's VM runs on a network of its own (`slurmlab-templates`, 10.213.0.0/24, in the lab's
namespace, no route out); a fork's NIC is moved to its cluster's network in the fork's XML.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lab import paths
from lab.providers import agent, savefile

log = logging.getLogger(__name__)

TEMPLATE_REVISION = 4  # 4: address-space randomization off under emulation (ADR 0030)
# Done in the template before it is saved, so that no fork pays for it: what every node does the same
# way on its first minute (measured: loading the NFS modules took 4-5 s of a join, and of the
# controller's NFS server start)
WARMUP = "modprobe -a nfsv4 nfsd"
# Under emulation (TCG) a process's code is translated per virtual address: with the kernel's address-space
# randomization every new process (ssh, sudo, Ansible's modules, Slurm's commands, Python) maps its
# libraries elsewhere and is translated afresh. Measured on a forked compute node (2026-12-07): 40 runs of
# `ls` 5.5-6.7 s of qemu CPU with it, 2.1-2.2 s without; 20 `python3 -c pass` 12.0-12.5 s against 6.4-7.4 s.
# Set in the running kernel before the save, so every fork has it; with KVM nothing is translated and
# the default stays (ADR 0030).
NO_ASLR = "echo 0 > /proc/sys/kernel/randomize_va_space"


def before_save(driver: str) -> list[str]:
    """The commands run in a template's VM before it is saved, in order."""
    return ([NO_ASLR] if driver == "qemu" else []) + [WARMUP]

NET_NAME = "slurmlab-templates"
NET_BRIDGE = "slbrtpl"
NET_SUBNET = "10.213.0.0/24"  # network.pick_subnet never hands out the first /24 of 10.213.0.0/16
PAD_NS = "https://slurmlab.invalid/template"
PAD_BYTES = 4096  # room in the saved XML for a fork's longer names and paths
BOOT_TIMEOUT_S = 600.0
TB_CACHE_MIB = 128  # TCG's translation cache (docs: SANDBOX.md; the Vagrant path uses a qemu wrapper)

ET.register_namespace("slurmlab", PAD_NS)


class TemplateError(Exception):
    """A template could not be built or used; the node then boots cold, with this reason."""


@dataclass(frozen=True)
class Shape:
    cpus: int
    memory_mib: int

    def __str__(self) -> str:
        return f"{self.cpus}cpu-{self.memory_mib}mib"


@dataclass(frozen=True)
class Template:
    key: str
    folder: Path

    @property
    def disk(self) -> Path:
        return self.folder / "disk.qcow2"

    @property
    def memory(self) -> Path:
        return self.folder / "mem.save"

    @property
    def meta(self) -> dict:
        return json.loads((self.folder / "meta.json").read_text())

    def is_complete(self) -> bool:
        return all((self.folder / f).is_file() for f in ("base.img", "disk.qcow2", "mem.save", "meta.json"))


def root() -> Path:
    return paths.libvirt_dir() / "templates"


def box_image(box: str) -> Path:
    """The disk image of an added Vagrant box (version 0: the lab adds its boxes unversioned)."""
    from lab.box import vagrant as boxvagrant

    d = boxvagrant.box_dir(box, "0")
    if d is None or not (d / "box.img").is_file():
        raise TemplateError(f"box {box} is not added to Vagrant (slurmlab box build)")
    return d / "box.img"


def box_marker(box: str) -> dict:
    """The slurmlab.json of an added box ({} when there is none): its inputs hash names its release."""
    try:
        return json.loads((box_image(box).parent / "slurmlab.json").read_text())
    except (OSError, ValueError):
        return {}


def key(box: str, shape: Shape, driver: str) -> str:
    img = box_image(box)
    st = img.stat()
    marker = img.parent / "slurmlab.json"
    doc = {"box": box, "image": str(img), "size": st.st_size, "mtime": st.st_mtime_ns,
           "marker": marker.read_text() if marker.exists() else "", "cpus": shape.cpus,
           "memory_mib": shape.memory_mib, "driver": driver, "revision": TEMPLATE_REVISION}
    h = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]
    return f"{shape}-{h}"


def find(box: str, shape: Shape, driver: str) -> Template | None:
    k = key(box, shape, driver)
    t = Template(k, root() / k)
    return t if t.is_complete() else None


def failure(box: str, shape: Shape, driver: str) -> str | None:
    """Why the template of `box` and `shape` cannot be had (a build of it failed; the box is missing),
    or None. A failed build is not tried again for the same box: `slurmlab box templates --rebuild`."""
    try:
        k = key(box, shape, driver)
    except TemplateError as e:
        return str(e)
    f = root() / f"{k}.failed"
    return f.read_text().strip() if f.exists() else None


def ensure(box: str, shape: Shape, driver: str, progress: Callable[[str], None] = lambda s: None) -> Template:
    """The template of `box` and `shape`, built now if there is none (under a lock: one build).
    Raises TemplateError, also when an earlier build of it failed (the reason is kept beside it)."""
    from filelock import FileLock

    k = key(box, shape, driver)
    t = Template(k, root() / k)
    if t.is_complete():
        return t
    root().mkdir(parents=True, exist_ok=True)
    os.chmod(root(), 0o755)
    with FileLock(str(root() / f"{k}.lock")):
        if t.is_complete():
            return t
        if (why := failure(box, shape, driver)) is not None:
            raise TemplateError(why)
        progress(f"building the warm-start template {k} (one boot; later nodes of this shape skip theirs)")
        try:
            _build(t, box, shape, driver)
        except TemplateError as e:
            (root() / f"{k}.failed").write_text(f"{e}\n")
            raise
    return t


def forget_failures(folder: Path | None = None) -> list[str]:
    """Clear every recorded build failure in `folder` (default: the plain templates'; the next fork
    tries again)."""
    folder = folder or root()
    gone = []
    for f in sorted(folder.glob("*.failed")) if folder.exists() else []:
        f.unlink()
        gone.append(f.name.removesuffix(".failed"))
    return gone


def _run(cmd: list[str]) -> None:
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise TemplateError(f"{' '.join(cmd)} failed: {r.stderr.strip()[-400:]}")


def domain_xml(*, name: str, cpus: int, memory_mib: int, disk: Path, network: str, mac: str, driver: str,
               description: str, pad: int = 0) -> str:
    """The domain of a template (and so of every fork: a fork's XML is this one with its own name,
    UUID, MAC, disk and network). The guest agent's channel is what makes a fork reachable.
    The CPU is libvirt's host-model, as vagrant-libvirt's VMs have it (saved expanded, e.g. EPYC under
    TCG here): with qemu's default qemu64 an idle fork took 25-35 % of a core, against a few %."""
    tcg = f"<tcg><tb-cache unit='MiB'>{TB_CACHE_MIB}</tb-cache></tcg>" if driver == "qemu" else ""
    padding = (f"<metadata><slurmlab:pad xmlns:slurmlab='{PAD_NS}'>{'.' * pad}</slurmlab:pad></metadata>"
               if pad else "")
    return f"""<domain type='{driver}'>
  <name>{name}</name>
  <uuid>{uuid.uuid4()}</uuid>
  <description>{description}</description>{padding}
  <memory unit='MiB'>{memory_mib}</memory>
  <currentMemory unit='MiB'>{memory_mib}</currentMemory>
  <vcpu>{cpus}</vcpu>
  <os><type arch='x86_64' machine='pc'>hvm</type><boot dev='hd'/></os>
  <features><acpi/><apic/>{tcg}</features>
  <cpu mode='host-model'/>
  <clock offset='utc'/>
  <on_poweroff>destroy</on_poweroff>
  <on_reboot>restart</on_reboot>
  <on_crash>destroy</on_crash>
  <devices>
    <disk type='file' device='disk'>
      <driver name='qemu' type='qcow2'/>
      <source file='{disk}'/>
      <target dev='vda' bus='virtio'/>
    </disk>
    <interface type='network'>
      <source network='{network}'/>
      <mac address='{mac}'/>
      <model type='virtio'/>
    </interface>
    <serial type='pty'><target port='0'/></serial>
    <console type='pty'><target type='serial' port='0'/></console>
    <channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>
    <rng model='virtio'><backend model='random'>/dev/urandom</backend></rng>
    <memballoon model='none'/>
  </devices>
</domain>
"""


def ensure_network(conn) -> None:
    """The templates' own network (isolated, DHCP), in the lab's namespace with libvirtd."""
    import ipaddress

    import libvirt

    from lab.providers.network import network_xml

    try:
        net = conn.networkLookupByName(NET_NAME)
    except libvirt.libvirtError:
        try:
            net = conn.networkDefineXML(network_xml(NET_NAME, NET_BRIDGE, ipaddress.ip_network(NET_SUBNET)))
        except libvirt.libvirtError:  # another template's build defined it first
            net = conn.networkLookupByName(NET_NAME)
    if not net.isActive():
        try:
            net.create()
        except libvirt.libvirtError:  # templates of two shapes built at once: one of them started it
            if not net.isActive():
                raise


def _build(t: Template, box: str, shape: Shape, driver: str) -> None:
    import libvirt

    from lab.host import libvirtd
    from lab.providers.domains import end_named

    t0 = time.monotonic()
    shutil.rmtree(t.folder, ignore_errors=True)
    t.folder.mkdir(parents=True)
    os.chmod(t.folder, 0o755)
    name = f"slurmlab-template-{t.key}"
    conn = libvirtd.connect()
    dom = None
    try:
        shutil.copyfile(box_image(box), t.folder / "base.img")
        _run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(t.folder / "base.img"), str(t.disk)])
        ensure_network(conn)
        end_named(conn, name)  # a template domain left running by a killed build holds the name
        mac = "52:54:00:fe:%02x:%02x" % tuple(hashlib.sha256(t.key.encode()).digest()[:2])
        xml = domain_xml(name=name, cpus=shape.cpus, memory_mib=shape.memory_mib, disk=t.disk, network=NET_NAME,
                         mac=mac, driver=driver, description=f"slurmlab template {t.key} of box {box}", pad=PAD_BYTES)
        t_copied = time.monotonic()
        dom = conn.createXML(xml, 0)  # transient: gone once saved
        agent.wait(dom, BOOT_TIMEOUT_S)
        t_agent = time.monotonic()
        ran = agent.run(dom, "/usr/bin/systemctl", ["is-system-running", "--wait"], timeout=BOOT_TIMEOUT_S)
        if ran.out.strip() not in ("running", "degraded"):
            raise TemplateError(f"the template's boot ended '{ran.out.strip()}': {ran.tail()}")
        failed = agent.run(dom, "/usr/bin/systemctl", ["--failed", "--plain", "--no-legend"], timeout=60).out.strip()
        for command in before_save(driver):
            ran = agent.run(dom, "/bin/sh", ["-c", command], timeout=120)
            if ran.exitcode != 0:
                raise TemplateError(f"the template's `{command}` failed: {ran.tail()}")
        # what a fork must not inherit: the boot's page cache (the save image stays small) and dirty blocks
        agent.run(dom, "/bin/sh", ["-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], timeout=120)
        t_booted = time.monotonic()
        part = t.folder / "mem.save.part"
        dom.save(str(part))
        dom = None
        img = savefile.read(part)
        os.replace(part, t.memory)
        for f in (t.folder / "base.img", t.disk):
            os.chmod(f, 0o444)  # frozen: the saved memory expects exactly this disk
        meta = {"key": t.key, "box": box, "box_image": str(box_image(box)),
                "box_inputs_hash": box_marker(box).get("inputs_hash"), "cpus": shape.cpus,
                "memory_mib": shape.memory_mib, "driver": driver, "revision": TEMPLATE_REVISION,
                "created": time.time(), "xml_room": img.xml_room, "failed_units": failed,
                "timings": {"copy": round(t_copied - t0, 1), "agent": round(t_agent - t_copied, 1),
                            "booted": round(t_booted - t_copied, 1), "save": round(time.monotonic() - t_booted, 1)}}
        (t.folder / "meta.json").write_text(json.dumps(meta, indent=1))
        log.info("template %s built in %.0f s", t.key, time.monotonic() - t0)
    except (libvirt.libvirtError, agent.AgentError, OSError, savefile.SaveFormatError) as e:
        raise TemplateError(f"building template {t.key}: {e}") from None
    finally:
        if dom is not None:
            try:
                dom.destroy()
            except libvirt.libvirtError:
                pass
        conn.close()
        if not t.is_complete():
            shutil.rmtree(t.folder, ignore_errors=True)


def listing() -> list[dict]:
    """Every complete template: key, box, shape, size on disk, age."""
    out = []
    for d in sorted(root().iterdir()) if root().exists() else []:
        t = Template(d.name, d)
        if d.is_dir() and t.is_complete():
            meta = t.meta
            size = sum(f.stat().st_blocks * 512 for f in d.iterdir() if f.is_file())
            out.append({"key": t.key, "box": meta["box"], "cpus": meta["cpus"], "memory_mib": meta["memory_mib"],
                        "driver": meta["driver"], "size": size, "created": meta["created"],
                        "timings": meta.get("timings", {})})
    return out


def prune(current: Callable[[dict], bool]) -> list[str]:
    """Remove the templates `current(meta)` says no to (built from a box that was rebuilt). A running
    fork keeps its open files: it runs on; new forks use the new template."""
    gone = []
    for d in sorted(root().iterdir()) if root().exists() else []:
        t = Template(d.name, d)
        if d.is_dir() and t.is_complete() and not current(t.meta):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(t.key)
    return gone


def prune_stale() -> list[str]:
    """Remove the templates of boxes that were rebuilt or removed (their key is not current any more)."""
    def current(meta: dict) -> bool:
        try:
            return meta["key"] == key(meta["box"], Shape(meta["cpus"], meta["memory_mib"]), meta["driver"])
        except (TemplateError, KeyError):
            return False
    return prune(current)


# The shapes `slurmlab box build` makes templates for: the instance types of examples/ and of the tests
# (ml.t3.medium and ml.c5.large are both 1 vCPU, 768 MiB in the lab catalog).
DEFAULT_TYPES = ("ml.t3.medium", "ml.c5.large")


def default_shapes() -> list[Shape]:
    from lab.spec.catalog import load_catalog

    sizes = [load_catalog().size(t) for t in DEFAULT_TYPES]
    return sorted({Shape(z.vcpus, z.memory_mib) for z in sizes}, key=str)
