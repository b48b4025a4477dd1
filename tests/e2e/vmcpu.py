"""The CPU each e2e test's VMs used (issue 43, ADR 0024): qemu's CPU per cluster, read from /proc at the
test's start and end, one JSON line per test in artifacts/test-vm-cpu.jsonl. The two streams' tests
touch different clusters, so a test's own cluster's line is its own. A VM that ends during the test
(deleted, replaced) is counted until its last reading (every 5 s); process accounting has the rest.
Never fails a test: a reading that cannot be made is left out."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OUT = REPO / "artifacts" / "test-vm-cpu.jsonl"
TICK = os.sysconf("SC_CLK_TCK")


def cluster_of(guest: str) -> str:
    parts = guest.rsplit("-", 2)
    return parts[0] if len(parts) == 3 and parts[2].isdigit() else guest


def readings() -> dict[int, tuple[str, float]]:
    """{qemu pid: (its VM's cluster, CPU seconds so far)}"""
    got = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
            if not args or b"qemu-system" not in args[0]:
                continue
            guest = next((a[6:].split(b",")[0].decode() for a in args if a.startswith(b"guest=")), "?")
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            got[int(pid)] = (cluster_of(guest), (int(fields[11]) + int(fields[12])) / TICK)
        except (OSError, ValueError, IndexError):
            continue
    return got


def used(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds per cluster between two readings (a VM started in between counts from zero)."""
    per: dict[str, float] = {}
    for pid, (cluster, cpu) in after.items():
        start = before.get(pid, (cluster, 0.0))[1]
        per[cluster] = per.get(cluster, 0.0) + max(cpu - start, 0.0)
    return {k: round(v, 1) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def own_clusters() -> set[str]:
    """The clusters in the lab home the test's module works in ($SLURMLAB_HOME's store): its own VMs, not
    the other stream's."""
    home = os.environ.get("SLURMLAB_HOME")
    if not home or not (Path(home) / "state.db").exists():
        return set()
    from lab.engine import daemon

    return {c.name for c in daemon.store().clusters()}


def record(test: str, seconds: float, per_cluster: dict[str, float], out: Path = OUT,
           own: set[str] | None = None) -> None:
    out.parent.mkdir(exist_ok=True)
    line = json.dumps({"test": test, "seconds": round(seconds, 1), "vm_cpu_s": per_cluster,
                       **({"own": sorted(own)} if own else {})}) + "\n"
    with open(out, "a") as f:  # one write per line: the two streams' lines never interleave
        f.write(line)


class Watch:
    """Readings at the test's start, every `every` s (a VM made and deleted within the test is seen), and at
    its end; each VM counts from its first reading (0 when it started during the test) to its last."""

    def __init__(self, test: str, every: float = 5.0):
        import threading

        self.test = test
        self.t0 = time.monotonic()
        self.own = own_clusters()
        self.before = readings()
        self.last = dict(self.before)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, args=(every,), daemon=True)
        self._thread.start()

    def _sample(self, every: float) -> None:
        while not self._stop.wait(every):
            self.last.update(readings())
            try:
                self.own |= own_clusters()  # a cluster made and deleted within the test is its own too
            except Exception:  # noqa: BLE001 - a measurement never fails a test (a store being written)
                pass

    def done(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.last.update(readings())
        self.own |= own_clusters()
        record(self.test, time.monotonic() - self.t0, used(self.before, self.last), own=self.own)
