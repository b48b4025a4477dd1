"""The whole configurer contract: what the engine calls to configure nodes and change slurm.conf.

Same sync/async rule as lab/providers/base.py: the blocking methods (`configure`, `join`, `leave`)
may be called directly; the engine awaits only their coroutine twins, whose default runs the
blocking method in a worker thread counted for the context's cluster. A configurer that never
blocks (SimConfigurer) overrides the twins.

`configure` returns a list of results, each with `warnings` (lab.configure.runner.PlaybookResult):
the engine turns them into events. A failure raises `ConfigureError` (its `failures` say which
node failed why); the engine marks those nodes Failure and retries them with backoff.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lab.providers.base import in_thread

if TYPE_CHECKING:
    from lab.configure.inventory import ClusterContext
    from lab.store.db import ClusterRow, GroupRow, NodeRow


@dataclass(frozen=True)
class Extension:
    """What a configurer needs of an installed cluster extension: its name and version, its whole
    configuration (the request's values merged over the defaults), the cluster's running nodes
    (`members`, each a target of the collector) and which of them is the controller."""

    name: str
    version: str
    config: dict
    members: tuple[str, ...]
    controller: str


@dataclass
class Probe:
    """One look at an extension: members that do not answer (node -> why) and a metrics sample."""

    unhealthy: dict[str, str] = field(default_factory=dict)
    sample: dict | None = None


class ConfigureError(Exception):
    """A configure, join or leave that failed; `failures`: node -> why (may be empty)."""

    def __init__(self, message: str, failures: dict[str, str] | None = None):
        super().__init__(message)
        self.failures = dict(failures or {})


def warnings_of(results: list | None) -> list[str]:
    """The warnings of `configure`'s results, without the "host: " each starts with."""
    return [w.split(": ", 1)[-1] for r in results or () for w in r.warnings or ()]


class Configurer(ABC):
    @abstractmethod
    def context(self, cluster: ClusterRow, groups: list[GroupRow], nodes: list[NodeRow]) -> ClusterContext | None:
        """What configure/join/leave need about the cluster (None: nothing)."""

    @abstractmethod
    def configure(self, ctx: ClusterContext | None, node: str, node_type: str) -> list | None:
        """Configure one node (controller, login or compute); returns results with `warnings`."""

    @abstractmethod
    def join(self, ctx: ClusterContext | None, batch: list[str]) -> Any:
        """The batch of configured compute nodes into slurm.conf, one reconfigure."""

    @abstractmethod
    def leave(self, ctx: ClusterContext | None, names: list[str]) -> Any:
        """Drain the nodes, wait for their jobs, take them out of slurm.conf, one reconfigure."""

    @abstractmethod
    def health_check(self, ctx: ClusterContext | None, targets: dict[str, list[str]], op_id: str,
                     faults: dict) -> dict[str, list[str]]:
        """Run the deep health checks `targets` names (node -> DeepHealthCheckType values) inside the
        nodes; node -> what failed ("Check: why"; empty: passed). `op_id` names the run (its Slurm
        maintenance reservation); `faults` are the lab's injected faults (a simulation may use them)."""

    @abstractmethod
    def set_clocks(self, ctx: ClusterContext | None) -> dict[str, str]:
        """Set every running node's clock to the host's now (after a checkpoint restore the guests run
        on from the checkpoint's time: munge refuses credentials 5 minutes off); node -> what failed."""

    # Slurm's view and the Slurm-side steps of recovery (lab/engine/recovery.py). Not abstract: a
    # configurer without Slurm (a test's fake) answers None and the engine watches libvirt only.
    def slurm_nodes(self, ctx: ClusterContext | None, faults: dict) -> tuple[dict, float] | None:
        """(node -> lab.configure.sinfo.SlurmNode for every compute node slurmctld knows, the time it was
        asked); raises lab.configure.slurmstate.SlurmUnreachable when slurmctld does not answer."""
        return None

    def restart_slurmd(self, ctx: ClusterContext | None, node: str) -> str:
        """The cheap repair: restart slurmd on the node; what went wrong ("" when it runs again)."""
        return "this configurer cannot restart slurmd"

    def take_down(self, ctx: ClusterContext | None, node: str, why: str) -> str:
        """Before a reboot or replace: the node DOWN in Slurm (its jobs end now); what went wrong."""
        return ""

    def cordon(self, ctx: ClusterContext | None, nodes: list[str], why: str) -> dict[str, str]:
        """Auto-patching (lab/engine/patching.py): the nodes DRAIN in Slurm with the reason `slurmlab: <why>`
        (their jobs run on, no new job starts there); node -> what went wrong."""
        return {n: "this configurer cannot drain nodes" for n in nodes}

    def uncordon(self, ctx: ClusterContext | None, nodes: list[str]) -> dict[str, str]:
        """Resume the nodes the lab drained (a reason of its own, `slurmlab: `; a user's drain stays)."""
        return {}

    def jobs_on(self, ctx: ClusterContext | None, nodes: list[str]) -> dict[str, int]:
        """node -> how many jobs run (or complete, or are suspended) there, from Slurm's job records; a
        node left out: not known. Not abstract: a configurer without Slurm knows nothing."""
        return {}

    # Cluster extensions (CreateClusterExtension, docs/adr/0017-cluster-extensions.md). Not abstract: a
    # configurer without extensions (a test's fake) says so in every failure and probes nothing.
    def extension_apply(self, ctx: ClusterContext | None, ext: Extension, targets: list[str]) -> dict[str, str]:
        """Install or update `ext` on the `targets` nodes (all running, named in ext.members) and refresh
        what the controller collects from (every member); node -> what failed (empty: all done)."""
        return {n: "this configurer has no extensions" for n in targets}

    def extension_remove(self, ctx: ClusterContext | None, ext: Extension, targets: list[str]) -> dict[str, str]:
        """Stop and remove every part of `ext` on the `targets` nodes; node -> what failed."""
        return {}

    def extension_probe(self, ctx: ClusterContext | None, ext: Extension, faults: dict) -> Probe | None:
        """One look at an installed extension: which members do not answer (node -> why) and one metrics
        sample (lab/configure/metrics.py shape); None: nothing to look at."""
        return None

    def hub_state(self, ctx: ClusterContext | None, logins: list[str]) -> dict[str, str]:
        """Lab.Jupyter: login node -> "" when its JupyterHub answers, else why not; a node left out: not
        known this time (nothing changes). Not abstract: a configurer without real nodes knows nothing."""
        return {}

    async def hub_state_async(self, ctx: ClusterContext | None, logins: list[str]) -> dict[str, str]:
        return await in_thread(_cluster(ctx), self.hub_state, ctx, logins)

    async def extension_apply_async(self, ctx: ClusterContext | None, ext: Extension, targets: list[str]) -> dict[str, str]:
        return await in_thread(_cluster(ctx), self.extension_apply, ctx, ext, targets)

    async def extension_remove_async(self, ctx: ClusterContext | None, ext: Extension, targets: list[str]) -> dict[str, str]:
        return await in_thread(_cluster(ctx), self.extension_remove, ctx, ext, targets)

    async def extension_probe_async(self, ctx: ClusterContext | None, ext: Extension, faults: dict) -> Probe | None:
        return await in_thread(_cluster(ctx), self.extension_probe, ctx, ext, faults)

    async def slurm_nodes_async(self, ctx: ClusterContext | None, faults: dict) -> tuple[dict, float] | None:
        return await in_thread(_cluster(ctx), self.slurm_nodes, ctx, faults)

    async def restart_slurmd_async(self, ctx: ClusterContext | None, node: str) -> str:
        return await in_thread(_cluster(ctx), self.restart_slurmd, ctx, node)

    async def take_down_async(self, ctx: ClusterContext | None, node: str, why: str) -> str:
        return await in_thread(_cluster(ctx), self.take_down, ctx, node, why)

    async def cordon_async(self, ctx: ClusterContext | None, nodes: list[str], why: str) -> dict[str, str]:
        return await in_thread(_cluster(ctx), self.cordon, ctx, nodes, why)

    async def uncordon_async(self, ctx: ClusterContext | None, nodes: list[str]) -> dict[str, str]:
        return await in_thread(_cluster(ctx), self.uncordon, ctx, nodes)

    async def jobs_on_async(self, ctx: ClusterContext | None, nodes: list[str]) -> dict[str, int]:
        return await in_thread(_cluster(ctx), self.jobs_on, ctx, nodes)

    async def set_clocks_async(self, ctx: ClusterContext | None) -> dict[str, str]:
        return await in_thread(_cluster(ctx), self.set_clocks, ctx)

    async def configure_async(self, ctx: ClusterContext | None, node: str, node_type: str) -> list | None:
        return await in_thread(_cluster(ctx), self.configure, ctx, node, node_type)

    async def join_async(self, ctx: ClusterContext | None, batch: list[str]) -> Any:
        return await in_thread(_cluster(ctx), self.join, ctx, batch)

    async def leave_async(self, ctx: ClusterContext | None, names: list[str]) -> Any:
        return await in_thread(_cluster(ctx), self.leave, ctx, names)

    async def health_check_async(self, ctx: ClusterContext | None, targets: dict[str, list[str]], op_id: str,
                                 faults: dict) -> dict[str, list[str]]:
        return await in_thread(_cluster(ctx), self.health_check, ctx, targets, op_id, faults)


def _cluster(ctx: ClusterContext | None) -> str:
    return ctx.name if ctx is not None else ""
