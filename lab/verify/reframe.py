"""A cluster's ReFrame site configuration (issue 46, docs/verification.md "A regression suite: ReFrame";
docs/research/verification.md section A): the text of a Python file setting `site_configuration`, made
from the lab's records alone (pure: no ssh, no ReFrame import). `slurmlab reframe-config` prints it or
installs it on the login nodes; the box carries ReFrame (lab/box/recipe.py WORKSHOP_WHEELS).

One ReFrame system named after the cluster, matched on its login nodes' and controller's hostnames; one
ReFrame partition per Slurm partition of the Compute groups, with what every node of it has (the
smallest group's CPUs, RealMemory and GPUs when groups of several sizes share a partition)."""

from __future__ import annotations

import re
from datetime import datetime, timezone

from lab.configure.inventory import ClusterContext, real_memory, default_partition, slurm_nodes
from lab.spec.catalog import slurm_cpus

# The box's modulefiles (lab/box/customize.sh names them from the installed Debian versions; docs/box.md):
# trixie's gcc-14 and libopenmpi-dev. A box whose Debian updates move a version needs these moved too.
GCC_MODULE = "gcc/14.2.0"
OPENMPI_MODULE = "openmpi/5.0.7"
LMOD_INIT = "/etc/profile.d/lmod.sh"  # sets LMOD_CMD, which ReFrame's 'lmod' modules system checks
INSTALL_DIR = "/etc/slurmlab/reframe"  # `reframe-config --install`: INSTALL_DIR/NAME.py on the login nodes
PROFILE_FILE = "/etc/profile.d/slurmlab-reframe.sh"  # ... and RFM_CONFIG_FILES pointing at it, for login shells
MAX_JOBS = 4  # ReFrame's jobs in flight per partition (its default, 8, is more than a lab partition runs)


def rfm_name(name: str) -> str:
    """A ReFrame name (system, partition, environment: a letter or _, then alphanumerics, - and _)."""
    s = re.sub(r"[^A-Za-z0-9_-]", "_", name)
    return s if re.match(r"[A-Za-z_]", s) else f"_{s}"


def has_lmod(ctx: ClusterContext) -> bool:
    """The box has Lmod and the workshop's modules exactly when it has Open MPI with Slurm's PMIx
    plugin: its "workshop" feature, which the context tells by MpiDefault=pmix."""
    return ctx.mpi_default == "pmix"


def install_path(cluster: str) -> str:
    return f"{INSTALL_DIR}/{cluster}.py"


def _literal(s: str) -> str:
    return re.escape(s).replace("\\-", "-")  # '-' needs no escape outside a class: readable names


def hostnames(ctx: ClusterContext) -> list[str]:
    """Regexes of the login nodes' and the controller's hostnames (NAME-GROUP-N: a replaced node's new
    name matches too), where `reframe` runs and ReFrame then picks this system."""
    return [rf"^{_literal(ctx.name)}-{_literal(g.name)}-\d+$"
            for g in ctx.groups if g.node_type in ("Login", "Controller")]


def partitions(ctx: ClusterContext) -> list[dict]:
    """One dict per Slurm partition of the Compute groups (the order they first appear in): its groups,
    the running nodes slurm.conf lists in it, and what each of those nodes has at least."""
    by_part: dict[str, list] = {}
    for g in ctx.groups:
        if g.node_type == "Compute":
            for p in g.partitions:
                by_part.setdefault(p, []).append(g)
    nodes = slurm_nodes(ctx)
    return [{"name": p, "groups": [g.name for g in gs],
             "num_nodes": sum(1 for n in nodes if p in n["partitions"]),
             "cpus": min(slurm_cpus(g.cpus) for g in gs),
             "real_memory": min(real_memory(g.memory_mib) for g in gs),
             "gpus": min(ctx.gpus.get(g.name, 0) for g in gs)} for p, gs in by_part.items()]


