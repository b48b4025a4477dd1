"""Releases per host (issue 47): the release registry records which host's pool holds a release's image
(lab/providers/hosttemplates.py), forgets it when the volumes go, and a remote node's release is read
from its disk's backing chain there (lab/providers/imagerelease.py). Against the folder-backed pool of
tests/unit/test_hosttemplates.py, a temporary cache and Vagrant home."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
from pathlib import Path

import pytest

from lab.box import releases as rel
from lab.providers import hosttemplates, imagerelease, templates
from lab.providers.base import Placement
from tests.unit.test_hosttemplates import Conn, FakeError, Vol, backing, template
from tests.unit.test_releases import _vagrant_box

BOX = "slurmlab/trixie-slurm"
M1 = {"inputs_hash": "h1", "debian_suite": "trixie", "slurm_version": "24.11.5", "built_at": "2026-12-01T00:00:00Z"}


class Far:
    local, name, pool = False, "far", "slurmlab"

    def __init__(self, conn=None) -> None:
        self.conn = conn

    def connect(self):
        return self.conn


class Dom:
    def __init__(self, xml: str) -> None:
        self.xml = xml

    def XMLDesc(self, flags):
        return self.xml


class HostConn(Conn):
    """The host's libvirt: its pool, its domains, and how many volumes were looked up by path."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        self.domains: dict[str, str] = {}
        self.by_path = 0

    def lookupByName(self, name):
        if name not in self.domains:
            raise FakeError(f"no domain {name}")
        return Dom(self.domains[name])

    def storageVolLookupByPath(self, path):
        self.by_path += 1
        return super().storageVolLookupByPath(path)

    def close(self):
        pass


def _vol_xml(self, flags):  # what libvirt says of a volume: its backing file, if it has one
    info = json.loads(subprocess.run(["qemu-img", "info", "-U", "--output", "json", self.path()],
                                     capture_output=True, text=True, check=True).stdout)
    below = f"<backingStore><path>{info['backing-filename']}</path></backingStore>" if "backing-filename" in info else ""
    return f"<volume><name>{self._name}</name>{below}</volume>"


@pytest.fixture
def host(monkeypatch, tmp_path):
    import libvirt

    monkeypatch.setattr(libvirt, "libvirtError", FakeError)
    monkeypatch.setattr(templates, "root", lambda: tmp_path / "templates")
    monkeypatch.setattr(Vol, "XMLDesc", _vol_xml, raising=False)
    monkeypatch.setenv("VAGRANT_HOME", str(tmp_path / "vagrant"))
    monkeypatch.setenv("SLURMLAB_CACHE", str(tmp_path / "cache"))
    _vagrant_box(tmp_path / "vagrant", BOX, M1)
    return HostConn(tmp_path / "host-pool")


def _template(tmp_path, key: str, **meta) -> templates.Template:
    t = template(tmp_path, key)
    (t.folder / "meta.json").write_text(json.dumps({"key": key, "box": BOX, **meta}))
    return t


def _volumes(t: templates.Template) -> list[str]:
    return [f"slurmlab_tpl_{t.key}_{f}" for f in ("base.img", "disk.qcow2", "mem.save")]


def _release(box: str = BOX) -> rel.Release:
    return next(r for r in rel.catalog() if r.box == box and r.inputs_hash == "h1")


def _domain_xml(disk: str, below: list[str] = ()) -> str:
    """A domain whose first disk is `disk`; `below`: the backing chain a running domain's XML carries."""
    chain = "".join(f"<backingStore type='file'><format type='qcow2'/><source file='{p}'/>" for p in below)
    chain += "<backingStore/>" + "</backingStore>" * len(below) if below else ""
    return (f"<domain><name>x</name><devices><disk type='file' device='cdrom'><source file='/iso'/>"
            f"<target dev='sda'/></disk><disk type='file' device='disk'><source file='{disk}'/>{chain}"
            f"<target dev='vda'/></disk></devices></domain>")


# ---------------------------------------------------------------- recorded by the upload, dropped with the volumes
def test_a_template_on_a_host_is_recorded_under_its_boxs_release(host, tmp_path):
    t = _template(tmp_path, "1cpu-768mib-abc", box_inputs_hash="h1")
    assert _release().hosts == ("local",)  # its box is added here
    hosttemplates.ensure(Far(), host, t)
    r = _release()
    assert r.hosts == ("local", "far") and r.to_json()["hosts"] == ("local", "far")
    assert rel.on_host("far") == {v: r.version for v in _volumes(t)}
    doc = json.loads(rel.registry_path().read_text())
    assert doc[f"{BOX}|h1"]["hosts"] == {"far": _volumes(t)}
    before = rel.registry_path().stat().st_mtime_ns
    hosttemplates.ensure(Far(), host, t)  # kept on the host: nothing written again
    assert rel.registry_path().stat().st_mtime_ns == before


