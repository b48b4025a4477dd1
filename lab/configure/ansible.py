"""The configurer the engine calls: which playbook, for which nodes, in which order."""

from __future__ import annotations

from collections.abc import Callable

from lab import users
from lab.configure.base import Configurer, Extension, Probe
from lab.configure.inventory import ClusterContext
from lab.configure.runner import PlaybookFailed, PlaybookResult, run_playbook
from lab.spec import group_gpus
from lab.spec.extensions import OBSERVABILITY
from lab.spec.rules.lifecycle import local_source
from lab.store.db import ClusterRow, GroupRow, NodeRow
from lab.workspace import ClusterDir


class AnsibleConfigurer(Configurer):
    """controller.yml -> nodes.yml -> join.yml (batch) ; leave.yml. controller.yml and nodes.yml end with
    lifecycle.yml (the OnCreate script)."""

    def __init__(self, ssh_executable: str | Callable[[str], str]):
        """`ssh_executable`: the ssh to reach the VMs, or a function of the cluster's name giving it
        (each host's VMs are reached from that host's namespace)."""
        self.ssh_executable = ssh_executable

    def context(self, cluster: ClusterRow, groups: list[GroupRow], nodes: list[NodeRow]) -> ClusterContext:
        cd = ClusterDir(cluster.name)
        lifecycle = {}
        for g in cluster.spec.get("InstanceGroups", []):
            lc = g.get("LifeCycleConfig") or {}
            src = lc.get("SourceS3Uri") or ""
            # a path, a file:// URI, or an s3:// prefix the lab's S3 holds (what `aws s3 sync` uploaded)
            folder = local_source(src, None)[0] if src else None
            if folder is not None:
                lifecycle[g["InstanceGroupName"]] = (str(folder), lc.get("OnCreate") or "on_create.sh")
        spec = cluster.spec.get("Lab") or {}
        return ClusterContext(name=cluster.name, groups=groups, nodes=nodes, ssh_key=cd.ssh_key,
                              munge_key=cd.munge_key, ssh_executable=self._ssh(cluster.name), lifecycle=lifecycle,
                              users=users.inventory_vars(users.load(cluster.name)),
                              gpus=group_gpus(cluster.spec, [(g.name, g.node_type, g.instance_type) for g in groups]),
                              node_environment=spec.get("NodeEnvironment") or "Lab", arn=cluster.arn,
                              jupyter=bool(spec.get("Jupyter")), mpi_default=self._mpi_default(cluster, groups, nodes))

    @staticmethod
    def _mpi_default(cluster: ClusterRow, groups: list[GroupRow], nodes: list[NodeRow]) -> str:
        """pmix when the controller's box has Open MPI and Slurm's PMIx plugin (its "workshop" feature)."""
        from lab import box

        ctl = {g.name for g in groups if g.node_type == "Controller"}
        image = (next((n.image for n in nodes if n.grp in ctl and n.image), None)
                 or (cluster.spec.get("Lab") or {}).get("Box") or box.DEFAULT_BOX)
        return "pmix" if box.WORKSHOP_FEATURE in box.features(image) else "none"

    def _ssh(self, cluster: str) -> str:
        return self.ssh_executable if isinstance(self.ssh_executable, str) else self.ssh_executable(cluster)

    def _run(self, ctx: ClusterContext, playbook: str, **kw) -> PlaybookResult:
        return run_playbook(ctx, playbook, workdir=ClusterDir(ctx.name).root, **kw)

    def configure(self, ctx: ClusterContext, node: str, node_type: str) -> list[PlaybookResult]:
        # controller.yml and nodes.yml end with the lifecycle play: one run per node
        return [self._run(ctx, "controller.yml" if node_type == "Controller" else "nodes.yml", limit=[node])]

    def join(self, ctx: ClusterContext, batch: list[str]) -> PlaybookResult:
        controller = next(n.name for n in ctx.nodes if any(g.name == n.grp and g.node_type == "Controller" for g in ctx.groups))
        # the nodes already running are in the run too: their /etc/hosts learns the new names
        running = [n.name for n in ctx.nodes if n.phase == "running" and n.name != controller and n.name not in batch]
        return self._run(ctx, "join.yml", limit=[controller, *batch, *running], joining=batch,
                         extravars={"slurmlab_joining": list(batch)})

    def health_check(self, ctx: ClusterContext, targets: dict[str, list[str]], op_id: str,
                     faults: dict) -> dict[str, list[str]]:
        """Real checks over SSH (lab/configure/health.py); injected faults are the sim's only."""
        from lab.configure import health

        return health.run(ctx, targets, op_id)

    def set_clocks(self, ctx: ClusterContext) -> dict[str, str]:
        from lab.configure import clock

        return clock.set_all(ctx)

    def slurm_nodes(self, ctx: ClusterContext, faults: dict):
        from lab.configure import slurmstate

        return slurmstate.read(ctx)

    def restart_slurmd(self, ctx: ClusterContext, node: str) -> str:
        from lab.configure import slurmstate

        return slurmstate.restart_slurmd(ctx, node)

    def take_down(self, ctx: ClusterContext, node: str, why: str) -> str:
        from lab.configure import slurmstate

        return slurmstate.take_down(ctx, node, why)

    def cordon(self, ctx: ClusterContext, nodes: list[str], why: str) -> dict[str, str]:
        from lab.configure import slurmstate

        return slurmstate.cordon(ctx, nodes, why)

    def uncordon(self, ctx: ClusterContext, nodes: list[str]) -> dict[str, str]:
        from lab.configure import slurmstate

        return slurmstate.uncordon(ctx, nodes)

    def jobs_on(self, ctx: ClusterContext, nodes: list[str]) -> dict[str, int]:
        from lab.configure import slurmstate

        return slurmstate.jobs_on(ctx, nodes)

    def hub_state(self, ctx: ClusterContext, logins: list[str]) -> dict[str, str]:
        """Each login node's hub asked from the controller over the Slurm poll's kept connection."""
        from lab.configure import hubstate

        return hubstate.read(ctx, logins)

    # ------------------------------------------------------------------ cluster extensions (docs/adr/0017)
    def extension_apply(self, ctx: ClusterContext, ext: Extension, targets: list[str]) -> dict[str, str]:
        """extension.yml on the targets and the controller (its Prometheus collects from every member)."""
        return self._extension(ctx, ext, [*targets, ext.controller], "present")

    def extension_remove(self, ctx: ClusterContext, ext: Extension, targets: list[str]) -> dict[str, str]:
        return self._extension(ctx, ext, targets, "absent")

    def extension_probe(self, ctx: ClusterContext, ext: Extension, faults: dict) -> Probe | None:
        """Prometheus on the controller, asked over the kept ssh connection; injected faults are the sim's only."""
        from lab.configure import extensions

        return extensions.probe(ctx, ext) if ext.name == OBSERVABILITY else None

    def _extension(self, ctx: ClusterContext, ext: Extension, hosts: list[str], state: str) -> dict[str, str]:
        """One extension.yml run; node -> what failed (a failure no host is named in: every host)."""
        from lab.configure import extensions

        hosts = list(dict.fromkeys(h for h in hosts if h))
        if ext.name != OBSERVABILITY:
            return {h: f"the lab has no extension {ext.name!r}" for h in hosts}
        if not hosts:
            return {}
        try:
            self._run(ctx, "extension.yml", limit=hosts, extravars=extensions.role_vars(ext, state))
        except PlaybookFailed as e:
            named = {h: why for h, why in e.failures.items() if h in hosts}
            return named or {h: str(e) for h in hosts}
        return {}

    def leave(self, ctx: ClusterContext, names: list[str]) -> PlaybookResult:
        controller = next(n.name for n in ctx.nodes if any(g.name == n.grp and g.node_type == "Controller" for g in ctx.groups))
        return self._run(ctx, "leave.yml", limit=[controller, *names], extravars={"slurmlab_leaving": names})
