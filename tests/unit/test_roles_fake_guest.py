"""The playbooks end to end against fake guests: no VMs, real ansible-core.

Each inventory host gets a private mount and UTS namespace on this machine
(overlays over /etc, /var/lib and /opt, a tmpfs /run) and is reached through
a python wrapper that enters it, so the hosts do not see each other's files.
systemctl, scontrol, sinfo, squeue and journalctl are fakes that share one
JSON state (units per host, the configuration slurmctld has loaded, drained
nodes, jobs). What this proves: the playbooks run (templating, conditionals,
handlers, delegation), a second run reports changed=0, a join or a leave does
one `scontrol reconfigure`, and the failure paths name the problem. What it
cannot prove: anything about real Slurm, munge or systemd.

Opt-in (about two minutes on 2 cores): set SLURMLAB_FAKE_GUESTS=1. Needs
root, unshare/nsenter and overlayfs (as on slurmlab's dev machines and CI);
skips otherwise.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = Path(__file__).parent / "data" / "inventory.yml"

FAKE = r'''#!/usr/bin/python3
"""Fake systemctl/scontrol/sinfo/squeue/journalctl for test_roles_fake_guest."""
import fcntl, json, os, re, sys

STATE = os.environ["FAKE_GUEST_STATE"]
UNITS = ("munge", "slurmctld", "slurmd", "sackd", "ssh")


def host():
    with open("/etc/fake-guest-host") as f:
        return f.read().strip()


def loaded(s):
    return re.findall(r"(?m)^NodeName=(\S+)", s["loaded"])


def main(s):
    prog = os.path.basename(sys.argv[0])
    if prog not in ("scontrol", "sinfo", "squeue", "journalctl"):
        prog = "systemctl"
    args = [a.strip("'") for a in sys.argv[1:]]
    s["calls"].append(prog + " " + " ".join(args))
    me = host()
    units = s["units"].setdefault(me, {u: {"enabled": u == "ssh", "active": u == "ssh"} for u in UNITS})
    ctl = s["units"].get(s["controller"], {}).get("slurmctld", {})
    if prog == "systemctl":
        wanted = [a.split("=", 1)[1] for a in args if a.startswith("--property=")]
        now = "--now" in args  # enable --now / disable --now
        args = [a for a in args if a not in ("--no-pager", "--plain", "--all", "-l", "--now")
                and not a.startswith("--property=")]
        cmd, unit = (args + ["", ""])[:2]
        unit = unit.replace(".service", "")
        u = units.get(unit)
        if cmd == "show":  # several units: one block each, separated by an empty line
            for i, name in enumerate(a.replace(".service", "") for a in args[1:]):
                v = units.get(name)
                props = {"Id": f"{name}.service", "LoadState": "loaded" if v else "not-found",
                         "ActiveState": "active" if v and v["active"] else "inactive",
                         "SubState": "running" if v and v["active"] else "dead"}
                if v:
                    props["UnitFileState"] = "enabled" if v["enabled"] else "disabled"
                if i:
                    print()
                for k in wanted or props:  # systemctl show --property=A --property=B prints A then B
                    if k in props:
                        print(f"{k}={props[k]}")
            return 0
        if cmd == "is-enabled":
            print("enabled" if u and u["enabled"] else "disabled")
            return 0 if u and u["enabled"] else 1
        if cmd == "is-active":
            print("active" if u and u["active"] else "inactive")
            return 0 if u and u["active"] else 3
        if cmd == "list-units":
            for name, v in units.items():
                print(f"{name}.service loaded {'active running' if v['active'] else 'inactive dead'} {name}")
            return 0
        if cmd == "list-unit-files":
            for name, v in units.items():
                print(f"{name}.service {'enabled' if v['enabled'] else 'disabled'} enabled")
            return 0
        if cmd == "daemon-reload":
            return 0
        if not u:
            print(f"Unit {unit}.service not found.", file=sys.stderr)
            return 5
        if cmd in ("start", "restart"):
            if unit == "slurmd" and me in s["fail_slurmd"]:
                print("Job for slurmd.service failed", file=sys.stderr)
                return 1
            u["active"] = True
            if unit == "slurmctld":
                s["loaded"] = open("/etc/slurm/slurm.conf").read()
            if unit == "munge" and cmd == "restart":
                s["munge_restarts"] += 1
        elif cmd == "stop":
            u["active"] = False
        elif cmd in ("enable", "disable"):
            u["enabled"] = cmd == "enable"
            if now:
                u["active"] = cmd == "enable"
                if unit == "slurmctld" and u["active"]:
                    s["loaded"] = open("/etc/slurm/slurm.conf").read()
        else:
            return 1
        return 0
    if prog == "journalctl":
        print("fake journal: slurmd: error: fake failure")
        return 0
    if not ctl.get("active"):
        print("Unable to contact slurm controller (connect failure)", file=sys.stderr)
        return 1
    if prog == "scontrol":
        args = [a for a in args if a not in ("--oneliner", "-o")]
        if args == ["reconfigure"]:
            s["loaded"] = open("/etc/slurm/slurm.conf").read()
            s["reconfigures"] += 1
            return 0
        if args == ["ping"]:
            print(f"Slurmctld(primary) at {s['controller']} is UP")
            return 0
        names = loaded(s)
        if args[:2] == ["show", "nodes"] or args[:2] == ["show", "node"]:
            wanted = names if args[1] == "nodes" else [args[2]]
            if args[1] == "node" and args[2] not in names:
                print(f"Node {args[2]} not found")
                return 1
            if not wanted:
                print("No nodes in the system")
            for n in wanted:
                state = "IDLE+DRAIN" if n in s["drained"] else "IDLE"
                print(f"NodeName={n} Arch=x86_64 CoresPerSocket=1 State={state} Reason=none")
            return 0
        if args[:1] == ["update"]:
            s["drained"].append(args[1].split("=", 1)[1])
            return 0
        return 1
    if prog == "sinfo":
        n = args[args.index("--nodes") + 1]
        if n in loaded(s):
            up = s["units"].get(n, {}).get("slurmd", {}).get("active") and n not in s["unresponsive"]
            print("idle\nidle" if up else "unknown*")
        return 0
    if prog == "squeue":
        for job in s["jobs"]:
            print(job)
        return 0
    return 1


with open(STATE + ".lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    with open(STATE) as f:
        state = json.load(f)
    rc = main(state)
    with open(STATE, "w") as f:
        json.dump(state, f)
sys.exit(rc)
'''

HOLDER = r'''
set -e
for d in etc opt; do
  mount -t overlay overlay -o lowerdir=/$d,upperdir=$H/$d/up,workdir=$H/$d/work /$d
done
mount -t overlay overlay -o lowerdir=/var/lib,upperdir=$H/var/up,workdir=$H/var/work /var/lib
mount -t tmpfs tmpfs /run
mkdir -p /run/systemd/system /etc/munge /etc/slurm /var/lib/slurm/slurmctld
mount --bind $FAKE /usr/bin/systemctl
for u in munge slurm vagrant; do id $u >/dev/null 2>&1 || useradd -r -M -s /bin/sh $u; done
echo $NAME > /etc/fake-guest-host
hostname debian
echo ready > $H/ready
exec sleep 100000
'''


def _can_run():
    if os.environ.get("SLURMLAB_FAKE_GUESTS") != "1":
        return "opt-in: set SLURMLAB_FAKE_GUESTS=1 (about two minutes)"
    if os.geteuid() != 0:
        return "needs root (mount namespaces and overlayfs)"
    for tool in ("unshare", "nsenter", "useradd", "/usr/bin/python3", "/usr/bin/systemctl"):
        if not shutil.which(tool) and not Path(tool).exists():
            return f"{tool} not found"
    probe = subprocess.run(
        ["unshare", "--mount", "--uts", "--fork", "sh", "-c",
         "d=$(mktemp -d) && mkdir $d/u $d/w && mount -t overlay overlay "
         "-o lowerdir=/etc,upperdir=$d/u,workdir=$d/w /etc; r=$?; rm -rf $d; exit $r"],
        capture_output=True, text=True)
    if probe.returncode != 0:
        return "cannot mount an overlay in a private mount namespace: " + probe.stderr.strip()
    return None


def _ansible_playbook():
    local = Path(sys.executable).parent / "ansible-playbook"
    return str(local) if local.exists() else shutil.which("ansible-playbook")


class Guests:
    """Fake guests, one namespace per inventory host, and a way to run playbooks on them."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.state = tmp / "state.json"
        self.bin = tmp / "bin"
        self.bin.mkdir()
        fake = self.bin / "fake"
        fake.write_text(FAKE)
        fake.chmod(0o755)
        for name in ("scontrol", "sinfo", "squeue", "journalctl"):
            (self.bin / name).symlink_to(fake)
        inv = yaml.safe_load(INVENTORY.read_text())
        controller = next(iter(inv["all"]["children"]["slurm_controller"]["hosts"]))
        self.hosts = [h for group in inv["all"]["children"].values() for h in group["hosts"]]
        self.write_state(units={}, controller=controller, loaded="", reconfigures=0, munge_restarts=0,
                         drained=[], jobs=[], fail_slurmd=[], unresponsive=[], calls=[])
        self.holders = []
        self.targets = {}
        for name in self.hosts:
            h = tmp / "hosts" / name
            for d in ("etc", "var", "opt"):
                (h / d / "up").mkdir(parents=True)
                (h / d / "work").mkdir(parents=True)
            env = dict(os.environ, H=str(h), FAKE=str(fake), NAME=name)
            proc = subprocess.Popen(["unshare", "--mount", "--uts", "--propagation", "private", "--fork",
                                     "sh", "-c", HOLDER], env=env, start_new_session=True)
            self.holders.append(proc)
            for _ in range(100):
                if (h / "ready").exists():
                    break
                time.sleep(0.05)
            else:
                raise RuntimeError(f"fake guest {name} did not start")
            pid = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
            target = pid[0] if pid else str(proc.pid)
            self.targets[name] = target
            wrapper = self.bin / f"python-{name}"
            wrapper.write_text(f"#!/bin/sh\nexec nsenter --target {target} --mount --uts /usr/bin/python3 \"$@\"\n")
            wrapper.chmod(0o755)
        inv["all"]["vars"].update(
            ansible_connection="local", ansible_become=False,
            slurmlab_munge_key_src=str(tmp / "munge.key"), slurmlab_lifecycle_dir=str(tmp / "lifecycle"),
            slurm_node_client_user="root", slurm_node_join_delay=1, slurm_controller_ready_delay=1,
        )
        for group in inv["all"]["children"].values():
            for name, hostvars in group["hosts"].items():
                hostvars["ansible_python_interpreter"] = str(self.bin / f"python-{name}")
        self.inventory = tmp / "inventory.yml"
        self.inventory.write_text(yaml.safe_dump(inv, sort_keys=False))
        key = tmp / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        (tmp / "lifecycle").mkdir()
        (tmp / "lifecycle" / "on_create.sh").write_text(
            'echo "$SLURMLAB_NODE_NAME $SLURMLAB_NODE_TYPE $SLURMLAB_CLUSTER" > /var/lib/on-create.out\n'
            '[ ! -e /etc/fail-on-create ] || { echo "boom"; exit 3; }\n')

    def close(self):
        for proc in self.holders:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def sh(self, host, command):
        """Run a shell command inside a fake guest."""
        subprocess.run(["nsenter", "--target", self.targets[host], "--mount", "--uts", "sh", "-c", command],
                       check=True)

    def read_state(self):
        return json.loads(self.state.read_text())

    def write_state(self, **changes):
        state = self.read_state() if self.state.exists() else {}
        state.update(changes)
        self.state.write_text(json.dumps(state))

    def path(self, host, path):
        """A file as the fake guest sees it (its overlay's upper layer)."""
        top, rest = path.strip("/").split("/", 1)
        layer = {"etc": "etc", "opt": "opt", "var": "var"}[top]
        if top == "var":
            rest = rest.split("/", 1)[1]  # var/lib/...
        return self.tmp / "hosts" / host / layer / "up" / rest

    def run(self, playbook, *args, extra=None, expect_rc=0):
        cmd = [_ansible_playbook(), "-i", str(self.inventory), str(ROOT / "playbooks" / playbook), *args]
        if extra is not None:
            extra_file = self.tmp / "extra.json"
            extra_file.write_text(json.dumps(extra))
            cmd += ["-e", f"@{extra_file}"]
        env = dict(os.environ, PATH=f"{self.bin}:{os.environ['PATH']}", FAKE_GUEST_STATE=str(self.state),
                   ANSIBLE_ROLES_PATH=str(ROOT / "roles"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORKS="10", ANSIBLE_PIPELINING="True",
                   ANSIBLE_HOME=str(self.tmp / "ansible-home"), ANSIBLE_LOCAL_TEMP=str(self.tmp / "ansible-local"),
                   ANSIBLE_REMOTE_TMP=str(self.tmp / "ansible-remote"), ANSIBLE_RETRY_FILES_ENABLED="False")
        env.pop("ANSIBLE_CONFIG", None)
        proc = subprocess.run(cmd, cwd=self.tmp, env=env, capture_output=True, text=True, timeout=300)
        out = proc.stdout + proc.stderr
        assert proc.returncode == expect_rc, out
        recap = {m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
                 for m in re.finditer(r"(?m)^(\S+)\s+:\s+(ok=.*)$", out)}
        return recap, out


@pytest.fixture(scope="module")
def guests(tmp_path_factory):
    why = _can_run()
    if why:
        pytest.skip(why)
    if not _ansible_playbook():
        pytest.skip("ansible-playbook is not installed")
    g = Guests(tmp_path_factory.mktemp("guests"))
    yield g
    g.close()


def _changed(recap):
    return {host: stats["changed"] for host, stats in recap.items() if stats["changed"]}


def _nodes(*names):
    inv = yaml.safe_load(INVENTORY.read_text())
    by_name = {n["name"]: n for n in inv["all"]["vars"]["slurmlab_slurm_nodes"]}
    return {"slurmlab_slurm_nodes": [by_name[n] for n in names]}


# The steps build on each other, in file order (pytest keeps it).

def test_controller_first_run_and_rerun(guests):
    recap, out = guests.run("controller.yml", extra=_nodes())
    assert recap["demo-controller-1"]["failed"] == 0
    state = guests.read_state()
    assert state["units"]["demo-controller-1"]["slurmctld"] == {"enabled": True, "active": True}
    assert state["units"]["demo-controller-1"]["munge"] == {"enabled": True, "active": True}
    assert state["reconfigures"] == 0, "the first start is a plain start"
    key = guests.path("demo-controller-1", "/etc/munge/munge.key")
    assert key.read_bytes() == (guests.tmp / "munge.key").read_bytes()
    assert oct(key.stat().st_mode & 0o777) == "0o400"
    assert "# BEGIN slurmlab cluster demo" in guests.path("demo-controller-1", "/etc/hosts").read_text()
    assert guests.path("demo-controller-1", "/etc/hostname").read_text() == "demo-controller-1\n"
    assert "NodeName=" not in guests.path("demo-controller-1", "/etc/slurm/slurm.conf").read_text()
    recap, out = guests.run("controller.yml", extra=_nodes())
    assert _changed(recap) == {}, out


def test_nodes_prepare_without_starting_slurmd(guests):
    recap, out = guests.run("nodes.yml", extra=_nodes())
    assert set(recap) == {"demo-login-1", "demo-compute-1", "demo-compute-2", "demo-gpu-1"}
    units = guests.read_state()["units"]
    assert units["demo-login-1"]["sackd"] == {"enabled": True, "active": True}
    assert not units["demo-compute-1"]["slurmd"]["active"]
    assert 'SLURMD_OPTIONS="--conf-server demo-controller-1"' in \
        guests.path("demo-compute-1", "/etc/default/slurmd").read_text()
    assert 'SACKD_OPTIONS="--conf-server demo-controller-1"' in \
        guests.path("demo-login-1", "/etc/default/sackd").read_text()
    recap, out = guests.run("nodes.yml", extra=_nodes())
    assert _changed(recap) == {}, out


def test_join_a_batch_reconfigures_once(guests):
    extra = _nodes("demo-compute-1", "demo-compute-2")
    recap, out = guests.run("join.yml", "--limit", "demo-controller-1,demo-compute-1,demo-compute-2", extra=extra)
    state = guests.read_state()
    assert state["reconfigures"] == 1
    assert state["units"]["demo-compute-1"]["slurmd"] == {"enabled": True, "active": True}
    assert re.findall(r"(?m)^NodeName=(\S+)", state["loaded"]) == ["demo-compute-1", "demo-compute-2"]
    recap, out = guests.run("join.yml", "--limit", "demo-controller-1,demo-compute-1,demo-compute-2", extra=extra)
    assert _changed(recap) == {}, out
    assert guests.read_state()["reconfigures"] == 1


def test_join_failure_names_node_and_journal(guests):
    guests.write_state(unresponsive=["demo-gpu-1"])
    extra = dict(_nodes("demo-compute-1", "demo-compute-2", "demo-gpu-1"), slurm_node_join_timeout=2)
    recap, out = guests.run("join.yml", "--limit", "demo-controller-1,demo-gpu-1", extra=extra, expect_rc=2)
    assert "Node demo-gpu-1 did not join within 2 s" in out
    assert "'unknown*'" in out and "fake failure" in out
    guests.write_state(unresponsive=[])
    recap, out = guests.run("join.yml", "--limit", "demo-controller-1,demo-gpu-1", extra=extra)
    assert _changed(recap) == {}, "slurm.conf was already rendered by the failed run"


def test_leave_drains_stops_and_removes(guests):
    nodes = _nodes("demo-compute-1", "demo-compute-2", "demo-gpu-1")
    guests.write_state(jobs=["42 vagrant RUNNING demo-gpu-1"])
    extra = dict(nodes, slurmlab_leaving=["demo-gpu-1"], slurmlab_drain_timeout=1)
    recap, out = guests.run("leave.yml", "--limit", "demo-controller-1,demo-gpu-1", extra=extra, expect_rc=2)
    assert "Jobs still run on demo-gpu-1" in out and "42 vagrant RUNNING" in out
    guests.write_state(jobs=[])
    before = guests.read_state()["reconfigures"]
    recap, out = guests.run("leave.yml", "--limit", "demo-controller-1,demo-gpu-1", extra=extra)
    state = guests.read_state()
    assert state["drained"] == ["demo-gpu-1"], "drained once, not again on the second try"
    assert state["units"]["demo-gpu-1"]["slurmd"] == {"enabled": False, "active": False}
    assert state["reconfigures"] == before + 1
    assert "demo-gpu-1" not in state["loaded"]
    recap, out = guests.run("leave.yml", "--limit", "demo-controller-1,demo-gpu-1", extra=extra)
    assert _changed(recap) == {}, out


def test_lifecycle_runs_once_and_reports_failure(guests):
    recap, out = guests.run("lifecycle.yml", "--limit", "demo-compute-1")
    assert guests.path("demo-compute-1", "/var/lib/on-create.out").read_text() == "demo-compute-1 Compute demo\n"
    assert guests.path("demo-compute-1", "/var/lib/slurmlab/lifecycle-on-create.done").exists()
    recap, out = guests.run("lifecycle.yml", "--limit", "demo-compute-1")
    assert _changed(recap) == {}, out
    guests.sh("demo-compute-2", "touch /etc/fail-on-create")
    recap, out = guests.run("lifecycle.yml", "--limit", "demo-compute-2", expect_rc=2)
    assert "on_create.sh failed on demo-compute-2 (exit 3)" in out and "boom" in out
    assert not guests.path("demo-compute-2", "/var/lib/slurmlab/lifecycle-on-create.done").exists()


@pytest.fixture
def fresh_guests(tmp_path):
    why = _can_run()
    if why:
        pytest.skip(why)
    if not _ansible_playbook():
        pytest.skip("ansible-playbook is not installed")
    g = Guests(tmp_path)
    yield g
    g.close()


def test_site_builds_the_whole_cluster_in_one_run(fresh_guests):
    """site.yml (the naive baseline of bench/cluster_timeline.py): every play of the engine in one run,
    slurm.conf listing every compute node from the start, so the join needs no reconfigure."""
    guests = fresh_guests
    recap, out = guests.run("site.yml")
    assert set(recap) == set(guests.hosts) and not any(s["failed"] or s["unreachable"] for s in recap.values()), out
    state = guests.read_state()
    assert state["units"]["demo-controller-1"]["slurmctld"] == {"enabled": True, "active": True}
    assert state["units"]["demo-login-1"]["sackd"] == {"enabled": True, "active": True}
    for node in ("demo-compute-1", "demo-compute-2", "demo-gpu-1"):
        assert state["units"][node]["slurmd"] == {"enabled": True, "active": True}, node
    assert re.findall(r"(?m)^NodeName=(\S+)", state["loaded"]) == ["demo-compute-1", "demo-compute-2", "demo-gpu-1"]
    assert state["reconfigures"] == 0, "slurmctld started with the full node set"
    for host in guests.hosts:  # each node's OnCreate ran once, as itself
        assert guests.path(host, "/var/lib/on-create.out").read_text().startswith(f"{host} "), host
    # the controller's OnCreate ran before any login or compute node was configured (the engine's order)
    plays = re.findall(r"(?m)^PLAY \[(.+?)\]", out)
    assert plays.index("Run the OnCreate lifecycle script") < plays.index("Configure login and compute nodes")
    recap, out = guests.run("site.yml")
    assert _changed(recap) == {}, out
