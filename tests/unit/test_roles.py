"""The Ansible side: playbooks parse, and slurm.conf renders as the golden file says.

Templates are rendered by ansible-core itself (a local play that includes the
real role tasks), so the role defaults, Ansible's filters and its Jinja2
settings are the ones the guests get. One ansible-playbook run serves every
rendering test (about two seconds). The tests only compare with the golden
file: regenerate it with `make golden` (tests/unit/golden.py) and review the diff.
"""

import getpass
import grp
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.unit import golden

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
INVENTORY = DATA / "inventory.yml"
PLAYBOOKS = ["controller.yml", "nodes.yml", "join.yml", "leave.yml", "lifecycle.yml", "site.yml", "users.yml"]
ROLES = ["common", "munge", "slurm_controller", "slurm_node", "state_disk", "nfs_server", "nfs_client", "accounting",
         "users"]

RENDER_PLAY = """
- name: Render slurmlab templates for the unit tests
  hosts: slurm_controller
  gather_facts: false
  connection: local
  tasks:
    - name: Sample cluster
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: config.yml
      vars:
        slurm_controller_conf_dir: "{{ out }}/sample"
    - name: No compute node yet
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: config.yml
      vars:
        slurm_controller_conf_dir: "{{ out }}/empty"
        slurmlab_slurm_nodes: []
    - name: Two nodes leaving
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: config.yml
      vars:
        slurm_controller_conf_dir: "{{ out }}/leaving"
        slurmlab_leaving: [demo-compute-2, demo-gpu-1]
    - name: Site overrides
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: config.yml
      vars:
        slurm_controller_conf_dir: "{{ out }}/override"
        slurm_controller_config: {MailProg: null, SlurmdTimeout: 600, PropagateResourceLimits: false}
        slurm_controller_cgroup_config: {}
    - name: /etc/hosts block
      ansible.builtin.template:
        src: "{{ roles_dir }}/common/templates/hosts_block.j2"
        dest: "{{ out }}/hosts_block"
        mode: "0644"
    - name: slurmd options
      ansible.builtin.template:
        src: "{{ roles_dir }}/slurm_node/templates/default-slurmd.j2"
        dest: "{{ out }}/default-slurmd"
        mode: "0644"
      vars:
        slurm_node_slurmd_options: "--conf-server {{ slurmlab_controller_name }}"
"""


def _ansible_tool(name):
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    # ansible-core is a dependency of slurmlab: a missing tool is a broken set-up, not a skip
    assert found, f"{name} is not installed: make setup (ansible-core is in pyproject.toml)"
    return found


