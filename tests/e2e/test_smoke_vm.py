"""Issue 2's smoke test: one real VM from the box through Vagrant + vagrant-libvirt.

Boot, ssh in with the cluster's own key, check `slurmd -V` reports 24.11, destroy, and check
that libvirt holds nothing of it any more (domain, volume, network).
"""

import re
import subprocess
import uuid

import pytest

from lab import box
from lab.host import libvirtd
from lab.providers import network
from lab.providers.base import MachineSpec, Start, mac_for
from lab.providers.reach import ssh_exe
from lab.providers.vagrant import VagrantProvider
from lab.workspace import ClusterDir

pytestmark = pytest.mark.e2e


def _libvirt_leftovers(cluster: str) -> list[str]:
    conn = libvirtd.connect()
    try:
        left = [f"domain {d.name()}" for d in conn.listAllDomains() if d.name().startswith(f"{cluster}-")]
        pool = conn.storagePoolLookupByName(libvirtd.POOL)
        pool.refresh(0)
        left += [f"volume {v.name()}" for v in pool.listAllVolumes() if v.name().startswith(f"{cluster}-")]
        left += [f"network {n.name()}" for n in conn.listAllNetworks() if n.name() == network.net_name(cluster)]
        return left
    finally:
        conn.close()


def test_one_vm_boots_answers_ssh_and_leaves_nothing(lab_home):
    libvirtd.up()
    assert box.is_current(), "the box is missing: run `slurmlab box build` (make test does)"
    cluster = f"smoke{uuid.uuid4().hex[:6]}"
    prov = VagrantProvider()
    try:
        net = prov.network(cluster)
        name = f"{cluster}-node-1"
        # the cold path (Vagrant boots the VM); the e2e cluster's nodes are forked (warm start)
        m = MachineSpec(name, "node", 1, 768, mac_for(cluster, name), network.address_for(net, 0), start=Start.COLD)
        prov.prepare(cluster, [m])
        obs = prov.ensure(cluster, m)
        assert obs.state == "running"
        key = ClusterDir(cluster).ssh_key
        assert oct(key.stat().st_mode & 0o777) == "0o600"
        out = subprocess.run(
            [ssh_exe(), "-i", str(key), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "BatchMode=yes", "-o", "ConnectTimeout=20", f"vagrant@{m.address}", "/usr/sbin/slurmd -V; hostname -I"],
            capture_output=True, text=True, timeout=120,
        )
        assert out.returncode == 0, out.stderr
        assert re.match(r"slurm(-wlm)? 24\.11\.\d+", out.stdout), out.stdout
        assert m.address in out.stdout
    finally:
        prov.delete_cluster(cluster)
    assert _libvirt_leftovers(cluster) == []
    assert not ClusterDir(cluster).root.exists()
