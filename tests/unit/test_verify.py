"""`slurmlab verify`: the command's wiring and the shipped suite's collection (no VMs)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab import verify
from lab.cli import app
from lab.errors import NotFound

INVENTORY = """\
all:
  children:
    slurm_controller:
      hosts:
        ctl: {ansible_host: 192.0.2.2, slurmlab_node_name: ctl, slurmlab_partitions: []}
    slurm_login:
      hosts:
        login1: {ansible_host: 192.0.2.3}
    slurm_compute:
      hosts:
        c1: {ansible_host: 192.0.2.4, slurmlab_partitions: [dev]}
        c2: {ansible_host: 192.0.2.5}
  vars:
    ansible_user: vagrant
    ansible_become: true
"""


@pytest.fixture
def inventory(tmp_path) -> Path:
    p = tmp_path / "inventory.yml"
    p.write_text(INVENTORY)
    return p


def test_verify_of_an_unknown_cluster(lab_home):
    res = CliRunner().invoke(app, ["verify", "nope"])
    assert isinstance(res.exception, NotFound)
    assert "nope" in res.exception.message


def _real_cluster(lab_home, running=()):
    """examples/cluster.yaml in the store (provider vagrant, no engine), `running` nodes joined."""
    from lab.control import clusters
    from lab.engine import daemon
    from lab.spec import load_spec

    st = daemon.store()
    clusters.create(st, load_spec(Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"),
                    provider="vagrant", start_engine=False, prepare_host=False)
    from lab.store.db import NodeRow

    for i, (grp, ordinal) in enumerate([("controller", 1), ("login", 1), ("compute", 1), ("compute", 2)]):
        name = f"demo-{grp}-{ordinal}"
        st.add_node(NodeRow(cluster="demo", name=name, grp=grp, ordinal=ordinal, instance_id=f"i-{i}",
                            address=f"10.213.9.{10 + i}", mac=f"52:54:00:00:00:0{i}",
                            phase="running" if name in running else "failed"))
    (lab_home / "clusters" / "demo").mkdir(parents=True, exist_ok=True)
    return lab_home / "clusters" / "demo" / "verify-inventory.yml"


def test_named_cluster_is_checked_on_its_running_nodes_only(lab_home, monkeypatch):
    import yaml

    inv = _real_cluster(lab_home, running=("demo-controller-1", "demo-login-1", "demo-compute-1"))
    calls = []
    monkeypatch.setattr(verify, "run", lambda i, j, extra_args=(), ssh_executable=None, tests=(): calls.append((i, ssh_executable)) or 0)
    res = CliRunner().invoke(app, ["verify", "demo"])
    assert res.exit_code == 0 and [c[0] for c in calls] == [inv]
    assert calls[0][1] and calls[0][1].endswith("ssh")  # a slurmlab cluster: plain ssh in the lab's namespace
    groups = yaml.safe_load(inv.read_text())["all"]["children"]
    assert {g: sorted(v["hosts"]) for g, v in groups.items()} == {
        "slurm_controller": ["demo-controller-1"], "slurm_login": ["demo-login-1"], "slurm_compute": ["demo-compute-1"]}
    assert "not checked (not running): demo-compute-2" in res.output
    assert oct(inv.stat().st_mode & 0o777) == "0o600"


def test_k_selects_checks_as_pytest_does(lab_home, monkeypatch):
    _real_cluster(lab_home)
    calls = []
    monkeypatch.setattr(verify, "run", lambda i, j, extra_args=(), ssh_executable=None, tests=(): calls.append(extra_args) or 0)
    assert CliRunner().invoke(app, ["verify", "demo", "-k", "slurmd"]).exit_code == 0
    assert CliRunner().invoke(app, ["verify", "demo"]).exit_code == 0
    assert calls == [("-k", "slurmd"), ()]


def test_missing_inventory_given_by_path(lab_home, tmp_path):
    res = CliRunner().invoke(app, ["verify", "x", "--inventory", str(tmp_path / "none.yml")])
    assert isinstance(res.exception, NotFound)


@pytest.mark.parametrize("rc,want", [(0, 0), (1, 1), (2, 2), (5, 1)])
def test_exit_code_is_pytests_with_no_tests_an_error(lab_home, monkeypatch, rc, want):
    inv = _real_cluster(lab_home)
    calls = []
    monkeypatch.setattr(verify, "run", lambda i, j, extra_args=(), ssh_executable=None, tests=(): calls.append((i, j)) or rc)
    res = CliRunner().invoke(app, ["verify", "demo", "--junit", "out.xml"])
    assert res.exit_code == want
    assert calls[0][0] == inv and calls[0][1].name == "out.xml"
    if rc == 5:
        assert "collected no tests" in res.output


def test_command_line(inventory, tmp_path):
    cmd = verify.command(inventory, tmp_path / "j.xml")
    assert cmd[:4] == [sys.executable, "-m", "pytest", str(verify.SUITE)]
    for arg in (f"--ansible-inventory={inventory.resolve()}", "--hosts=ansible://all", "--force-ansible",
                "no:cacheprovider", "addopts=", "-v", "-rfE", f"--junitxml={(tmp_path / 'j.xml').resolve()}"):
        assert arg in cmd
    assert (verify.SUITE / "test_cluster.py").is_file()


def test_suite_collects_per_check_and_node(inventory):
    r = subprocess.run(verify.command(inventory, None, ["--collect-only", "-q"]),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = set(re.findall(r"<Function (\S+)>", r.stdout))
    for want in [
        "test_inventory_groups",
        "test_munge_active[ctl]", "test_munge_active[login1]", "test_munge_active[c2]",
        "test_munge_key_same_on_every_node",
        "test_munge_key_mode_and_owner[c1]",
        "test_slurmctld_active_on_controller",
        "test_slurmctld_not_on_other_nodes[c1]", "test_slurmctld_not_on_other_nodes[login1]",
        "test_slurmd_active_on_compute[c1]", "test_slurmd_active_on_compute[c2]",
        "test_sackd_active_on_login[login1]", "test_slurmd_not_on_login[login1]",
        "test_login_submits_and_queries[login1]",
        "test_compute_node_state_in_sinfo[c1]", "test_compute_node_in_its_partitions[c2]",
        "test_srun_covers_all_compute_nodes",
        "test_names_resolve[ctl]",
        "test_ssh_password_login_only_where_wanted[login1]", "test_the_room_port_lets_in_the_students_only[login1]",
        "test_nfs_server_exports_shared_folders", "test_shared_folders_mounted[c1]",
        "test_shared_folders_mounted[login1]", "test_shared_home_round_trip",
        "test_student_accounts[c2]", "test_slurmdbd_active_on_controller",
        "test_accounting_reachable_from_login[login1]", "test_gres_on_gpu_nodes[c1]",
        "test_cgroup_confinement[c2]",
        "test_vagrant_insecure_key_not_authorized[c2]",
        "test_clocks_within_one_second",
        "test_jupyterhub_answers_on_login_when_enabled[login1]",
    ]:
        assert want in ids, f"{want} not collected:\n{r.stdout}"
    # every check of the suite's modules (test_cluster, test_nodes, test_workshop), per node where it is
    # one: 57 for this inventory (a split or a move of the suite must not lose one)
    assert len(ids) == 57, f"{len(ids)} checks collected:\n{r.stdout}"
    assert "test_slurmctld_not_on_other_nodes[ctl]" not in ids
    assert "test_slurmd_active_on_compute[ctl]" not in ids
    assert "test_shared_folders_mounted[ctl]" not in ids  # the controller is the NFS server


def test_ssh_environment_puts_the_wrapper_first_as_ssh(tmp_path):
    wrapper = tmp_path / "bin" / "netns-ssh"
    wrapper.parent.mkdir()
    wrapper.write_text("#!/bin/sh\n")
    env = verify.ssh_environment(str(wrapper))
    first = Path(env["PATH"].split(":")[0])
    assert (first / "ssh").resolve() == wrapper.resolve()
    assert env["SLURMLAB_VERIFY_BACKEND"] == "ssh"
    assert "ControlMaster=auto" in env["ANSIBLE_SSH_EXTRA_ARGS"] and "ControlPath=" in env["ANSIBLE_SSH_EXTRA_ARGS"]


def test_suite_without_login_group(tmp_path):
    p = tmp_path / "inv.yml"
    p.write_text(INVENTORY.replace("    slurm_login:\n      hosts:\n        login1: {ansible_host: 192.0.2.3}\n", ""))
    r = subprocess.run(verify.command(p, None, ["--collect-only", "-q"]), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "login1" not in r.stdout and "test_srun_covers_all_compute_nodes" in r.stdout
