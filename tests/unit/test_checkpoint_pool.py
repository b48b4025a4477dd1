"""Checkpoints of a cluster on another host (lab/providers/checkpoint_keep.py Pool, ADR 0035), against a
fake libvirt whose pool is a folder: the memory is saved to and restored from the host's pool (never a
file of this machine), the disks come down through the stream and go back up as new volumes with the
checkpoint's bytes, the checkpoint's volumes are the cluster's (delete-cluster takes them), delete removes
them from the host, and a restore is refused with nothing changed when the memory is gone or the
cluster moved. What it cannot prove: that a remote qemu saves and restores a guest (the second-host e2e
test restores the far cluster on the rig)."""

from __future__ import annotations

import json
from pathlib import Path

import libvirt
import pytest

from lab import paths
from lab.providers import checkpoint, network, state_disk
from lab.providers.base import CheckpointError
from lab.workspace import ClusterDir
from tests.unit import test_checkpoint_libvirt as virt

CAPS = ("<capabilities><host><secmodel><model>dac</model><baselabel type='qemu'>+64055:+994</baselabel>"
        "</secmodel></host></capabilities>")


class Vol:
    def __init__(self, path: Path):
        self.p = path

    def name(self):
        return self.p.name

    def path(self):
        return str(self.p)

    def info(self):
        return [0, self.p.stat().st_size, self.p.stat().st_size]

    def delete(self, flags=0):
        self.p.unlink()

    def download(self, st, offset, length, flags):
        st.data = self.p.read_bytes()[offset:]

    def upload(self, st, offset, length, flags):
        st.target, st.offset = self.p, offset


class Stream:
    def __init__(self):
        self.data, self.target, self.sent = b"", None, b""

    def recv(self, n):
        out, self.data = self.data[:n], self.data[n:]
        return out

    def send(self, b):
        self.sent += b
        return len(b)

    def finish(self):
        if self.target is not None:
            with open(self.target, "r+b") as f:
                f.seek(self.offset)
                f.write(self.sent)

    def abort(self):
        pass


class Pool:
    def __init__(self, folder: Path):
        self.dir = folder

    def refresh(self, flags=0):
        pass

    def info(self):
        return [0, 0, 0, 50 << 30]

    def XMLDesc(self, flags=0):
        return f"<pool><name>slurmlab</name><target><path>{self.dir}</path></target></pool>"

    def listAllVolumes(self):
        return [Vol(p) for p in sorted(self.dir.iterdir())]

    def storageVolLookupByName(self, name):
        if not (self.dir / name).exists():
            raise libvirt.libvirtError("no volume")
        return Vol(self.dir / name)

    def createXML(self, xml, flags):
        name = xml.split("<name>")[1].split("<")[0]
        (self.dir / name).write_bytes(b"")
        return Vol(self.dir / name)


class Dom(virt.Dom):
    cluster = "far"

    def saveFlags(self, path, dxml, flags):
        self.lab.saved_to.append(path)
        Path(path).write_text(self._name)
        self.state = "off"


class Conn(virt.Conn):
    dom_class = Dom

    def restoreFlags(self, path, dxml, flags):
        self.lab.restored_from.append(path)
        self.lab.doms[Path(path).read_text()].state = "paused"

    def storagePoolLookupByName(self, name):
        return Pool(self.lab.pool)

    def storageVolLookupByPath(self, path):
        if not Path(path).exists():
            raise libvirt.libvirtError("no volume")
        return Vol(Path(path))

    def newStream(self, flags):
        return Stream()

    def getCapabilities(self):
        return CAPS

    def close(self):
        pass


class Far:
    name, local, pool = "room-b", False, "slurmlab"

    def __init__(self, lab):
        self.lab = lab

    def connect(self):
        if self.lab.silent:
            raise libvirt.libvirtError("host does not answer")
        return Conn(self.lab)


