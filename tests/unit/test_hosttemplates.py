"""Templates on another host (lab/providers/hosttemplates.py) against a pool whose volumes are files of a
folder standing for the host's disk, driven through the libvirt calls the module makes. The real
upload and fork on a remote rig: tests/e2e/test_updates.py's second-host test."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lab.providers import hosttemplates, savefile, templates
from tests.unit.test_warm import XML, image

CAPS = "<capabilities><host><secmodel><model>dac</model><baselabel type='kvm'>+64055:+64055</baselabel></secmodel></host></capabilities>"


class FakeError(Exception):
    def get_error_message(self) -> str:
        return str(self)


class Stream:
    def __init__(self) -> None:
        self.vol = self.offset = None
        self.mode, self.sent_bytes = "", 0

    def send(self, data: bytes) -> int:
        with open(self.vol.file, "r+b") as f:
            f.seek(self.offset + self.sent_bytes)
            f.write(data)
        self.sent_bytes += len(data)
        self.vol.pool.uploaded.append((self.vol.name(), self.offset + self.sent_bytes - len(data), len(data)))
        return len(data)

    def recv(self, n: int) -> bytes:
        with open(self.vol.file, "rb") as f:
            f.seek(self.offset + self.sent_bytes)
            data = f.read(min(n, self.length - self.sent_bytes))
        self.sent_bytes += len(data)
        return data

    def finish(self) -> None:
        pass

    abort = finish


class Vol:
    def __init__(self, pool, name: str) -> None:
        self.pool, self._name, self.file = pool, name, pool.folder / name

    def name(self) -> str:
        return self._name

    def path(self) -> str:
        return str(self.file)

    def info(self):
        size = self.file.stat().st_size
        if self.file.read_bytes()[:4] == b"QFI\xfb":  # libvirt's refresh probes a qcow2 file: its virtual size
            return [0, 1 << 30, size]
        return [0, self.pool.capacity.get(self._name, size), size]

    def upload(self, st, offset, length, flags):
        assert offset + length <= self.file.stat().st_size, "an upload beyond the volume's capacity"
        st.vol, st.offset, st.length = self, offset, length

    def download(self, st, offset, length, flags):
        st.vol, st.offset, st.length = self, offset, length

    def delete(self, flags):
        self.file.unlink()


def _field(xml: str, tag: str) -> str:
    return xml.split(f"<{tag}")[1].split(">", 1)[1].split("<")[0]


class Pool:
    def __init__(self, folder: Path) -> None:
        self.folder, self.uploaded, self.capacity = folder, [], {}
        folder.mkdir()

    def refresh(self, flags):
        pass

    def storageVolLookupByName(self, name):
        if not (self.folder / name).exists():
            raise FakeError(name)
        return Vol(self, name)

    def listAllVolumes(self):
        return [Vol(self, p.name) for p in sorted(self.folder.iterdir())]

    def createXML(self, xml, flags):
        name, size = _field(xml, "name"), int(_field(xml, "capacity"))
        if "<backingStore>" in xml:  # what libvirt does: qemu-img create on the host
            backing = xml.split("<backingStore><path>")[1].split("<")[0]
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", backing,
                            str(self.folder / name)], check=True)
        elif "qcow2" in xml:
            subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(self.folder / name), str(size)], check=True)
        else:
            with open(self.folder / name, "wb") as f:
                f.truncate(size)
        self.capacity[name] = size
        return Vol(self, name)

    def createXMLFrom(self, xml, src, flags):
        name = _field(xml, "name")
        (self.folder / name).write_bytes(src.file.read_bytes())
        return Vol(self, name)


class Conn:
    def __init__(self, folder: Path) -> None:
        self.pool = Pool(folder)

    def getCapabilities(self):
        return CAPS

    def storagePoolLookupByName(self, name):
        assert name == "slurmlab"
        return self.pool

    def storageVolLookupByPath(self, path):
        return self.pool.storageVolLookupByName(Path(path).name)

    def newStream(self, flags):
        return Stream()


class Host:
    name, pool = "far", "slurmlab"


@pytest.fixture
def fake(monkeypatch, tmp_path):
    import libvirt

    monkeypatch.setattr(libvirt, "libvirtError", FakeError)
    monkeypatch.setattr(templates, "root", lambda: tmp_path / "templates")  # the templates this machine has
    return Conn(tmp_path / "host-pool")


def template(tmp_path: Path, key: str = "1cpu-768mib-abc") -> templates.Template:
    """A plain template's files: base.img, disk.qcow2 over it, mem.save."""
    d = tmp_path / "templates" / key
    d.mkdir(parents=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(d / "base.img"), "64M"], check=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(d / "base.img"),
                    str(d / "disk.qcow2")], check=True)
    (d / "mem.save").write_bytes(image(stream=bytes(range(256)) * 8192))
    return templates.Template(key, d)


