"""What Slurm says of its nodes, parsed (no I/O): one `sinfo` line per node, as the engine's
recovery rules read it (lab/engine/recovery.py) and the simulated Slurm makes it (lab/configure/sim.py)."""

from __future__ import annotations

from dataclasses import dataclass

ACTION_REBOOT, ACTION_REPLACE = "Action:Reboot", "Action:Replace"


@dataclass(frozen=True)
class SlurmNode:
    """One node as `sinfo -N -o '%N|%T|%E'` shows it: the state in its long form with Slurm's
    suffixes (`down*`, `idle~`, `failing`, `drained`), the reason (may be empty)."""

    name: str
    state: str
    reason: str = ""

    @property
    def base(self) -> str:
        return self.state.rstrip("*~#!%$@^-+").lower()

    @property
    def not_responding(self) -> bool:
        return self.state.endswith("*")

    @property
    def down(self) -> bool:
        """DOWN or NOT_RESPONDING: Slurm cannot use it, and nobody asked for that."""
        return self.base == "down" or self.not_responding

    @property
    def failed(self) -> bool:
        return self.base in ("fail", "failing")

    @property
    def busy(self) -> bool:
        """Jobs still run on it (FAILING, DRAINING, allocated, mixed, completing)."""
        return self.base in ("failing", "draining", "allocated", "mixed", "completing")

    def action(self) -> str | None:
        """"reboot" / "replace" when a user asked for it in the reason (Action:Reboot / Action:Replace)."""
        r = self.reason.strip()
        if r.startswith(ACTION_REPLACE):
            return "replace"
        if r.startswith(ACTION_REBOOT):
            return "reboot"
        return None

    def trouble(self) -> str | None:
        """What the lab shows of a node Slurm cannot use (None: nothing to show)."""
        if not (self.down or self.failed):
            return None
        return f"Slurm: {self.state}" + (f" ({self.reason})" if self.reason else "")


def parse_sinfo(text: str) -> dict[str, SlurmNode]:
    """`sinfo -a -h -N -o '%N|%T|%E'` (a line per node and partition; the reason may hold '|')."""
    out: dict[str, SlurmNode] = {}
    for line in text.splitlines():
        parts = line.strip().split("|", 2)
        if len(parts) < 2 or not parts[0]:
            continue
        reason = parts[2].strip() if len(parts) > 2 else ""
        out[parts[0]] = SlurmNode(parts[0], parts[1].strip(), "" if reason == "none" else reason)
    return out
