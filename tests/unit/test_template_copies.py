"""A tagged box's templates are copies of its source box's (lab/providers/template_copies.py), without a
VM: real qcow2 files made by qemu-img, the keys of two box names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lab import paths
from lab.providers import roletemplates as rt
from lab.providers import template_copies, templates
from lab.providers.templates import Shape

REPO = Path(__file__).resolve().parents[2]
SHAPE = Shape(1, 768)


def _qcow2(path: Path, backing: Path | None = None) -> None:
    cmd = ["qemu-img", "create", "-q", "-f", "qcow2"] + (["-F", "qcow2", "-b", str(backing)] if backing else [])
    subprocess.run(cmd + [str(path)] + ([] if backing else ["16M"]), check=True)


def _backing(path: Path) -> str:
    info = json.loads(subprocess.run(["qemu-img", "info", "--output", "json", str(path)], check=True,
                                     capture_output=True, text=True).stdout)
    return info.get("backing-filename", "")


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """Templates under tmp: the plain template of box `old` and its controller and compute role templates."""
    shutil.copytree(REPO / "roles", tmp_path / "roles")
    (tmp_path / "playbooks").mkdir()
    shutil.copy(REPO / "playbooks" / "template.yml", tmp_path / "playbooks")
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(templates, "root", lambda: tmp_path / "templates")
    monkeypatch.setattr(templates, "key", lambda box, s, d: f"{s}-{box}")
    monkeypatch.setattr(templates, "box_image", lambda box: tmp_path / f"{box}.img")
    k = templates.key("old", SHAPE, "qemu")
    plain = templates.root() / k
    plain.mkdir(parents=True)
    _qcow2(plain / "base.img")
    _qcow2(plain / "disk.qcow2", plain / "base.img")
    (plain / "mem.save").write_bytes(b"memory")
    (plain / "meta.json").write_text(json.dumps({"key": k, "box": "old", "cpus": 1, "memory_mib": 768, "driver": "qemu",
                                                 "created": 1.0}))
    for role in ("Controller", "Compute"):
        rk = rt.key("old", SHAPE, "qemu", role)
        d = rt.root() / rk
        d.mkdir(parents=True)
        _qcow2(d / "disk.qcow2", plain / "disk.qcow2")
        os.chmod(d / "disk.qcow2", 0o444)
        (d / "mem.save").write_bytes(role.encode())
        if role == "Controller":
            _qcow2(d / "state.qcow2")
        (d / "meta.json").write_text(json.dumps({"key": rk, "role": role, "base": k, "box": "old", "cpus": 1,
                                                 "memory_mib": 768, "driver": "qemu", "created": 1.0}))
    return tmp_path


def test_the_tagged_box_gets_every_template_of_its_source_with_its_own_chain(lab):
    made = template_copies.share("old", "new", "qemu")
    plain = templates.find("new", SHAPE, "qemu")
    ctl, comp = (rt.find("new", SHAPE, "qemu", r) for r in ("Controller", "Compute"))
    assert plain is not None and ctl is not None and comp is not None
    assert sorted(made) == sorted([plain.key, ctl.key, comp.key])
    assert rt.find("new", SHAPE, "qemu", "Login") is None  # the source had none
    # each overlay's chain stays inside the new box's templates: the old box's may be pruned
    assert _backing(plain.disk) == str(plain.folder / "base.img")
    assert _backing(ctl.disk) == _backing(comp.disk) == str(plain.disk)
    # frozen files are the same inodes (no copy of the memory images); the overlays are copies, 0444
    assert os.path.samefile(ctl.memory, rt.root() / rt.key("old", SHAPE, "qemu", "Controller") / "mem.save")
    assert os.path.samefile(ctl.state, rt.root() / rt.key("old", SHAPE, "qemu", "Controller") / "state.qcow2")
    assert oct(ctl.disk.stat().st_mode & 0o777) == "0o444"
    assert (plain.meta["box"], plain.meta["box_image"], plain.meta["copied_from"]) == ("new", str(lab / "new.img"),
                                                                                      "1cpu-768mib-old")
    assert (ctl.meta["box"], ctl.meta["base"], ctl.meta["key"]) == ("new", plain.key, ctl.key)
    # what the listing and pruning see: the new box's own, current
    assert {r["key"] for r in rt.listing() if r["box"] == "new"} == {ctl.key, comp.key}
    assert rt.prune_stale() == []
    assert template_copies.share("old", "new", "qemu") == []  # kept


def test_a_stale_source_template_is_not_copied(lab, monkeypatch):
    monkeypatch.setattr(templates, "key", lambda box, s, d: f"{s}-{box}-rebuilt")  # the old box was rebuilt since
    assert template_copies.share("old", "new", "qemu") == []
    assert templates.find("new", SHAPE, "qemu") is None