@pytest.fixture
def far(tmp_path, lab_home, monkeypatch):
    class Lab:
        pass

    lab = Lab()
    lab.doms, lab.saved_to, lab.restored_from, lab.silent, lab.log = {}, [], [], False, []
    lab.pool = tmp_path / "host-pool"
    lab.pool.mkdir()
    for n in ("far-controller-1", "far-compute-1"):
        (lab.pool / f"{n}.img").write_bytes(n.encode() + bytes(1 << 20))
        lab.doms[n] = Dom(lab, n, str(lab.pool / f"{n}.img"))
    (lab.pool / "slurmlab_tpl_c5-abc_disk.qcow2").write_bytes(b"template")
    here = tmp_path / "libvirt"
    monkeypatch.setattr(paths, "libvirt_dir", lambda: here)
    monkeypatch.setattr(checkpoint.placement, "host_of", lambda c: lab.host)
    monkeypatch.setattr(network, "add_host", lambda *a: None)
    from lab.providers import agent, kept

    lab.clocks = []
    monkeypatch.setattr(agent, "set_time", lambda dom: lab.clocks.append(dom.name()))

    monkeypatch.setattr(kept, "drop", lambda cluster, address: None)
    from lab.host import registry

    monkeypatch.setattr(registry, "get", lambda name: lab.host)
    lab.host = Far(lab)
    lab.here = here
    ClusterDir("far").root.mkdir(parents=True, exist_ok=True)
    return lab


RECORD = {"cluster": {}, "groups": [], "nodes": []}


def test_the_memory_stays_in_the_hosts_pool_and_the_disks_come_back_with_their_bytes(far):
    out = checkpoint.take("far", "step-1", RECORD)
    assert out["host"] == "room-b" and out["nodes"] == ["far-compute-1", "far-controller-1"]
    assert far.saved_to == [str(far.pool / f"far-ckpt.step-1.{n}.mem") for n in ("far-compute-1", "far-controller-1")]
    assert not list(far.here.rglob("*.mem")), "a memory file came to this machine"
    kept = checkpoint.folder("far", "step-1") / "disks"
    assert (kept / "far-compute-1.img").read_bytes().startswith(b"far-compute-1")
    assert all(state_disk.is_cluster_volume("far", p.name) for p in far.pool.glob("far-ckpt.*"))
    assert not state_disk.is_cluster_volume("fa", "far-ckpt.step-1.far-compute-1.mem")
    listed = checkpoint.summaries("far")
    assert [(c["tag"], c["host"]) for c in listed] == [("step-1", "room-b")] and listed[0]["size"] > 2 << 20

    (far.pool / "far-compute-1.img").write_bytes(b"written since")  # the node's disk changed
    far.doms["far-compute-1"].state = "running"
    back = checkpoint.restore("far", "step-1")
    assert back["record"] == RECORD
    assert far.restored_from[-2:] == far.saved_to
    assert (far.pool / "far-compute-1.img").read_bytes().startswith(b"far-compute-1")
    assert (far.pool / "slurmlab_tpl_c5-abc_disk.qcow2").read_bytes() == b"template"
    assert all(d.state == "running" for d in far.doms.values())

    checkpoint.delete("far", "step-1")
    assert not list(far.pool.glob("far-ckpt.*")) and checkpoint.summaries("far") == []


def test_a_restore_whose_memory_is_gone_changes_nothing(far):
    checkpoint.take("far", "one", RECORD)
    (far.pool / "far-ckpt.one.far-compute-1.mem").unlink()
    with pytest.raises(CheckpointError, match="lost the memory of far-compute-1 .*room-b"):
        checkpoint.restore("far", "one")
    assert all(d.state == "running" for d in far.doms.values())


def test_a_checkpoint_is_restored_on_the_host_it_was_taken_on(far, monkeypatch):
    checkpoint.take("far", "one", RECORD)

    class Local:
        name, local = "local", True

    monkeypatch.setattr(checkpoint.placement, "host_of", lambda c: Local())
    with pytest.raises(CheckpointError, match="taken on host room-b; the cluster runs on host local"):
        checkpoint.restore("far", "one")


def test_a_silent_host_keeps_the_memory_and_the_checkpoint_still_goes_here(far):
    checkpoint.take("far", "one", RECORD)
    far.silent = True
    assert checkpoint.delete_all("far") == ["checkpoint one"]
    assert not checkpoint.root("far").exists()
    assert len(list(far.pool.glob("far-ckpt.one.*.mem"))) == 2  # found later as the cluster's volumes


def test_a_failed_take_leaves_nothing_on_the_host(far, monkeypatch):
    def broken(self, path):
        raise OSError("link lost")

    monkeypatch.setattr(checkpoint.Pool, "keep_disk", broken)
    with pytest.raises(OSError):
        checkpoint.take("far", "bad", RECORD)
    assert not list(far.pool.glob("far-ckpt.*")) and not checkpoint.folder("far", "bad").exists()
    assert all(d.state == "running" for d in far.doms.values())
    meta = checkpoint.root("far")
    assert not meta.exists() or not any(meta.iterdir()), json.dumps(sorted(map(str, meta.rglob("*"))))
