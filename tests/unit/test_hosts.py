"""The lab's hosts: the hosts file, placement's choice, and what a host's room is."""

from __future__ import annotations

import os

import pytest

from lab.errors import Conflict, HostError, NotFound, UsageError
from lab.host import registry
from lab.host.registry import Host
from lab.providers import placement
from lab.providers.placement import Room, choose


@pytest.mark.parametrize("need_mib,need_cpus,rooms,expected", [
    # the most free memory wins among the hosts with room for all of it
    (2304, 3, [Room("local", 3000, None), Room("h2", 6000, None)], "h2"),
    (2304, 3, [Room("local", 6000, None), Room("h2", 3000, None)], "local"),
    # a host without room for the whole cluster is never chosen, however much it has
    (2304, 3, [Room("local", 2000, None), Room("h2", 2304, None)], "h2"),
    # memory first, then CPUs: equal memory, more CPUs left wins; a CPU limit too low excludes
    (1024, 2, [Room("local", 4000, 2), Room("h2", 4000, 6)], "h2"),
    (1024, 4, [Room("local", 8000, 2), Room("h2", 4000, 4)], "h2"),
    # an unreachable host is never chosen; ties go to the first listed (local)
    (1024, 1, [Room("local", 4000, None), Room("h2", 9000, None, reachable=False)], "local"),
    (1024, 1, [Room("local", 4000, None), Room("h2", 4000, None)], "local"),
    # no CPU limit: the free cores still break a tie on memory (more first), never exclude a host
    (1024, 1, [Room("local", 4000, None, free_cpus=2), Room("h2", 4000, None, free_cpus=8)], "h2"),
    (1024, 4, [Room("local", 4000, None, free_cpus=2), Room("h2", 3000, None, free_cpus=8)], "local"),
    (1024, 16, [Room("local", 4000, None, free_cpus=-2)], "local"),
    # a limit and free cores: the fewer counts (a limit the host's other VMs leave no cores for)
    (1024, 2, [Room("local", 4000, 8, free_cpus=2), Room("h2", 4000, None, free_cpus=4)], "h2"),
    (1024, 2, [Room("local", 4000, 8, free_cpus=6), Room("h2", 4000, None, free_cpus=4)], "local"),
    # no host has room: None (the caller waits for room on the roomiest)
    (9000, 1, [Room("local", 4000, None), Room("h2", 8000, None)], None),
    (1024, 1, [], None),
])
def test_choose_takes_free_memory_first_then_cores(need_mib, need_cpus, rooms, expected):
    assert choose(need_mib, need_cpus, rooms) == expected


def test_hosts_file_add_limit_remove(lab_home):
    assert [h.name for h in registry.all_hosts()] == ["local"]
    registry.add(Host("h2", "qemu+unix:///system?socket=/x/sock", "slurmlab-h2", 4096, 2, simulated=True))
    assert oct(os.stat(registry.file()).st_mode & 0o777) == "0o600"
    h2 = registry.get("h2")
    assert (h2.uri, h2.netns, h2.memory_mib, h2.cpus, h2.simulated) == ("qemu+unix:///system?socket=/x/sock",
                                                                         "slurmlab-h2", 4096, 2, True)
    # the local host takes limits too, and keeps its own URI
    registry.set_limits("local", 1024, None)
    assert registry.get("local").memory_mib == 1024 and registry.get("local").uri == "qemu:///system"
    assert [h.name for h in registry.all_hosts()] == ["local", "h2"]
    registry.remove("h2")
    with pytest.raises(NotFound):
        registry.get("h2")
    assert registry.get("local").memory_mib == 1024


@pytest.mark.parametrize("host,err", [
    (Host("local", "qemu+ssh://a/system"), Conflict),
    (Host("H2!", "qemu+ssh://a/system"), UsageError),
    (Host("h2", "qemu+unix:///system?socket=/x/sock"), Conflict),  # that libvirtd is listed already
])
def test_bad_or_clashing_hosts_are_refused_and_change_nothing(lab_home, host, err):
    registry.add(Host("h3", "qemu+unix:///system?socket=/x/sock"))
    before = registry.file().read_text()
    with pytest.raises(err):
        registry.add(host)
    assert registry.file().read_text() == before


def test_limits_are_set_and_lifted_and_local_cannot_go(lab_home):
    with pytest.raises(UsageError):
        registry.set_limits("local", -1, None)
    assert not registry.file().exists()
    registry.set_limits("local", 2048, 2)
    assert (registry.get("local").memory_mib, registry.get("local").cpus) == (2048, 2)
    registry.set_limits("local", 0, None)  # 0 lifts a limit, None leaves one
    assert (registry.get("local").memory_mib, registry.get("local").cpus) == (None, 2)
    registry.file().unlink()
    with pytest.raises(UsageError):
        registry.remove("local")
    with pytest.raises(NotFound):
        registry.set_limits("nope", 100, None)
    assert not registry.file().exists()