def _env(tmp):
    env = dict(os.environ)
    env.update(
        ANSIBLE_ROLES_PATH=str(ROOT / "roles"),
        ANSIBLE_HOME=str(tmp / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-local"),
        ANSIBLE_REMOTE_TMP=str(tmp / "ansible-remote"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_RETRY_FILES_ENABLED="False",
        ANSIBLE_HOST_KEY_CHECKING="False",
    )
    env.pop("ANSIBLE_CONFIG", None)
    return env


def render_templates(tmp):
    """Run RENDER_PLAY in the folder tmp; returns the folder of the rendered files."""
    out = tmp / "out"
    for sub in ("sample", "empty", "leaving", "override"):
        (out / sub).mkdir(parents=True)
    # A stale cgroup.conf that the "override" run (empty cgroup dict) must remove.
    (out / "override" / "cgroup.conf").write_text("CgroupPlugin=autodetect\n")
    play = tmp / "render.yml"
    play.write_text(RENDER_PLAY)
    user = getpass.getuser()
    group = grp.getgrgid(os.getgid()).gr_name
    cmd = [
        _ansible_tool("ansible-playbook"), "-i", str(INVENTORY), str(play),
        "-e", f"out={out}", "-e", f"roles_dir={ROOT / 'roles'}",
        "-e", f"slurm_controller_conf_owner={user}", "-e", f"slurm_controller_conf_group={group}",
        "-e", f"ansible_python_interpreter={sys.executable}",
    ]
    proc = subprocess.run(cmd, cwd=tmp, env=_env(tmp), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    return render_templates(tmp_path_factory.mktemp("roles"))


def _lines(text, prefix):
    return [line for line in text.splitlines() if line.startswith(prefix)]


def test_playbooks_pass_syntax_check(tmp_path):
    cmd = [_ansible_tool("ansible-playbook"), "--syntax-check", "-i", str(INVENTORY)]
    cmd += [str(ROOT / "playbooks" / name) for name in PLAYBOOKS]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_roles_have_the_standard_layout():
    for role in ROLES:
        for part in ("defaults/main.yml", "tasks/main.yml", "tasks/validate.yml", "handlers/main.yml"):
            assert (ROOT / "roles" / role / part).is_file(), f"roles/{role}/{part} missing"


def test_role_variables_are_prefixed():
    for role in ROLES:
        defaults = yaml.safe_load((ROOT / "roles" / role / "defaults" / "main.yml").read_text()) or {}
        for name in defaults:
            assert name.startswith((role + "_", "slurmlab_")), f"roles/{role}: variable {name} lacks its prefix"


# Each play's handlers as ansible-core loads them (roles: and import_role, in play order): Ansible
# runs notified handlers in this order, whatever order the tasks notified them in.
PLAY_HANDLERS = """
import json, sys
from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.playbook import Playbook
from ansible.plugins.loader import init_plugin_loader
from ansible.vars.manager import VariableManager
init_plugin_loader()
loader = DataLoader()
vm = VariableManager(loader=loader, inventory=InventoryManager(loader=loader, sources=[sys.argv[1]]))
out = {}
for path in sys.argv[2:]:
    plays = Playbook.load(path, variable_manager=vm, loader=loader).get_plays()
    out[path.rsplit("/", 1)[-1]] = {p.get_name(): [h.name for b in p.compile_roles_handlers() + p.handlers
                                                   for h in b.block] for p in plays}
print(json.dumps(out))
"""

EXECUTION_ORDER = ["Restart munge", "Reconfigure slurmctld", "Restart slurmd", "Restart sackd"]


def test_handlers_in_execution_order(tmp_path):
    """munge before the Slurm daemons, slurmctld's reconfigure before slurmd: in every play of every
    playbook, as ansible-core loads it (a play that listed its roles in another order fails here)."""
    cmd = [sys.executable, "-c", PLAY_HANDLERS, str(INVENTORY)] + [str(ROOT / "playbooks" / p) for p in PLAYBOOKS]
    proc = subprocess.run(cmd, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    loaded = json.loads(proc.stdout)
    for playbook, plays in loaded.items():
        for play, handlers in plays.items():
            known = [h for h in handlers if h in EXECUTION_ORDER]
            assert known == sorted(known, key=EXECUTION_ORDER.index), f"{playbook}, play {play!r}: {handlers}"
    # the plays where the order matters hold the handlers (the check above is not vacuous)
    assert loaded["controller.yml"]["Configure the Slurm controller"] == ["Restart munge", "Reconfigure slurmctld"]
    assert loaded["nodes.yml"]["Configure login and compute nodes"] == ["Restart munge", "Restart slurmd",
                                                                         "Restart sackd"]
    assert loaded["join.yml"]["Add the new nodes to slurm.conf"] == ["Reconfigure slurmctld"]
    assert "Restart slurmd" in loaded["join.yml"]["Start slurmd on the joining compute nodes"]


def test_slurm_conf_matches_golden(rendered):
    golden.assert_matches("slurm.conf.golden", (rendered / "sample" / "slurm.conf").read_text())


def test_slurm_conf_nodes_and_partitions(rendered):
    text = (rendered / "sample" / "slurm.conf").read_text()
    assert _lines(text, "NodeName=") == [
        "NodeName=demo-compute-1 CPUs=2 RealMemory=900",
        "NodeName=demo-compute-2 NodeAddr=10.213.7.12 CPUs=2 RealMemory=900",  # the others give no address
        "NodeName=demo-gpu-1 CPUs=1 RealMemory=400 Gres=gpu:2",
    ]
    # demo-gpu-1 has no partition: it goes to the default one.
    assert _lines(text, "PartitionName=") == [
        "PartitionName=batch Nodes=demo-compute-1,demo-compute-2 MaxTime=INFINITE State=UP",
        "PartitionName=dev Nodes=demo-compute-1,demo-compute-2,demo-gpu-1 Default=YES MaxTime=INFINITE State=UP",
    ]
    for setting in (
        "SlurmctldParameters=enable_configless", "SlurmctldHost=demo-controller-1", "ClusterName=demo",
        "ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup,task/affinity", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory", "AccountingStorageType=accounting_storage/slurmdbd",
        "AccountingStorageHost=demo-controller-1", "GresTypes=gpu",
        "DefMemPerCPU=400",  # the smallest node's memory per CPU (demo-gpu-1: 400 MiB, 1 CPU)
        "ReturnToService=1", "MailProg=/bin/true", "DebugFlags=GLOB_SILENCE", "SlurmUser=slurm",
    ):
        assert setting in text.splitlines()
    keys = [line.split("=", 1)[0] for line in text.splitlines()
            if line and not line.startswith("#") and not line.startswith(("NodeName=", "PartitionName="))]
    assert keys == sorted(keys, key=str.lower), "slurm.conf keys must be sorted (stable diffs)"


def test_gres_conf_names_the_emulated_devices_of_gpu_nodes(rendered):
    lines = [line for line in (rendered / "sample" / "gres.conf").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines == ["AutoDetect=off", "NodeName=demo-gpu-1 Name=gpu File=/dev/nvidia[0-1]"]
    # without a GPU node there is neither a gres.conf nor GresTypes
    assert not (rendered / "leaving" / "gres.conf").exists()
    assert "GresTypes" not in (rendered / "leaving" / "slurm.conf").read_text()


def test_slurm_conf_without_nodes_has_no_empty_partition(rendered):
    text = (rendered / "empty" / "slurm.conf").read_text()
    assert _lines(text, "NodeName=") == []
    assert _lines(text, "PartitionName=") == []
    assert "DefMemPerCPU" not in text and not (rendered / "empty" / "gres.conf").exists()
    assert "SlurmctldHost=demo-controller-1" in text


def test_slurm_conf_leaves_out_leaving_nodes(rendered):
    text = (rendered / "leaving" / "slurm.conf").read_text()
    assert "demo-compute-2" not in text and "demo-gpu-1" not in text
    assert _lines(text, "PartitionName=") == [
        "PartitionName=batch Nodes=demo-compute-1 MaxTime=INFINITE State=UP",
        "PartitionName=dev Nodes=demo-compute-1 Default=YES MaxTime=INFINITE State=UP",
    ]


def test_slurm_conf_overrides(rendered):
    lines = (rendered / "override" / "slurm.conf").read_text().splitlines()
    assert "SlurmdTimeout=600" in lines
    assert "PropagateResourceLimits=NO" in lines
    assert not any(line.startswith("MailProg=") for line in lines), "a null override removes the key"
    assert not (rendered / "override" / "cgroup.conf").exists(), "an empty cgroup dict removes cgroup.conf"


def test_cgroup_conf(rendered):
    lines = [line for line in (rendered / "sample" / "cgroup.conf").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines == ["CgroupPlugin=cgroup/v2", "ConstrainCores=yes", "ConstrainDevices=yes", "ConstrainRAMSpace=yes",
                     "SystemdTimeout=30000"]


def test_hosts_block_and_daemon_options(rendered):
    assert (rendered / "hosts_block").read_text().splitlines() == [
        "192.0.2.31 demo-compute-1",
        "192.0.2.32 demo-compute-2",
        "192.0.2.10 demo-controller-1",
        "192.0.2.41 demo-gpu-1",
        "192.0.2.20 demo-login-1",
        "192.0.2.10 slurmlab-controller",  # the controller's name in every cluster (role templates)
    ]
    assert 'SLURMD_OPTIONS="--conf-server demo-controller-1"' in (rendered / "default-slurmd").read_text()


def test_failure_reason_of_a_command_is_what_it_said():
    from lab.configure.runner import _failures

    ev = {"event": "runner_on_failed", "event_data": {"host": "demo-controller-1", "task": "Reconfigure slurmctld", "res": {
        "msg": "non-zero return code", "rc": 1, "stdout": "",
        "stderr": "slurm_reconfigure error: Socket timed out on send/recv operation"}}}
    assert _failures([ev]) == {"demo-controller-1": "task 'Reconfigure slurmctld' failed: exit 1: "
                                                    "slurm_reconfigure error: Socket timed out on send/recv operation"}


OWED_PLAY = """
- name: Render slurm.conf for a running slurmctld
  hosts: slurm_controller
  gather_facts: false
  connection: local
  tasks:
    - name: Running already
      ansible.builtin.set_fact:
        slurm_controller_was_active: true
    - name: Render
      ansible.builtin.include_role:
        name: slurm_controller
        tasks_from: config.yml
      vars:
        slurm_controller_conf_dir: "{{ out }}"
"""


def test_a_failed_reconfigure_is_owed_until_it_succeeds(tmp_path):
    """The first run changes slurm.conf and its `scontrol reconfigure` fails; the second run has
    nothing to render but still reconfigures (the marker), and a third run does nothing."""
    out, bin_dir = tmp_path / "out", tmp_path / "bin"
    out.mkdir()
    bin_dir.mkdir()
    calls = tmp_path / "calls"
    scontrol = bin_dir / "scontrol"
    refuse = tmp_path / "refuse"  # while it exists, scontrol fails as when slurmctld is away
    refuse.touch()
    scontrol.write_text(f"#!/bin/sh\necho \"$*\" >> {calls}\n"
                        f"[ ! -e {refuse} ] || {{ echo 'Unable to contact slurm controller' >&2; exit 1; }}\n")
    scontrol.chmod(0o755)
    (tmp_path / "play.yml").write_text(OWED_PLAY)
    user, group = getpass.getuser(), grp.getgrgid(os.getgid()).gr_name
    env = _env(tmp_path)
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    cmd = [_ansible_tool("ansible-playbook"), "-i", str(INVENTORY), str(tmp_path / "play.yml"), "-e", f"out={out}",
           "-e", f"slurm_controller_conf_owner={user}", "-e", f"slurm_controller_conf_group={group}",
           "-e", f"ansible_python_interpreter={sys.executable}"]

    def run():
        return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    first = run()
    assert first.returncode != 0 and (out / ".slurmlab-reconfigure-owed").exists(), first.stdout[-2000:]
    assert calls.read_text().splitlines() == ["reconfigure"] * 4  # one try and three retries, all refused
    calls.write_text("x\n")
    refuse.unlink()  # from now on scontrol succeeds
    second = run()
    assert second.returncode == 0, second.stdout[-2000:]
    assert calls.read_text().splitlines()[1:] == ["reconfigure"]
    assert not (out / ".slurmlab-reconfigure-owed").exists()
    third = run()
    assert third.returncode == 0 and calls.read_text().splitlines()[1:] == ["reconfigure"]
    assert "changed=0" in third.stdout


def test_the_roles_shared_attempts_and_node_name_check():
    """playbooks/filter_plugins and test_plugins: the retries of every wait, and the node-name check."""
    import importlib.util

    def load(kind):
        spec = importlib.util.spec_from_file_location(kind, ROOT / "playbooks" / kind / "slurmlab.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod

    attempts = load("filter_plugins").FilterModule().filters()["slurmlab_attempts"]
    assert attempts("60", "5") == 12 and attempts(61, 5) == 13 and attempts(1, 5) == 1 and attempts(0, 5) == 1
    assert attempts(120, 5, 25) == 4  # a try of at most 25 s, then 5 s before the next
    name = load("test_plugins").TestModule().tests()["a_node_name"]
    assert name("demo-compute-1") and not name("Demo") and not name("-x") and not name("a" * 64) and not name(3)
