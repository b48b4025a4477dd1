"""Ansible's part of a role template's build (lab/providers/roletemplates.py, docs/adr/0022): run
playbooks/template.yml on the build VM, a host of no cluster, with the lab's roles and the same
environment as a cluster's runs (ssh in the lab's namespace)."""

from __future__ import annotations

from pathlib import Path

from lab import users as users_mod
from lab.configure.inventory import CONTROLLER_ALIAS, GROUP_OF_TYPE
from lab.configure.runner import PlaybookFailed, PlaybookResult, _failures


def inventory(address: str, private_key: Path, role: str, ssh_executable: str) -> dict:
    """One host in its role's group; names that a cluster's inventory has, for a node of no cluster
    (template.yml's tasks name no cluster, the roles' checks want the names)."""
    name = "slurmlab-template"
    inv: dict = {"all": {"children": {g: {"hosts": {}} for g in GROUP_OF_TYPE.values()}}}
    inv["all"]["children"][GROUP_OF_TYPE[role]]["hosts"][name] = {
        "ansible_host": address, "slurmlab_node_name": name, "slurmlab_node_type": role,
        "slurmlab_group": "template", "slurmlab_gpus": 0,
    }
    inv["all"]["vars"] = {
        "ansible_user": "vagrant",
        "ansible_become": True,
        "ansible_ssh_private_key_file": str(private_key),
        "ansible_ssh_executable": ssh_executable,
        "ansible_python_interpreter": "/usr/bin/python3",
        "slurmlab_cluster_name": "slurmlab-template",
        "slurmlab_munge_key_src": "",
        "slurmlab_munge_key_sha256": "",
        "slurmlab_controller_name": name if role == "Controller" else CONTROLLER_ALIAS,
        "slurmlab_controller_alias": CONTROLLER_ALIAS,
        "slurmlab_etc_hosts": [{"name": name, "address": address}],
        "slurmlab_jupyter": False,
        "slurmlab_node_environment": "lab",
        **users_mod.inventory_vars(None),
    }
    return inv


def run(address: str, private_key: Path, role: str, workdir: Path) -> None:
    """template.yml on the build VM at `address`; raises PlaybookFailed with the failing task."""
    import time

    import ansible_runner
    import yaml

    from lab import paths
    from lab.configure.runner import ssh_envvars
    from lab.osutil import atomic_write
    from lab.providers.reach import ssh_exe

    workdir.mkdir(parents=True, exist_ok=True)
    ssh = ssh_exe()
    atomic_write(workdir / "inventory.yml", yaml.safe_dump(inventory(address, private_key, role, ssh)), 0o600)
    env = ssh_envvars(ssh)
    # no ssh master left open to the VM that is saved next (its memory would keep the connection)
    env["ANSIBLE_SSH_ARGS"] = "-o ControlMaster=no -o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no"
    t0 = time.monotonic()
    r = ansible_runner.run(private_data_dir=str(workdir), project_dir=str(paths.resource("playbooks")),
                           playbook="template.yml", inventory=str(workdir / "inventory.yml"), envvars=env,
                           quiet=True, suppress_env_files=True)
    result = PlaybookResult(playbook="template.yml", ok=r.rc == 0 and r.status == "successful",
                            changed=dict((r.stats or {}).get("changed", {})), failures=_failures(r.events),
                            seconds=time.monotonic() - t0)
    if not result.ok:
        if not result.failures:
            result.failures = {"?": f"ansible-runner status {r.status} rc {r.rc}; see {workdir}"}
        raise PlaybookFailed(result)