def test_a_broken_hosts_file_is_named(lab_home):
    registry.file().parent.mkdir(parents=True, exist_ok=True)
    registry.file().write_text("hosts: [unclosed\n")
    with pytest.raises(UsageError, match="hosts.yml"):
        registry.all_hosts()


def test_an_unreachable_uri_is_a_host_error_naming_it(lab_home, tmp_path):
    with pytest.raises(HostError, match="nonexistent"):
        registry.require_reachable(Host("h9", f"qemu+unix:///system?socket={tmp_path}/nonexistent"))


class _Dom:
    def __init__(self, mem_mib, vcpus, active=True):
        self.mem, self.vcpus, self.active = mem_mib, vcpus, active

    def isActive(self):
        return self.active

    def info(self):
        return [1, self.mem * 1024, self.mem * 1024, self.vcpus, 0]


class _Conn:
    def __init__(self, free_mib, doms, cpus=8):
        self.free, self.doms, self.cpus = free_mib, doms, cpus

    def getInfo(self):  # [model, memory MiB, cpus, mhz, nodes, sockets, cores, threads]
        return ["x86_64", 24 * 1024, self.cpus, 2400, 1, 1, self.cpus, 1]

    def getFreeMemory(self):
        return self.free << 20

    def getMemoryStats(self, cell, flags):  # KiB, as libvirt gives them: free + buffers + cached is what VMs may take
        return {"total": 24 << 20, "free": (self.free - 3000) << 10, "buffers": 1000 << 10, "cached": 2000 << 10}

    def listAllDomains(self):
        return self.doms

    def close(self):
        pass


def test_room_is_free_memory_less_the_reserve_capped_by_the_lab_limit(monkeypatch):
    host = Host("h2", "x", memory_mib=4096, cpus=4)
    monkeypatch.setattr(Host, "connect", lambda self: _Conn(20000, [_Dom(768, 1), _Dom(768, 1), _Dom(2048, 2, active=False)]))
    r = placement.room(host)
    assert (r.memory_mib, r.cpus, r.reachable) == (4096 - 1536, 2, True)
    assert r.free_cpus == 8 - 2  # the host's cores less the running domains' vCPUs
    host.memory_mib, host.cpus = None, None
    r = placement.room(host)
    assert (r.memory_mib, r.cpus, r.free_cpus) == (20000 - registry.HOST_RESERVE_MIB, None, 6)


@pytest.mark.parametrize("uri,want", [("qemu:///system", 1500), ("qemu+unix:///system?socket=/x/sock", 1500),
                                       ("qemu+ssh://root@h2/system", 20000)])
def test_on_this_machine_shared_memory_is_not_free(monkeypatch, uri, want):
    """libvirt counts shared memory (tmpfs, a process's shared pages) as cache: on this machine the kernel's
    MemAvailable caps it (issue 45's fault run); another machine's libvirt is all there is to ask."""
    conn = _Conn(20000, [])
    conn.getURI = lambda: uri
    monkeypatch.setattr(registry, "meminfo_mib", lambda field="MemAvailable": 1500)
    assert registry.available_mib(conn) == want


def test_a_cluster_is_placed_once_where_there_is_room(lab_home, monkeypatch):
    registry.add(Host("h2", "qemu+unix:///system?socket=/x/sock", "slurmlab-h2"))
    rooms = {"local": Room("local", 1000, None), "h2": Room("h2", 5000, None)}
    monkeypatch.setattr(placement, "room", lambda h: rooms[h.name])
    from lab.workspace import ClusterDir

    ClusterDir("far").create()
    assert placement.place("far", 2304, 3).name == "h2"
    rooms["h2"] = Room("h2", 0, None)  # later calls keep the recorded host
    assert placement.place("far", 2304, 3).name == "h2"
    assert placement.host_of("far").netns == "slurmlab-h2"
    (ClusterDir("far").root / "Vagrantfile").write_text("")
    assert placement.clusters_on("h2") == ["far"] and placement.clusters_on("local") == []
    # no host has room: the roomiest reachable one, to wait there
    ClusterDir("big").create()
    rooms["local"] = Room("local", 3000, None)
    assert placement.place("big", 9000, 1).name == "local"


