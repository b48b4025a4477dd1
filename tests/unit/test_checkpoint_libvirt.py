"""lab/providers/checkpoint.py against a fake libvirt: the order that makes a checkpoint one moment
(every domain paused before the first save; all resumed together after), a failed save that leaves the
cluster running as before, and a restore that removes a domain added since and brings back one
removed since, with its disks and its network address. What it cannot prove: that qemu saves and
restores a real guest (the e2e suite restores the CI cluster and runs srun across it)."""

from __future__ import annotations

import json

import libvirt
import pytest

from lab import paths
from lab.providers import checkpoint, network
from lab.providers.base import CheckpointError
from lab.workspace import ClusterDir


class Dom:
    cluster = "demo"

    def __init__(self, lab, name, disk):
        self.lab, self._name, self.disk = lab, name, disk
        self.state = "running"

    def name(self):
        return self._name

    def XMLDesc(self, flags=0):
        return (f"<domain><name>{self._name}</name><description>slurmlab cluster={self.cluster}</description><devices>"
                f"<disk device='disk'><source file='{self.disk}'/></disk></devices></domain>")

    def isActive(self):
        return self.state != "off"

    def info(self):
        return [libvirt.VIR_DOMAIN_PAUSED if self.state == "paused" else libvirt.VIR_DOMAIN_RUNNING, 0, 1024, 1, 0]

    def suspend(self):
        self.lab.log.append(f"suspend {self._name}")
        self.state = "paused"

    def resume(self):
        self.lab.log.append(f"resume {self._name}")
        self.state = "running"

    def saveFlags(self, path, dxml, flags):
        self.lab.log.append(f"save {self._name} ({self.state})")
        if self._name in self.lab.fail_save:
            raise libvirt.libvirtError("no space left on device")
        with open(path, "w") as f:
            f.write(self._name)
        self.state = "off"

    def destroyFlags(self, flags=0):
        self.state = "off"

    def undefineFlags(self, flags=0):
        self.lab.doms.pop(self._name)


class Conn:
    dom_class = Dom

    def __init__(self, lab):
        self.lab = lab

    def listAllDomains(self):
        return list(self.lab.doms.values())

    def lookupByName(self, name):
        return self.lab.doms[name]

    def restoreFlags(self, path, dxml, flags):
        name = open(path).read()
        self.lab.log.append(f"restore {name}")
        self.lab.doms[name].state = "paused"

    def defineXML(self, xml):
        name = xml.split("<name>")[1].split("<")[0]
        disk = xml.split("file='")[1].split("'")[0]
        self.lab.doms.setdefault(name, self.dom_class(self.lab, name, disk)).state = "off"

    def close(self):
        pass


class Here:
    name, local = "local", True

    def __init__(self, lab):
        self.lab = lab

    def connect(self):
        return Conn(self.lab)


@pytest.fixture
def fake(tmp_path, lab_home, monkeypatch):
    class Lab:
        log: list = []
        fail_save: set = set()
        doms: dict = {}
        hosts: list = []

    lab = Lab()
    lab.log, lab.fail_save, lab.doms, lab.hosts = [], set(), {}, []
    pool = tmp_path / "pool"
    pool.mkdir()
    for n in ("demo-controller-1", "demo-compute-1", "demo-compute-2"):
        (pool / f"{n}.img").write_bytes(n.encode() + bytes(3 << 20))
        lab.doms[n] = Dom(lab, n, str(pool / f"{n}.img"))
    monkeypatch.setattr(paths, "libvirt_dir", lambda: tmp_path / "libvirt")
    monkeypatch.setattr(checkpoint.placement, "host_of", lambda c: Here(lab))
    monkeypatch.setattr(network, "add_host", lambda c, mac, name, addr: lab.hosts.append(name))
    from lab.providers import agent, kept

    lab.clocks = []
    monkeypatch.setattr(agent, "set_time", lambda dom: lab.clocks.append(dom.name()))

    lab.dropped = []
    monkeypatch.setattr(kept, "drop", lambda cluster, address: lab.dropped.append((cluster, address)))
    (ClusterDir("demo").root / ".vagrant" / "machines" / "demo-compute-2").mkdir(parents=True)
    lab.pool = pool
    return lab


