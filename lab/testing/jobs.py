"""A batch job that a test submitted (`LabCluster.sbatch`): wait for it, its state, its output, and its
record in Slurm accounting."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

# sacct's final states (a state may carry more words: "CANCELLED by 1000")
DONE = ("COMPLETED", "FAILED", "OUT_OF_MEMORY", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "BOOT_FAIL",
        "DEADLINE")
FIELDS = ("JobID", "JobName", "User", "Partition", "State", "ExitCode", "NodeList", "AllocCPUS", "Elapsed",
          "Start", "End")


def parse_sacct(text: str) -> dict[str, str] | None:
    """The first row of `sacct -n -X -P -o FIELDS` as a dict (None: no row yet)."""
    for line in text.splitlines():
        if line.count("|") == len(FIELDS) - 1:
            return dict(zip(FIELDS, line.split("|")))
    return None


def state_of(record: dict[str, str] | None) -> str:
    """The state's first word ("CANCELLED by 1000" -> CANCELLED), "" without a record."""
    return (record or {}).get("State", "").split(" ")[0] if record and record.get("State", "").strip() else ""


@dataclass
class Job:
    cluster: Any  # the LabCluster it was submitted on (lab/testing/cluster.py imports this module)
    id: str
    user: str
    output_path: str  # where Slurm writes its stdout (and stderr, unless the test asked otherwise)
    node: str = "login"  # where the job was submitted and where it is read from

    def record(self) -> dict[str, str] | None:
        """The job's row in Slurm accounting (sacct): FIELDS as keys; None until slurmdbd has it."""
        fmt = ",".join(FIELDS)
        out = self.cluster.run(self.node, f"sacct -n -X -P -j {self.id} -o {fmt}").stdout
        return parse_sacct(out)

    @property
    def state(self) -> str:
        """Its state now: PENDING, RUNNING, COMPLETED ... ("" while accounting has no row yet)."""
        return state_of(self.record())

    def wait(self, timeout: float = 300, every: float = 3.0, want=DONE) -> str:
        """Wait until the job's state is one of `want` (by default: it ended); its state. An
        AssertionError names the state it was in when `timeout` seconds passed."""
        deadline = time.monotonic() + timeout
        while True:
            state = self.state
            if state in want:
                return state
            if time.monotonic() > deadline:
                raise AssertionError(f"job {self.id} on {self.cluster.name} is {state or 'not in accounting'} "
                                     f"after {timeout:.0f} s (waited for {', '.join(want)})")
            time.sleep(every)

    @property
    def output(self) -> str:
        """What the job wrote to its output file so far (on the shared file system)."""
        return self.cluster.run(self.node, f"cat {self.output_path}", user=self.user).stdout

    def __str__(self) -> str:
        return self.id
