"""The controller's state disk on real VMs: a volume in the lab's pool that outlives the controller's VM.

The Vagrantfile gives the controller one more disk (`lv.storage :file, allow_existing: true`, serial
STATE_DISK_SERIAL): `vagrant destroy` leaves such a disk, so a new controller VM (a software update, a
replaced or lost VM) attaches the same volume and finds /home, /fsx, slurmctld's state and the
accounting database on it (roles/state_disk mounts it; docs/adr/0007). The volume is removed with the
cluster (its name: lab.providers.base.state_disk_name).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from lab.host import pools
from lab.providers import placement
from lab.providers.base import STATE_DISK_SERIAL

SIZE = "8G"  # virtual size; the qcow2 file grows with what is written


def is_cluster_volume(cluster: str, vol: str) -> bool:
    """The cluster's state disk, its munge key uploaded to a remote host (hostside.munge_volume), or a
    checkpoint's memory on a remote host (checkpoint_keep.volume_prefix: a tag holds no '.')."""
    # "-state-<digits>.qcow2" right after the name: cluster "a" never takes cluster "a-b"'s volume
    return re.fullmatch(re.escape(cluster) + r"-(state-[0-9]+\.qcow2|munge\.key|ckpt\.[a-z0-9-]+\..+\.mem)", vol) is not None


def attached(cluster: str, name: str) -> bool:
    """Whether the domain `name` has a state disk (a cluster made before the state disk has none)."""
    import libvirt

    conn = placement.host_of(cluster).connect()
    try:
        try:
            xml = conn.lookupByName(name).XMLDesc(0)
        except libvirt.libvirtError:
            return False
        return any((d.findtext("serial") or "") == STATE_DISK_SERIAL
                   for d in ET.fromstring(xml).findall("devices/disk"))
    finally:
        conn.close()


def delete_volumes(cluster: str) -> list[str]:
    """Remove the cluster's state disk volumes (and an uploaded key) from the pool; what was removed, for humans."""
    import libvirt

    host = placement.host_of(cluster)
    conn = host.connect()
    removed = []
    try:
        pool = conn.storagePoolLookupByName(host.pool)
        pools.refresh(pool)
        for vol in pool.listAllVolumes():
            if is_cluster_volume(cluster, vol.name()):
                vol.delete(0)
                removed.append(f"volume {vol.name()}")
    except libvirt.libvirtError:
        pass
    finally:
        conn.close()
    return removed
