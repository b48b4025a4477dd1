"""Warm start without a VM: the save image rewrite (lab/providers/savefile.py), a fork's domain XML
and its identity archive (lab/providers/templates.py, fork.py), and when a node boots cold instead
(lab/providers/warm.py). The real forks are in tests/e2e (every e2e cluster is built warm)."""

from __future__ import annotations

import io
import struct
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from lab.providers import savefile, templates
from lab.providers.base import ClusterNet, MachineSpec, Start, role_templates_of, start_of
from lab.providers.base import cluster_of
from lab.providers.fork import Identity, fork_of, fork_xml, identity_archive

XML = "<domain type='qemu'><name>slurmlab-template-x</name><uuid>u</uuid></domain>"


def image(xml: str = XML, room: int = 600, cookie: bytes = b"<cookie/>", magic: bytes = savefile.MAGIC,
          version: int = 2, fmt: int = 0, stream: bytes = b"QEVM" + bytes(range(256)) * 40) -> bytes:
    """A save image as libvirt writes it: header, XML padded to `room`, cookie, qemu's stream."""
    data = xml.encode() + b"\0" * (room - len(xml)) + cookie + b"\0"
    header = struct.pack("<16s5I14I", magic, version, len(data), 1, fmt, room, *([0] * 14))
    return header + data + stream


def test_header_is_read_as_libvirt_writes_it():
    img = savefile.parse(image())
    assert (img.version, img.format, img.was_running, img.cookie_offset) == (2, 0, 1, 600)
    assert img.xml == XML and img.cookie == b"<cookie/>" and img.xml_room == 600
    assert savefile.HEADER_SIZE == 92


def test_new_xml_replaces_the_old_in_place():
    head = image()[:92 + 610]
    new = XML.replace("slurmlab-template-x", "demo-compute-12")
    out = savefile.with_xml(head, new)
    assert len(out) == len(head)  # the stream behind it does not move
    got = savefile.parse(out)
    assert got.xml == new and got.cookie == b"<cookie/>" and got.data_len == savefile.parse(head).data_len


@pytest.mark.parametrize("kw,words", [
    ({"magic": b"NotASaveImage..."}, "not a libvirt qemu save image"),
    ({"magic": savefile.PARTIAL}, "incomplete"),
    ({"version": 3}, "version 3: the lab rewrites version 2 only"),
    ({"fmt": 5}, "compressed"),
])
def test_unknown_images_are_refused_with_the_reason(kw, words):
    with pytest.raises(savefile.SaveFormatError, match=words):
        savefile.parse(image(**kw))


def test_xml_longer_than_the_room_is_refused():
    with pytest.raises(savefile.SaveFormatError, match="does not fit"):
        savefile.with_xml(image(), "<domain>" + "x" * 700 + "</domain>")


def test_copy_keeps_the_stream_byte_for_byte(tmp_path):
    src, dst = tmp_path / "t.save", tmp_path / "f.save"
    raw = image(stream=bytes(range(256)) * 4096)
    src.write_bytes(raw)
    new = XML.replace("slurmlab-template-x", "n1")
    assert savefile.copy_with_xml(src, dst, new) == len(raw)
    out = dst.read_bytes()
    assert len(out) == len(raw) and out[92 + 610:] == raw[92 + 610:]
    assert savefile.read(dst).xml == new
    assert not (tmp_path / "f.save.part").exists()


def template_xml() -> str:
    return templates.domain_xml(name="slurmlab-template-k", cpus=1, memory_mib=768, disk=Path("/t/disk.qcow2"),
                                network=templates.NET_NAME, mac="52:54:00:fe:00:01", driver="qemu",
                                description="slurmlab template k", pad=200)


