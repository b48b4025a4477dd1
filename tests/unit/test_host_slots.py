"""Boot and fork slots per host (issue 47): counted from the cores and memory of the cluster's own
host as its libvirt reports them, and the domain type its VMs get there, never from this machine's
cores or /dev/kvm for another host. Fake libvirt connections only."""

from __future__ import annotations

import asyncio
import types

import libvirt
import pytest

from lab.engine import slots
from lab.engine.slots import HostSize, HostSlots
from lab.host import kvm, registry
from lab.host.registry import Host

HERE = HostSize(2, 4096, False)  # this machine: 2 cores, 4 GiB, no KVM


class _Conn:
    """A host's libvirt: getInfo's [model, memory MiB, cpus, mhz, nodes, sockets, cores, threads], and
    the KVM domain capabilities when it offers them."""

    def __init__(self, cpus: int, memory_mib: int, kvm_offered: bool = False):
        self.cpus, self.memory_mib, self.kvm_offered = cpus, memory_mib, kvm_offered
        self.closed = False

    def getInfo(self):
        return ["x86_64", self.memory_mib, self.cpus, 2400, 1, 1, self.cpus, 1]

    def getDomainCapabilities(self, emulator, arch, machine, virttype, flags):
        if not self.kvm_offered:
            raise libvirt.libvirtError("no kvm here")
        return "<domainCapabilities/>"

    def close(self):
        self.closed = True


@pytest.fixture
def hosts(lab_home, monkeypatch):
    """Hosts `far` (remote, over ssh) and `h2` (simulated, on this machine); `answers[name]` is what
    connecting to a host gives (a connection, or an exception raised); `asked` lists the connects."""
    monkeypatch.delenv("SLURMLAB_BOOT_SLOTS", raising=False)
    monkeypatch.delenv("SLURMLAB_FORK_SLOTS", raising=False)
    monkeypatch.delenv("SLURMLAB_DRIVER", raising=False)
    registry.add(Host("far", "qemu+ssh://root@10.212.1.2/system"))
    registry.add(Host("h2", "qemu+unix:///system?socket=/x/sock", "slurmlab-h2", simulated=True))
    answers: dict[str, object] = {"local": _Conn(2, 4096), "h2": _Conn(2, 4096)}
    asked: list[str] = []

    def connect(self):
        asked.append(self.name)
        got = answers[self.name]
        if isinstance(got, Exception):
            raise got
        return got

    monkeypatch.setattr(Host, "connect", connect)
    monkeypatch.setattr(kvm, "detect", lambda: types.SimpleNamespace(usable=False, driver="qemu"))
    return types.SimpleNamespace(answers=answers, asked=asked)


def test_a_remote_host_counts_its_own_cores_and_memory(hosts):
    """8 cores and 32 GiB there, 2 cores here: 8 boot slots, 16 fork slots (two per core; 31 GiB beyond
    the reserve allows more); asked once for the engine's life; the local host is its own."""
    hosts.answers["far"] = _Conn(8, 32 * 1024)
    count = HostSlots(here=lambda: HERE)
    assert count("vagrant", "far") == (8, 16)
    assert count("vagrant", "far") == (8, 16)
    assert hosts.asked == ["far"] and hosts.answers["far"].closed
    assert count("vagrant", None) == (2, 3)  # None: the local host; 4 GiB less the reserve: 3 forks
    assert hosts.asked == ["far", "local"]


def test_a_small_remote_host_forks_one_per_gib_beyond_its_reserve(hosts):
    hosts.answers["far"] = _Conn(16, 3 * 1024)
    assert HostSlots(here=lambda: HERE)("vagrant", "far") == (16, 2)
    hosts.answers["far"] = _Conn(1, 512)
    assert HostSlots(here=lambda: HERE)("vagrant", "far") == (1, 1)


def test_a_kvm_host_has_no_limit_whatever_this_machine_has(hosts, monkeypatch):
    """The domain type is the one hostside gives the VMs there: a remote host's own libvirt decides,
    this machine's /dev/kvm does not (either way)."""
    hosts.answers["far"] = _Conn(8, 32 * 1024, kvm_offered=True)
    assert HostSlots(here=lambda: HERE)("vagrant", "far") == (None, None)
    hosts.answers["far"] = _Conn(8, 32 * 1024, kvm_offered=False)
    monkeypatch.setattr(kvm, "detect", lambda: types.SimpleNamespace(usable=True, driver="kvm"))
    count = HostSlots(here=lambda: HERE)
    assert count("vagrant", "far") == (8, 16)  # KVM here, emulation there
    assert count("vagrant", None) == (None, None)  # this machine's /dev/kvm is the local host's
    assert count("vagrant", "h2") == (None, None)  # and a simulated host's (its qemu runs here)


def test_a_remote_hosts_driver_setting_is_its_domain_type(hosts, lab_home):
    registry._save([{"name": "far", "uri": "qemu+ssh://root@10.212.1.2/system", "driver": "qemu"}])
    hosts.answers["far"] = _Conn(4, 8192, kvm_offered=True)
    assert HostSlots(here=lambda: HERE)("vagrant", "far") == (4, 7)