def backing(path: str) -> str:
    out = subprocess.run(["qemu-img", "info", "-U", "--output", "json", path], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["backing-filename"]


def test_a_template_goes_up_once_and_names_only_the_hosts_files(fake, tmp_path):
    t = template(tmp_path)
    on = hosttemplates.ensure(Host(), fake, t)
    host = fake.pool.folder
    assert sorted(p.name for p in host.iterdir()) == [f"slurmlab_tpl_{t.key}_{f}" for f in ("base.img", "disk.qcow2", "mem.save")]
    assert on.disk == str(host / f"slurmlab_tpl_{t.key}_disk.qcow2") and on.state is None
    assert backing(on.disk) == str(host / f"slurmlab_tpl_{t.key}_base.img")  # rebased onto the host's volume
    assert Path(on.memory).read_bytes() == t.memory.read_bytes()
    assert backing(str(t.disk)) == str(t.folder / "base.img")  # the template here is untouched
    fake.pool.uploaded.clear()
    assert hosttemplates.ensure(Host(), fake, t) == on
    assert fake.pool.uploaded == []  # kept: nothing sent again


def test_an_upload_cut_off_is_sent_again_and_its_first_bytes_go_last(fake, tmp_path):
    t = template(tmp_path)
    on = hosttemplates.ensure(Host(), fake, t)
    sent = [(n, off) for n, off, _ in fake.pool.uploaded if n.endswith("mem.save")]
    assert sent[-1][1] == 0 and all(off >= 4096 for _, off in sent[:-1])
    with open(on.memory, "r+b") as f:  # a killed engine: everything but the first bytes
        f.write(b"\0" * 4096)
    fake.pool.uploaded.clear()
    assert hosttemplates.ensure(Host(), fake, t) == on
    assert {n for n, _, _ in fake.pool.uploaded} == {f"slurmlab_tpl_{t.key}_mem.save"}
    assert Path(on.memory).read_bytes() == t.memory.read_bytes()


def test_a_fork_on_the_host_makes_volumes_only(fake, tmp_path):
    t = template(tmp_path)
    store = hosttemplates.PoolStore(fake, "slurmlab", hosttemplates.ensure(Host(), fake, t), t)
    overlay = store.overlay("demo-compute-1")
    assert Path(overlay).parent == fake.pool.folder and backing(overlay) == store.on_host.disk
    new = XML.replace("slurmlab-template-x", "demo-compute-1")
    img = store.image("demo-compute-1", new)
    out, raw = Path(img).read_bytes(), t.memory.read_bytes()
    assert savefile.read(Path(img)).xml == new and len(out) == len(raw) and out[92 + 610:] == raw[92 + 610:]
    assert [(n, off) for n, off, _ in fake.pool.uploaded if n == "demo-compute-1-fork.save"] == [("demo-compute-1-fork.save", 0)]
    state = store.state_disk("demo-state-1.qcow2", "1G")
    assert json.loads(subprocess.run(["qemu-img", "info", "--output", "json", state], capture_output=True,
                                     check=True).stdout)["virtual-size"] == 1 << 30
    assert store.state_disk("demo-state-1.qcow2", "1G") == state  # the cluster's state stays
    store.drop_image("demo-compute-1")
    store.drop_overlay("demo-compute-1")
    assert not Path(img).exists() and not Path(overlay).exists() and Path(state).exists()


def test_a_role_templates_chain_and_state_go_up_rebased(fake, tmp_path):
    from lab.providers.roletemplates import RoleTemplate

    plain = template(tmp_path)
    d = tmp_path / "templates" / "roles" / f"{plain.key}-controller-x"
    d.mkdir(parents=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(plain.disk), str(d / "disk.qcow2")], check=True)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(d / "state.qcow2"), "8M"], check=True)
    (d / "mem.save").write_bytes(plain.memory.read_bytes())
    hosttemplates.ensure(Host(), fake, plain)  # a compute node's fork took the plain template's files up
    fake.pool.uploaded.clear()
    on = hosttemplates.ensure(Host(), fake, RoleTemplate(d.name, d, "Controller"))
    assert {n for n, _, _ in fake.pool.uploaded} == {f"slurmlab_tpl_{d.name}_{f}" for f in ("disk.qcow2", "mem.save", "state.qcow2")}
    host = fake.pool.folder
    assert backing(on.disk) == str(host / f"slurmlab_tpl_{plain.key}_disk.qcow2")
    assert backing(str(host / f"slurmlab_tpl_{plain.key}_disk.qcow2")) == str(host / f"slurmlab_tpl_{plain.key}_base.img")
    assert on.state == str(host / f"slurmlab_tpl_{d.name}_state.qcow2")
    state = hosttemplates.PoolStore(fake, "slurmlab", on, RoleTemplate(d.name, d, "Controller")).state_disk("demo-state-1.qcow2", "8G")
    assert Path(state).read_bytes() == (d / "state.qcow2").read_bytes()  # the role template's, formatted and filled