def test_a_template_built_before_its_meta_named_the_boxs_inputs_is_its_current_boxs(host, tmp_path):
    t = _template(tmp_path, "1cpu-768mib-old")  # no box_inputs_hash: ensure is asked for current templates only
    hosttemplates.ensure(Far(), host, t)
    assert set(rel.on_host("far")) == set(_volumes(t)) and _release().hosts == ("local", "far")


def test_an_old_registry_without_hosts_still_reads():
    r = rel.Release(**{"version": "2026.12.1", "line": "trixie-slurm", "box": BOX, "inputs_hash": "h1"})
    assert r.hosts == () and r.to_json()["hosts"] == ()


def test_pruned_template_volumes_and_a_removed_host_are_forgotten(host, tmp_path):
    import shutil

    old, new = _template(tmp_path, "1cpu-768mib-old", box_inputs_hash="h1"), _template(tmp_path, "1cpu-768mib-new",
                                                                                      box_inputs_hash="h1")
    hosttemplates.ensure(Far(), host, old)
    shutil.rmtree(old.folder)  # a rebuilt box: its old template is gone here
    hosttemplates.ensure(Far(), host, new)  # ... and its volumes from the host at the next upload
    assert set(rel.on_host("far")) == set(_volumes(new))
    assert hosttemplates.remove_all(Far(host)) == [f"volume {v} on host far" for v in _volumes(new)]
    assert rel.on_host("far") == {} and _release().hosts == ("local",)
    assert "hosts" not in json.loads(rel.registry_path().read_text())[f"{BOX}|h1"]


def test_a_host_that_cannot_be_reached_is_forgotten_when_removed(host, tmp_path):
    hosttemplates.ensure(Far(), host, _template(tmp_path, "1cpu-768mib-abc", box_inputs_hash="h1"))

    class Gone(Far):
        def connect(self):
            raise FakeError("cannot reach far")
    assert "stay on host far" in hosttemplates.remove_all(Gone())[0]
    assert rel.on_host("far") == {}


# ---------------------------------------------------------------- a node's release, read from its host
def test_a_forks_chain_leads_to_its_template_and_so_its_release(host, tmp_path):
    t = _template(tmp_path, "1cpu-768mib-abc", box_inputs_hash="h1")
    on = hosttemplates.ensure(Far(), host, t)
    overlay = hosttemplates.PoolStore(host, "slurmlab", on, t).overlay("demo-compute-1")
    host.domains["demo-compute-1"] = _domain_xml(overlay)  # shut off: no chain in the domain's XML
    version = _release().version
    host.by_path = 0
    assert list(imagerelease.chain(host, "demo-compute-1")) == [
        "demo-compute-1.img", f"slurmlab_tpl_{t.key}_disk.qcow2", f"slurmlab_tpl_{t.key}_base.img"]
    assert imagerelease.on_host(host, "far", "demo-compute-1", rel.catalog()) == version
    host.domains["demo-compute-1"] = _domain_xml(overlay, [on.disk, backing(on.disk)])  # running: its XML has it
    host.by_path = 0
    assert imagerelease.on_host(host, "far", "demo-compute-1", rel.catalog()) == version
    assert host.by_path == 0  # read from the domain's XML alone


def test_a_cold_boots_box_volume_is_its_boxs_release_and_stays_it_after_a_rebuild(host, tmp_path):
    img = tmp_path / "vagrant" / "boxes" / "slurmlab-VAGRANTSLASH-trixie-slurm" / "0" / "libvirt" / "box.img"
    os.utime(img, (1764547200, 1764547200))
    name = "slurmlab-VAGRANTSLASH-trixie-slurm_vagrant_box_image_0_1764547200_box.img"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(host.pool.folder / name), "64M"], check=True)
    disk = host.pool.folder / "demo-compute-1.img"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", str(host.pool.folder / name),
                    str(disk)], check=True)
    host.domains["demo-compute-1"] = _domain_xml(str(disk))
    first = _release().version
    assert imagerelease.on_host(host, "far", "demo-compute-1", rel.catalog()) == first
    assert rel.on_host("far") == {name: first}  # recorded: its box's image changes with the next build
    (img.parent / "slurmlab.json").write_text(json.dumps({**M1, "inputs_hash": "h2"}))  # the box rebuilt
    os.utime(img, (1764633600, 1764633600))
    now = rel.catalog()
    assert rel.of_box(now, BOX).version != first
    assert imagerelease.on_host(host, "far", "demo-compute-1", now) == first
    other = name.replace("1764547200", "1764000000")  # an image of the box this lab never saw on that host
    (host.pool.folder / other).write_bytes(b"")
    assert imagerelease.box_volume(other, now) is None


