"""lab/testing: what the pytest plugin's LabCluster sends to the nodes, and how it reads Slurm's answers
(no VM: the ssh command is faked)."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from lab.testing import cluster as tc
from lab.testing.jobs import Job, parse_sacct, state_of


def test_sbatch_options_become_long_options():
    assert tc._sbatch_options({"nodes": 2, "ntasks_per_node": 1, "exclusive": True, "x": False, "y": None}) == [
        "--nodes=2", "--ntasks-per-node=1", "--exclusive"]


def test_sacct_row_and_state():
    row = "17|hello|user01|dev|CANCELLED by 5001|0:0|c-compute-1|1|00:00:02|2026-12-07T10:00:00|2026-12-07T10:00:02"
    rec = parse_sacct("\n" + row + "\n")
    assert rec["JobID"] == "17" and rec["NodeList"] == "c-compute-1" and state_of(rec) == "CANCELLED"
    assert parse_sacct("") is None and state_of(None) == ""


class _Node:
    name, address = "c-login-1", "10.0.0.5"


@pytest.fixture
def faked(monkeypatch):
    """LabCluster with its node lookup and ssh faked: the remote lines it sent, and what they answer."""
    sent, answers = [], []
    monkeypatch.setattr(tc.LabCluster, "node", lambda self, node: _Node())
    monkeypatch.setattr("lab.providers.kept.command", lambda cluster, address, remote, persist_s=60: ["ssh", *remote])

    def run(cmd, **kw):
        sent.append(cmd[-1])
        rc, out = answers.pop(0) if answers else (0, "")
        return subprocess.CompletedProcess(cmd, rc, out, "boom" if rc else "")

    monkeypatch.setattr(tc.subprocess, "run", run)
    return sent, answers


def test_run_as_a_user_and_as_root(faked):
    sent, _ = faked
    c = tc.LabCluster("c")
    c.run("login", "echo $HOME", user="user01")
    c.run("login", "whoami", user="root")
    c.run("login", "hostname")
    assert sent[0] == "sudo -u user01 -H -- sh -c " + shlex.quote("cd && echo $HOME")
    assert sent[1] == "sudo -H -- sh -c whoami"
    assert sent[2] == "hostname"


def test_a_failed_command_names_the_node_the_user_and_its_output(faked):
    _, answers = faked
    answers.append((3, "half"))
    with pytest.raises(tc.CommandFailed, match="'false' on c-login-1 as user02 exited 3:\nhalfboom"):
        tc.LabCluster("c").run("login", "false", user="user02")
    answers.append((3, ""))
    assert tc.LabCluster("c").run("login", "false", check=False).returncode == 3


def test_sbatch_sends_the_script_on_stdin_and_knows_its_output_file(faked):
    sent, answers = faked
    answers.append((0, "42\n"))
    job = tc.LabCluster("c").sbatch("#!/bin/sh\nsrun hostname\n", user="user01", nodes=2)
    assert isinstance(job, Job) and job.id == "42" and job.user == "user01"
    assert job.output_path == "/fsx/user01/slurm-42.out"
    remote = shlex.split(sent[0])[-1]  # what sh -c runs as user01
    assert remote.startswith("cd && mkdir -p /fsx/user01 && printf %s ")
    assert "'#!/bin/sh\nsrun hostname\n' | sbatch --parsable --chdir=/fsx/user01 --output=slurm-%j.out --nodes=2" in remote
    answers.append((0, "43;cluster\n"))
    job = tc.LabCluster("c").sbatch("#!/bin/sh\ntrue\n", user="u", output="/tmp/o-%j-%u.txt")
    assert job.id == "43" and job.output_path == "/tmp/o-43-u.txt"
    answers.append((0, "sbatch: error: nope\n"))
    with pytest.raises(tc.CommandFailed, match="no job id"):
        tc.LabCluster("c").sbatch("#!/bin/sh\n", user="u")


def test_job_wait_returns_the_final_state_and_names_the_last_one_on_timeout(faked, monkeypatch):
    _, answers = faked
    monkeypatch.setattr("lab.testing.jobs.time.sleep", lambda s: None)
    row = "7|j|u|dev|{}|0:0|n1|1|00:00:01|a|b"
    answers.extend([(0, ""), (0, row.format("RUNNING")), (0, row.format("COMPLETED"))])
    job = Job(tc.LabCluster("c"), "7", "u", "/fsx/u/slurm-7.out")
    assert job.wait() == "COMPLETED"
    answers.extend([(0, row.format("PENDING"))] * 3)
    with pytest.raises(AssertionError, match="job 7 on c is PENDING after 0 s"):
        job.wait(timeout=0)


def test_the_testinfra_host_runs_the_labs_ssh_not_the_one_on_path(monkeypatch, tmp_path):
    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path))
    monkeypatch.setattr(tc.LabCluster, "node", lambda self, node: _Node())
    monkeypatch.setattr("lab.providers.reach.cluster_ssh_exe", lambda cluster: "/lab/bin/ssh-in-netns")
    host = tc.LabCluster("c").host("login")
    cmd, args = host.backend._build_ssh_command("true")
    line = " ".join(cmd) % tuple(args)
    assert line.startswith("/lab/bin/ssh-in-netns ") and line.endswith(" 10.0.0.5 true")
    assert "-o User=vagrant" in line and "ControlPath=/tmp/slurmlab-cm-" in line and "/clusters/c/secrets/id_ed25519" in line


def test_the_e2e_suites_job_state_reads_the_plugins_sacct_record(faked, monkeypatch):
    from tests.e2e.labcli import Cluster

    sent, answers = faked
    monkeypatch.setattr("lab.testing.jobs.time.sleep", lambda s: None)
    monkeypatch.setattr("tests.e2e.labcli.time.sleep", lambda s: None)
    row = "9|j|u|dev|{}|0:0|c-compute-1|1|00:00:01|a|b"
    answers.extend([(0, ""), (0, row.format("RUNNING")), (0, row.format("CANCELLED by 5001"))])
    assert Cluster("c").job_state("9") == ("CANCELLED", "c-compute-1")
    assert sent[0].startswith("sacct -n -X -P -j 9 -o JobID,")
    answers.append((0, row.format("RUNNING")))
    assert Cluster("c").job_state("9", timeout=0) == ("RUNNING", "c-compute-1")  # the last seen, at the timeout
