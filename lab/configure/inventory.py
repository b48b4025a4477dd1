"""The cluster's Ansible inventory (pure: built from records; docs/roles.md has the contract)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lab import users as users_mod
from lab.spec.catalog import slurm_cpus
from lab.store.db import GroupRow, NodeRow

CONTROLLER_ALIAS = "slurmlab-controller"  # lab.providers.vagrantfile.CONTROLLER_ALIAS (the hosts credential)
GROUP_OF_TYPE = {"Controller": "slurm_controller", "Login": "slurm_login", "Compute": "slurm_compute"}


@dataclass
class ClusterContext:
    name: str
    groups: list[GroupRow]
    nodes: list[NodeRow]
    ssh_key: Path
    munge_key: Path
    ssh_executable: str
    lifecycle: dict[str, tuple[str, str]] | None = None  # group -> (local folder, OnCreate script)
    users: dict | None = None  # lab.users.inventory_vars(...): the student accounts; None: none
    gpus: dict[str, int] = field(default_factory=dict)  # group -> emulated GPUs per node (absent: 0)
    node_environment: str = "Lab"  # Lab.NodeEnvironment: Lab | HyperPod (role hyperpod_env)
    arn: str = ""  # the cluster's ARN (HyperPod's resource_config.json carries it)
    jupyter: bool = False  # Lab.Jupyter: JupyterHub on the login nodes (role jupyterhub)
    # slurm.conf's MpiDefault: "pmix" where the box has Open MPI and Slurm's PMIx plugin (its
    # "workshop" feature, lab/box/recipe.py), else "none"
    mpi_default: str = "none"


def resource_config(ctx: ClusterContext) -> dict:
    """/opt/ml/config/resource_config.json as HyperPod writes it on every node: the cluster and its
    instance groups with each instance's name, id and address (CustomerIpAddress, what lifecycle
    scripts match their own address against). Nodes without an address yet are left out."""
    by_group: dict[str, list[NodeRow]] = {}
    for n in sorted(ctx.nodes, key=lambda n: (n.grp, n.ordinal)):
        if n.address:
            by_group.setdefault(n.grp, []).append(n)
    return {
        "ClusterConfig": {"ClusterArn": ctx.arn, "ClusterName": ctx.name},
        "InstanceGroups": [
            {"Name": g.name, "InstanceType": g.instance_type,
             "Instances": [{"InstanceName": n.name, "InstanceId": n.instance_id,
                            "AgentIpAddress": n.address, "CustomerIpAddress": n.address}
                           for n in by_group.get(g.name, [])]}
            for g in ctx.groups
        ],
    }


def slurm_nodes(ctx: ClusterContext, joining: list[str] = ()) -> list[dict]:
    """Compute nodes slurm.conf must list: those already joined plus the batch joining now."""
    types = {g.name: g for g in ctx.groups}
    out = []
    for n in sorted(ctx.nodes, key=lambda n: n.name):
        g = types.get(n.grp)
        if g and g.node_type == "Compute" and (n.phase == "running" or n.name in joining):
            out.append({"name": n.name, "address": n.address, "cpus": slurm_cpus(g.cpus),
                        "real_memory": real_memory(g.memory_mib), "partitions": list(g.partitions),
                        "gpus": ctx.gpus.get(g.name, 0)})
    return out


def _sha256_of(path: Path) -> str:
    """The file's sha256 (hex), "" when it cannot be read (the roles then copy it)."""
    import hashlib

    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


def real_memory(memory_mib: int) -> int:
    """What Slurm may schedule: the VM's memory less what the kernel and daemons keep."""
    return max(128, int(memory_mib * 0.75))


def default_partition(ctx: ClusterContext) -> str:
    for g in ctx.groups:
        if g.node_type == "Compute" and g.partitions:
            return g.partitions[0]
    return "dev"


def build(ctx: ClusterContext, joining: list[str] = ()) -> dict:
    types = {g.name: g for g in ctx.groups}
    controller = next((n.name for n in ctx.nodes if types[n.grp].node_type == "Controller"), None)
    inv: dict = {"all": {"children": {v: {"hosts": {}} for v in GROUP_OF_TYPE.values()}, "vars": {}}}
    for n in sorted(ctx.nodes, key=lambda n: n.name):
        g = types[n.grp]
        inv["all"]["children"][GROUP_OF_TYPE[g.node_type]]["hosts"][n.name] = {
            "ansible_host": n.address,
            "slurmlab_node_name": n.name,
            "slurmlab_node_type": g.node_type,
            "slurmlab_group": g.name,
            "slurmlab_cpus": slurm_cpus(g.cpus),
            "slurmlab_real_memory": real_memory(g.memory_mib),
            "slurmlab_partitions": list(g.partitions),
            "slurmlab_gpus": ctx.gpus.get(g.name, 0),
        }
        if ctx.lifecycle and g.name in ctx.lifecycle:
            folder, script = ctx.lifecycle[g.name]
            hv = inv["all"]["children"][GROUP_OF_TYPE[g.node_type]]["hosts"][n.name]
            hv["slurmlab_lifecycle_dir"] = folder
            hv["slurmlab_lifecycle_on_create"] = script
            # HyperPod-shaped nodes: the scripts start Slurm's daemons (docs/hyperpod-nodes.md)
            hv["slurmlab_lifecycle_starts_slurm"] = ctx.node_environment == "HyperPod"
    inv["all"]["vars"] = {
        "ansible_user": "vagrant",
        "ansible_become": True,
        "ansible_ssh_private_key_file": str(ctx.ssh_key),
        "ansible_ssh_executable": ctx.ssh_executable,
        "ansible_python_interpreter": "/usr/bin/python3",
        "slurmlab_cluster_name": ctx.name,
        "slurmlab_mpi_default": ctx.mpi_default,
        "slurmlab_munge_key_src": str(ctx.munge_key),
        "slurmlab_munge_key_sha256": _sha256_of(ctx.munge_key),
        "slurmlab_controller_name": controller,
        # the controller's other name, the same in every cluster (/etc/hosts): chrony's server and the
        # NFS units are then the same text everywhere, and role templates hold them (docs/adr/0022)
        "slurmlab_controller_alias": CONTROLLER_ALIAS,
        "slurmlab_etc_hosts": [{"name": n.name, "address": n.address} for n in sorted(ctx.nodes, key=lambda n: n.name)],
        "slurmlab_slurm_nodes": slurm_nodes(ctx, joining),
        "slurmlab_partitions_default": default_partition(ctx),
        "slurmlab_jupyter": ctx.jupyter,
        "slurmlab_node_environment": "hyperpod" if ctx.node_environment == "HyperPod" else "lab",
        **(ctx.users if ctx.users is not None else users_mod.inventory_vars(None)),
    }
    if ctx.node_environment == "HyperPod":
        inv["all"]["vars"]["slurmlab_resource_config"] = resource_config(ctx)
    return inv