def test_fork_xml_is_the_nodes_own():
    xml, uid = fork_xml(template_xml(), cluster="demo", name="demo-compute-1", mac="52:54:00:12:34:56",
                                  disk=Path("/pool/demo-compute-1.img"), network="slurmlab-demo")
    root = ET.fromstring(xml)
    assert root.findtext("name") == "demo-compute-1" and root.findtext("uuid") == uid
    assert root.find("devices/interface/mac").get("address") == "52:54:00:12:34:56"
    assert root.find("devices/interface/source").attrib == {"network": "slurmlab-demo"}
    assert root.find("devices/disk/source").get("file") == "/pool/demo-compute-1.img"
    assert fork_of(xml) == "slurmlab-template-k" and fork_of(template_xml()) is None
    assert "pad" not in xml  # the template's padding is the fork's room, not part of it

    class Dom:
        def XMLDesc(self, flags):
            return xml
    assert cluster_of(Dom()) == "demo"  # the engine finds it among the cluster's domains
    # the template's own parts stay: the guest agent's channel, the TCG cache cap
    assert root.find("devices/channel/target").get("name") == "org.qemu.guest_agent.0"
    assert root.find("features/tcg/tb-cache").text == "128"


def test_two_forks_never_share_a_uuid():
    a = fork_xml(template_xml(), cluster="c", name="c-compute-1", mac="52:54:00:00:00:02",
                           disk=Path("/p/a.img"), network="n")[1]
    b = fork_xml(template_xml(), cluster="c", name="c-compute-2", mac="52:54:00:00:00:03",
                           disk=Path("/p/b.img"), network="n")[1]
    assert a != b


NET = ClusterNet("slurmlab-demo", "slbr7", "10.213.7.0/24", "10.213.7.1")


def machines() -> list[MachineSpec]:
    return [MachineSpec(f"demo-{g}-1", g, 1, 768, f"52:54:00:00:00:1{i}", f"10.213.7.1{i}", t)
            for i, (g, t) in enumerate([("controller", "Controller"), ("compute", "Compute")])]


def files(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}


def archive_of(m: MachineSpec, ident: Identity) -> dict[str, bytes]:
    return files(identity_archive(cluster="demo", machine=m, machines=machines(), net=NET,
                                  public_key="ssh-ed25519 AAAA lab", munge_key=b"k" * 1024, ident=ident))


def test_identity_archive_holds_what_fork_identity_reads():
    m = machines()[1]
    got = archive_of(m, Identity(host_keys={"ssh_host_ed25519_key": b"priv", "ssh_host_ed25519_key.pub": b"pub"}))
    env = dict(line.split("=", 1) for line in got["fork.env"].decode().splitlines())
    assert env["MAC"] == m.mac and env["ADDRESS"] == "10.213.7.11/24" and env["GATEWAY"] == "10.213.7.1"
    assert len(env["MACHINE_ID"]) == 32 and int(env["MACHINE_ID"], 16) >= 0
    assert got["slurmlab.munge_key"] == b"k" * 1024
    assert b"name=demo-compute-1\nrole=Compute\ncluster=demo\ncontroller=demo-controller-1\n" == got["slurmlab.node"]
    assert got["slurmlab.hosts"] == (b"10.213.7.11 demo-compute-1\n10.213.7.10 demo-controller-1\n"
                                     b"10.213.7.10 slurmlab-controller\n")
    assert got["slurmlab.authorized_keys"] == b"ssh-ed25519 AAAA lab\n" and len(got["seed"]) == 64


def test_two_forks_never_share_an_identity():
    """MAC, address, hostname, machine-id, SSH host key and RNG seed differ between any two forks."""
    from lab.providers.fork import host_keys

    a, b = (archive_of(m, Identity(host_keys=host_keys(f"root@{m.name}"))) for m in machines())
    for name in ("fork.env", "seed", "slurmlab.node", "ssh_host_ed25519_key", "ssh_host_ecdsa_key",
                 "ssh_host_ed25519_key.pub"):
        assert a[name] != b[name], name
    ea, eb = (dict(x.split("=", 1) for x in f["fork.env"].decode().splitlines()) for f in (a, b))
    for k in ("MAC", "ADDRESS", "MACHINE_ID"):
        assert ea[k] != eb[k], k


