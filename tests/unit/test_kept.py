"""lab/providers/kept.py: `slurmlab ssh NODE -- COMMAND` over a kept connection (ControlMaster), per lab
home and way in; ssh itself connects anew when a kept connection is broken (its VM went away)."""

from __future__ import annotations

from lab.providers import kept


def test_a_command_goes_over_a_connection_kept_for_a_minute(monkeypatch, tmp_path):
    monkeypatch.setattr(kept, "control_folder", lambda cluster: tmp_path)
    monkeypatch.setattr(kept, "ssh_command", lambda cluster, address, *opts: ["ssh", *opts, f"vagrant@{address}"])
    cmd = kept.command("c", "10.0.0.2", ["srun", "-N2", "hostname"])
    assert cmd[-4:] == ["vagrant@10.0.0.2", "srun", "-N2", "hostname"]
    opts = dict(o.split("=", 1) for o in cmd[1:-4] if o != "-o")
    assert opts["ControlMaster"] == "auto" and opts["ControlPersist"] == "60"
    assert opts["ControlPath"] == f"{tmp_path}/%C"
    # a master whose VM went away ends within 15 s instead of holding every later command
    assert int(opts["ServerAliveInterval"]) * int(opts["ServerAliveCountMax"]) <= 15
