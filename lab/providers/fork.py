"""Fork a node from a warm-start template: restore the template's memory under the node's own name,
then give it its identity through the guest agent (docs/adr/0011).

Steps, each timed:
  overlay    a qcow2 overlay over the template's frozen disk, in the pool as `<node>.img` (removed with
             the node like a Vagrant VM's disk: lab.providers.domains.purge)
  image      a copy of the template's save image with the node's XML in its header (savefile.py):
             name, UUID, MAC, disk, the cluster's network
  restore    define the domain, restore it from the copy (running), delete the copy
  identity   `guest-set-time` (the saved clock is the template's), then the box's fork-identity script
             with a tar archive on stdin: the node's MAC and address, machine-id, SSH host keys, RNG seed,
             and the credentials a cold VM gets at boot (name, hosts, munge key, the cluster's SSH key)
A failed fork removes what it made and raises ForkError; the provider then boots the node cold.
"""

from __future__ import annotations

import io
import ipaddress
import logging
import os
import subprocess
import tarfile
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from lab import paths
from lab.providers import agent, savefile, templates
from lab.providers.base import ClusterNet, MachineSpec
from lab.providers.vagrantfile import hosts_credential, node_credential

log = logging.getLogger(__name__)

AGENT_TIMEOUT_S = 60.0
IDENTITY_TIMEOUT_S = 120.0
STATE_DISK_TARGET = "vdb"


class ForkError(Exception):
    """A fork failed (restore, agent, identity); what it made is gone. The node can boot cold."""


@dataclass
class Identity:
    """What makes a fork its own node (every field differs between two forks)."""

    machine_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    seed: bytes = field(default_factory=lambda: os.urandom(64))
    host_keys: dict[str, bytes] = field(default_factory=dict)  # file name -> content


def host_keys(comment: str) -> dict[str, bytes]:
    """A new ed25519 and ecdsa host key pair, made on the host (ms, not the guest's emulated seconds)."""
    out = {}
    with tempfile.TemporaryDirectory() as d:
        for t in ("ed25519", "ecdsa"):
            f = Path(d) / f"ssh_host_{t}_key"
            subprocess.run(["ssh-keygen", "-q", "-t", t, "-N", "", "-C", comment, "-f", str(f)], check=True,
                           capture_output=True)
            out[f.name] = f.read_bytes()
            out[f.name + ".pub"] = (Path(d) / f"{f.name}.pub").read_bytes()
    return out


def identity_archive(*, cluster: str, machine: MachineSpec, machines: Sequence[MachineSpec], net: ClusterNet,
                     public_key: str, munge_key: bytes | None, ident: Identity) -> bytes:
    """The tar archive fork-identity reads on stdin (pure: tested without a VM)."""
    prefix = ipaddress.ip_network(net.cidr).prefixlen
    controller = next((m.name for m in machines if m.node_type == "Controller"), None)
    files: dict[str, bytes] = {
        "fork.env": (f"MAC={machine.mac.lower()}\nADDRESS={machine.address}/{prefix}\nGATEWAY={net.gateway}\n"
                     f"MACHINE_ID={ident.machine_id}\n").encode(),
        "seed": ident.seed,
        "slurmlab.authorized_keys": (public_key.strip() + "\n").encode(),
        **ident.host_keys,
    }
    if machine.node_type and controller:  # a Slurm node (the cold path's qemu_args give the same credentials)
        files["slurmlab.node"] = node_credential(cluster, machine, controller).encode()
        files["slurmlab.hosts"] = hosts_credential(machines).encode()
        if munge_key is not None:
            files["slurmlab.munge_key"] = munge_key
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, data in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o600, int(time.time())
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def forks_dir() -> Path:
    return paths.libvirt_dir() / "forks"


