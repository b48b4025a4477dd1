"""Where a CI run's CPU went (issue 43): Linux process accounting (acct(2)) writes one record per
process that ends, with its command name and CPU time; this script turns it on and off, and sums it.

  cpu_account.py on FILE          every process that ends from now on is written to FILE (root)
  cpu_account.py off
  cpu_account.py report FILE [--guests F] [--json OUT]
                                  CPU seconds per command, short-lived runs apart (a CLI poll, an ssh),
                                  qemu per cluster (F: "PID GUEST" lines, the CI's sampler writes them)

A process still running at `off` is not in FILE (the engine of a cluster never deleted). Off when
the kernel has no process accounting: `on` says so and exits 0, and `report` of a missing file too.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import struct
import sys
from collections import defaultdict
from pathlib import Path

# struct acct_v3 (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime (float),
# utime, stime, mem, io, rw, minflt, majflt, swaps (comp_t), comm[16]
RECORD = struct.Struct("<BBHIIIIIIf8H16s")
AHZ = 100  # comp_t's unit: 1/AHZ s
SHORT_S = 60.0  # a process that lived less is one of many (a CLI call, an ssh): counted apart


def comp_t(v: int) -> int:
    """comp_t: 13-bit mantissa, 3-bit base-8 exponent."""
    return (v & 0x1FFF) << (3 * (v >> 13))


def records(data: bytes):
    """(pid, ppid, command, cpu seconds, elapsed seconds) of each v3 record."""
    for off in range(0, len(data) - RECORD.size + 1, RECORD.size):
        f = RECORD.unpack_from(data, off)
        if f[1] & 0x0F != 3:  # ac_version (its high bit says big-endian)
            continue
        utime, stime = comp_t(f[10]), comp_t(f[11])
        comm = f[18].split(b"\0", 1)[0].decode(errors="replace")
        yield f[6], f[7], comm, (utime + stime) / AHZ, f[9] / AHZ


def guest_cluster(guest: str) -> str:
    """The cluster of a VM named CLUSTER-GROUP-N (a role template's build VM keeps its whole name)."""
    parts = guest.rsplit("-", 2)
    return parts[0] if len(parts) == 3 and parts[2].isdigit() else guest


def summary(data: bytes, guests: dict[int, str]) -> dict:
    by_command: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    qemu: dict[str, float] = defaultdict(float)
    total = 0.0
    for pid, _ppid, comm, cpu, elapsed in records(data):
        total += cpu
        if pid in guests:  # the record names the thread that ended last ("worker", "CPU 0/TCG")
            comm = "qemu-system-x86"
        key = comm if elapsed >= SHORT_S else f"{comm} (short)"
        by_command[key] += cpu
        count[key] += 1
        if comm.startswith("qemu-system"):
            qemu[guest_cluster(guests.get(pid, "?"))] += cpu
    top = sorted(by_command.items(), key=lambda kv: -kv[1])
    return {"cpu_s": round(total, 1),
            "commands": [{"command": k, "cpu_s": round(v, 1), "processes": count[k]} for k, v in top],
            "qemu_by_cluster": {k: round(v, 1) for k, v in sorted(qemu.items(), key=lambda kv: -kv[1])}}


def _acct(path: str | None) -> str | None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(path.encode() if path else None) == 0:
        return None
    import os

    return os.strerror(ctypes.get_errno())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    on = sub.add_parser("on")
    on.add_argument("file", type=Path)
    sub.add_parser("off")
    rep = sub.add_parser("report")
    rep.add_argument("file", type=Path)
    rep.add_argument("--guests", type=Path)
    rep.add_argument("--json", type=Path)
    rep.add_argument("--top", type=int, default=12)
    a = ap.parse_args(argv)
    if a.cmd == "on":
        a.file.parent.mkdir(parents=True, exist_ok=True)
        a.file.write_bytes(b"")
        why = _acct(str(a.file.resolve()))
        print(f"ci: CPU per command: {'off: ' + why if why else 'on'}")
        return 0
    if a.cmd == "off":
        _acct(None)
        return 0
    if not a.file.exists():
        print(f"ci: CPU per command: no {a.file}")
        return 0
    guests = {}
    if a.guests and a.guests.exists():
        for line in a.guests.read_text().splitlines():
            pid, _, name = line.partition(" ")
            if pid.isdigit() and name:
                guests[int(pid)] = name
    s = summary(a.file.read_bytes(), guests)
    print(f"ci: CPU of the processes that ended: {s['cpu_s']:.0f} s")
    for c in s["commands"][:a.top]:
        print(f"ci:   {c['cpu_s']:8.1f} s  {c['command']} ({c['processes']} process(es))")
    if s["qemu_by_cluster"]:
        print("ci: qemu per cluster: " + ", ".join(f"{k} {v:.0f} s" for k, v in s["qemu_by_cluster"].items()))
    if a.json:
        a.json.write_text(json.dumps(s, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
