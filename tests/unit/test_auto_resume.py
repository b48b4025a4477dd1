"""srun --auto-resume=1 (roles/common/files/srun-auto-resume, installed as /usr/local/bin/srun): which
words are srun's option and which are the command's, plain srun unchanged, a NODE_FAIL restarts the
step, any other failure does not, the restart limit. The real thing runs in e2e
(test_action_replace_under_an_auto_resume_step); an srun that was not told that its step ended is ended
with the step's exit code."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.unit.scripts import load_script

PATH = Path(__file__).resolve().parents[2] / "roles" / "common" / "files" / "srun-auto-resume"


def exit_():
    raise SystemExit(0)  # os.execv does not return


@pytest.fixture
def wrapper():
    return load_script("srun_auto_resume", PATH)


@pytest.mark.parametrize("argv,want,rest", [
    (["--auto-resume=1", "-N2", "train.sh"], "1", ["-N2", "train.sh"]),
    (["-N", "2", "--auto-resume", "1", "-p", "dev", "hostname"], "1", ["-N", "2", "-p", "dev", "hostname"]),
    (["-N2", "sh", "-c", "echo --auto-resume=1"], None, ["-N2", "sh", "-c", "echo --auto-resume=1"]),  # the command's
    (["--auto-resume=0", "hostname"], "0", ["hostname"]),
    (["-w", "a,b", "--", "--auto-resume=1"], None, ["-w", "a,b", "--", "--auto-resume=1"]),
])
def test_split_finds_only_sruns_own_option(wrapper, argv, want, rest):
    assert wrapper.split(argv) == (want, rest)


def test_without_the_option_it_is_slurms_srun(wrapper, monkeypatch):
    called = []
    monkeypatch.setattr(wrapper.os, "execv", lambda path, args: called.append((path, args)) or exit_())
    monkeypatch.setattr(wrapper, "run", lambda args, tag=None: pytest.fail("must exec, not run"))
    with pytest.raises(SystemExit):
        wrapper.main(["-N2", "hostname"])
    assert called == [("/usr/bin/srun", ["/usr/bin/srun", "-N2", "hostname"])]


def test_a_node_failure_restarts_the_step_and_another_failure_does_not(wrapper, monkeypatch, capsys):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    codes, ran = [1, 0], []
    monkeypatch.setattr(wrapper, "run", lambda args, tag=None: ran.append(args) or codes.pop(0))
    monkeypatch.setattr(wrapper, "job_state", lambda tag: ("12", "NODE_FAIL"))
    assert wrapper.main(["--auto-resume=1", "-N2", "train.sh"]) == 0
    assert len(ran) == 2 and ran[0] == ran[1] and ran[0][0].startswith("--comment=slurmlab-auto-resume-")
    assert "job 12 ended NODE_FAIL (a node failed): starting the step again (restart 1 of 3)" in capsys.readouterr().err
    monkeypatch.setattr(wrapper, "run", lambda args, tag=None: 7)
    monkeypatch.setattr(wrapper, "job_state", lambda tag: ("13", "FAILED"))
    assert wrapper.main(["--auto-resume=1", "false"]) == 7  # the program's own failure: not restarted


def test_the_restarts_are_bounded(wrapper, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("SLURMLAB_AUTO_RESUME_MAX", "2")
    ran = []
    monkeypatch.setattr(wrapper, "run", lambda args, tag=None: ran.append(1) or 1)
    monkeypatch.setattr(wrapper, "job_state", lambda tag: ("12", "NODE_FAIL"))
    assert wrapper.main(["--auto-resume=1", "x"]) == 1 and len(ran) == 3


def test_inside_an_allocation_it_says_so_and_runs_srun_once(wrapper, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_ID", "5")
    called = []
    monkeypatch.setattr(wrapper.os, "execv", lambda path, args: called.append(args) or exit_())
    with pytest.raises(SystemExit):
        wrapper.main(["--auto-resume=1", "train.sh"])
    assert called == [["/usr/bin/srun", "train.sh"]] and "requeues a batch job" in capsys.readouterr().err


def test_the_users_own_comment_finds_the_job(wrapper, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    tags, codes, ran = [], [1, 0], []
    monkeypatch.setattr(wrapper, "run", lambda args, tag=None: ran.append(args) or codes.pop(0))
    monkeypatch.setattr(wrapper, "job_state", lambda tag: tags.append(tag) or ("12", "NODE_FAIL"))
    assert wrapper.main(["--auto-resume=1", "--comment", "run-7", "train.sh"]) == 0
    assert tags == ["run-7"] and ran[0] == ["--comment", "run-7", "train.sh"]


def _slurm(monkeypatch, wrapper, squeue, steps, sacct):
    said = {"squeue": squeue, "steps": steps, "sacct": sacct}

    def out(*cmd):
        return said["steps" if "--steps" in cmd else cmd[0]]
    monkeypatch.setattr(wrapper, "_out", out)
    return said


def test_a_step_ended_without_srun_knowing_is_found(wrapper, monkeypatch):
    said = _slurm(monkeypatch, wrapper, "41|RUNNING|tag-1\n40|COMPLETED|tag-2\n", "41.extern\n", "CANCELLED by 1001|0:15\n")
    assert wrapper.step_untold("tag-1") == ("41", "CANCELLED by 1001|0:15")
    said["steps"] = "41.extern\n41.0\n"  # the step still runs
    assert wrapper.step_untold("tag-1") is None
    said["steps"], said["sacct"] = "41.extern\n", ""  # not started yet: no record of step 0
    assert wrapper.step_untold("tag-1") is None
    said["sacct"] = "RUNNING|0:0\n"
    assert wrapper.step_untold("tag-1") is None
    said["squeue"], said["sacct"] = "41|PENDING|tag-1\n", "COMPLETED|0:0\n"
    assert wrapper.step_untold("tag-1") is None


@pytest.mark.parametrize("end,rc", [("COMPLETED|0:0", 0), ("FAILED|3:0", 3), ("CANCELLED by 1001|0:15", 143),
                                    ("NODE_FAIL|0:0", 1)])
def test_the_steps_exit_code(wrapper, end, rc):
    assert wrapper.exit_code(end) == rc


class Child:
    """srun as the wrapper sees it: it has not ended at each wait, until `ends_after` waits."""
    def __init__(self, ends_after=None):
        self.waits, self.killed, self.ends_after = 0, False, ends_after

    def wait(self, timeout=None):
        if self.killed:
            return -9
        self.waits += 1
        if self.ends_after is not None and self.waits > self.ends_after:
            return 0
        raise subprocess.TimeoutExpired("srun", timeout)


def test_srun_that_was_not_told_is_ended_after_a_minute_with_the_steps_code(wrapper, monkeypatch, capsys):
    clock = iter(range(0, 10_000, 15))
    monkeypatch.setattr(wrapper.time, "monotonic", lambda: next(clock))
    monkeypatch.setattr(wrapper, "step_untold", lambda tag: ("41", "COMPLETED|0:0"))
    cancelled = []
    monkeypatch.setattr(wrapper.subprocess, "run", lambda cmd, **kw: cancelled.append(cmd))
    child = Child()
    child.kill = lambda: setattr(child, "killed", True)
    assert wrapper.wait(child, "tag-1", every=15, untold_s=60) == 0
    assert child.killed and cancelled == [["scancel", "41"]] and child.waits == 4
    assert "step 41.0 ended COMPLETED|0:0 on its nodes 60 s ago, but srun was not told" in capsys.readouterr().err


def test_srun_that_ends_itself_is_left_alone(wrapper, monkeypatch):
    seen = iter([("41", "COMPLETED|0:0"), None, ("41", "COMPLETED|0:0")])
    monkeypatch.setattr(wrapper, "step_untold", lambda tag: next(seen))
    monkeypatch.setattr(wrapper.subprocess, "run", lambda cmd, **kw: pytest.fail("nothing to cancel"))
    child = Child(ends_after=3)
    child.kill = lambda: pytest.fail("srun ended by itself")
    assert wrapper.wait(child, "tag-1", every=15, untold_s=60) == 0
