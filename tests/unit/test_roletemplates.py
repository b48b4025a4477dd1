"""Role templates (lab/providers/roletemplates.py, docs/adr/0022) without a VM: what makes one stale,
where its files are, the build VMs' addresses, and the listing and pruning of what is on disk."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from lab import paths
from lab.providers import buildaddresses
from lab.providers import roletemplates as rt
from lab.providers import templates
from lab.providers.templates import Shape

REPO = Path(__file__).resolve().parents[2]
SHAPE = Shape(1, 768)


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """A copy of roles/ and playbooks/template.yml, templates under tmp, a plain template key that
    follows a file (the box)."""
    shutil.copytree(REPO / "roles", tmp_path / "roles")
    (tmp_path / "playbooks").mkdir()
    shutil.copy(REPO / "playbooks" / "template.yml", tmp_path / "playbooks")
    monkeypatch.setattr(paths, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(templates, "root", lambda: tmp_path / "templates")
    box = tmp_path / "box"
    box.write_text("1")
    monkeypatch.setattr(templates, "key", lambda b, s, d: f"{s}-plain{box.read_text()}")
    return tmp_path


def test_a_changed_role_makes_its_templates_stale_and_no_other(tree):
    before = {r: rt.key("box", SHAPE, "qemu", r) for r in rt.ROLES}
    (tree / "roles" / "state_disk" / "files" / "state-disk.sh").write_text("# changed\n")
    after = {r: rt.key("box", SHAPE, "qemu", r) for r in rt.ROLES}
    assert after["Controller"] != before["Controller"]
    assert after["Login"] == before["Login"] and after["Compute"] == before["Compute"]
    (tree / "roles" / "common" / "files" / "probe.sh").write_text("# changed\n")
    again = {r: rt.key("box", SHAPE, "qemu", r) for r in rt.ROLES}
    assert all(again[r] != after[r] for r in rt.ROLES)  # every role's template runs common
    (tree / "playbooks" / "template.yml").write_text("---\n")
    last = {r: rt.key("box", SHAPE, "qemu", r) for r in rt.ROLES}
    assert all(last[r] != again[r] for r in rt.ROLES)
    (tree / "roles" / "slurm_controller" / "defaults" / "main.yml").write_text("---\n")  # no template runs it
    assert {r: rt.key("box", SHAPE, "qemu", r) for r in rt.ROLES} == last


def test_a_new_plain_template_makes_new_role_templates(tree):
    k = rt.key("box", SHAPE, "qemu", "Compute")
    (tree / "box").write_text("2")
    assert rt.key("box", SHAPE, "qemu", "Compute") != k
    assert rt.key("box", SHAPE, "qemu", "Compute").startswith(f"{SHAPE}-plain2-compute-")


def _fake(tree, role: str, key: str | None = None) -> rt.RoleTemplate:
    k = key or rt.key("box", SHAPE, "qemu", role)
    t = rt.RoleTemplate(k, rt.root() / k, role)
    t.folder.mkdir(parents=True)
    for f in (t.disk, t.memory) + ((t.state,) if role == "Controller" else ()):
        f.write_bytes(b"x")
    (t.folder / "meta.json").write_text(json.dumps({
        "key": k, "role": role, "base": "b", "box": "box", "cpus": 1, "memory_mib": 768, "driver": "qemu",
        "created": 0, "timings": {"configure": 12.3}}))
    return t


def test_a_controller_template_is_complete_only_with_its_state_disk(tree):
    t = _fake(tree, "Controller")
    assert t.is_complete() and rt.find("box", SHAPE, "qemu", "Controller") == t
    t.state.unlink()
    assert not t.is_complete() and rt.find("box", SHAPE, "qemu", "Controller") is None
    assert rt.find("box", SHAPE, "qemu", "NotARole") is None


def test_listing_and_pruning_keep_the_current_ones(tree):
    current = _fake(tree, "Compute")
    stale = _fake(tree, "Login", key="1cpu-768mib-old-login-0000000000")
    rows = {r["key"]: r for r in rt.listing()}
    assert set(rows) == {current.key, stale.key} and rows[current.key]["role"] == "Compute"
    assert rt.prune_stale() == [stale.key]
    assert not stale.folder.exists() and current.folder.exists()


def test_a_failure_is_kept_and_forgotten(tree):
    rt.root().mkdir(parents=True)
    k = rt.key("box", SHAPE, "qemu", "Login")
    (rt.root() / f"{k}.failed").write_text("ssh did not answer\n")
    assert rt.failure("box", SHAPE, "qemu", "Login") == "ssh did not answer"
    assert rt.forget_failures() == [k] and rt.failure("box", SHAPE, "qemu", "Login") is None


def test_builds_at_once_get_their_own_addresses(tree):
    rt.root().mkdir(parents=True)
    a, la = buildaddresses.take(rt.root())
    b, lb = buildaddresses.take(rt.root())
    assert a != b and a.startswith("10.213.0.") and int(a.rsplit(".", 1)[1]) < 200
    la.release()
    c, lc = buildaddresses.take(rt.root())
    assert c == a
    lb.release()
    lc.release()


class _Dom:
    def __init__(self, conn, name):
        self.conn, self.name = conn, name

    def isActive(self):
        return True

    def destroy(self):
        self.conn.ended.append(self.name)

    def undefineFlags(self, flags):
        self.conn.domains.discard(self.name)


class _Conn:
    def __init__(self, *names):
        self.domains, self.ended = set(names), []

    def lookupByName(self, name):
        import libvirt

        if name not in self.domains:
            raise libvirt.libvirtError(f"no domain {name}")
        return _Dom(self, name)

    def close(self):
        pass


def test_the_vm_of_a_killed_build_is_ended_before_its_address_is_given_again(tree, monkeypatch):
    """Issue 45's fault run: an engine SIGKILLed mid-build left its build VM running; the next build got
    the same address and its ssh was reset. Whoever takes a free address ends the VM named for it."""
    rt.root().mkdir(parents=True)
    conn = _Conn("slurmlab-rtpl-dead", "slurmlab-rtpl-live")
    a, la = buildaddresses.take(rt.root(), conn, "slurmlab-rtpl-dead")
    b, lb = buildaddresses.take(rt.root(), conn, "slurmlab-rtpl-live")
    la.release()  # its engine was killed: the lock goes with the process, the VM and its name stay
    c, lc = buildaddresses.take(rt.root(), conn, "slurmlab-rtpl-new")
    assert c == a and conn.ended == ["slurmlab-rtpl-dead"]  # the live build's VM is left alone
    assert (rt.root() / f"address-{a.rsplit('.', 1)[1]}.domain").read_text() == "slurmlab-rtpl-new\n"
    buildaddresses.give_back(rt.root(), c, lc)
    assert not (rt.root() / f"address-{a.rsplit('.', 1)[1]}.domain").exists()
    # an engine that starts ends the left ones, never a running build's
    lb.release()
    conn.domains.add("slurmlab-rtpl-live")
    from lab.host import libvirtd

    monkeypatch.setattr(libvirtd, "connect", lambda: conn)
    _, lo = buildaddresses.take(rt.root(), None, "")  # a build holding an address: not looked at
    assert buildaddresses.end_left(rt.root()) == ["slurmlab-rtpl-live"] and conn.ended[-1] == "slurmlab-rtpl-live"
    lo.release()
    assert buildaddresses.end_left(rt.root()) == []


def test_an_explicit_build_forgets_the_failure_of_its_template(tree):
    rt.root().mkdir(parents=True)
    k = rt.key("box", SHAPE, "qemu", "Compute")
    (rt.root() / f"{k}.failed").write_text("address taken\n")
    rt.forget_failure("box", SHAPE, "qemu", "Compute")
    assert rt.failure("box", SHAPE, "qemu", "Compute") is None