class _Silent(libvirt.libvirtError):
    """libvirtError's own __init__ takes the thread's last libvirt error as its text when there is one (in
    CI an earlier test's real "Cannot write data: Broken pipe"): this one keeps the text it is given."""

    def __init__(self, msg: str) -> None:
        Exception.__init__(self, msg)


def test_a_silent_host_counts_as_this_machine_said_once_and_is_asked_again(hosts, monkeypatch):
    from lab.engine import slots

    said = []  # the warnings themselves: caplog misses them when an earlier test of the same run set up logging
    monkeypatch.setattr(slots.log, "warning", lambda msg, *a: said.append(msg % a))
    hosts.answers["far"] = _Silent("Cannot recv data: Connection reset by peer")
    count = HostSlots(here=lambda: HERE)
    assert count("vagrant", "far") == (2, 3)  # this machine's 2 cores and 4 GiB
    assert count("vagrant", "far") == (2, 3)
    assert hosts.asked == ["far", "far"]  # a failure is not kept: asked again
    said = [m for m in said if "far" in m]
    assert len(said) == 1 and "this machine's" in said[0] and "Connection reset" in said[0]
    hosts.answers["far"] = _Conn(8, 32 * 1024)
    assert count("vagrant", "far") == (8, 16)
    assert count("vagrant", "far") == (8, 16)
    assert hosts.asked == ["far"] * 3  # kept once it answered


def test_a_silent_remote_host_is_not_taken_for_kvm_by_this_machines_dev_kvm(hosts):
    hosts.answers["far"] = libvirt.libvirtError("down")
    count = HostSlots(here=lambda: HostSize(2, 4096, True))
    assert count("vagrant", "far") == (2, 3)  # limits, as for emulation: nothing says KVM there
    assert count("vagrant", "gone") == (2, 3)  # a host no longer listed: NotFound, the same
    hosts.answers["local"] = libvirt.libvirtError("libvirtd not up")
    assert count("vagrant", None) == (None, None)  # a silent local host is this machine, KVM and all


def test_the_settings_override_each_count(hosts, monkeypatch):
    hosts.answers["far"] = _Conn(8, 32 * 1024)
    monkeypatch.setenv("SLURMLAB_BOOT_SLOTS", "3")
    count = HostSlots(here=lambda: HERE)
    assert count("vagrant", "far") == (3, 16)  # the fork count is still the host's
    monkeypatch.setenv("SLURMLAB_FORK_SLOTS", "0")
    assert count("vagrant", "far") == (3, None)  # 0: no limit
    monkeypatch.setenv("SLURMLAB_BOOT_SLOTS", "0")
    monkeypatch.setenv("SLURMLAB_FORK_SLOTS", "5")
    hosts.answers["far"] = libvirt.libvirtError("down")
    assert HostSlots(here=lambda: HERE)("vagrant", "far") == (None, 5)
    assert hosts.asked == ["far"]  # both given: no host is asked


def test_a_simulated_provider_has_no_slots_and_asks_no_host(hosts):
    def ask(name):
        raise AssertionError(f"asked {name}")

    assert HostSlots(ask=ask)("sim", "far") == (None, None)
    assert HostSlots(ask=ask)("sim", None) == (None, None)


def test_this_machines_counts_stay_for_the_benchmark(monkeypatch):
    monkeypatch.delenv("SLURMLAB_BOOT_SLOTS", raising=False)
    monkeypatch.delenv("SLURMLAB_FORK_SLOTS", raising=False)
    monkeypatch.setattr(slots, "this_machine", lambda: HostSize(4, 8192, False))
    assert slots.boot_slots() == {"vagrant": 4} and slots.fork_slots() == {"vagrant": 7}
    monkeypatch.setattr(slots, "this_machine", lambda: HostSize(4, 8192, True))
    assert slots.boot_slots() == {} and slots.fork_slots() == {}


def test_the_engine_counts_a_clusters_slots_on_its_host(tmp_path):
    """Tuning.host_slots decides for a cluster placed on host x (the per-provider counts are not used):
    one VM boots at once there, and a waiting node says so."""
    from tests.simlab import SimLab, spec_text

    async def go():
        lab = SimLab(tmp_path)
        lab.eng = lab.new_engine()
        asked = []

        def host_slots(provider, host):
            asked.append((provider, host))
            return (1, None) if host == "x" else (None, None)

        lab.eng.tuning.host_slots = host_slots
        lab.eng.tuning.boot_slots = {"sim": 5}  # not asked when host_slots is set
        lab.create(spec_text(computes=2, logins=1))
        lab.st.update_cluster("demo", host="x")
        messages = set()
        await lab.run_until(lambda: messages.update(n.message for n in lab.st.nodes("demo")) or lab.full())
        assert set(lab.phases().values()) == {"running"}
        assert set(asked) == {("sim", "x")}
        assert lab.prov.launched[:2] == ["demo-controller-1", "demo-login-1"]
        assert "waiting for a boot slot (1 VMs boot at once on this host)" in messages
        await lab.finish()

    asyncio.run(go())


def test_the_daemons_engine_counts_slots_per_host(tmp_path):
    from lab.engine import daemon
    from lab.store import Store

    eng = daemon.make_engine(Store(tmp_path / "state.db"))
    assert isinstance(eng.tuning.host_slots, HostSlots)
    assert eng.tuning.boot_slots == {} and eng.tuning.fork_slots == {}