RECORD = {"cluster": {}, "groups": [], "nodes": [{"name": "demo-compute-2", "mac": "m", "address": "10.0.0.3"}]}


def test_every_domain_pauses_before_the_first_save_and_all_resume_together(fake):
    out = checkpoint.take("demo", "one", RECORD)
    assert out["tag"] == "one" and out["nodes"] == sorted(fake.doms) and out["size"] > 0
    first_save = next(i for i, x in enumerate(fake.log) if x.startswith("save"))
    assert {x for x in fake.log[:first_save]} == {f"suspend {n}" for n in fake.doms}
    assert all("(paused)" in x for x in fake.log if x.startswith("save"))
    last_restore = max(i for i, x in enumerate(fake.log) if x.startswith("restore"))
    assert {x for x in fake.log[last_restore + 1:]} == {f"resume {n}" for n in fake.doms}
    assert all(d.state == "running" for d in fake.doms.values())
    meta = json.loads((checkpoint.folder("demo", "one") / "meta.json").read_text())
    assert meta["record"] == RECORD and set(meta["domains"]) == set(fake.doms)
    assert [c["tag"] for c in checkpoint.summaries("demo")] == ["one"]
    with pytest.raises(CheckpointError, match="already has a checkpoint 'one'"):
        checkpoint.take("demo", "one", RECORD)


def test_a_failed_save_leaves_every_domain_running_and_no_checkpoint(fake):
    fake.fail_save = {"demo-compute-2"}
    with pytest.raises(libvirt.libvirtError):
        checkpoint.take("demo", "bad", RECORD)
    assert all(d.state == "running" for d in fake.doms.values()), {n: d.state for n, d in fake.doms.items()}
    assert not checkpoint.folder("demo", "bad").exists() and checkpoint.summaries("demo") == []


def test_restore_removes_the_added_brings_back_the_removed_with_disks_and_address(fake):
    checkpoint.take("demo", "one", RECORD)
    # since then: compute-2 removed (domain, disk, vagrant dir), compute-3 added, compute-1's disk written
    fake.doms.pop("demo-compute-2")
    (fake.pool / "demo-compute-2.img").unlink()
    machines = ClusterDir("demo").root / ".vagrant" / "machines"
    (machines / "demo-compute-2").rmdir()
    (fake.pool / "demo-compute-3.img").write_bytes(b"new")
    fake.doms["demo-compute-3"] = Dom(fake, "demo-compute-3", str(fake.pool / "demo-compute-3.img"))
    (fake.pool / "demo-compute-1.img").write_bytes(b"changed")
    out = checkpoint.restore("demo", "one")
    assert out["record"] == RECORD and set(out["timings"]) == {"down", "disks", "restore", "total"}
    assert sorted(fake.doms) == ["demo-compute-1", "demo-compute-2", "demo-controller-1"]
    assert all(d.state == "running" for d in fake.doms.values())
    assert not (fake.pool / "demo-compute-3.img").exists()
    assert (fake.pool / "demo-compute-1.img").read_bytes().startswith(b"demo-compute-1")
    assert (fake.pool / "demo-compute-2.img").read_bytes().startswith(b"demo-compute-2")
    assert (machines / "demo-compute-2").is_dir() and fake.hosts == ["demo-compute-2"]
    assert out["clocks_missed"] == [] and sorted(fake.clocks) == sorted(fake.doms)  # by the guest agents
    assert fake.dropped == [("demo", "10.0.0.3")]  # its kept ssh connection ended: its TCP state died
    with pytest.raises(CheckpointError, match="has no checkpoint 'two' \\(its checkpoints: one\\)"):
        checkpoint.restore("demo", "two")
    assert checkpoint.delete_all("demo") == ["checkpoint one"] and checkpoint.summaries("demo") == []


def test_a_checkpoint_that_would_fill_the_disk_is_refused_with_the_amount(fake, monkeypatch):
    import shutil
    from collections import namedtuple

    monkeypatch.setattr(shutil, "disk_usage", lambda p: namedtuple("U", "total used free")(0, 0, 512 << 20))
    with pytest.raises(CheckpointError, match=r"needs .* GiB .* free; 0.5 GiB is free"):
        checkpoint.take("demo", "big", RECORD)
    assert checkpoint.summaries("demo") == [] and all(d.state == "running" for d in fake.doms.values())
