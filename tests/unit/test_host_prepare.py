"""`slurmlab host prepare NAME` (issue 47, lab/providers/hostprepare.py): which of this machine's templates
go up to a host's pool, in which order, what is reported, and the command's refusals. Fakes only: template
folders under a temporary templates root, the upload (hosttemplates.ensure), the host's volumes
(hosttemplates.listing), its domain type (lab.host.caps.domain_type) and its connection stand in; no
libvirtd, no VM. The real upload: tests/unit/test_hosttemplates.py and the e2e second-host test."""

from __future__ import annotations

import json
import types
from pathlib import Path

import libvirt
import pytest
from typer.testing import CliRunner

from lab import box
from lab.cli import app
from lab.errors import UsageError
from lab.host import caps, registry
from lab.providers import hostprepare, hosttemplates, templates
from lab.providers import roletemplates as rtpl
from lab.providers.templates import Shape, TemplateError

BOX = "slurmlab/trixie-slurm"
OTHER_BOX = "slurmlab/forky-slurm"


# ------------------------------------------------------------------------------------ fakes
class Conn:
    def __init__(self) -> None:
        self.closed = 0

    def close(self) -> None:
        self.closed += 1


class FarHost:
    """A host that is not this machine: what prepare and the command read of it."""
    local, remote = False, True

    def __init__(self, name: str = "h2", pool: str = "slurmlab-h2", fail: Exception | None = None) -> None:
        self.name, self.pool, self.fail = name, pool, fail
        self.conns: list[Conn] = []

    def connect(self) -> Conn:
        if self.fail is not None:
            raise self.fail
        self.conns.append(Conn())
        return self.conns[-1]


class NoAnswer(libvirt.libvirtError):
    """libvirt's error as libvirt.open raises it (its message set by libvirt, not by Python)."""

    def __init__(self, msg: str) -> None:
        Exception.__init__(self, msg)
        self.msg = msg

    def get_error_message(self) -> str:
        return self.msg


def _plain(root: Path, key: str, box_name: str, cpus: int, mib: int, driver: str, complete: bool = True) -> None:
    d = root / key
    d.mkdir(parents=True)
    for f in ("base.img", "disk.qcow2") + (("mem.save",) if complete else ()):
        (d / f).write_bytes(b"x")
    (d / "meta.json").write_text(json.dumps({"key": key, "box": box_name, "cpus": cpus, "memory_mib": mib,
                                             "driver": driver, "created": 1.0}))


def _role(root: Path, key: str, role: str, box_name: str, cpus: int, mib: int, driver: str, state: bool = True) -> None:
    d = root / "roles" / key
    d.mkdir(parents=True)
    for f in ("disk.qcow2", "mem.save") + (("state.qcow2",) if state else ()):
        (d / f).write_bytes(b"x")
    (d / "meta.json").write_text(json.dumps({"key": key, "role": role, "base": "b", "box": box_name, "cpus": cpus,
                                             "memory_mib": mib, "driver": driver, "created": 1.0}))


@pytest.fixture
def tpl_root(tmp_path, monkeypatch) -> Path:
    """This machine's templates: of the box under both domain types and three shapes, of another box, and
    incomplete ones. The role templates' keys sort before the plain ones' (the order is not by name)."""
    root = tmp_path / "templates"
    monkeypatch.setattr(templates, "root", lambda: root)
    _plain(root, "2cpu-2048mib-aaa", BOX, 2, 2048, "qemu")
    _plain(root, "1cpu-768mib-bbb", BOX, 1, 768, "qemu")
    _plain(root, "1cpu-1024mib-ccc", BOX, 1, 1024, "qemu")
    _plain(root, "1cpu-768mib-kvm", BOX, 1, 768, "kvm")
    _plain(root, "1cpu-768mib-other", OTHER_BOX, 1, 768, "qemu")
    _plain(root, "1cpu-768mib-half", BOX, 1, 768, "qemu", complete=False)  # no mem.save: a build cut off
    _role(root, "0-compute-768", "Compute", BOX, 1, 768, "qemu")
    _role(root, "0-controller-2048", "Controller", BOX, 2, 2048, "qemu")
    _role(root, "0-controller-768-nostate", "Controller", BOX, 1, 768, "qemu", state=False)  # incomplete
    _role(root, "0-login-kvm", "Login", BOX, 1, 768, "kvm")
    _role(root, "0-login-other", "Login", OTHER_BOX, 1, 768, "qemu")
    return root