class LocalStore:
    """What a fork makes on this machine: its overlay in the pool folder, its save image copy under
    forks_dir() (a host that is not this machine: lab.providers.hosttemplates.PoolStore)."""

    def __init__(self, pool_dir: Path, template: templates.Template) -> None:
        self.pool_dir, self.template = pool_dir, template

    def overlay(self, name: str) -> str:
        overlay = self.pool_dir / f"{name}.img"
        overlay.unlink(missing_ok=True)  # a disk left by a failed attempt: the domain is gone (ensure checked)
        r = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(self.template.disk),
                            str(overlay)], capture_output=True, text=True)
        if r.returncode:
            raise ForkError(f"qemu-img create {overlay} failed: {r.stderr.strip()[-300:]}")
        return str(overlay)

    def image(self, name: str, xml: str) -> str:
        forks_dir().mkdir(parents=True, exist_ok=True)
        image = forks_dir() / f"{name}.save"
        savefile.copy_with_xml(self.template.memory, image, xml)
        return str(image)

    def drop_image(self, name: str) -> None:
        (forks_dir() / f"{name}.save").unlink(missing_ok=True)

    def drop_overlay(self, name: str) -> None:
        (self.pool_dir / f"{name}.img").unlink(missing_ok=True)


def fork(conn, *, pool_dir: Path, template: templates.Template, cluster: str, machine: MachineSpec,
         machines: Sequence[MachineSpec], net: ClusterNet, public_key: str, munge_key: bytes | None,
         state_disk: Path | str | None = None, description: str | None = None, pad: int = 0,
         store=None) -> dict:
    """Make `machine` a running fork of `template` with its identity; {step: seconds}. Raises ForkError.
    `state_disk` is hot-plugged, or, when the template's saved XML holds a state disk (a controller's role
    template: lab/providers/roletemplates.py), takes its place in the XML. `description` and `pad` serve
    a role template's build (a VM of no cluster, saved again: room in its XML for its forks'). `store`
    makes the overlay and the save image copy (LocalStore on this machine)."""
    import libvirt

    store = store or LocalStore(pool_dir, template)
    t = {}
    t0 = time.monotonic()
    name = machine.name
    dom = None
    try:
        overlay = store.overlay(name)
        t["overlay"] = time.monotonic() - t0
        saved = savefile.read(template.memory)
        in_xml = has_state_disk(saved.xml)
        if in_xml and state_disk is None:
            raise ForkError(f"template {template.key} holds a state disk and none was given")
        xml, _ = fork_xml(saved.xml, cluster=cluster, name=name, mac=machine.mac, disk=overlay,
                          network=net.name, state_disk=state_disk if in_xml else None, description=description,
                          pad=pad)
        image = store.image(name, xml)
        t["image"] = time.monotonic() - t0 - sum(t.values())
        conn.defineXML(xml)
        conn.restoreFlags(image, None, 0)
        dom = conn.lookupByName(name)
        t["restore"] = time.monotonic() - t0 - sum(t.values())
        store.drop_image(name)
        if state_disk is not None and not in_xml:
            dom.attachDeviceFlags(state_disk_xml(state_disk),
                                  libvirt.VIR_DOMAIN_AFFECT_LIVE | libvirt.VIR_DOMAIN_AFFECT_CONFIG)
        agent.wait(dom, AGENT_TIMEOUT_S, poll=0.2)
        agent.set_time(dom)
        t["agent"] = time.monotonic() - t0 - sum(t.values())
        ident = Identity(host_keys=host_keys(f"root@{name}"))
        archive = identity_archive(cluster=cluster, machine=machine, machines=machines, net=net, public_key=public_key,
                                   munge_key=munge_key, ident=ident)
        ran = agent.run(dom, "/usr/local/lib/slurmlab/fork-identity", stdin=archive, timeout=IDENTITY_TIMEOUT_S)
        if ran.exitcode != 0:
            raise ForkError(f"fork-identity exited {ran.exitcode}: {ran.tail()}")
        t["identity"] = time.monotonic() - t0 - sum(t.values())
        return {k: round(v, 2) for k, v in t.items()}
    except (libvirt.libvirtError, agent.AgentError, savefile.SaveFormatError, templates.TemplateError, OSError) as e:
        _undo(conn, name, store)
        raise ForkError(f"{name}: fork of template {template.key} failed: {e}") from None
    except ForkError:
        _undo(conn, name, store)
        raise
    finally:
        try:
            store.drop_image(name)
        except Exception as e:  # noqa: BLE001 - a leftover copy is removed with the node (domains.purge)
            log.warning("%s: the fork's save image copy stays: %s", name, e)


