"""More of what slurm_cluster gives a test: a testinfra host, a command as a user, Slurm's answer."""

import pytest

pytestmark = pytest.mark.slurm_cluster(spec="../cluster.yaml")


def test_the_controller_runs_slurmctld_and_its_config_names_the_cluster(slurm_cluster):
    host = slurm_cluster.host("controller")
    assert host.service("slurmctld").is_running
    assert host.file("/etc/slurm/slurm.conf").contains(f"ClusterName={slurm_cluster.name}")


def test_every_compute_node_is_up_in_slurm(slurm_cluster):
    states = slurm_cluster.out("login", "sinfo -h -N -o '%N %t'").split("\n")
    nodes = [line.split() for line in states if line.strip()]
    assert nodes and all(state in ("idle", "mix", "alloc") for _, state in nodes), nodes


def test_a_command_runs_as_the_user_asked_for(slurm_cluster):
    user = slurm_cluster.default_user()  # the first student account, else vagrant
    assert slurm_cluster.out("login", "id -un", user=user).strip() == user
    assert slurm_cluster.out("login", "id -un", user="root").strip() == "root"