@pytest.fixture
def fake_host_side(monkeypatch):
    """The upload, the host's volumes and its domain type, recorded. `calls.fail` = a key whose upload fails."""
    calls = types.SimpleNamespace(ensure=[], listing=[], domain_type=[], fail=None, driver="qemu",
                                  volumes=[{"volume": "slurmlab_tpl_k_base.img", "template": "k", "bytes": 3 << 20},
                                           {"volume": "slurmlab_tpl_k_mem.save", "template": "k", "bytes": 5 << 20},
                                           {"volume": "slurmlab_tpl_old_disk.qcow2", "template": "old", "bytes": 7}])

    def ensure(host, conn, t):
        calls.ensure.append((host, conn, t))
        if t.key == calls.fail:
            raise TemplateError(f"template {t.key} on host {host.name}: no space left")
        return hosttemplates.OnHost("/pool/disk", "/pool/mem")

    def listing(conn, pool_name):
        calls.listing.append((conn, pool_name))
        return calls.volumes

    def domain_type(host, conn):
        calls.domain_type.append((host, conn))
        return calls.driver

    monkeypatch.setattr(hosttemplates, "ensure", ensure)
    monkeypatch.setattr(hosttemplates, "listing", listing)
    monkeypatch.setattr(caps, "domain_type", domain_type)
    return calls


def _keys(ts) -> list[str]:
    return [t.key for t in ts]


# ------------------------------------------------------------------------------------ candidates
def test_candidates_are_the_box_and_domain_types_complete_templates_plain_first(tpl_root):
    got = hostprepare.candidates("qemu", BOX)
    assert _keys(got) == ["1cpu-1024mib-ccc", "1cpu-768mib-bbb", "2cpu-2048mib-aaa",  # plain, by key
                          "0-compute-768", "0-controller-2048"]  # then role templates
    plain, roles = got[:3], got[3:]
    assert all(type(t) is templates.Template for t in plain)
    assert all(isinstance(t, rtpl.RoleTemplate) for t in roles)
    assert [t.role for t in roles] == ["Compute", "Controller"]
    # each one's folder is this machine's: what ensure uploads from
    assert [t.folder for t in plain] == [tpl_root / k for k in _keys(plain)]
    assert [t.folder for t in roles] == [tpl_root / "roles" / k for k in _keys(roles)]
    assert all(t.is_complete() for t in got)


def test_candidates_of_the_other_domain_type_and_box(tpl_root):
    assert _keys(hostprepare.candidates("kvm", BOX)) == ["1cpu-768mib-kvm", "0-login-kvm"]
    assert _keys(hostprepare.candidates("qemu", OTHER_BOX)) == ["1cpu-768mib-other", "0-login-other"]
    assert hostprepare.candidates("kvm", OTHER_BOX) == []
    assert hostprepare.candidates("qemu", "slurmlab/nope") == []


@pytest.mark.parametrize("shapes,expected", [
    (["1cpu-768mib"], ["1cpu-768mib-bbb", "0-compute-768"]),
    ({str(Shape(2, 2048))}, ["2cpu-2048mib-aaa", "0-controller-2048"]),
    (("1cpu-1024mib", "2cpu-2048mib"), ["1cpu-1024mib-ccc", "2cpu-2048mib-aaa", "0-controller-2048"]),
    (["4cpu-4096mib"], []),
    (["1cpu-768"], []),  # not a shape's name: nothing, not everything
    ((), ["1cpu-1024mib-ccc", "1cpu-768mib-bbb", "2cpu-2048mib-aaa", "0-compute-768", "0-controller-2048"]),
])
def test_candidates_of_the_shapes_asked_for(tpl_root, shapes, expected):
    assert _keys(hostprepare.candidates("qemu", BOX, shapes)) == expected


