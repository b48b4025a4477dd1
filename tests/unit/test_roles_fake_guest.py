"""The failure paths of the playbooks, run by the real ansible-core on this machine.

What tests/e2e/test_cluster.py cannot show on real VMs without breaking a cluster on purpose:
that a failed join, a drain that times out, a slurmctld that does not serve its nodes and a
failing OnCreate script stop the run with a message that names the problem (the node, the
state seen, the jobs, the daemon's journal, the script's output). Also leave.yml's controller
play: one `scontrol reconfigure`, the node gone from slurm.conf, nothing changed on a rerun.

Every host of the sample inventory is this machine (`ansible_connection=local`), every file the
roles write is redirected into a temporary folder through role variables, and systemctl,
scontrol, sinfo, squeue, journalctl and findmnt are fakes on PATH that share one JSON state. No
root, no VMs; a few seconds per playbook. What it cannot prove: anything about real Slurm,
systemd or NFS (the e2e suite runs every playbook on real VMs, a second run with changed=0).
"""

import getpass
import grp
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from tests.unit.test_roles import INVENTORY, ROOT, _ansible_tool, _env

FAKE = r'''#!PYTHON
"""Fake systemctl/scontrol/sinfo/squeue/journalctl/findmnt for test_roles_fake_guest."""
import json, os, re, sys

STATE = os.environ["FAKE_STATE"]
prog = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(STATE) as f:
    s = json.load(f)
s["calls"].append(" ".join([prog] + args))


def loaded():
    return re.findall(r"(?m)^NodeName=(\S+)", s["loaded"])


def main():
    if prog == "systemctl":
        cmd, unit = (args + ["", ""])[:2]
        u = s["units"].setdefault(unit, {"enabled": False, "active": False})
        if cmd == "is-active":
            print("active" if u["active"] else "inactive")
            return 0 if u["active"] else 3
        if cmd == "is-enabled":
            print("enabled" if u["enabled"] else "disabled")
            return 0 if u["enabled"] else 1
        if cmd == "enable":
            u["enabled"] = True
        elif cmd in ("start", "restart"):
            u["active"] = True
        return 0
    if prog == "journalctl":
        unit = args[args.index("--unit") + 1]
        print(f"fake journal of {unit}: error: fake failure")
        print(f"fake journal of {unit}: lines asked: {args[args.index('--lines') + 1]}")
        return 0
    if prog == "findmnt":
        print("nfs4")
        return 0
    if prog == "scontrol":
        a = [x for x in args if x not in ("--oneliner", "-o")]
        if a == ["reconfigure"]:
            s["reconfigures"] += 1
            if not s["stale"]:
                with open(os.path.join(os.environ["FAKE_CONF_DIR"], "slurm.conf")) as f:
                    s["loaded"] = f.read()
            return 0
        if a[:2] == ["show", "nodes"]:
            for n in loaded():
                print(f"NodeName={n} Arch=x86_64 State=IDLE Reason=none")
            return 0
        if a[:2] == ["show", "node"]:
            if a[2] not in loaded():
                print(f"Node {a[2]} not found")
                return 1
            state = "IDLE+DRAIN" if a[2] in s["drained"] else "IDLE"
            if a[2] in s["unresponsive"]:
                state = "DOWN+NOT_RESPONDING"
            print(f"NodeName={a[2]} Arch=x86_64 State={state} Reason=Not responding [slurm@now]")
            return 0
        if a[:1] == ["update"]:
            s["drained"].append(a[1].split("=", 1)[1])
            return 0
        return 1
    if prog == "sinfo":
        n = args[args.index("--nodes") + 1]
        if n in loaded():
            print("unknown*" if n in s["unresponsive"] else "idle")
        return 0
    if prog == "squeue":
        for job in s["jobs"]:
            print(job)
        return 0
    return 1


rc = main()
with open(STATE, "w") as f:
    json.dump(s, f)
sys.exit(rc)
'''

NODES = {n["name"]: n for n in yaml.safe_load(INVENTORY.read_text())["all"]["vars"]["slurmlab_slurm_nodes"]}


