"""Checks of every node: names, SSH, clocks, student accounts; GPUs and cgroups on compute nodes."""

from __future__ import annotations

import re
import shlex
import time

import pytest

from lab.verify.suite.labcluster import CLOCK_TOLERANCE, VAGRANT_INSECURE_KEY


# ---------------------------------------------------------------- names, ssh, clocks
def test_names_resolve(cluster, node):
    others = [cluster.slurm_name(n) for n in cluster.nodes if n != node]
    if not others:
        pytest.skip("a single node")
    script = "for n in " + " ".join(shlex.quote(o) for o in others) + \
             "; do getent hosts \"$n\" >/dev/null || echo \"$n\"; done"
    unresolved = cluster.out(node, script).split()
    assert not unresolved, f"{node} cannot resolve {unresolved}"


def _sshd_config(cluster, node, port: int, user: str) -> list[str]:
    """sshd's settings for a connection of `user` to `port` (-C: the login node's room port is a Match)."""
    spec = f"lport={port},user={user},host=verify,addr=127.0.0.1"
    return cluster.out(node, f"/usr/sbin/sshd -T -C {spec}").lower().splitlines()


def test_ssh_password_login_only_where_wanted(cluster, node):
    """Keys only, except on login nodes of a cluster with student accounts (their shared password)."""
    want = "yes" if node in cluster.login and cluster.users() else "no"
    cfg = _sshd_config(cluster, node, 22, "vagrant")
    values = [line.split(None, 1)[1] for line in cfg if line.startswith("passwordauthentication ")]
    assert values == [want], f"sshd on {node}: passwordauthentication {values or 'not reported'}, want {want}"


def test_the_room_port_lets_in_the_students_only(cluster, node):
    """A login node of a cluster with student accounts: the room's port (2222) allows those accounts
    only (never vagrant or root), with at most 3 tries a connection (lab/room, docs/adr/0032)."""
    users = [u["name"] for u in cluster.users()]
    if node not in cluster.login or not users:
        pytest.skip("the room's port is on login nodes of clusters with student accounts")
    cfg = _sshd_config(cluster, node, 2222, users[0])
    listening = [line.split(None, 1)[1] for line in cfg if line.startswith("port ")]
    allowed = {line.split(None, 1)[1] for line in cfg if line.startswith("allowusers ")}
    assert "2222" in listening, f"sshd on {node} does not listen on the room's port: port {listening}"
    assert allowed == set(users), f"sshd on {node}: the room's port allows {sorted(allowed)}, want {users}"
    assert "permitrootlogin no" in cfg and "maxauthtries 3" in cfg, f"sshd on {node}: root or tries not limited"


def test_vagrant_insecure_key_not_authorized(cluster, node):
    files = ("for h in /root $(getent passwd | cut -d: -f6 | sort -u); do "
             "for f in \"$h\"/.ssh/authorized_keys*; do [ -f \"$f\" ] && echo \"$f\"; done; done")
    found = cluster.run(node, f"({files}) | sort -u | xargs -r grep -lF {VAGRANT_INSECURE_KEY}").stdout.split()
    assert not found, f"Vagrant's insecure key is authorized on {node} in {found}"


def _clock_offset(cluster, name: str) -> tuple[float, float]:
    """(remote clock - local clock, half the round trip): the best of two samples."""
    best = None
    for _ in range(2):
        t0 = time.time()
        remote = float(cluster.out(name, "date +%s.%N"))
        t1 = time.time()
        sample = (remote - (t0 + t1) / 2, (t1 - t0) / 2)
        if best is None or sample[1] < best[1]:
            best = sample
    return best


def test_clocks_within_one_second(cluster):
    ctl = cluster.controller
    ref, ref_err = _clock_offset(cluster, ctl)
    bad = []
    for n in cluster.nodes:
        if n == ctl:
            continue
        off, err = _clock_offset(cluster, n)
        diff, slack = off - ref, err + ref_err  # the round trips bound where each `date` ran
        if abs(diff) > CLOCK_TOLERANCE + slack:
            bad.append(f"{n} {diff:+.3f}s (allowed {CLOCK_TOLERANCE}s + {slack:.3f}s round trip)")
    assert not bad, f"clocks differ from {ctl}'s: " + "; ".join(bad)


# ---------------------------------------------------------------- student accounts
def test_student_accounts(cluster, node):
    """Every account of slurmlab_users exists with its uid, gid and home on every node."""
    users = cluster.users()
    if not users:
        pytest.skip("the cluster has no student accounts (slurmlab_users is empty)")
    want = {u["name"]: f"{u['uid']}:{u['uid']}:/home/{u['name']}" for u in users}
    got = {}
    for line in cluster.out(node, "getent passwd " + " ".join(want) + " || true").splitlines():
        f = line.split(":")
        if len(f) >= 6:
            got[f[0]] = f"{f[2]}:{f[3]}:{f[5]}"
    wrong = sorted(f"{n} is {got.get(n, 'missing')}, want {w}" for n, w in want.items() if got.get(n) != w)
    assert not wrong, f"{node}: " + "; ".join(wrong[:5]) + (f" (+{len(wrong) - 5} more)" if len(wrong) > 5 else "")


# ---------------------------------------------------------------- GPUs, cgroups
def test_gres_on_gpu_nodes(cluster, compute):
    """A node with emulated GPUs (slurmlab_gpus) has Gres=gpu:N in Slurm and N device files."""
    n = cluster.gpus(compute)
    name = cluster.slurm_name(compute)
    record = cluster.out(cluster.controller, f"scontrol --oneliner show node {shlex.quote(name)}")
    gres = re.search(r"\bGres=(\S+)", record)
    gres = gres.group(1) if gres else "(null)"
    if n == 0:
        assert "gpu" not in gres, f"{name} has no GPUs in the spec but Slurm shows Gres={gres}"
        return
    assert gres == f"gpu:{n}", f"{name}: Slurm shows Gres={gres}, want gpu:{n}"
    devices = cluster.out(compute, "ls /dev | grep -c '^nvidia[0-9]' || true")
    assert devices == str(n), f"{compute} has {devices} /dev/nvidiaN device files, want {n}"


def test_cgroup_confinement(cluster, compute):
    assert cluster.out(compute, "stat -f -c %T /sys/fs/cgroup") == "cgroup2fs", f"{compute} does not run cgroup v2"
    conf = dict(line.split("=", 1) for line in
                cluster.out(compute, "scontrol show config | sed -n 's/^\\(ProctrackType\\|TaskPlugin\\) *= */\\1=/p'").splitlines()
                if "=" in line)
    assert conf.get("ProctrackType") == "proctrack/cgroup", f"ProctrackType is {conf.get('ProctrackType')}"
    assert "task/cgroup" in conf.get("TaskPlugin", ""), f"TaskPlugin is {conf.get('TaskPlugin')}"