def test_with_as_much_memory_free_the_host_with_more_free_cores_is_chosen(lab_home, monkeypatch):
    """No CPU limit on either host: the cores libvirt reports less the vCPUs running there decide."""
    from lab.workspace import ClusterDir

    monkeypatch.setattr(registry, "meminfo_mib", lambda field="MemAvailable": 1 << 20)
    registry.add(Host("h2", "qemu+ssh://root@10.212.1.2/system"))
    conns = {"local": _Conn(8000, [_Dom(1000, 6)], cpus=8), "h2": _Conn(8000, [_Dom(1000, 2)], cpus=16)}
    monkeypatch.setattr(Host, "connect", lambda self: conns[self.name])
    assert [placement.room(h).free_cpus for h in registry.all_hosts()] == [2, 14]
    ClusterDir("c").create()
    assert placement.place("c", 2000, 2).name == "h2"


class _NamedDom(_Dom):
    def __init__(self, cluster, mem_mib):
        super().__init__(mem_mib, 1)
        self.cluster = cluster

    def XMLDesc(self, flags):
        return f"<domain><description>slurmlab cluster={self.cluster}</description></domain>"


def test_clusters_created_at_once_spread_by_what_the_ones_before_claim(lab_home, monkeypatch):
    """A room creating at once: before any VM of the first cluster runs, the second is placed as if the
    first's memory were taken already; a running cluster's memory is not counted twice."""
    from lab.workspace import ClusterDir

    registry.add(Host("h2", "qemu+unix:///system?socket=/x/sock", "slurmlab-h2"))
    doms = {"local": [], "h2": []}
    # what libvirt reports free drops by what the running domains take
    monkeypatch.setattr(Host, "connect", lambda self: _Conn(5000 + registry.HOST_RESERVE_MIB - sum(d.mem for d in doms[self.name]),
                                                            doms[self.name]))
    for c in ("a", "b", "c"):
        ClusterDir(c).create()
    assert placement.place("a", 2000, 2).name == "local"  # a tie goes to the first listed
    assert placement.room(registry.get("local")).memory_mib == 3000
    assert placement.place("b", 2000, 2).name == "h2"  # local has a's claim against it
    # a's own nodes find a's claim theirs: they may start (5000 free for them, not 3000)
    assert placement.room(registry.get("local"), "a").memory_mib == 5000
    doms["local"] = [_NamedDom("a", 1200)]  # a's controller runs: the rest of its claim is still pending
    assert placement.room(registry.get("local")).memory_mib == 5000 - 2000
    doms["local"] = [_NamedDom("a", 1000), _NamedDom("a", 1000)]  # all of it runs: counted once
    assert placement.room(registry.get("local")).memory_mib == 5000 - 2000
    # the claim follows the cluster's size (a later prepare with more nodes)
    assert placement.place("b", 3000, 3).name == "h2" and placement.room(registry.get("h2")).memory_mib == 2000
    assert placement.placed("b") == "h2" and placement.clusters_on("h2") == []  # no Vagrantfile yet


def test_what_a_cluster_left_on_a_lost_host_goes_and_nothing_else(monkeypatch):
    """domains.purge_cluster_on: the cluster's domains (any state), their disks, its state disk and its
    network go; another cluster whose name starts the same keeps everything, and so does the box."""
    import libvirt

    from lab.providers import domains

    pool_dir = "/p"
    gone: list[str] = []

    class Dom:
        def __init__(self, name, cluster, active=True):
            self._name, self.cluster, self.active = name, cluster, active

        def name(self):
            return self._name

        def XMLDesc(self, flags):
            return (f"<domain><description>slurmlab cluster={self.cluster}</description><devices>"
                    f"<disk><source file='{pool_dir}/{self._name}.img'/></disk></devices></domain>")

        def isActive(self):
            return self.active

        def destroy(self):
            self.active = False

        def undefineFlags(self, flags):
            gone.append(f"domain {self._name}")

    class Vol:
        def __init__(self, name):
            self._name = name

        def name(self):
            return self._name

        def path(self):
            return f"{pool_dir}/{self._name}"

        def delete(self, flags):
            gone.append(f"volume {self._name}")

    class Pool:
        def refresh(self, flags):
            pass

        def listAllVolumes(self):
            return [Vol(v) for v in ("far-controller-1.img", "far-compute-1.img", "far-state-1796210387.qcow2",
                                     "far-b-compute-1.img", "far-b-state-1.qcow2", "box_vagrant_box_image_0.img")]

    class Net:
        def isActive(self):
            return True

        def destroy(self):
            pass

        def undefine(self):
            gone.append("network")

    class Conn:
        def listAllDomains(self):
            return [Dom("far-controller-1", "far"), Dom("far-compute-1", "far", active=False), Dom("far-b-compute-1", "far-b")]

        def storagePoolLookupByName(self, name):
            return Pool()

        def networkLookupByName(self, name):
            if name != "slurmlab-far":
                raise libvirt.libvirtError("no network")
            return Net()

        def close(self):
            pass

    monkeypatch.setattr(Host, "connect", lambda self: Conn())
    done = domains.purge_cluster_on(Host("h2", "x", pool="slurmlab"), "far")
    assert sorted(gone) == ["domain far-compute-1", "domain far-controller-1", "network", "volume far-compute-1.img",
                            "volume far-controller-1.img", "volume far-state-1796210387.qcow2"]
    assert all(d.endswith("on host h2") for d in done) and len(done) == 6


