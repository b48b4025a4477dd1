"""What a host holds under a cluster name that no cluster of the lab has (a killed run's VMs, network,
checkpoints): a create refuses while it is there, `delete-cluster NAME --leftovers` removes it, and a
cluster moved to a host first clears what an earlier life of it left there. The volume removal under
all of them survives a pool refresh that fails while another thread writes into the pool."""

from __future__ import annotations

from pathlib import Path

import libvirt
import pytest

from lab.control import commands
from lab.errors import Conflict
from lab.host.registry import Host
from lab.providers import domains, leftovers
from lab.engine import daemon
from lab.spec import load_spec

REPO = Path(__file__).resolve().parents[2]


def far_spec(tmp_path):
    """examples/small.yaml as cluster far."""
    text = (REPO / "examples" / "small.yaml").read_text().replace("ClusterName: ci", "ClusterName: far")
    (tmp_path / "far.yaml").write_text(text.replace("./lifecycle", str(REPO / "examples" / "lifecycle")))
    return load_spec(tmp_path / "far.yaml")


class Vol:
    def __init__(self, pool, name):
        self.pool, self._name = pool, name

    def name(self):
        return self._name

    def path(self):
        return f"/p/{self._name}"

    def delete(self, flags):
        self.pool.names.remove(self._name)


class Pool:
    def __init__(self, names, refresh_failures=0):
        self.names, self.refresh_failures = list(names), refresh_failures

    def refresh(self, flags):
        if self.refresh_failures:
            self.refresh_failures -= 1
            raise libvirt.libvirtError("cannot open volume '/p/x.img': No such file or directory")

    def listAllVolumes(self):
        return [Vol(self, n) for n in self.names]


class Dom:
    def __init__(self, conn, name, cluster):
        self.conn, self._name, self.cluster = conn, name, cluster

    def name(self):
        return self._name

    def XMLDesc(self, flags):
        return (f"<domain><description>slurmlab cluster={self.cluster}</description><devices>"
                f"<disk><source file='/p/{self._name}.img'/></disk></devices></domain>")

    def isActive(self):
        return False

    def undefineFlags(self, flags):
        self.conn.doms.remove(self)


class Net:
    def __init__(self, conn):
        self.conn = conn

    def isActive(self):
        return False

    def undefine(self):
        self.conn.nets.remove("slurmlab-far")


class Conn:
    def __init__(self, pool):
        self.pool = pool
        self.doms = [Dom(self, "far-controller-1", "far"), Dom(self, "far-b-compute-1", "far-b")]
        self.nets = ["slurmlab-far", "slurmlab-far-b"]

    def listAllDomains(self):
        return list(self.doms)

    def storagePoolLookupByName(self, name):
        return self.pool

    def listNetworks(self):
        return list(self.nets)

    def listDefinedNetworks(self):
        return []

    def networkLookupByName(self, name):
        if name not in self.nets:
            raise libvirt.libvirtError("no network")
        return Net(self)

    def close(self):
        pass


@pytest.fixture
def host(lab_home, tmp_path, monkeypatch):
    """The local host as a fake libvirt holding cluster far's leftovers (and cluster far-b's things)."""
    monkeypatch.setenv("SLURMLAB_LIBVIRT_DIR", str(tmp_path / "libvirt"))
    pool = Pool(["far-controller-1.img", "far-state-1796210387.qcow2", "far-compute-2.img", "far-b-compute-1.img",
                 "box_image_0.img"])
    conn = Conn(pool)
    monkeypatch.setattr(Host, "connect", lambda self: conn)
    monkeypatch.setattr(domains.time, "sleep", lambda s: None)
    monkeypatch.setattr("lab.host.libvirtd.up", lambda: None)
    (leftovers.checkpoint.root("far") / "before-break").mkdir(parents=True)
    return conn


def test_a_create_over_leftovers_is_refused_and_records_nothing(host, tmp_path, monkeypatch):
    found = leftovers.find("far")
    assert found == ["domain far-controller-1 on host local", "volume far-controller-1.img on host local",
                     "volume far-state-1796210387.qcow2 on host local",
                     "volume far-compute-2.img on host local",  # a disk whose domain is gone
                     "network slurmlab-far on host local", "checkpoint before-break"]
    assert leftovers.find("far-b") == ["domain far-b-compute-1 on host local", "volume far-b-compute-1.img on host local",
                                       "network slurmlab-far-b on host local"]
    monkeypatch.setattr("lab.box.require", lambda box: None)
    st = daemon.store()
    with pytest.raises(Conflict) as e:
        commands.create(st, far_spec(tmp_path), "vagrant", start_engine=False)
    assert "domain far-controller-1 on host local" in e.value.message and "checkpoint before-break" in e.value.message
    assert "slurmlab delete-cluster far --leftovers" in e.value.fix
    assert st.clusters() == []


def test_delete_leftovers_removes_the_names_things_and_nothing_else(host):
    st = daemon.store()
    gone = commands.remove_leftovers(st, "far")
    assert sorted(gone) == ["checkpoint before-break", "domain far-controller-1 on host local",
                            "network slurmlab-far on host local", "volume far-compute-2.img on host local",
                            "volume far-controller-1.img on host local",
                            "volume far-state-1796210387.qcow2 on host local"]
    assert [d.name() for d in host.doms] == ["far-b-compute-1"] and host.nets == ["slurmlab-far-b"]
    assert host.pool.names == ["far-b-compute-1.img", "box_image_0.img"]
    assert leftovers.find("far") == [] and commands.remove_leftovers(st, "far") == []


def test_delete_leftovers_refuses_a_cluster_of_this_lab(host, tmp_path):
    st = daemon.store()
    commands.create(st, far_spec(tmp_path), "vagrant", start_engine=False, prepare_host=False)
    with pytest.raises(Conflict, match="cluster far is a cluster of this lab"):
        commands.remove_leftovers(st, "far")
    assert [d.name() for d in host.doms] == ["far-controller-1", "far-b-compute-1"]


def test_volumes_go_although_a_refresh_fails_while_another_thread_writes_the_pool(host, caplog):
    host.pool.refresh_failures = 2
    assert domains._delete_volumes(host, "slurmlab", lambda v: v.name().startswith("far-controller")) == ["far-controller-1.img"]
    host.pool.refresh_failures = 5  # never succeeds: said, not silently kept
    assert domains._delete_volumes(host, "slurmlab", lambda v: v.name().startswith("far-state")) == []
    assert "volumes not removed" in caplog.text and "far-state-1796210387.qcow2" in host.pool.names


def test_a_cluster_moved_to_a_host_first_clears_what_an_earlier_life_left_there(host, monkeypatch):
    from lab.providers import placement
    from lab.providers.vagrant import VagrantProvider

    monkeypatch.setattr(placement, "rehome", lambda cluster, mem, cpus: Host("local", "qemu:///system", pool="slurmlab"))
    assert VagrantProvider().rehome("far", 1024, 1) == "local"
    assert [d.name() for d in host.doms] == ["far-b-compute-1"] and "far-controller-1.img" not in host.pool.names
