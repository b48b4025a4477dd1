"""The libvirt domains of a cluster: which cluster a domain belongs to (the description slurmlab's
Vagrantfile sets), a cluster's domains, and removing one with its volumes."""

from __future__ import annotations

from lab.providers import placement


def cluster_of(dom) -> str | None:
    """The cluster a domain belongs to, from the description slurmlab's Vagrantfile sets."""
    import xml.etree.ElementTree as ET

    try:
        desc = ET.fromstring(dom.XMLDesc(0)).findtext("description") or ""
    except Exception:  # noqa: BLE001 - a domain vanishing mid-listing
        return None
    prefix = "slurmlab cluster="
    return desc[len(prefix):].strip() if desc.startswith(prefix) else None


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


def _delete_volumes(conn, pool_name: str, match) -> list[str]:
    """Delete the pool's volumes `match(vol)` says yes to; their names."""
    import libvirt

    gone = []
    try:
        pool = conn.storagePoolLookupByName(pool_name)
        pool.refresh(0)
        for vol in pool.listAllVolumes():
            if match(vol):
                vol.delete(0)
                gone.append(vol.name())
    except libvirt.libvirtError:
        pass
    return gone


def of_cluster(conn, cluster: str) -> list:
    """The cluster's domains (any state), by name."""
    out = []
    for dom in conn.listAllDomains():
        if cluster_of(dom) == cluster:
            out.append(dom)
    return sorted(out, key=lambda d: d.name())


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
                 _delete_volumes(conn, host.pool, lambda vol: vol.path() in disks or is_cluster_volume(cluster, vol.name()))]
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
    import logging

    import libvirt

    from lab.errors import LabError
    from lab.host import registry

    done = []
    for name in placement.abandoned(cluster):
        try:
            done += purge_cluster_on(registry.get(name), cluster)
        except (libvirt.libvirtError, LabError) as e:
            logging.getLogger(__name__).warning(
                "cluster %s: its VMs on lost host %s stay until that host answers and is cleaned "
                "(virsh -c URI list --all; `slurmlab host remove %s` refuses while they exist): %s", cluster, name, name, e)
    return done