def test_the_volumes_of_templates_this_machine_no_longer_has_are_removed(fake, tmp_path):
    old, new = template(tmp_path, "1cpu-768mib-old"), template(tmp_path, "1cpu-768mib-new")
    hosttemplates.ensure(Host(), fake, old)
    fake.pool.createXML("<volume><name>demo-compute-1.img</name><capacity>1</capacity></volume>", 0)
    import shutil

    shutil.rmtree(old.folder)  # a rebuilt box: the old template is pruned here
    hosttemplates.ensure(Host(), fake, new)
    listed = hosttemplates.listing(fake, "slurmlab")
    assert {x["template"] for x in listed} == {new.key}
    assert (fake.pool.folder / "demo-compute-1.img").exists()  # a node's volume is never a template's


def test_box_templates_names_the_hosts_that_hold_each_template(fake, tmp_path, monkeypatch):
    import libvirt

    from lab.cmd import hosts
    from lab.host import registry

    t = template(tmp_path)
    hosttemplates.ensure(Host(), fake, t)

    class Remote:
        local, name, pool = False, "far", "slurmlab"

        def connect(self):
            return fake

    class Gone(Remote):
        name = "gone"

        def connect(self):
            raise libvirt.libvirtError("cannot reach gone")

    class Local:
        local, name = True, "local"
    fake.close = lambda: None
    monkeypatch.setattr(registry, "all_hosts", lambda: [Local(), Remote(), Gone()])
    on, unreachable = hosts._templates_on_hosts()
    assert on == {t.key: ["far"]}
    assert unreachable == [("gone", "cannot reach gone")]


def test_a_stream_that_takes_nothing_or_a_short_file_fails_instead_of_spinning(fake, tmp_path):
    from lab.providers import volstream

    vol = fake.pool.createXML("<volume><name>v</name><capacity>8</capacity></volume>", 0)

    class Stuck(Stream):
        def send(self, data):
            return 0

        def abort(self):
            self.aborted = True
    st = Stuck()
    fake.newStream = lambda flags: st
    with pytest.raises(OSError, match="took no bytes"):
        volstream.send(fake, vol, 0, b"12345678")
    assert st.aborted
    del fake.newStream
    with pytest.raises(OSError, match="ended 4 bytes short"):
        volstream.send_file(fake, vol, 0, 8, volstream._Bytes(b"1234"))


def test_under_emulation_the_template_is_saved_without_address_randomization():
    """ADR 0030: under TCG a fork's new processes must map their code where the last one did (its
    translation is reused); with KVM the kernel's default stays. The warm-up runs either way, last."""
    qemu, kvm = templates.before_save("qemu"), templates.before_save("kvm")
    assert qemu[0] == "echo 0 > /proc/sys/kernel/randomize_va_space" and qemu[-1] == templates.WARMUP
    assert kvm == [templates.WARMUP]
    assert templates.TEMPLATE_REVISION >= 4  # templates saved before it have randomization on: a new key