def test_no_templates_folder_no_candidates(tmp_path, monkeypatch):
    monkeypatch.setattr(templates, "root", lambda: tmp_path / "none")
    assert hostprepare.candidates("qemu", BOX) == []


# ------------------------------------------------------------------------------------ prepare
def test_prepare_uploads_each_candidate_in_order_and_reports(tpl_root, fake_host_side, monkeypatch):
    clock = iter([100.0, 101.0, 103.5, 104.0, 104.25, 110.0, 110.0, 110.0, 120.0, 120.0])
    monkeypatch.setattr(hostprepare, "time", types.SimpleNamespace(monotonic=lambda: next(clock)))
    host, said = FarHost(), []

    done = hostprepare.prepare(host, BOX, ["1cpu-768mib", "2cpu-2048mib"], progress=said.append)

    [conn] = host.conns
    assert fake_host_side.domain_type == [(host, conn)]
    assert [(h, c) for h, c, _ in fake_host_side.ensure] == [(host, conn)] * 4
    assert _keys(t for _, _, t in fake_host_side.ensure) == ["1cpu-768mib-bbb", "2cpu-2048mib-aaa",
                                                              "0-compute-768", "0-controller-2048"]
    assert isinstance(fake_host_side.ensure[3][2], rtpl.RoleTemplate)
    assert said == ["1cpu-768mib-bbb", "2cpu-2048mib-aaa", "0-compute-768 (Compute)", "0-controller-2048 (Controller)"]
    assert fake_host_side.listing == [(conn, "slurmlab-h2")]  # the host's own pool, after the uploads
    assert conn.closed == 1
    assert done == {
        "host": "h2", "driver": "qemu",
        "templates": [{"template": "1cpu-768mib-bbb", "role": None, "seconds": 2.5},
                      {"template": "2cpu-2048mib-aaa", "role": None, "seconds": 0.2},
                      {"template": "0-compute-768", "role": "Compute", "seconds": 0.0},
                      {"template": "0-controller-2048", "role": "Controller", "seconds": 10.0}],
        "seconds": 20.0,
        "bytes": (3 << 20) + (5 << 20) + 7,  # every template volume in the pool, kept ones too
    }
    json.dumps(done)  # what --output json prints


def test_prepare_uses_the_hosts_domain_type(tpl_root, fake_host_side):
    fake_host_side.driver = "kvm"
    done = hostprepare.prepare(FarHost(), BOX)
    assert done["driver"] == "kvm"
    assert [r["template"] for r in done["templates"]] == ["1cpu-768mib-kvm", "0-login-kvm"]


def test_prepare_with_nothing_to_upload_still_reports_the_pool(tpl_root, fake_host_side):
    host = FarHost()
    done = hostprepare.prepare(host, BOX, ["8cpu-8192mib"])
    assert fake_host_side.ensure == [] and done["templates"] == []
    assert done["bytes"] == (3 << 20) + (5 << 20) + 7 and host.conns[0].closed == 1


def test_a_failed_upload_closes_the_connection_and_raises(tpl_root, fake_host_side):
    fake_host_side.fail = "2cpu-2048mib-aaa"
    host = FarHost()
    with pytest.raises(TemplateError, match="2cpu-2048mib-aaa on host h2"):
        hostprepare.prepare(host, BOX)
    # the ones before it went up, none after it was tried, and the pool was not read
    assert _keys(t for _, _, t in fake_host_side.ensure) == ["1cpu-1024mib-ccc", "1cpu-768mib-bbb", "2cpu-2048mib-aaa"]
    assert fake_host_side.listing == []
    assert host.conns[0].closed == 1


def test_a_host_that_fails_midway_closes_the_connection(tpl_root, fake_host_side, monkeypatch):
    def gone(conn, pool):
        raise NoAnswer("End of file while reading data")

    monkeypatch.setattr(hosttemplates, "listing", gone)
    host = FarHost()
    with pytest.raises(libvirt.libvirtError):
        hostprepare.prepare(host, BOX)
    assert host.conns[0].closed == 1