class Lab:
    """The sample inventory's hosts, all on this machine, with fake Slurm and systemd commands."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.conf = tmp / "etc-slurm"
        self.state = tmp / "state.json"
        for d in (self.bin, self.conf, tmp / "home", tmp / "fsx", tmp / "lifecycle"):
            d.mkdir()
        fake = self.bin / "fake"
        fake.write_text(FAKE.replace("PYTHON", sys.executable, 1))
        fake.chmod(0o755)
        for name in ("systemctl", "scontrol", "sinfo", "squeue", "journalctl", "findmnt"):
            (self.bin / name).symlink_to(fake)
        self.write_state(units={}, loaded="", reconfigures=0, drained=[], jobs=[], unresponsive=[], stale=False,
                         calls=[])
        for host in ("demo-controller-1", "demo-login-1", "demo-compute-1", "demo-compute-2", "demo-gpu-1"):
            (tmp / f"hosts-{host}").write_text("127.0.0.1 localhost\n")
        (tmp / "lifecycle" / "on_create.sh").write_text(
            'echo "$SLURMLAB_NODE_NAME $SLURMLAB_NODE_TYPE $SLURMLAB_CLUSTER" > on-create.out\n'
            '[ ! -e "$FAIL_ON_CREATE" ] || { echo "boom"; exit 3; }\n')
        # every path the roles write, in tmp; the connection is local, as this user
        self.vars = {
            "ansible_connection": "local", "ansible_become": False, "ansible_python_interpreter": sys.executable,
            "common_hosts_file": str(tmp / "hosts-") + "{{ inventory_hostname }}",
            "common_chrony_file": str(tmp / "chrony-") + "{{ inventory_hostname }}.conf",
            "common_auto_resume_file": str(tmp / "srun-") + "{{ inventory_hostname }}",
            "slurm_controller_conf_dir": str(self.conf),
            "slurm_controller_conf_owner": getpass.getuser(),
            "slurm_controller_conf_group": grp.getgrgid(os.getgid()).gr_name,
            "slurm_controller_ready_delay": 1, "slurm_controller_drain_delay": 1,
            "nfs_client_mounts": [str(tmp / "home"), str(tmp / "fsx")], "nfs_client_wait_delay": 1,
            "nfs_client_unit_dir": str(tmp / "units"),
            "slurm_node_join_delay": 1, "slurm_node_client_check": False,
            "slurmlab_lifecycle_dir": str(tmp / "lifecycle"),
            "slurmlab_lifecycle_dest": str(tmp / "lifecycle-dest"),
            "slurmlab_lifecycle_marker": str(tmp / "lifecycle-on-create.done"),
            "slurmlab_lifecycle_log": str(tmp / "provision" / "provisioning.log"),
            "slurmlab_lifecycle_live": str(tmp / "provision" / "on-create.out"),
        }

    def read_state(self):
        return json.loads(self.state.read_text())

    def write_state(self, **changes):
        state = self.read_state() if self.state.exists() else {}
        state.update(changes)
        self.state.write_text(json.dumps(state))

    def serve(self, *names):
        """slurmctld runs with a slurm.conf that lists these nodes (controller.yml ran before)."""
        text = "".join(f"NodeName={n} CPUs=1 RealMemory=400\n" for n in names)
        self.write_state(loaded=text)

    def run(self, playbook, limit, expect_rc=0, **extra):
        extra_file = self.tmp / "extra.json"
        extra_file.write_text(json.dumps({**self.vars, **extra}))
        cmd = [_ansible_tool("ansible-playbook"), "-i", str(INVENTORY), str(ROOT / "playbooks" / playbook),
               "--limit", limit, "-e", f"@{extra_file}"]
        env = _env(self.tmp)
        env.update(PATH=f"{self.bin}:{env['PATH']}", FAKE_STATE=str(self.state), FAKE_CONF_DIR=str(self.conf),
                   FAIL_ON_CREATE=str(self.tmp / "fail-on-create"), ANSIBLE_FORKS="5")
        proc = subprocess.run(cmd, cwd=self.tmp, env=env, capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == expect_rc, out[-6000:]
        recap = {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
                 for m in re.finditer(r"(?m)^(\S+)\s+:\s+(ok=.*)$", out)}
        return recap, " ".join(out.split())  # one line: messages are folded


@pytest.fixture
def lab(tmp_path):
    return Lab(tmp_path)


def _changed(recap):
    return {host: stats["changed"] for host, stats in recap.items() if stats["changed"]}


def _nodes(*names):
    return [NODES[n] for n in names]


def test_join_reconfigures_once_and_a_failed_join_names_node_state_and_journal(lab):
    lab.serve("demo-compute-1", "demo-compute-2")
    lab.write_state(unresponsive=["demo-gpu-1"])
    nodes = _nodes("demo-compute-1", "demo-compute-2", "demo-gpu-1")
    recap, out = lab.run("join.yml", "demo-controller-1,demo-gpu-1", expect_rc=2,
                         slurmlab_slurm_nodes=nodes, slurm_node_join_timeout=2)
    assert lab.read_state()["reconfigures"] == 1, "one reconfigure for the batch"
    assert "NodeName=demo-gpu-1" in (lab.conf / "slurm.conf").read_text()
    assert recap["demo-controller-1"]["failed"] == 0 and recap["demo-gpu-1"]["failed"] == 1, out
    assert "Node demo-gpu-1 did not join within 2 s: sinfo on demo-controller-1 shows state 'unknown*'" in out
    assert "Controller record: State=DOWN+NOT_RESPONDING Reason=Not responding [slurm@now]." in out
    # role common's tasks/journal.yml, with slurm_node_journal_lines
    assert ("Last lines of slurmd's journal on demo-gpu-1: fake journal of slurmd: error: fake failure"
            " | fake journal of slurmd: lines asked: 30") in out
    assert "journalctl --unit slurmd --lines 30 --no-pager --output cat" in lab.read_state()["calls"]

    lab.write_state(unresponsive=[])
    recap, out = lab.run("join.yml", "demo-controller-1,demo-gpu-1", slurmlab_slurm_nodes=nodes)
    assert lab.read_state()["reconfigures"] == 1, "slurm.conf was rendered by the failed run: no second reconfigure"
    assert _changed(recap) == {}, out


def test_a_controller_that_does_not_serve_the_new_nodes_is_named_with_its_journal(lab):
    lab.serve("demo-compute-1")
    lab.write_state(stale=True)  # reconfigure "succeeds" but slurmctld keeps the old node set
    recap, out = lab.run("join.yml", "demo-controller-1", expect_rc=2,
                         slurmlab_slurm_nodes=_nodes("demo-compute-1", "demo-compute-2"), slurm_controller_ready_timeout=2)
    assert ("slurmctld on demo-controller-1 did not serve the expected nodes within 2 s."
            " Expected: demo-compute-1, demo-compute-2. Seen: demo-compute-1.") in out
    assert ("Last lines of slurmctld's journal: fake journal of slurmctld: error: fake failure"
            " | fake journal of slurmctld: lines asked: 30") in out


def test_leave_names_the_jobs_then_reconfigures_once(lab):
    nodes = _nodes("demo-compute-1", "demo-compute-2", "demo-gpu-1")
    lab.serve("demo-compute-1", "demo-compute-2", "demo-gpu-1")
    lab.write_state(jobs=["42 vagrant RUNNING demo-gpu-1"])
    # the leaving node is away (only the controller in --limit): its stop play has no host
    leave = dict(slurmlab_slurm_nodes=nodes, slurmlab_leaving=["demo-gpu-1"], slurmlab_drain_timeout=1)
    recap, out = lab.run("leave.yml", "demo-controller-1", expect_rc=2, **leave)
    assert "Jobs still run on demo-gpu-1 after 1 s of draining: 42 vagrant RUNNING demo-gpu-1." in out
    assert "slurmlab_drain_force: true" in out
    assert lab.read_state()["reconfigures"] == 0 and not (lab.conf / "slurm.conf").exists()

    lab.write_state(jobs=[])
    recap, out = lab.run("leave.yml", "demo-controller-1", **leave)
    state = lab.read_state()
    assert state["drained"] == ["demo-gpu-1"], "drained once, not again on the second try"
    assert state["reconfigures"] == 1
    assert re.findall(r"(?m)^NodeName=(\S+)", state["loaded"]) == ["demo-compute-1", "demo-compute-2"]
    # the controller play runs slurm_controller's tasks/join.yml only (no probe, no start, no validate)
    assert not any(c.startswith("systemctl") for c in state["calls"]), state["calls"]

    recap, out = lab.run("leave.yml", "demo-controller-1", **leave)
    assert _changed(recap) == {}, out
    assert lab.read_state()["reconfigures"] == 1


def test_on_create_runs_once_and_a_failure_names_script_exit_and_output(lab):
    (lab.tmp / "fail-on-create").touch()
    recap, out = lab.run("lifecycle.yml", "demo-compute-2", expect_rc=2)
    assert ("on_create.sh failed on demo-compute-2 (exit 3). After a fix: slurmlab lifecycle rerun demo "
            "demo-compute-2. Last lines of its output: boom") in out
    assert not (lab.tmp / "lifecycle-on-create.done").exists()
    # the output as it came (what `slurmlab lifecycle rerun` follows): the last run's
    assert (lab.tmp / "provision" / "on-create.out").read_text() == "boom\n"

    (lab.tmp / "fail-on-create").unlink()
    recap, out = lab.run("lifecycle.yml", "demo-compute-2")
    assert (lab.tmp / "lifecycle-dest" / "on-create.out").read_text() == "demo-compute-2 Compute demo\n"
    assert (lab.tmp / "lifecycle-on-create.done").read_text() == "on_create.sh\n"
    assert recap["demo-compute-2"]["changed"] == 1
    recap, out = lab.run("lifecycle.yml", "demo-compute-2")
    assert _changed(recap) == {}, out
    # every run's output is kept in the provisioning log (`slurmlab logs NAME NODE --lifecycle`)
    log = (lab.tmp / "provision" / "provisioning.log").read_text()
    assert log.count("slurmlab: ./on_create.sh on demo-compute-2, started ") == 2
    assert ", exit 3\nboom\n" in log and ", exit 0\n" in log


def test_a_failed_step_is_named_with_its_last_lines_without_the_traceback(lab):
    """Scripts that say which step runs ("Execute script: ./X", as AWS's lifecycle_script.py does):
    the message names the failing step and shows its last lines, not the Python traceback after."""
    (lab.tmp / "lifecycle" / "on_create.sh").write_text(
        f'echo "own log line" >> {lab.tmp / "provision" / "provisioning.log"}\n'
        'echo "Execute script: ./add_users.sh"\necho "users added"\n'
        'echo "Execute script: ./setup_accounting.sh controller "\n'
        'for i in 1 2 3 4 5 6; do echo "line $i"; done\necho "E: no such command: mysqll" >&2\n'
        'echo "Traceback (most recent call last):"\necho \'  File "lifecycle.py", line 9\'\n'
        'echo "subprocess.CalledProcessError: returned non-zero exit status 127."\nexit 1\n')
    recap, out = lab.run("lifecycle.yml", "demo-compute-2", expect_rc=2)
    assert ("on_create.sh failed on demo-compute-2 (exit 1) in step ./setup_accounting.sh controller. "
            "After a fix: slurmlab lifecycle rerun demo demo-compute-2. Last lines of its output: line 4 | line 5 | line 6 | E: no such command: mysqll") in out, out
    assert "users added" not in out.split("in step")[1] and "CalledProcessError" not in out.split("in step")[1]
    # the script wrote the provisioning log itself (as AWS's on_create.sh does): the lab adds nothing
    assert (lab.tmp / "provision" / "provisioning.log").read_text() == "own log line\n"