def test_start_comes_from_the_spec():
    assert start_of({}) == Start.WARM and start_of({"Lab": {"Box": "b"}}) == Start.WARM
    assert start_of({"Lab": {"Start": "Cold"}}) == Start.COLD


def test_role_templates_are_used_unless_the_spec_turns_them_off():
    assert role_templates_of({}) and role_templates_of({"Lab": {"RoleTemplates": True}})
    assert not role_templates_of({"Lab": {"RoleTemplates": False}})
    assert not role_templates_of({"Lab": {"NodeEnvironment": "HyperPod"}})


def test_the_spec_takes_role_templates_true_or_false(tmp_path, lab_home):
    from lab.spec.load import load_spec
    from lab.spec.problems import SpecInvalid
    from tests.specs import BASE

    spec = tmp_path / "spec.yaml"
    spec.write_text(BASE + "Lab: {RoleTemplates: false}\n")
    assert role_templates_of(load_spec(spec).to_dict()) is False
    spec.write_text(BASE + "Lab: {RoleTemplates: 'off'}\n")
    with pytest.raises(SpecInvalid) as ei:
        load_spec(spec)
    assert "Lab.RoleTemplates: 'off' is not true or false" in ei.value.message


def test_a_cold_spec_boots_cold_and_a_remote_hosts_nodes_are_forked_too(monkeypatch):
    from lab.providers import warm

    class Host:
        local, name = False, "far"
    monkeypatch.setattr(warm.placement, "host_of", lambda c: Host())
    monkeypatch.setattr(warm, "box_supports", lambda box: None)
    monkeypatch.setattr(warm.templates, "failure", lambda *a: None)
    w = warm.WarmStart()
    m = machines()[1]
    assert w.blocker("demo", MachineSpec(**{**m.__dict__, "start": Start.COLD}), "b") == "Lab.Start is Cold"
    assert w.blocker("demo", m, "b") is None  # its templates go up to that host (lab/providers/hosttemplates.py)


def test_a_box_without_warm_start_boots_cold(monkeypatch, tmp_path):
    from lab.box import vagrant as boxvagrant
    from lab.providers import warm

    monkeypatch.setattr(boxvagrant, "box_dir", lambda name, version: tmp_path)
    assert "not built by slurmlab" in warm.box_supports("x/y")
    (tmp_path / "slurmlab.json").write_text('{"inputs_hash": "abc"}')
    assert "built before warm start" in warm.box_supports("x/y")
    (tmp_path / "slurmlab.json").write_text('{"inputs_hash": "abc", "features": ["warm-start"]}')
    assert warm.box_supports("x/y") is None


