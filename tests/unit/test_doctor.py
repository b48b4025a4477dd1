import json

from typer.testing import CliRunner

from lab import doctor
from lab.cli import app


def test_missing_vagrant_names_the_package(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty PATH: no tool is found
    probe = next(p for p in doctor.probes() if p.id == "tool:vagrant")
    [res] = doctor.run_probes([probe])
    assert not res.ok
    assert res.fix.startswith("apt-get install -y vagrant")
    assert doctor.blocking_failures([res]) == [res]


def test_doctor_json_and_exit_code_on_missing_tool(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(doctor, "probes", lambda: [doctor._tool("vagrant", "vagrant"), doctor._tool("qemu-img", "qemu-utils")])
    res = CliRunner().invoke(app, ["doctor", "--output", "json"])
    assert res.exit_code == 5
    data = json.loads(res.stdout)
    assert data["ok"] is False
    fixes = {p["id"]: p["fix"] for p in data["probes"]}
    assert "qemu-utils" in fixes["tool:qemu-img"]


def test_a_crashing_probe_is_reported_not_raised():
    def boom():
        raise RuntimeError("kaput")

    [res] = doctor.run_probes([doctor.Probe("x", "x", boom, "fix it")])
    assert not res.ok and "kaput" in res.detail and res.fix == "fix it"


def test_warning_is_not_blocking():
    [res] = doctor.run_probes([doctor.Probe("w", "w", lambda: (False, "slow"), "meh", doctor.WARNING)])
    assert doctor.blocking_failures([res]) == []
