"""roles/common/files/probe.sh against a stand-in systemctl: whether a unit is enabled comes from its unit
files (`systemctl list-unit-files`), not from `systemctl show`'s UnitFileState, which keeps what systemd
read at its last load of the unit: after the roles' `systemctl enable --no-reload` with no daemon-reload
since (issue 42), CI's second controller.yml run read slurmctld as disabled and started it again."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SYSTEMCTL = r'''#!/bin/sh
case "$1" in
  show)  # systemd's copy from its last load: every unit "disabled" (asked for or not, a stale answer)
    case "$*" in *UnitFileState*) stale='UnitFileState=disabled\n' ;; *) stale='' ;; esac
    for u in munge slurmd sackd slurmctld; do
      printf "Id=%s.service\nLoadState=loaded\nActiveState=active\n$stale\n" "$u"
    done ;;
  list-unit-files)
    printf 'munge.service enabled enabled\nslurmctld.service enabled enabled\nslurmd.service disabled enabled\n' ;;
esac
'''


def test_the_probe_reads_enabled_from_the_unit_files(tmp_path):
    (tmp_path / "systemctl").write_text(SYSTEMCTL)
    (tmp_path / "systemctl").chmod(0o755)
    p = subprocess.run(["sh", str(ROOT / "roles/common/files/probe.sh"), "demo-controller-1", "demo",
                        str(tmp_path / "chrony.conf"), str(tmp_path / "srun")],
                       capture_output=True, text=True, timeout=60, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    state = dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)
    assert state["slurmctld_UnitFileState"] == "enabled" and state["munge_UnitFileState"] == "enabled"
    assert state["slurmd_UnitFileState"] == "disabled"
    assert "sackd_UnitFileState" not in state  # no unit file: the roles read '' (not enabled)
    assert state["slurmctld_ActiveState"] == "active" and state["slurmctld_LoadState"] == "loaded"
    assert state["chrony_sha"] == "absent" and state["auto_resume_sha"] == "absent"
    # what roles/accounting and roles/state_disk compare (issue 42: a role template's fork skips both)
    assert state["slurmdbd_conf_sha"] == "absent" and state["accounting_db"] == "absent"
    assert " / " in state["mounts"] + " "
