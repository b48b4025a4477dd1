"""scripts/cpu_account.py (issue 43): a CI run's CPU per command from process accounting records."""

from __future__ import annotations

import importlib.util
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("cpu_account", ROOT / "scripts" / "cpu_account.py")
ca = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ca)


def comp(ticks: int) -> int:
    """ticks as comp_t (13-bit mantissa, base-8 exponent), as the kernel encodes them."""
    exp = 0
    while ticks > 0x1FFF:
        ticks >>= 3
        exp += 1
    return (exp << 13) | ticks


def record(pid: int, comm: str, cpu_s: float, elapsed_s: float, version: int = 3) -> bytes:
    ticks = int(cpu_s * ca.AHZ)
    return ca.RECORD.pack(0, version, 0, 0, 0, 0, pid, 1, 0, elapsed_s * ca.AHZ,
                          comp(ticks // 2), comp(ticks - ticks // 2), 0, 0, 0, 0, 0, 0, comm.encode())


def test_records_sum_per_command_short_lived_apart_and_qemu_per_cluster():
    data = (record(10, "qemu-system-x86", 900, 1200) + record(11, "qemu-system-x86", 300, 600)
            + record(12, "worker", 50, 400) + record(20, "ssh", 0.5, 2) + record(21, "ssh", 0.25, 1)
            + record(30, "ansible-playboo", 80, 90) + record(40, "python", 0.5, 1, version=2))
    s = ca.summary(data, {10: "patch-controller-1", 11: "patch-compute-12", 12: "slurmlab-role-template"})
    assert s["cpu_s"] == 1330.8  # the version-2 record is not read
    cmds = {c["command"]: (c["cpu_s"], c["processes"]) for c in s["commands"]}
    assert cmds == {"qemu-system-x86": (1250.0, 3), "ssh (short)": (0.8, 2), "ansible-playboo": (80.0, 1)}
    assert s["commands"][0]["command"] == "qemu-system-x86"  # the most first
    # a qemu whose last thread was "worker" is known by its pid
    assert s["qemu_by_cluster"] == {"patch": 1200.0, "slurmlab-role-template": 50.0}


def test_comp_t_decodes_large_values():
    assert ca.comp_t(comp(123456)) == 123456 >> 6 << 6  # 3 base-8 digits of precision lost above 8191
    assert struct.calcsize("<" + ca.RECORD.format.lstrip("<")) == 64


def test_report_of_a_missing_file_says_so(tmp_path, capsys):
    assert ca.main(["report", str(tmp_path / "none")]) == 0
    assert "no " in capsys.readouterr().out
