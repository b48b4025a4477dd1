"""What became of a room connection, and the slowing of an address that keeps failing.

Every connection through a room reaches the login node's sshd from one address (the lab's side of the
cluster's network), so sshd cannot tell the students apart: its own PerSourcePenalties would shut the
whole room out after one student's typos, and the login node turns them off (roles/users). The room
knows each connection's real client address and the port it dialled the node from; after the connection
ends it reads what sshd logged for that port (`Accepted ...`, `Failed ...`) and keeps the count here:

- FREE failures in WINDOW_S cost nothing (typos);
- each one beyond makes that address's next connections wait twice as long, 1 s up to MAX_WAIT_S
  (sshd's MaxAuthTries 3 on the room's port: a guesser gets 3 passwords per wait);
- a login that succeeds clears the address's count.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

WINDOW_S = 600.0
FREE = 3
MAX_WAIT_S = 60.0
MAX_OPEN_PER_ADDRESS = 10  # connections at once from one client address; more are closed at once

_ACCEPTED = re.compile(r"Accepted (\S+) for (\S+) from ")
_REFUSED = re.compile(r"(Failed \S+ for (?:invalid user )?\S+|Invalid user \S*|Too many authentication failures"
                      r"|maximum authentication attempts exceeded|Connection closed by (?:authenticating|invalid) user \S+"
                      r"|Disconnected from (?:authenticating|invalid) user \S+)")


@dataclass(frozen=True)
class Outcome:
    kind: str  # accepted | refused | none (no login tried: a probe, or nothing logged)
    detail: str = ""

    @property
    def failed(self) -> bool:
        return self.kind == "refused"


def outcome(lines: Iterable[str], port: int) -> Outcome:
    """What sshd's log lines say of the connection from `port`: accepted (method and user), else the first
    refusal, else none."""
    mine = [ln for ln in lines if re.search(rf" port {port}(?:\s|$)", ln)]
    for ln in mine:
        if m := _ACCEPTED.search(ln):
            return Outcome("accepted", f"{m.group(2)} ({m.group(1)})")
    for ln in mine:
        if m := _REFUSED.search(ln):
            return Outcome("refused", m.group(1))
    return Outcome("none")


class Penalties:
    """Failures per client address over the last WINDOW_S, and the wait they cost; thread-safe."""

    def __init__(self, window_s: float = WINDOW_S, free: int = FREE, max_wait_s: float = MAX_WAIT_S):
        self.window_s, self.free, self.max_wait_s = window_s, free, max_wait_s
        self._failed: dict[str, list[float]] = {}
        self._open: dict[str, int] = {}
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> list[float]:
        kept = [t for t in self._failed.get(address, []) if now - t < self.window_s]
        if kept:
            self._failed[address] = kept
        else:
            self._failed.pop(address, None)
        return kept

    def failures(self, address: str, now: float) -> int:
        with self._lock:
            return len(self._recent(address, now))

    def wait_s(self, address: str, now: float) -> float:
        n = self.failures(address, now)
        return 0.0 if n < self.free else min(self.max_wait_s, float(2 ** (n - self.free)))

    def failed(self, address: str, now: float) -> int:
        """Count a failure; the address's failures in the window."""
        with self._lock:
            self._failed.setdefault(address, []).append(now)
            return len(self._recent(address, now))

    def succeeded(self, address: str) -> None:
        with self._lock:
            self._failed.pop(address, None)

    def enter(self, address: str) -> bool:
        """A connection from `address` starts; False (and not counted) when it has MAX_OPEN_PER_ADDRESS open."""
        with self._lock:
            if self._open.get(address, 0) >= MAX_OPEN_PER_ADDRESS:
                return False
            self._open[address] = self._open.get(address, 0) + 1
            return True

    def leave(self, address: str) -> None:
        with self._lock:
            left = self._open.get(address, 1) - 1
            if left > 0:
                self._open[address] = left
            else:
                self._open.pop(address, None)
