"""The libvirt domains of a cluster: which cluster a domain belongs to (the description slurmlab's
Vagrantfile sets), a cluster's domains, and removing one with its volumes."""

from __future__ import annotations

import logging
import re
import time

from lab.host import pools
from lab.providers import placement
from lab.providers.base import cluster_of

log = logging.getLogger(__name__)


def purge(cluster: str, name: str) -> None:
    """Make sure neither the domain nor its volumes remain on the cluster's host (after vagrant
    destroy, or instead of it)."""
    host = placement.host_of(cluster)
    conn = host.connect()
    try:
        end_named(conn, name)
        _delete_volumes(conn, host.pool, lambda vol: vol.name() == f"{name}.img" or vol.name().startswith(f"{name}-"))
    finally:
        conn.close()


def _end(dom) -> None:
    """Stop the domain (if it runs) and undefine it with its NVRAM and managed save."""
    import libvirt

    if dom.isActive():
        dom.destroy()
    dom.undefineFlags(libvirt.VIR_DOMAIN_UNDEFINE_NVRAM | libvirt.VIR_DOMAIN_UNDEFINE_MANAGED_SAVE)


def end_named(conn, name: str) -> None:
    """The domain `name` stopped and undefined, if there is one (a transient one is gone once stopped)."""
    import libvirt

    try:
        _end(conn.lookupByName(name))
    except libvirt.libvirtError:
        pass


def _delete_volumes(conn, pool_name: str, match, attempts: int = 3) -> list[str]:
    """Delete the pool's volumes `match(vol)` says yes to; their names. A refresh fails when another
    thread creates or removes a file in the pool at that moment (a fork's overlay, a cold boot's
    disk): tried again, and a volume that still cannot go is logged, never silently kept."""
    import libvirt

    gone: list[str] = []
    last = None
    for attempt in range(attempts):
        try:
            pool = conn.storagePoolLookupByName(pool_name)
            pools.refresh(pool)
            left = [v for v in pool.listAllVolumes() if match(v)]
        except libvirt.libvirtError as e:
            last = e
            time.sleep(0.5 * (attempt + 1))
            continue
        last = None
        for vol in left:
            name = vol.name()
            try:
                vol.delete(0)
                gone.append(name)
            except libvirt.libvirtError as e:
                last = e
        if last is None:
            return gone
        time.sleep(0.5 * (attempt + 1))
    if last is not None:
        log.warning("pool %s: volumes not removed: %s", pool_name, last.get_error_message())
    return gone


def of_cluster(conn, cluster: str) -> list:
    """The cluster's domains (any state), by name."""
    out = []
    for dom in conn.listAllDomains():
        if cluster_of(dom) == cluster:
            out.append(dom)
    return sorted(out, key=lambda d: d.name())


def is_node_disk(cluster: str, vol: str) -> bool:
    """`<cluster>-<group>-<n>.img`, a node's disk (a fork's overlay, a cold VM's) even without its
    domain. Only groups without a dash are recognised: cluster "a" never takes cluster "a-b"'s disks."""
    return re.fullmatch(re.escape(cluster) + r"-[A-Za-z0-9]+-[0-9]+\.img", vol) is not None


def leftovers_on(host, cluster: str) -> list[str]:
    """What `host` holds under the name `cluster`: its domains, its state disk and its network (for a
    name no cluster of this lab has: a lab with another SLURMLAB_HOME, or a run that was killed). For
    humans; purge_cluster_on removes the same things."""
    import libvirt

    from lab.providers.network import net_name
    from lab.providers.state_disk import is_cluster_volume

    conn = host.connect()
    try:
        found = [f"domain {d.name()}" for d in of_cluster(conn, cluster)]
        try:
            pool = conn.storagePoolLookupByName(host.pool)
            pools.refresh(pool)
            found += [f"volume {v.name()}" for v in pool.listAllVolumes()
                      if is_cluster_volume(cluster, v.name()) or is_node_disk(cluster, v.name())]
        except libvirt.libvirtError:
            pass
        if net_name(cluster) in conn.listNetworks() + conn.listDefinedNetworks():
            found.append(f"network {net_name(cluster)}")
    finally:
        conn.close()
    return found


def purge_cluster_on(host, cluster: str) -> list[str]:
    """Remove everything of `cluster` from `host` (a host the cluster left when it was lost): its
    domains, their disks, its state disk and its network. What was removed, for humans."""
    import xml.etree.ElementTree as ET

    import libvirt

    from lab.providers.network import net_name
    from lab.providers.state_disk import is_cluster_volume

    done, disks = [], set()
    conn = host.connect()
    try:
        for dom in of_cluster(conn, cluster):
            name = dom.name()
            try:
                disks |= {s.get("file") for s in ET.fromstring(dom.XMLDesc(0)).findall("devices/disk/source") if s.get("file")}
                _end(dom)
                done.append(f"domain {name} on host {host.name}")
            except libvirt.libvirtError:
                pass
        done += [f"volume {v} on host {host.name}" for v in
                 _delete_volumes(conn, host.pool, lambda vol: vol.path() in disks or is_cluster_volume(cluster, vol.name())
                                       or is_node_disk(cluster, vol.name()))]
        try:
            net = conn.networkLookupByName(net_name(cluster))
            if net.isActive():
                net.destroy()
            net.undefine()
            done.append(f"network {net_name(cluster)} on host {host.name}")
        except libvirt.libvirtError:
            pass
    finally:
        conn.close()
    return done


def purge_abandoned(cluster: str) -> list[str]:
    """Remove what `cluster` left on the hosts it was moved away from (a delete); what is still
    unreachable stays, with a warning that says how to clean it."""
    import libvirt

    from lab.errors import LabError
    from lab.host import registry

    done = []
    for name in placement.abandoned(cluster):
        try:
            done += purge_cluster_on(registry.get(name), cluster)
        except (libvirt.libvirtError, LabError) as e:
            log.warning(
                "cluster %s: its VMs on lost host %s stay until that host answers and is cleaned "
                "(virsh -c URI list --all; `slurmlab host remove %s` refuses while they exist): %s", cluster, name, name, e)
    return done
