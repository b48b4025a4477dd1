"""A cluster's host that stops answering (lab/engine/hostloss.py), on the sim provider with a virtual
clock: stale first, then Failure and a rebuild on another host; with no room, Failure until the host
answers again; the local host is never given up."""

from __future__ import annotations

import asyncio

from lab.control import clusters
from lab.providers.base import Placement, ProviderUnreachable
from lab.providers.sim import SimProvider
from tests.simlab import SimLab, spec_text

DOWN = "libvirt unreachable on host h2 (qemu+unix:///system?socket=/x): Connection refused"


class PlacedSim(SimProvider, Placement):
    """The sim provider with hosts (the engine detects Placement): they are a test's `Hosts`."""

    hosts: "Hosts"

    def place(self, cluster, memory_mib, cpus):
        return self.hosts.host

    def host_of(self, cluster):
        return self.hosts.host

    def rehome(self, cluster, memory_mib, cpus):
        return self.hosts.rehome(cluster, memory_mib, cpus)


class Hosts:
    """The sim provider on a host named `host`, whose libvirtd answers unless `down`; `rehome`
    moves the cluster to `spare` (None: no host has room), where it has no VM yet."""

    def __init__(self, lab: SimLab, host: str = "h2", spare: str | None = "local"):
        self.lab, self.host, self.spare, self.down, self.rehomed = lab, host, spare, False, []
        self.real = lab.prov.observe_async
        lab.prov.observe_async = self.observe_async
        lab.prov.__class__ = PlacedSim
        lab.prov.hosts = self

    async def observe_async(self, cluster):
        if self.down:
            raise ProviderUnreachable(DOWN)
        return await self.real(cluster)

    def rehome(self, cluster, memory_mib, cpus):
        self.rehomed.append((cluster, memory_mib, cpus))
        if self.spare is None:
            return None
        self.host, self.down = self.spare, False
        self.lab.prov.vms.pop(cluster, None)  # the new host has none of its VMs
        return self.host


async def _ready(lab):
    lab.create(spec_text(computes=2))
    await lab.run_until(lambda: lab.full())
    await lab.tick()


def _statuses(lab):
    return {n["InstanceId"]: n["InstanceStatus"] for n in clusters.list_nodes(lab.st, "demo")}


def test_a_lost_host_is_stale_first_then_its_nodes_fail_and_are_rebuilt_elsewhere(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.eng.hostloss.host_lost_s = 60
        await _ready(lab)
        h = Hosts(lab)
        ids_before = set(_statuses(lab))
        h.down = True
        t0 = lab.clock.t
        while lab.clock.t < t0 + 50:
            await lab.tick()
        assert h.rehomed == [] and set(_statuses(lab)) == ids_before  # only stale within host_lost_s
        assert clusters.describe(lab.st, "demo")["FailureMessage"].startswith("stale")
        await lab.run_until(lambda: bool(h.rehomed), max_ticks=30)
        # 4 nodes of 768 MiB (ml.t3.medium, ml.c5.large in the lab catalog), 1 vCPU each
        assert h.rehomed == [("demo", 4 * 768, 4)]
        shown = _statuses(lab)
        assert set(shown).isdisjoint(ids_before), "every node gets a fresh instance"
        assert all(s["Status"] == "Failure" and "host h2 lost" in s["Message"] and "replaced on host local" in s["Message"]
                   for s in shown.values()), shown
        errors = [e.description for e in lab.st.events("demo") if e.level == "Error" and "now lives on host local" in e.description]
        assert len(errors) == 1 and DOWN in errors[0]
        assert not [e for e in lab.st.events("demo") if "observed again" in e.description]  # it was not: it moved
        await lab.run_until(lambda: lab.full())
        assert lab.vms() == {"demo-controller-1", "demo-login-1", "demo-compute-1", "demo-compute-2"}
        assert "FailureMessage" not in clusters.describe(lab.st, "demo")

    asyncio.run(go())


def test_with_no_room_elsewhere_the_nodes_fail_and_come_back_with_their_host(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.eng.hostloss.host_lost_s = 10
        await _ready(lab)
        h = Hosts(lab, spare=None)
        ids_before = set(_statuses(lab))
        h.down = True
        await lab.run_until(lambda: bool(h.rehomed), max_ticks=60)
        await lab.tick()
        shown = _statuses(lab)
        assert all(s["Status"] == "Failure" and "no other host has room" in s["Message"] for s in shown.values()), shown
        h.down = False  # the host answers again: its VMs are still there, configured again, same instances
        await lab.run_until(lambda: lab.full())
        assert set(_statuses(lab)) == ids_before

    asyncio.run(go())


def test_the_local_host_is_never_given_up(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.eng.hostloss.host_lost_s = 5
        await _ready(lab)
        h = Hosts(lab, host="local")
        h.down = True
        for _ in range(40):
            await lab.tick()
        assert h.rehomed == []
        assert all(s["Status"] == "Running" for s in _statuses(lab).values())

    asyncio.run(go())


def test_with_node_recovery_none_the_nodes_fail_and_the_cluster_stays(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        lab.eng.hostloss.host_lost_s = 5
        lab.create(spec_text(computes=2, recovery="None"))
        await lab.run_until(lambda: lab.full())
        h = Hosts(lab)
        h.down = True
        for _ in range(30):
            await lab.tick()
        assert h.rehomed == [] and h.host == "h2"
        shown = _statuses(lab)
        assert all(s["Status"] == "Failure" and "NodeRecovery is None" in s["Message"] for s in shown.values()), shown
        assert len([e for e in lab.st.events("demo") if "stay Failure" in e.description]) == 1

    asyncio.run(go())