def state_disk_xml(path: Path | str) -> str:
    from lab.providers.base import STATE_DISK_SERIAL

    return (f"<disk type='file' device='disk'><driver name='qemu' type='qcow2'/><source file='{path}'/>"
            f"<target dev='{STATE_DISK_TARGET}' bus='virtio'/><serial>{STATE_DISK_SERIAL}</serial></disk>")


def _undo(conn, name: str, store) -> None:
    from lab.providers.domains import end_named

    end_named(conn, name)
    store.drop_overlay(name)


def _is_state(d) -> bool:
    from lab.providers.base import STATE_DISK_SERIAL

    return (d.findtext("serial") or "") == STATE_DISK_SERIAL


def has_state_disk(template_xml: str) -> bool:
    """Whether a saved XML holds a state disk (a controller's role template does)."""
    return any(_is_state(d) for d in ET.fromstring(template_xml).findall("devices/disk"))


def fork_xml(template_xml: str, *, cluster: str, name: str, mac: str, disk: Path | str, network: str,
             state_disk: Path | str | None = None, description: str | None = None, pad: int = 0) -> tuple[str, str]:
    """A fork's domain XML from the template's saved one: its own name, UUID, MAC, disk and network, the
    cluster's description (lab.providers.base.cluster_of), no padding; the template's state disk, if it
    has one, is `state_disk`. Returns (xml, uuid)."""
    root_el = ET.fromstring(template_xml)
    new_uuid = str(uuid.uuid4())
    root_el.find("name").text = name
    root_el.find("uuid").text = new_uuid
    desc = root_el.find("description")
    desc.text = description or f"slurmlab cluster={cluster}"
    md = root_el.find("metadata")
    if md is not None:
        root_el.remove(md)
    md = ET.SubElement(root_el, "metadata")
    ET.SubElement(md, f"{{{templates.PAD_NS}}}fork", {"template": template_name(template_xml)})
    if pad:
        ET.SubElement(md, f"{{{templates.PAD_NS}}}pad").text = "." * pad
    all_disks = [d for d in root_el.findall("devices/disk") if d.get("device", "disk") == "disk"]
    disks = [d for d in all_disks if not _is_state(d)]
    states = [d for d in all_disks if _is_state(d)]
    if len(disks) != 1 or disks[0].find("source") is None:
        raise ForkError("the template's XML does not have exactly one system disk")
    if len(states) > 1 or (states and state_disk is None):
        raise ForkError("the template's XML holds a state disk and the fork was given none")
    disks[0].find("source").set("file", str(disk))
    for d in states:
        d.find("source").set("file", str(state_disk))
    for d in disks + states:
        for bs in d.findall("backingStore"):
            d.remove(bs)
    ifaces = root_el.findall("devices/interface")
    if len(ifaces) != 1:
        raise ForkError("the template's XML does not have exactly one network interface")
    ifaces[0].find("mac").set("address", mac)
    src = ifaces[0].find("source")
    for k in list(src.attrib):
        del src.attrib[k]
    src.set("network", network)
    for el in ("target", "alias"):
        for e in ifaces[0].findall(el):
            ifaces[0].remove(e)
    return ET.tostring(root_el, encoding="unicode"), new_uuid


def template_name(xml: str) -> str:
    return ET.fromstring(xml).findtext("name") or ""


def fork_of(dom_xml: str) -> str | None:
    """The template a domain was forked from (its metadata), or None for a cold-booted VM."""
    el = ET.fromstring(dom_xml).find(f"metadata/{{{templates.PAD_NS}}}fork")
    return el.get("template") if el is not None else None
