"""Image releases of the simulated provider (issue 32): boxes are records too. One line,
`trixie-slurm` like the real default box, that starts with one release (`FIRST`, the default box) and
grows when a release is published (`SimReleases.publish`: a test or a benchmark).
Kept in `sim-releases.json` next to the simulated VMs when the provider has a path, else in memory."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from pathlib import Path

from lab.box.recipe import box_name
from lab.box.releases import Release, next_version
from lab.osutil import atomic_write

FIRST = Release(version="2026.1.1", line="trixie-slurm", box=box_name(), inputs_hash="simulated",
                slurm_version="24.11.5", built_at="2026-01-01T00:00:00Z", registered_at="2026-01-01T00:00:00Z")


class SimReleases:
    def __init__(self, path: Path | None = None):
        self.path = path
        self._mem = [FIRST]
        self._lock = threading.Lock()

    def all(self) -> list[Release]:
        if self.path is None:
            return list(self._mem)
        try:
            rows = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return [FIRST]
        return [FIRST, *(Release(**r) for r in rows)]

    def publish(self, *, security: bool = False, now: float | None = None) -> Release:
        """A new release of the line: the next version, a box name of its own, `security` as asked."""
        with self._lock:
            have = self.all()
            now = time.time() if now is None else now
            v = next_version([r.version for r in have], now)
            stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
            r = replace(FIRST, version=v, box=f"{FIRST.box}-{v}", inputs_hash=f"simulated-{v}", security=security,
                        built_at=stamp, registered_at=stamp)
            if self.path is None:
                self._mem.append(r)
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write(self.path, json.dumps([x.to_json() for x in [*have[1:], r]], indent=2) + "\n")
            return r