class Placed(Placement):
    """A provider with hosts whose cluster is on `host`."""

    def __init__(self, host: str | None) -> None:
        self.host = host

    def host_of(self, cluster: str) -> str | None:
        return self.host

    def place(self, cluster, memory_mib, cpus):
        return self.host

    def rehome(self, cluster, memory_mib, cpus):
        return None


def test_a_remote_node_that_nothing_tells_keeps_the_guess_with_a_warning(host, tmp_path, monkeypatch, caplog):
    from lab.host import registry

    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", str(host.pool.folder / "demo-compute-1.img"), "8M"],
                   check=True)
    host.domains["demo-compute-1"] = _domain_xml(str(host.pool.folder / "demo-compute-1.img"))
    monkeypatch.setattr(registry, "get", lambda name: Far(host))
    guess = _release().version
    run = asyncio.run
    with caplog.at_level(logging.WARNING, logger="lab.providers.imagerelease"):
        assert run(imagerelease.of_node(Placed("far"), "demo", "demo-compute-1", rel.catalog(), BOX)) == guess
        assert "demo-compute-1: its image release on host far is not known" in caplog.text
        caplog.clear()
        assert run(imagerelease.of_node(Placed("far"), "demo", "demo-compute-9", rel.catalog(), BOX)) == guess
        assert "no domain demo-compute-9" in caplog.text  # the host cannot say: the guess, never a failure
        caplog.clear()
        assert run(imagerelease.of_node(Placed("local"), "demo", "demo-compute-1", rel.catalog(), BOX)) == guess
        assert run(imagerelease.of_node(object(), "demo", "demo-compute-1", rel.catalog(), BOX)) == guess
        assert caplog.text == ""  # this machine's nodes: their box's release, asked of no host


def test_a_remote_fork_is_recorded_as_its_templates_release(host, tmp_path, monkeypatch):
    from lab.host import registry

    t = _template(tmp_path, "1cpu-768mib-abc", box_inputs_hash="h1")
    on = hosttemplates.ensure(Far(), host, t)
    host.domains["demo-compute-1"] = _domain_xml(hosttemplates.PoolStore(host, "slurmlab", on, t).overlay("demo-compute-1"))
    first = _release().version
    rel.register("slurmlab/trixie-slurm-next", {**M1, "inputs_hash": "h9"})  # a newer release of the line
    _vagrant_box(tmp_path / "vagrant", "slurmlab/trixie-slurm-next", {**M1, "inputs_hash": "h9"})
    monkeypatch.setattr(registry, "get", lambda name: Far(host))
    got = asyncio.run(imagerelease.of_node(Placed("far"), "demo", "demo-compute-1", rel.catalog(),
                                           "slurmlab/trixie-slurm-next"))
    assert got == first  # what its disk was made from, not the box the guess would name


# ---------------------------------------------------------------- box list
def test_box_list_names_the_hosts_of_each_release(host, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import lab.box as boxmod
    from lab.cli import app

    t = _template(tmp_path, "1cpu-768mib-abc", box_inputs_hash="h1")
    hosttemplates.ensure(Far(), host, t)
    gone = rel.register("slurmlab/trixie-slurm-old", {**M1, "inputs_hash": "h0"})  # left Vagrant here,
    rel.record_on_host("room-b", gone.box, "h0", ["slurmlab-VAGRANTSLASH-trixie-slurm-old_vagrant_box_image_0_1_box.img"])
    rel.register("slurmlab/forky-slurm", {**M1, "inputs_hash": "hf", "debian_suite": "forky"})  # gone, on no host
    added = boxmod.BoxInfo(name=BOX, inputs_hash="h1", path=None, size_bytes=None, added=True, built_at=M1["built_at"],
                           slurmlab=True, slurm_version="24.11.5")
    monkeypatch.setattr(boxmod, "list_boxes", lambda: [added])
    res = CliRunner().invoke(app, ["box", "list", "--output", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [(b["name"], b["added"], b["hosts"]) for b in rows] == [(BOX, True, ["local", "far"]),
                                                                  ("slurmlab/trixie-slurm-old", False, ["room-b"])]
    assert rows[0]["release"]["hosts"] == ["local", "far"] and rows[1]["release"]["version"] == gone.version
    text = CliRunner().invoke(app, ["box", "list"]).stdout
    assert "on: local, far" in text and "on: room-b  (not in Vagrant here)" in text
