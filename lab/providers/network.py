"""A libvirt network per cluster: isolated (no route out), its own /24, static DHCP entries.

It lives on the cluster's host (placement.py), in the lab's namespace with libvirtd (netns mode), so its bridge and dnsmasq never touch
the machine's own network. Guests need nothing from outside: the box carries every package.
"""

from __future__ import annotations

import ipaddress
import xml.etree.ElementTree as ET

from lab.providers import placement
from lab.providers.base import ClusterNet

BASE = ipaddress.ip_network("10.213.0.0/16")
PREFIX = "slurmlab-"


def net_name(cluster: str) -> str:
    return f"{PREFIX}{cluster}"


def _used_subnets(conn) -> dict[str, str]:
    used = {}
    for net in conn.listAllNetworks():
        root = ET.fromstring(net.XMLDesc(0))
        ip = root.find("ip")
        if ip is not None and ip.get("address"):
            iface = ipaddress.ip_interface(f"{ip.get('address')}/{ip.get('netmask', '255.255.255.0')}")
            used[str(iface.network)] = net.name()
    return used


def pick_subnet(used: set[str], preferred: int) -> ipaddress.IPv4Network:
    """First free /24 of 10.213.0.0/16, starting from a per-cluster preferred index."""
    subnets = list(BASE.subnets(new_prefix=24))[1:]
    n = len(subnets)
    for i in range(n):
        cand = subnets[(preferred + i) % n]
        if str(cand) not in used:
            return cand
    raise RuntimeError("no free /24 left in 10.213.0.0/16")


def network_xml(name: str, bridge: str, subnet: ipaddress.IPv4Network) -> str:
    gw = subnet.network_address + 1
    start, end = subnet.network_address + 200, subnet.network_address + 250
    return (
        f"<network><name>{name}</name>"
        f"<bridge name='{bridge}' stp='off' delay='0'/>"
        f"<ip address='{gw}' netmask='{subnet.netmask}'>"
        f"<dhcp><range start='{start}' end='{end}'/></dhcp></ip></network>"
    )


def _as_clusternet(net) -> ClusterNet:
    root = ET.fromstring(net.XMLDesc(0))
    ip = root.find("ip")
    iface = ipaddress.ip_interface(f"{ip.get('address')}/{ip.get('netmask')}")
    return ClusterNet(net.name(), root.find("bridge").get("name"), str(iface.network), str(iface.ip))


def ensure(cluster: str, preferred_index: int = 0) -> ClusterNet:
    import libvirt

    conn = placement.host_of(cluster).connect()
    try:
        name = net_name(cluster)
        try:
            net = conn.networkLookupByName(name)
        except libvirt.libvirtError:
            subnet = pick_subnet(set(_used_subnets(conn)), preferred_index)
            bridge = f"slbr{subnet.network_address.packed[2]}"
            net = conn.networkDefineXML(network_xml(name, bridge, subnet))
        if not net.isActive():
            net.create()
        return _as_clusternet(net)
    finally:
        conn.close()


def address_for(net: ClusterNet, ordinal: int) -> str:
    """Static address of the ordinal-th node of the cluster (ordinal from 0): .10, .11, ..."""
    subnet = ipaddress.ip_network(net.cidr)
    if not 0 <= ordinal < 190:
        raise ValueError("a lab cluster holds at most 190 nodes per network")
    return str(subnet.network_address + 10 + ordinal)


def add_host(cluster: str, mac: str, name: str, address: str) -> None:
    """Static DHCP entry (live and persistent). Idempotent."""
    import libvirt

    conn = placement.host_of(cluster).connect()
    try:
        net = conn.networkLookupByName(net_name(cluster))
        xml = net.XMLDesc(0)
        if f"mac='{mac}'" in xml or f'mac="{mac}"' in xml:
            return
        entry = f"<host mac='{mac}' name='{name}' ip='{address}'/>"
        flags = libvirt.VIR_NETWORK_UPDATE_AFFECT_CONFIG
        if net.isActive():
            flags |= libvirt.VIR_NETWORK_UPDATE_AFFECT_LIVE
        net.update(libvirt.VIR_NETWORK_UPDATE_COMMAND_ADD_LAST, libvirt.VIR_NETWORK_SECTION_IP_DHCP_HOST, -1, entry, flags)
    finally:
        conn.close()


def remove(cluster: str) -> bool:
    import libvirt

    conn = placement.host_of(cluster).connect()
    try:
        try:
            net = conn.networkLookupByName(net_name(cluster))
        except libvirt.libvirtError:
            return False
        if net.isActive():
            net.destroy()
        net.undefine()
        return True
    finally:
        conn.close()
