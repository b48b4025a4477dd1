"""The pure half of issue 26 (lab/engine/recovery.py) as tables: Slurm state x reason x NodeRecovery x
time since the trouble x recovery steps taken x protected, in; decisions out. Plus sinfo parsing and
the failures-in-a-row count. Rows are built directly; no store, no engine."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from lab.configure.sinfo import SlurmNode, parse_sinfo
from lab.engine.recovery import PROTECT_AFTER, PROTECT_WINDOW_S, RECOVER_AFTER_S, assess, count_failure
from lab.store.db import GroupRow, NodeRow

NOW = 10_000.0
TAKEN = NOW - 1.0
NODE = "demo-compute-1"


def groups(protected: str | None = None) -> list[GroupRow]:
    return [GroupRow("demo", "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "InService"),
            GroupRow("demo", "compute", "ml.c5.large", "Compute", 1, ["dev"], 1, 768, "InService", protected=protected)]


def compute(**kw) -> NodeRow:
    kw.setdefault("phase", "running")
    kw.setdefault("joined_at", NOW - 600)
    return NodeRow(cluster="demo", name=NODE, grp="compute", ordinal=1, instance_id="i-1", address="10.0.0.2",
                   mac="m", **kw)


@dataclass
class Row:
    id: str
    state: str | None  # Slurm's %T for the node (None: Slurm does not list it)
    expect: list[tuple[str, str]]  # (kind, a piece of its text)
    reason: str = ""
    recovery: str = "Automatic"
    node: dict = field(default_factory=dict)  # more NodeRow fields
    protected: str | None = None
    busy: bool = False


ROWS = [
    Row("healthy-nothing", "idle", []),
    Row("allocated-nothing", "allocated", []),
    Row("not-listed-nothing", None, [], node={"slurm": "Slurm: down*"}),
    Row("newly-down-marked-no-step-yet", "down*", [("mark", "Slurm: down* (Not responding)")], reason="Not responding"),
    Row("idle-not-responding-is-down", "idle*", [("mark", "Slurm: idle*")]),
    Row("down-below-threshold-waits", "down*", [], reason="Not responding",
        node={"slurm": "Slurm: down* (Not responding)", "slurm_since": NOW - RECOVER_AFTER_S + 5}),
    Row("down-past-threshold-restarts-slurmd", "down*", [("repair", "step 1 of 3: repair")], reason="Not responding",
        node={"slurm": "Slurm: down* (Not responding)", "slurm_since": NOW - RECOVER_AFTER_S - 1}),
    Row("still-down-after-a-restart-reboots", "down*", [("reboot", "step 2 of 3: reboot")], reason="Not responding",
        node={"slurm": "Slurm: down* (Not responding)", "slurm_since": NOW - RECOVER_AFTER_S, "repairs": 1}),
    Row("still-down-after-a-reboot-replaces", "down", [("replace", "step 3 of 3: replace")], reason="Node unexpectedly rebooted",
        node={"slurm": "Slurm: down (Node unexpectedly rebooted)", "slurm_since": 0.0, "repairs": 2}),
    Row("replaced-and-down-again-replaces-again", "down*", [("replace", "step 3 of 3")], reason="Not responding",
        node={"slurm": "Slurm: down* (Not responding)", "slurm_since": 0.0, "repairs": 5}),
    Row("state-changed-is-marked-again", "down", [("mark", "Slurm: down (x)"), ("repair", "")], reason="x",
        node={"slurm": "Slurm: down* (Not responding)", "slurm_since": 0.0}),
    Row("none-recovery-marks-only", "down*", [], reason="Not responding", recovery="None",
        node={"slurm": "Slurm: down* (Not responding)", "slurm_since": 0.0}),
    Row("none-recovery-new-mark", "down*", [("mark", "down*")], reason="Not responding", recovery="None"),
    Row("protected-group-marks-only", "down*", [], reason="Not responding", protected="5 failures",
        node={"slurm": "Slurm: down* (Not responding)", "slurm_since": 0.0}),
    Row("healthy-again-clears", "idle", [("clear", "Slurm: idle")], node={"slurm": "Slurm: down*", "repairs": 2}),
    Row("user-fail-other-reason-shown-not-recovered", "fail", [("mark", "Slurm: fail (bad fan)")], reason="bad fan"),
    Row("user-fail-other-reason-never-recovered", "fail", [], reason="bad fan",
        node={"slurm": "Slurm: fail (bad fan)", "slurm_since": 0.0}),
    Row("user-drain-left-alone", "drained", [], reason="disk check by hand"),
    Row("user-draining-left-alone", "draining", [], reason="disk check by hand"),
    Row("action-replace-idle-replaces", "fail", [("mark", "Action:Replace"), ("replace", "set by a user")],
        reason="Action:Replace"),
    Row("action-replace-with-none-recovery-still-replaces", "fail", [("mark", ""), ("replace", "")],
        reason="Action:Replace", recovery="None"),
    Row("action-replace-in-protected-group-still-replaces", "down", [("mark", ""), ("replace", "")],
        reason="Action:Replace", protected="5 failures"),
    Row("action-replace-failing-waits-for-the-job", "failing", [("mark", ""), ("wait", "waiting for the jobs")],
        reason="Action:Replace"),
    Row("action-replace-down-goes-at-once", "down", [("mark", ""), ("replace", "")], reason="Action:Replace"),
    Row("action-reboot-reboots", "fail", [("mark", ""), ("reboot", "Action:Reboot")], reason="Action:Reboot"),
    Row("action-reboot-on-a-drained-node-reboots", "drained", [("mark", "drained (Action:Reboot)"), ("reboot", "")],
        reason="Action:Reboot"),
    Row("action-replace-on-a-draining-node-waits", "draining", [("mark", ""), ("wait", "")], reason="Action:Replace"),
    Row("pending-node-skipped", "down*", [], node={"pending": "reboot"}),
    Row("not-running-skipped", "down*", [], node={"phase": "configuring"}),
    Row("not-joined-skipped", "down*", [], node={"joined_at": None}),
    Row("view-older-than-the-join-skipped", "down*", [], node={"joined_at": NOW - 0.5}),
    Row("busy-node-skipped", "down*", [], busy=True),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_assess(row: Row):
    view = {} if row.state is None else {NODE: SlurmNode(NODE, row.state, row.reason)}
    got = assess([compute(**row.node)], groups(row.protected), view, TAKEN, NOW, {NODE} if row.busy else set(),
                 row.recovery)
    assert [d.kind for d in got] == [k for k, _ in row.expect], got
    for d, (_, text) in zip(got, row.expect):
        assert text in d.text, (d, text)
        assert d.by_user == ("Action:" in row.reason and d.kind in ("reboot", "replace"))


def test_the_controller_and_login_nodes_are_not_watched():
    ctl = NodeRow(cluster="demo", name="demo-controller-1", grp="controller", ordinal=1, instance_id="i-c",
                  address="10.0.0.1", mac="m", phase="running", joined_at=0.0)
    assert assess([ctl], groups(), {ctl.name: SlurmNode(ctl.name, "down*")}, TAKEN, NOW, set(), "Automatic") == []


def test_sinfo_lines_parse_with_pipes_in_the_reason_and_one_row_per_node():
    text = ("demo-compute-1|idle|none\n"
            "demo-compute-2|down*|Not responding\n"
            "demo-compute-2|down*|Not responding\n"  # listed once per partition
            "demo-gpu-1|drained|disk | fan check\n"
            "\n garbage\n")
    got = parse_sinfo(text)
    assert got == {"demo-compute-1": SlurmNode("demo-compute-1", "idle", ""),
                   "demo-compute-2": SlurmNode("demo-compute-2", "down*", "Not responding"),
                   "demo-gpu-1": SlurmNode("demo-gpu-1", "drained", "disk | fan check")}
    assert got["demo-compute-2"].down and got["demo-compute-2"].not_responding and not got["demo-gpu-1"].down


@pytest.mark.parametrize("state,down,failed,busy", [
    ("idle", False, False, False), ("down", True, False, False), ("down*", True, False, False),
    ("idle*", True, False, False), ("idle~", False, False, False), ("fail", False, True, False),
    ("failing", False, True, True), ("drained", False, False, False), ("mixed", False, False, True),
    ("allocated*", True, False, True), ("completing", False, False, True),
])
def test_states(state, down, failed, busy):
    s = SlurmNode("n", state)
    assert (s.down, s.failed, s.busy) == (down, failed, busy)


def test_failures_in_a_row_protect_the_group_at_the_limit_and_a_long_gap_starts_over():
    g = GroupRow("demo", "compute", "t", "Compute", 1, [], 1, 768, "InService")
    for i in range(1, PROTECT_AFTER + 1):
        count, protect = count_failure(g, NOW + i)
        assert count == i and protect == (i == PROTECT_AFTER)
        g.failures, g.failed_at = count, NOW + i
    g.protected = "already"
    assert count_failure(g, NOW + 10) == (PROTECT_AFTER + 1, False)  # protected once, not again
    g.protected = None
    assert count_failure(g, NOW + PROTECT_AFTER + PROTECT_WINDOW_S + 1) == (1, False)  # long after: a new count


def test_a_poll_that_hangs_drops_the_kept_connection_and_says_slurm_does_not_answer(monkeypatch, tmp_path):
    """Found in CI: after a checkpoint restore the kept ssh connection to the controller was dead and
    every later poll hung 60 s on it. Now a hung poll ends that connection (ssh -O exit)."""
    import subprocess
    from pathlib import Path

    from lab.configure import slurmstate
    from lab.configure.inventory import ClusterContext

    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path))
    ctl = NodeRow(cluster="demo", name="demo-controller-1", grp="controller", ordinal=1, instance_id="i-c",
                  address="10.0.0.1", mac="m", phase="running")
    ctx = ClusterContext("demo", groups(), [ctl], Path("/k"), Path("/m"), "ssh")
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        if "-O" in cmd:
            return subprocess.CompletedProcess(cmd, 0, "", "")
        raise subprocess.TimeoutExpired(cmd, kw.get("timeout"))

    monkeypatch.setattr(slurmstate.subprocess, "run", run)
    with pytest.raises(slurmstate.SlurmUnreachable, match="did not return within 60 s"):
        slurmstate.read(ctx)
    assert "ServerAliveInterval=5" in calls[0] and len(calls) == 2, calls
    drop = calls[1]
    assert drop[drop.index("-O") + 1] == "exit" and drop[-1] == "vagrant@10.0.0.1", drop


def test_jobs_on_counts_each_nodes_jobs_and_leaves_out_a_node_squeue_failed_for(tmp_path):
    """Auto-patching's last word before a patch (lab/configure/slurmstate.py jobs_on): the shell it sends to
    the controller, run here against a stand-in squeue."""
    import subprocess

    from lab.configure.slurmstate import jobs_on_command, parse_jobs_on

    fake = tmp_path / "squeue"
    fake.write_text('#!/bin/sh\ncase "$3" in busy) printf "28\\n31\\n";; idle) ;; *) echo no >&2; exit 1;; esac\n')
    fake.chmod(0o755)
    p = subprocess.run(["sh", "-c", jobs_on_command(["busy", "idle", "gone"])], capture_output=True, text=True,
                       env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert parse_jobs_on(p.stdout) == {"busy": 2, "idle": 0}  # "gone": not known, so not idle