# ------------------------------------------------------------------------------------ the command
def test_local_is_refused_and_nothing_changes(lab_home, tpl_root, fake_host_side, monkeypatch):
    asked = []
    monkeypatch.setattr(hostprepare, "prepare", lambda *a, **k: asked.append(a))
    monkeypatch.setattr(registry.Host, "connect", lambda self: asked.append(self))
    before = sorted(p.relative_to(tpl_root) for p in tpl_root.rglob("*"))

    res = CliRunner().invoke(app, ["host", "prepare", "local"])

    assert res.exit_code != 0
    e = res.exception
    assert isinstance(e, UsageError) and e.exit_code == 2
    assert "nothing to upload" in e.message and "local" in e.message
    assert asked == [] and fake_host_side.ensure == [] and fake_host_side.domain_type == []
    assert not registry.file().exists()  # the hosts file is not written
    assert sorted(p.relative_to(tpl_root) for p in tpl_root.rglob("*")) == before


def test_json_is_what_prepare_returns(tpl_root, fake_host_side, monkeypatch):
    host = FarHost()
    monkeypatch.setattr(registry, "get", lambda name: host if name == "h2" else pytest.fail(f"asked for {name}"))
    real, returned = hostprepare.prepare, []

    def spy(h, box_name, shapes, progress):
        returned.append((h, box_name, list(shapes), real(h, box_name, shapes, progress)))
        return returned[-1][3]

    monkeypatch.setattr(hostprepare, "prepare", spy)

    res = CliRunner().invoke(app, ["host", "prepare", "h2", "--shape", "1cpu-768mib", "--shape", "2cpu-2048mib",
                                   "--output", "json"])

    assert res.exit_code == 0, res.output
    [(h, box_name, shapes, done)] = returned
    assert (h, box_name, shapes) == (host, box.DEFAULT_BOX, ["1cpu-768mib", "2cpu-2048mib"])
    assert json.loads(res.stdout) == done  # stdout is the JSON alone: no progress lines in it
    assert [r["template"] for r in done["templates"]] == ["1cpu-768mib-bbb", "2cpu-2048mib-aaa",
                                                          "0-compute-768", "0-controller-2048"]
    assert host.conns[0].closed == 1


def test_box_option_and_text_output(tpl_root, fake_host_side, monkeypatch):
    monkeypatch.setattr(registry, "get", lambda name: FarHost(name))
    res = CliRunner().invoke(app, ["host", "prepare", "h3", "--box", OTHER_BOX])
    assert res.exit_code == 0, res.output
    assert "uploading 1cpu-768mib-other ..." in res.output and "uploading 0-login-other (Login) ..." in res.output
    assert "0-login-other  role=Login" in res.output
    assert "host h3: 2 template(s) ready, 8 MiB in its pool" in res.output


def test_a_host_that_does_not_answer_is_named(tpl_root, fake_host_side, monkeypatch):
    host = FarHost("h2", fail=NoAnswer("Cannot recv data: ssh: connect to host lab-b port 22: No route to host"))
    monkeypatch.setattr(registry, "get", lambda name: host)

    res = CliRunner().invoke(app, ["host", "prepare", "h2", "--output", "json"])

    assert res.exit_code != 0
    e = res.exception
    assert isinstance(e, UsageError), res.output
    assert "host h2 does not answer" in e.message and "No route to host" in e.message
    assert fake_host_side.ensure == [] and res.stdout == ""


def test_a_failed_upload_is_a_usage_error_that_says_how_to_go_on(tpl_root, fake_host_side, monkeypatch):
    fake_host_side.fail = "1cpu-768mib-bbb"
    host = FarHost()
    monkeypatch.setattr(registry, "get", lambda name: host)

    res = CliRunner().invoke(app, ["host", "prepare", "h2"])

    e = res.exception
    assert res.exit_code != 0 and isinstance(e, UsageError)
    assert "1cpu-768mib-bbb on host h2: no space left" in e.message
    assert "slurmlab host prepare h2 again" in e.fix
    assert host.conns[0].closed == 1
