"""Checks a running Slurm cluster through its Ansible inventory (docs/verify.md).

Run with `slurmlab verify NAME`, or directly:
    python -m pytest lab/verify/suite --ansible-inventory inventory.yml --hosts ansible://all

Every command goes through Ansible (testinfra's ansible backend with force_ansible), so the
inventory's connection vars (ansible_ssh_executable, keys, become) apply as they do for playbooks.
Groups: slurm_controller (one host), slurm_compute (one or more), slurm_login (optional).

The checks by area: test_cluster.py (inventory, munge, Slurm daemons, scheduling), test_nodes.py
(names, SSH, clocks, student accounts, GPUs, cgroups), test_workshop.py (shared folders over NFS,
accounting). The cluster and its fixtures: labcluster.py, fixtures.py.
"""

from __future__ import annotations

import shlex

import pytest

from lab.verify.suite.labcluster import COMPUTE, CONTROLLER, GOOD_STATES, MUNGE_KEY, SRUN_WAIT, active


# ---------------------------------------------------------------- inventory
def test_inventory_groups(cluster):
    assert len(cluster.controllers) == 1, f"{CONTROLLER} must hold exactly one host: {cluster.controllers}"
    assert cluster.compute, f"{COMPUTE} holds no host"


# ---------------------------------------------------------------- munge
def test_munge_active(cluster, node):
    assert active(cluster, node, "munge") == "active", f"munge is not active on {node}"


def test_munge_key_same_on_every_node(cluster):
    # Digests are computed on the nodes; the key itself never leaves them.
    digests = {n: cluster.out(n, f"sha256sum {MUNGE_KEY}").split()[0] for n in cluster.nodes}
    assert len(set(digests.values())) == 1, "munge keys differ (sha256): " + ", ".join(
        f"{n}={d[:12]}" for n, d in sorted(digests.items()))


def test_munge_key_mode_and_owner(cluster, node):
    assert cluster.out(node, f"stat -c '%a %U' {MUNGE_KEY}") == "400 munge", \
        f"{MUNGE_KEY} on {node} must be mode 0400 owned by munge"


# ---------------------------------------------------------------- daemons
def test_slurmctld_active_on_controller(cluster):
    assert active(cluster, cluster.controller, "slurmctld") == "active"


def test_slurmctld_not_on_other_nodes(cluster, non_controller):
    assert active(cluster, non_controller, "slurmctld") != "active"
    assert cluster.run(non_controller, "pgrep -x slurmctld").stdout.strip() == "", "a slurmctld process runs"


def test_slurmd_active_on_compute(cluster, compute):
    assert active(cluster, compute, "slurmd") == "active", f"slurmd is not active on {compute}"


def test_sackd_active_on_login(cluster, login):
    assert active(cluster, login, "sackd") == "active", f"sackd is not active on {login}"


def test_slurmd_not_on_login(cluster, login):
    assert active(cluster, login, "slurmd") != "active"
    assert cluster.run(login, "pgrep -x slurmd").stdout.strip() == "", "a slurmd process runs"


def test_login_submits_and_queries(cluster, login):
    user = cluster.user(login)
    job = cluster.out(login, "sbatch --parsable --output=/dev/null --job-name=slurmlab-verify --wrap true", user)
    job_id = job.split(";")[0]
    assert job_id.isdigit(), f"sbatch printed {job!r}, not a job id"
    cluster.out(login, "squeue", user)
    listed = cluster.out(login, f"squeue -h -t all -j {job_id} -o %i", user).split()
    assert job_id in listed, f"job {job_id} submitted on {login} is not in squeue"


# ---------------------------------------------------------------- scheduling
def test_compute_node_state_in_sinfo(cluster, sinfo, compute):
    name = cluster.slurm_name(compute)
    assert name in sinfo, f"{name} is not in `sinfo -N` on {cluster.controller}"
    assert sinfo[name]["states"] <= GOOD_STATES, f"{name} is {sorted(sinfo[name]['states'])}, not idle/allocated/mixed"


def test_compute_node_in_its_partitions(cluster, sinfo, compute):
    expected = cluster.expected_partitions(compute)
    if expected is None:
        pytest.skip(f"{compute} has no slurmlab_partitions host var")
    name = cluster.slurm_name(compute)
    assert name in sinfo, f"{name} is not in `sinfo -N`"
    missing = set(expected) - sinfo[name]["partitions"]
    assert not missing, f"{name} is in {sorted(sinfo[name]['partitions'])}, not in {sorted(missing)}"


def _srun_plan(cluster) -> list[tuple[str | None, list[str]]]:
    """One srun over all compute nodes in a partition they share; else one per partition."""
    nodes = [cluster.slurm_name(n) for n in cluster.compute]
    parts = {cluster.slurm_name(n): cluster.expected_partitions(n) for n in cluster.compute}
    if any(p is None for p in parts.values()):
        return [(None, nodes)]  # partitions unknown: the default partition
    common = set.intersection(*(set(p) for p in parts.values()))
    if common:
        return [(sorted(common)[0], nodes)]
    plan: dict[str, list[str]] = {}
    for n in nodes:
        plan.setdefault(parts[n][0], []).append(n)
    return sorted(plan.items())


def test_srun_covers_all_compute_nodes(cluster):
    where = cluster.login[0] if cluster.login else cluster.controller
    user = cluster.user(where)
    seen: set[str] = set()
    for partition, nodes in _srun_plan(cluster):
        p = f" -p {shlex.quote(partition)} -w {','.join(nodes)}" if partition else ""
        # --immediate: fail when the nodes cannot be allocated within SRUN_WAIT s (a down or
        # draining node) instead of queueing; timeout bounds a launch that hangs on a dead slurmd.
        cmd = f"timeout {SRUN_WAIT + 60} srun --immediate={SRUN_WAIT} -N{len(nodes)}{p} hostname"
        seen |= {line.strip().split(".")[0] for line in cluster.out(where, cmd, user).splitlines() if line.strip()}
    want = {cluster.slurm_name(n) for n in cluster.compute}
    assert want <= seen, f"srun from {where} did not reach {sorted(want - seen)} (saw {sorted(seen)})"