def test_a_failed_template_build_is_remembered(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURMLAB_LIBVIRT_DIR", str(tmp_path))
    monkeypatch.setattr(templates, "key", lambda box, shape, driver: f"{shape}-k")
    shape = templates.Shape(1, 768)
    assert templates.failure("b", shape, "qemu") is None
    templates.root().mkdir(parents=True)
    (templates.root() / "1cpu-768mib-k.failed").write_text("building template: the agent did not answer\n")
    assert "did not answer" in templates.failure("b", shape, "qemu")
    with pytest.raises(templates.TemplateError, match="did not answer"):
        templates.ensure("b", shape, "qemu")
    assert templates.forget_failures() == ["1cpu-768mib-k"] and templates.failure("b", shape, "qemu") is None


def test_a_bare_vm_gets_no_slurm_identity():
    """A VM without a node type (a bare VM: no Slurm identity at boot) gets keys and an address only, like a cold one."""
    bare = MachineSpec("c-node-1", "node", 1, 768, "52:54:00:00:00:99", "10.213.7.20")
    got = files(identity_archive(cluster="c", machine=bare, machines=[bare], net=NET, public_key="k",
                                 munge_key=b"m", ident=Identity()))
    assert "fork.env" in got and "slurmlab.authorized_keys" in got
    assert not {"slurmlab.node", "slurmlab.hosts", "slurmlab.munge_key"} & set(got)


def test_a_domain_removed_while_observed_is_gone_not_unreachable(monkeypatch):
    """A fork is undefined in one libvirt call: `observe` may list it and find it gone a moment later.
    That is one VM less, not libvirtd unreachable (CI saw a spurious stale-state Error event)."""
    import libvirt

    from lab.providers import vagrant

    class Gone(libvirt.libvirtError):
        def __init__(self):
            Exception.__init__(self, "Domain not found")

        def get_error_code(self):
            return libvirt.VIR_ERR_NO_DOMAIN

    class Dom:
        def __init__(self, name, gone=False):
            self._name, self.gone = name, gone

        def name(self):
            return self._name

        def state(self):
            if self.gone:
                raise Gone()
            return libvirt.VIR_DOMAIN_RUNNING, 1

    class Conn:
        def close(self):
            pass

    class Host:
        name, uri = "local", "qemu:///system"

        def connect(self):
            return Conn()

    monkeypatch.setattr(vagrant.placement, "host_of", lambda c: Host())
    monkeypatch.setattr(vagrant.placement, "abandoned", lambda c: [])
    monkeypatch.setattr(vagrant.domains, "of_cluster", lambda conn, c: [Dom("c-compute-1"), Dom("c-compute-2", gone=True)])
    seen = vagrant.VagrantProvider(box="b").observe("c")
    assert list(seen) == ["c-compute-1"] and seen["c-compute-1"].state == "running"


def test_two_template_builds_at_once_share_the_network():
    """Templates of two shapes are built at once (box build --for SPEC): the second build's define and
    start of the templates' network find it done by the first, and go on."""
    import libvirt

    from lab.providers import templates

    class Net:
        def __init__(self):
            self.active, self.created = False, 0

        def isActive(self):
            return self.active

        def create(self):
            self.active = True  # the other build started it between isActive() and create()
            raise libvirt.libvirtError("Requested operation is not valid: network is already active")

    class Conn:
        def __init__(self):
            self.net, self.lookups = Net(), 0

        def networkLookupByName(self, name):
            self.lookups += 1
            if self.lookups == 1:
                raise libvirt.libvirtError("Network not found")
            return self.net

        def networkDefineXML(self, xml):
            raise libvirt.libvirtError("network 'slurmlab-templates' already exists")

    conn = Conn()
    templates.ensure_network(conn)
    assert conn.net.active and conn.lookups == 2

    # libvirtError's message is the thread's last libvirt error when there is one (another test's): the
    # test knows its own error by identity, not by its text
    failure = libvirt.libvirtError("cannot create bridge")

    class Broken(Net):
        def create(self):
            raise failure

    conn = Conn()
    conn.net = Broken()
    with pytest.raises(libvirt.libvirtError) as raised:
        templates.ensure_network(conn)
    assert raised.value is failure


def _with_state_disk(xml: str, path: str = "/tpl/state.qcow2") -> str:
    root = ET.fromstring(xml)
    disk = ET.SubElement(root.find("devices"), "disk", {"type": "file", "device": "disk"})
    ET.SubElement(disk, "source", {"file": path})
    ET.SubElement(disk, "serial").text = "slurmlab-state"
    return ET.tostring(root, encoding="unicode")


def test_a_role_templates_state_disk_becomes_the_clusters_in_the_forks_xml():
    """Issue 42: a controller's role template is saved with its state disk; its fork's XML names the
    cluster's new state disk in its place (no hot-plug), and refuses to fork without one."""
    from lab.providers.fork import ForkError, has_state_disk

    saved = _with_state_disk(template_xml())
    assert has_state_disk(saved) and not has_state_disk(template_xml())
    xml, _ = fork_xml(saved, cluster="demo", name="demo-controller-1", mac="52:54:00:12:34:56",
                      disk=Path("/pool/demo-controller-1.img"), network="slurmlab-demo",
                      state_disk=Path("/pool/demo-state-1.qcow2"))
    sources = {d.findtext("serial") or "system": d.find("source").get("file")
               for d in ET.fromstring(xml).findall("devices/disk")}
    assert sources == {"system": "/pool/demo-controller-1.img", "slurmlab-state": "/pool/demo-state-1.qcow2"}
    with pytest.raises(ForkError, match="state disk"):
        fork_xml(saved, cluster="demo", name="demo-controller-1", mac="52:54:00:12:34:56",
                 disk=Path("/pool/x.img"), network="n")


def test_a_role_templates_build_vm_keeps_room_and_names_no_cluster():
    xml, _ = fork_xml(template_xml(), cluster="slurmlab-role-template", name="slurmlab-rtpl-k", mac="52:54:00:fd:00:01",
                      disk=Path("/tpl/x.img"), network="slurmlab-templates", description="slurmlab role template k",
                      pad=100)
    root = ET.fromstring(xml)
    assert root.findtext("description") == "slurmlab role template k"  # not "slurmlab cluster=...": no cluster's

    class Dom:
        def XMLDesc(self, flags):
            return xml
    assert cluster_of(Dom()) is None
    assert "." * 100 in xml


def test_which_nodes_are_forked_from_role_templates(monkeypatch, tmp_path):
    from lab import paths
    from lab.host import kvm
    from lab.providers import roletemplates
    from lab.providers.warm import WarmStart

    monkeypatch.setattr(kvm, "detect", lambda: type("K", (), {"driver": "qemu"})())
    monkeypatch.setattr(paths, "pool_dir", lambda: tmp_path)
    found = roletemplates.RoleTemplate("k-controller", tmp_path / "k", "Controller")
    failed: dict[str, str] = {}
    monkeypatch.setattr(roletemplates, "find", lambda box, shape, driver, role: found)
    monkeypatch.setattr(roletemplates, "failure", lambda box, shape, driver, role: failed.get(role))
    w = WarmStart()  # no configure_template: nothing builds in the background here
    ctl = MachineSpec("demo-controller-1", "controller", 1, 768, "52:54:00:00:00:10", "10.213.7.10", "Controller",
                      state_disk="demo-state-1.qcow2")
    assert w.role_template("demo", ctl, "b") == (found, "")
    (tmp_path / "demo-state-1.qcow2").write_text("a replaced controller's disk")
    t, why = w.role_template("demo", ctl, "b")
    assert t is None and "state disk" in why
    hp = MachineSpec("hp-worker-1", "worker", 1, 768, "52:54:00:00:00:11", "10.213.7.11", "Compute", role_template=False)
    assert w.role_template("hp", hp, "b")[0] is None
    failed["Compute"] = "held back"
    cmp = MachineSpec("demo-compute-1", "compute", 1, 768, "52:54:00:00:00:12", "10.213.7.12", "Compute")
    t, why = w.role_template("demo", cmp, "b")
    assert t is None and "held back" in why
    assert w.role_template("demo", MachineSpec("x", "g", 1, 768, "52:54:00:00:00:13", "10.213.7.13"), "b")[0] is None


def test_the_ssh_wait_gives_each_try_longer_and_sees_a_slow_sshd_answer():
    """Issue 43's CI: a live fork's sshd took more than 15 s for one login on a starved host; probes that
    always gave up at 15 s never saw it answer, and the fork was thrown away and booted cold."""
    from lab.providers.warm import answers_within

    tries = []

    def slow_sshd(cluster, address, *, connect_timeout, timeout):
        tries.append((connect_timeout, timeout))
        return timeout >= 45  # one login takes 40 s

    assert answers_within("c", "10.0.0.2", 300, probe=slow_sshd, pause_s=0)
    assert tries == [(3, 15), (6, 30), (9, 45)]
    tries.clear()
    assert not answers_within("c", "10.0.0.2", 0.05, probe=lambda *a, **k: tries.append(k) or False, pause_s=0.01)
    assert tries and max(k["timeout"] for k in tries) <= 90 and max(k["connect_timeout"] for k in tries) <= 30
