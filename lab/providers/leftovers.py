"""What this machine holds under a cluster name that no cluster of this lab has: leftovers.

A cluster's VMs, its network, its state disk and its checkpoints are named after it on the host, not
after the lab home that made it. A run that was killed before its delete (a CI job, a session ended
without warning), or a lab with another SLURMLAB_HOME, leaves them there; a new cluster of the same
name would then take them for its own: reboot a stale VM with another cluster's keys, find a
checkpoint it never took. So a create refuses while any is there (`find`, from the provider's
preflight), and `slurmlab delete-cluster NAME --leftovers` removes them (`remove`), the way
`kind delete cluster` removes what carries its cluster's label.

Every registered host that answers is looked at; one that does not is skipped (its leftovers are
found when it answers: the engine's sweep of abandoned hosts removes a moved cluster's).
"""

from __future__ import annotations

import logging
import shutil

from lab.host import registry
from lab.providers import checkpoint, domains, fork, vagrantfile

log = logging.getLogger(__name__)


def _hosts():
    """Every registered host that answers (libvirt connects), the local one first."""
    import libvirt

    for host in registry.all_hosts():
        try:
            host.connect().close()
        except libvirt.libvirtError as e:
            log.info("host %s not looked at for leftovers: %s", host.name, e.get_error_message())
            continue
        yield host


def find(cluster: str) -> list[str]:
    """What the hosts hold under the name `cluster`, for humans ("domain x on host local", ...)."""
    found = [f"{what} on host {host.name}" for host in _hosts() for what in domains.leftovers_on(host, cluster)]
    kept = checkpoint.root(cluster)
    found += [f"checkpoint {p.name}" for p in sorted(kept.iterdir())] if kept.is_dir() else []
    return found


def refuse(cluster: str) -> None:
    """Conflict when the hosts hold anything under the name (a create's preflight)."""
    from lab.errors import Conflict

    left = find(cluster)
    if left:
        raise Conflict(f"this machine holds {', '.join(left)} under the name {cluster}, and no cluster of this lab "
                       "has that name: a lab with another SLURMLAB_HOME made them, or a run that was killed",
                       f"slurmlab delete-cluster {cluster} --leftovers removes them (if no other lab uses them), "
                       "or choose another name")


def remove(cluster: str) -> list[str]:
    """Remove what find() reports (and the credentials and save images of the name); what went. The
    host is brought up first: leftovers in a libvirtd that is not running yet are leftovers too."""
    from lab.host import libvirtd

    libvirtd.up()
    done = [x for host in _hosts() for x in domains.purge_cluster_on(host, cluster)]
    kept = checkpoint.root(cluster)
    done += [f"checkpoint {p.name}" for p in sorted(kept.iterdir())] if kept.is_dir() else []
    shutil.rmtree(kept, ignore_errors=True)
    shutil.rmtree(vagrantfile.credentials_dir(cluster), ignore_errors=True)
    for image in fork.forks_dir().glob(f"{cluster}-*.save"):
        image.unlink(missing_ok=True)
    return done
