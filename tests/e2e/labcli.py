"""What the e2e modules do through slurmlab's command line, for a named cluster: run a command, describe,
list nodes, ssh to a node (as a student too), wait for a job in accounting, the cluster's events; and
`slurmlab serve` for their boto3 tests. Each module has its own lab home and clusters (tests/e2e/lock.py
says why two streams of them can run at once)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from lab.testing.cluster import LabCluster
from lab.testing.jobs import Job, state_of
from lab.testing.served import Served  # noqa: F401 - the e2e modules' boto3 server

REPO = Path(__file__).resolve().parents[2]
DONE = ("COMPLETED", "FAILED", "OUT_OF_MEMORY", "CANCELLED", "TIMEOUT")


def sl(*args, check=True, timeout=2400) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "lab", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    sys.stderr.write(p.stderr[-4000:])
    if check and p.returncode != 0:
        raise AssertionError(f"slurmlab {' '.join(args)} exited {p.returncode}\n{p.stdout}\n{p.stderr[-3000:]}")
    return p


def sl_json(*args) -> dict:
    """`slurmlab ARGS --output json` run in this process through the same Typer app (typer's CliRunner):
    the command's code and output without a Python start, which costs 0.4-0.5 s of CPU; the tests poll
    describe-cluster and list-cluster-nodes hundreds of times a run (issue 43). `sl` runs the command
    itself, as a user does."""
    from typer.testing import CliRunner

    from lab.cli import app

    r = CliRunner().invoke(app, [*args, "--output", "json"], catch_exceptions=False)
    assert r.exit_code == 0, f"slurmlab {' '.join(args)} exited {r.exit_code}\n{r.output[-3000:]}"
    return json.loads(r.stdout)


def wait(cond, timeout: float, what: str, every: float = 5.0):
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(every)
    return got


def keep(name: str, p: subprocess.CompletedProcess) -> None:
    """The command's output in artifacts/ (docs/workshop.md quotes these runs)."""
    (REPO / "artifacts").mkdir(exist_ok=True)
    (REPO / "artifacts" / name).write_text(f"$ {' '.join(['slurmlab', *p.args[3:]])}\n{p.stdout}{p.stderr}[rc={p.returncode}]\n")


def events_of(cluster: str) -> list[str]:
    return [e["Description"] for e in sl_json("list-cluster-events", cluster)["Events"]]


class Cluster(LabCluster):
    """One cluster of the module's lab home, by name: the pytest plugin's LabCluster (lab/testing/cluster.py),
    so that the e2e suite runs its commands through it; describe and nodes through the command line."""

    def describe(self) -> dict:
        return sl_json("describe-cluster", self.name)

    def nodes(self) -> dict[str, dict]:
        data = sl_json("list-cluster-nodes", self.name)
        return {n["NodeLogicalId"]: n for n in data["ClusterNodeSummaries"]}

    def on(self, node: str, command: str) -> str:
        """`command` on a node as `slurmlab ssh NAME NODE -- COMMAND` runs it (the same lookup, the same kept
        connection), without a Python start per call: the tests make hundreds, each 0.4 s of CPU (issue 43).
        The command itself stays tested where a test calls `sl("ssh", ...)`."""
        return self.out(node, command)

    def student(self, command: str, user: str = "user03", node: str = "login") -> str:
        """`command` as a student account, in its home (the shared /home). Not `sudo -i`: it escapes
        the command for the login shell, and `$(...)` then reaches sh broken."""
        return self.out(node, command, user=user)

    def job_state(self, job: str, timeout: float = 120, want=DONE) -> tuple[str, str]:
        """(State, NodeList) of a job in Slurm accounting (the plugin's Job.record), once it reached one of
        `want`; the last seen when `timeout` passed."""
        record = Job(self, str(job), user="", output_path="").record
        deadline = time.monotonic() + timeout
        while True:
            rec = record()
            state = state_of(rec)
            if state in want or time.monotonic() > deadline:
                return state, (rec or {}).get("NodeList", "")
            time.sleep(3)