def _partition(p: dict, environs: list[str], lmod: bool, default: str) -> dict:
    cpus, gpus = p["cpus"], p["gpus"]
    entry: dict = {
        "name": rfm_name(p["name"]),
        "descr": f"Slurm partition {p['name']}{' (the default)' if p['name'] == default else ''}: "
                 f"group {', '.join(p['groups'])}",
        "scheduler": "slurm",  # job states from sacct: the lab runs slurmdbd
        "launcher": "srun",
        "access": [f"-p {p['name']}"],
        "environs": environs,
        "max_jobs": MAX_JOBS,
    }
    if lmod:  # job scripts run in a non-login shell: Lmod's `module` comes from here
        entry["prepare_cmds"] = [f". {LMOD_INIT}"]
    # written, not detected: detecting a remote partition installs ReFrame from the network
    entry["processor"] = {"arch": "x86_64", "num_cpus": cpus, "num_cpus_per_core": 1, "num_sockets": 1,
                          "num_cpus_per_socket": cpus}
    resources = [{"name": "memory", "options": ["--mem={size}"]}]  # extra_resources = {'memory': {'size': '256M'}}
    if gpus:
        # emulated: device files behind Slurm's Gres=gpu:N, no GPU (docs/spec.md Lab.Gpus)
        entry["devices"] = [{"type": "gpu", "model": "emulated", "num_devices": gpus}]
        resources.append({"name": "_rfm_gpu", "options": ["--gres=gpu:{num_gpus_per_node}"]})  # num_gpus_per_node
    entry["resources"] = resources
    # mem_per_node_mib: Slurm's RealMemory (what --mem may ask for), not the VM's memory
    entry["extras"] = {"num_nodes": p["num_nodes"], "mem_per_node_mib": p["real_memory"], "gpus_per_node": gpus}
    return entry


def site_configuration(ctx: ClusterContext) -> dict:
    """The `site_configuration` dict of the cluster (ReFrame 4.x's schema, reframe/schemas/config.json)."""
    lmod, system = has_lmod(ctx), rfm_name(ctx.name)
    environs = ["gnu", "openmpi"] if lmod else ["gnu"]
    environments: list[dict] = [
        # Debian's GCC (the workshop box's; a box without it runs run-only checks in this one)
        {"name": "gnu", "modules": [GCC_MODULE] if lmod else [], "cc": "gcc", "cxx": "g++", "ftn": "gfortran",
         "target_systems": [system]},
    ]
    if lmod:
        environments.append({"name": "openmpi", "modules": [GCC_MODULE, OPENMPI_MODULE], "cc": "mpicc",
                             "cxx": "mpicxx", "ftn": "mpifort", "target_systems": [system]})
    default = default_partition(ctx)
    return {
        "systems": [{
            "name": system,
            "descr": f"slurmlab cluster {ctx.name}",
            "hostnames": hostnames(ctx),
            "modules_system": "lmod" if lmod else "nomod",
            "partitions": [_partition(p, environs, lmod, default) for p in partitions(ctx)],
        }],
        "environments": environments,
        # the stdout handler (ReFrame's builtin configuration keeps its debug file and perflog handlers)
        "logging": [{"handlers$": [{"type": "stream", "name": "stdout", "level": "info", "format": "%(message)s"}],
                     "target_systems": [system]}],
    }


def render(ctx: ClusterContext, written: datetime | None = None) -> str:
    """The configuration file's text: a header saying what it is and how to run it, then the dict."""
    when = (written or datetime.now(timezone.utc)).strftime("%Y-%m-%d %H:%M %Z").strip()
    conf = site_configuration(ctx)
    system = conf["systems"][0]["name"]
    part = (conf["systems"][0]["partitions"] or [{"name": "PARTITION"}])[0]["name"]
    login = next((f"{ctx.name}-{g.name}-1" for g in ctx.groups if g.node_type == "Login"), "the login node")
    header = [
        f"# ReFrame 4 site configuration of the slurmlab cluster {ctx.name}, written by",
        f"# `slurmlab reframe-config {ctx.name}` on {when}, from the lab's records: partitions,",
        "# CPUs and RealMemory as slurm.conf has them. Write it again when the cluster's groups change.",
        "#",
        f"# Run ReFrame on {login}, from a login shell (bash -l: Lmod and RFM_CONFIG_FILES), from a",
        "# folder the compute nodes see ($HOME or /fsx/$USER: ReFrame's stage directory must be shared):",
        f"#   reframe -C {install_path(ctx.name)} -c hello.py -r",
        f"#   reframe -C {install_path(ctx.name)} --system={system}:{part} -c hello.py -l   (list only)",
        "# (`slurmlab reframe-config --install` puts this file there; examples/reframe/hello.py is a check.)",
    ]
    return "\n".join(header) + "\n\nsite_configuration = " + _py(conf, lead=len("site_configuration = ")) + "\n"


def _py(value, indent: int = 0, lead: int = 0, width: int = 100) -> str:
    """`value` (dicts, lists, str, int) as Python source in ReFrame's own examples' layout: a container
    that does not fit on its line (`lead`: what comes before it there) gets one item per line, four in."""
    flat = repr(value)
    if not isinstance(value, (dict, list)) or not value or indent + lead + len(flat) + 1 <= width:
        return flat
    pad = " " * (indent + 4)
    if isinstance(value, dict):
        items = [f"{pad}{k!r}: {_py(v, indent + 4, len(repr(k)) + 2)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + ",\n" + " " * indent + "}"
    return "[\n" + ",\n".join(pad + _py(v, indent + 4) for v in value) + ",\n" + " " * indent + "]"