def test_ssh_user_and_key_go_into_the_uri_as_libvirt_reads_them(tmp_path):
    key = tmp_path / "id_lab"
    key.write_text("k")
    assert registry.with_ssh("qemu+ssh://lab-b/system", "root", str(key)) == f"qemu+ssh://root@lab-b/system?keyfile={key}"
    assert registry.with_ssh("qemu+ssh://me@lab-b/system?no_tty=1", "root", None) == "qemu+ssh://root@lab-b/system?no_tty=1"
    assert registry.with_ssh("qemu:///system", None, None) == "qemu:///system"
    with pytest.raises(UsageError, match="qemu\\+ssh"):
        registry.with_ssh("qemu+unix:///system?socket=/x", "root", None)
    with pytest.raises(UsageError, match="no such file"):
        registry.with_ssh("qemu+ssh://lab-b/system", None, str(tmp_path / "missing"))


class _Pool:
    def __init__(self, free_gib, volumes, active=True):
        self.free, self.volumes, self.active = free_gib, volumes, active

    def isActive(self):
        return self.active

    def refresh(self, flags):
        pass

    def info(self):
        return [2, 0, 0, int(self.free * (1 << 30))]

    def listVolumes(self):
        return self.volumes


class _HostConn(_Conn):
    def __init__(self, pool):
        super().__init__(8000, [])
        self.pool = pool

    def getInfo(self):
        return ["x86_64", 16000, 4]

    def getMemoryStats(self, cell, flags):
        return {"free": 8000 << 10, "buffers": 0, "cached": 0}

    def storagePoolLookupByName(self, name):
        import libvirt

        if self.pool is None:
            raise libvirt.libvirtError("no pool")
        return self.pool


@pytest.mark.parametrize("pool,box,problem", [
    (_Pool(50, ["slurmlab-VAGRANTSLASH-trixie-slurm_vagrant_box_image_0_1_box.img"]), "present", ""),
    (_Pool(50, []), "uploaded on first use", ""),
    (_Pool(0.5, []), "missing, and the pool has 0.5 GiB free for a 1.0 GiB box", "cannot take the box"),
    (None, "", "storage pool 'slurmlab' missing"),
    (_Pool(50, [], active=False), "", "is not started"),
])
def test_probe_says_whether_a_host_has_or_can_take_the_box(monkeypatch, pool, box, problem):
    from lab.host import probe

    monkeypatch.setattr(Host, "connect", lambda self: _HostConn(pool))
    rep = probe.probe(Host("h2", "x", pool="slurmlab"), "slurmlab/trixie-slurm", box_bytes=1 << 30)
    assert rep.reachable and rep.box == box and (problem in rep.problem if problem else not rep.problem), rep
    assert (rep.memory_total_mib, rep.memory_free_mib, rep.cpus) == (16000, 8000, 4)
    assert rep.ok == (not problem) and (rep.fix if problem else True)


def test_ssh_masters_are_kept_apart_per_namespace():
    """A master left in a lost host's namespace must never carry a connection meant for a new VM at the
    same address in another namespace: Ansible's ControlPath folder is per ssh wrapper (namespace)."""
    from types import SimpleNamespace

    from lab.configure.runner import envvars

    import yaml
    from ansible.plugins.connection import ssh as ssh_plugin

    here = envvars(SimpleNamespace(ssh_executable="/h/bin/ssh"))["ANSIBLE_SSH_CONTROL_PATH_DIR"]
    there = envvars(SimpleNamespace(ssh_executable="/h/bin/ssh-slurmlab-h2"))["ANSIBLE_SSH_CONTROL_PATH_DIR"]
    assert here != there and there.endswith("ssh-slurmlab-h2")
    # the name is the one Ansible's ssh plugin reads (a wrong one is silently ignored: masters then
    # went to ~/.ansible/cp for every namespace)
    doc = yaml.safe_load(ssh_plugin.DOCUMENTATION)
    assert "ANSIBLE_SSH_CONTROL_PATH_DIR" in [e["name"] for e in doc["options"]["control_path_dir"]["env"]]
