"""Every provider the lab has, by the name a cluster records (`ClusterRow.provider`), with what it
can do: the one place that knows provider names. Code elsewhere asks `info(name)` for a capability,
never compares names (the way kind's providers answer `Info()`).

    vagrant  real VMs: Vagrant + vagrant-libvirt, configured by Ansible (the default)
    sim      simulated VMs: records only, no Slurm inside (API practice, fast engine tests)
"""

from __future__ import annotations

from dataclasses import dataclass

from lab.errors import UsageError
from lab.providers.base import Provider


@dataclass(frozen=True)
class ProviderInfo:
    name: str
    what: str  # one line for --provider's help and errors
    # its nodes are records: nothing to ssh into, no Slurm inside; labelled simulated; configured by the
    # simulated configurer (lab/configure/sim.py), the others by Ansible (lab/configure/ansible.py)
    simulated: bool


INFOS = {
    "vagrant": ProviderInfo("vagrant", "real VMs", simulated=False),
    "sim": ProviderInfo("sim", "simulated VMs, no Slurm inside", simulated=True),
}
DEFAULT = "vagrant"


def names() -> tuple[str, ...]:
    return tuple(INFOS)


def check(name: str, where: str = "--provider") -> ProviderInfo:
    """The provider's info; UsageError naming the known ones for an unknown name."""
    found = INFOS.get(name)
    if found is None:
        raise UsageError(f"{where}: unknown provider '{name}'",
                         "use one of: " + ", ".join(f"{i.name} ({i.what})" for i in INFOS.values()))
    return found


def info(name: str) -> ProviderInfo:
    """What the provider a cluster records can do (an unknown name: a real one, as the default)."""
    return INFOS.get(name) or INFOS[DEFAULT]


def make(name: str) -> Provider:
    """A provider object for `name` (the engine makes one per name, on first use)."""
    check(name)
    if name == "sim":
        from lab import paths, settings
        from lab.providers.sim import SimProvider

        # The simulated VMs outlive the engine (as libvirt domains do): a restarted engine finds them.
        return SimProvider(boot_time=settings.SIM_BOOT_TIME.get(),
                           path=paths.home() / "sim-vms.db")
    from lab.providers.vagrant import VagrantProvider

    return VagrantProvider()


def releases(name: str) -> list:
    """The image releases of provider `name` without making the provider (DescribeCluster's image
    versions, UpdateClusterSoftware's ImageReleaseVersion): what its `releases()` answers."""
    if info(name).simulated:
        from lab import paths
        from lab.providers.sim_releases import SimReleases

        return SimReleases(paths.home() / "sim-releases.json").all()
    from lab.box.releases import catalog

    return catalog()
