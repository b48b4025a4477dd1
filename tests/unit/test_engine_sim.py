"""The sim provider, provider selection per cluster, and seeded fault injection."""

from __future__ import annotations

import asyncio
import re
import time

import pytest

from lab import capacity
from lab.configure.sim import SimConfigurer
from lab.control import clusters
from lab.engine import daemon
from lab.engine.engine import Engine
from lab.errors import UsageError
from lab.providers.base import MachineSpec
from lab.providers.sim import SimProvider, VirtualClock
from lab.spec.problems import SpecInvalid
from lab.store.db import SCHEMA_VERSION, ClusterRow, GroupRow, Store
from tests.fakes import FakeConfigurer, FakeProvider
from tests.simlab import SimLab, spec_text


def test_sim_vm_boots_in_its_boot_time_on_the_virtual_clock():
    async def go():
        clock = VirtualClock(100.0)
        prov = SimProvider(1.5, clock=clock, sleep=clock.sleep)
        m = MachineSpec("c-compute-1", "compute", 1, 512, "52:54:00:00:00:01", "10.1.0.2")
        task = asyncio.create_task(prov.ensure_async("c", m))
        await asyncio.sleep(0)
        obs = prov.observe("c")["c-compute-1"]
        assert obs.state == "running" and obs.details == {"simulated": True, "ready": False}  # defined, booting
        clock.advance(1.0)
        await asyncio.sleep(0)
        assert not task.done()
        clock.advance(0.5)
        got = await task
        assert got.details["ready"] and got.address == "10.1.0.2"
        assert prov.launched == ["c-compute-1"]
        # idempotent, like vagrant up: a second ensure does not create another VM
        await prov.ensure_async("c", m)
        assert prov.launched == ["c-compute-1"]

    asyncio.run(go())


def test_sim_default_boot_time_is_short_and_vms_outlive_the_provider_object(tmp_path):
    assert 0 < SimProvider().boot_time <= 2
    prov = SimProvider(0, path=tmp_path / "sim.db")
    prov.ensure("c", MachineSpec("c-a-1", "a", 1, 512, "m", "10.1.0.2"))
    prov.crash("c", "c-a-1", "shutoff")
    again = SimProvider(0, path=tmp_path / "sim.db")
    assert again.observe("c")["c-a-1"].state == "shutoff"
    again.delete_cluster("c")
    assert SimProvider(0, path=tmp_path / "sim.db").observe("c") == {}


def test_create_with_provider_sim_is_labelled_simulated(tmp_path):
    async def go():
        lab = SimLab(tmp_path)
        row = lab.create(spec_text())
        assert row.provider == "sim"
        await lab.run_until(lambda: lab.full())
        assert all(re.fullmatch(r"i-[0-9a-f]{17}", n.instance_id) for n in lab.st.nodes("demo"))
        d = clusters.describe(lab.st, "demo")
        assert d["Lab"] == {**d["Lab"], "Provider": "sim", "Simulated": True}
        assert "simulated" in lab.st.events("demo")[0].description
        with pytest.raises(clusters.UsageError):
            clusters.create(lab.st, __import__("lab.spec", fromlist=["x"]).loads_spec(spec_text(name="other")),
                            provider="vmware", start_engine=False)
        await lab.finish()

    asyncio.run(go())


def test_daemon_makes_the_sim_pair_and_the_engine_uses_each_clusters_provider(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMLAB_HOME", str(tmp_path / "home"))
    assert isinstance(daemon.make_provider("sim"), SimProvider)
    assert isinstance(daemon.make_configurer("sim"), SimConfigurer)
    with pytest.raises(UsageError, match="unknown provider 'nope'"):
        daemon.make_provider("nope")

    async def go():
        st = Store(tmp_path / "state.db")
        clock = VirtualClock()
        fake, sim = FakeProvider(), SimProvider(0, clock=clock, sleep=clock.sleep)
        made = []

        def factory(name):
            made.append(name)
            return {"sim": sim}[name]

        eng = Engine(st, fake, FakeConfigurer(), clock=clock, provider_factory=factory,
                     configurer_factory=lambda name: SimConfigurer(0, 0, 0, sleep=clock.sleep))
        for name, prov in (("a", "fake"), ("b", "sim")):
            st.add_cluster(ClusterRow(name, "arn:x", "Creating", None, {"NodeProvisioningMode": "Continuous"}, prov, 1,
                                      time.time()),
                           [GroupRow(name, "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "Creating")])
        for _ in range(12):
            await eng.step()
            await asyncio.gather(*eng.tasks.values(), return_exceptions=True)
        assert made == ["sim"]
        assert fake.launched == ["a-controller-1"] and sim.launched == ["b-controller-1"]
        assert st.node("b", "b-controller-1").instance_id.startswith("i-")
        assert st.node("a", "a-controller-1").phase == st.node("b", "b-controller-1").phase == "running"

    asyncio.run(go())


def test_capacity_file_faults_are_parsed_validated_and_stored(tmp_path):
    cap = capacity.parse("faults: {seed: 7, launch_failure_rate: 0.25}\n"
                         "instance_types:\n  ml.c5.large: {available: 2, arrivals: [{after_seconds: 5, count: 1}]}\n")
    assert cap.faults == capacity.Faults(seed=7, launch_failure_rate=0.25)
    st = Store(tmp_path / "s.db")
    capacity.apply(st, cap, now=100.0)
    assert st.faults() == {"seed": 7, "launch_failure_rate": 0.25}
    assert st.capacity() == {"ml.c5.large": 2} and st.pending_arrivals()[0][1:] == ("ml.c5.large", 105.0, 1)
    capacity.apply(st, capacity.parse("faults: {launch_failure_rate: 0}"))
    assert st.faults() == {}
    with pytest.raises(SpecInvalid) as e:
        capacity.parse("faults:\n  seed: 1\n  launch_failure_rate: 1.5\n  rate: 2\nbogus: 1\n", "cap.yaml")
    text = str(e.value)
    assert "cap.yaml:3: faults.launch_failure_rate: must be a number from 0 to 1" in text
    assert "cap.yaml:4: faults.rate: unknown key 'rate'" in text and "cap.yaml:5: bogus: unknown key 'bogus'" in text


def _fault_run(tmp_path, seed):
    async def go():
        lab = SimLab(tmp_path)
        lab.st.set_faults(seed, 0.5)
        lab.create(spec_text(computes=6))
        await lab.run_until(lambda: lab.full(), max_ticks=400)
        await lab.finish()
        return [(e.node, e.description.split(" (retry")[0]) for e in lab.st.events("demo")
                if "injected launch failure" in e.description]

    return asyncio.run(go())


def test_injected_launch_failures_are_transient_and_reproducible(tmp_path):
    a = _fault_run(tmp_path / "a", 3)
    b = _fault_run(tmp_path / "b", 3)
    c = _fault_run(tmp_path / "c", 4)
    assert a and a == b  # same seed, same failures
    assert a != c
    assert all("launch_failure_rate 0.5, seed 3" in d for _, d in a)


def test_a_schema_1_state_file_is_upgraded_in_place(tmp_path):
    import sqlite3

    db = sqlite3.connect(str(tmp_path / "state.db"))
    db.executescript("""
    CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
    INSERT INTO meta VALUES ('schema_version', '1');
    CREATE TABLE nodes (cluster TEXT NOT NULL, name TEXT NOT NULL, grp TEXT NOT NULL, ordinal INTEGER NOT NULL,
      instance_id TEXT NOT NULL, address TEXT NOT NULL, mac TEXT NOT NULL, phase TEXT NOT NULL,
      message TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0, retry_at REAL NOT NULL DEFAULT 0,
      launched_at REAL, booted_at REAL, joined_at REAL, PRIMARY KEY (cluster, name));
    INSERT INTO nodes (cluster, name, grp, ordinal, instance_id, address, mac, phase)
      VALUES ('c', 'c-a-1', 'a', 1, 'i-0', '10.0.0.2', 'm', 'running');
    CREATE TABLE events (id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, cluster TEXT NOT NULL,
      grp TEXT, node TEXT, resource_type TEXT NOT NULL, level TEXT NOT NULL, description TEXT NOT NULL);
    CREATE TABLE clusters (name TEXT PRIMARY KEY, arn TEXT NOT NULL, status TEXT NOT NULL, failure_message TEXT,
      spec TEXT NOT NULL, provider TEXT NOT NULL, net_index INTEGER NOT NULL,
      created_at REAL NOT NULL, in_service_at REAL, full_size_at REAL);
    INSERT INTO clusters (name, arn, status, spec, provider, net_index, created_at)
      VALUES ('c', 'arn:c', 'InService', '{}', 'sim', 1, 0);
    """)
    db.commit()
    db.close()
    st = Store(tmp_path / "state.db")
    n = st.node("c", "c-a-1")
    assert n.phase == "running" and n.pending is None and n.generation == 0
    st.add_event("c", "Instance", "Info", "hello", node="c-a-1")
    assert st.events("c")[0].instance_id == "i-0"
    assert n.configured_at is None
    c = st.cluster("c")
    assert c.status == "InService" and c.unobserved_since is None and c.unobserved_reason is None
    st.update_cluster("c", unobserved_since=5.0, unobserved_reason="gone")
    assert st.cluster("c").unobserved_since == 5.0
    assert st.meta("schema_version") == SCHEMA_VERSION == 10
    assert st.nodes("c")[0].slurm is None and st.nodes("c")[0].repairs == 0  # schema 8
    assert st.nodes("c")[0].release is None  # schema 10: not known for a node made before releases
    # schema 6: an operation's details (a deep health check's configurations) read back decoded
    assert "details" in {r[1] for r in st._db.execute("PRAGMA table_info(operations)")}
    # schema 7: the cluster's host, none for a cluster made before hosts
    assert c.host is None
    st.update_cluster("c", host="h2")
    assert st.cluster("c").host == "h2"


def test_a_schema_2_state_file_gets_configured_at(tmp_path):
    """v2 -> v3: nodes.configured_at added in place (None: counts as configured long ago)."""
    import sqlite3

    Store(tmp_path / "state.db").close()
    db = sqlite3.connect(str(tmp_path / "state.db"))
    db.executescript("""
    DROP TABLE nodes;
    CREATE TABLE nodes (cluster TEXT NOT NULL, name TEXT NOT NULL, grp TEXT NOT NULL, ordinal INTEGER NOT NULL,
      instance_id TEXT NOT NULL, address TEXT NOT NULL, mac TEXT NOT NULL, phase TEXT NOT NULL,
      message TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0, retry_at REAL NOT NULL DEFAULT 0,
      launched_at REAL, booted_at REAL, joined_at REAL, pending TEXT, generation INTEGER NOT NULL DEFAULT 0,
      PRIMARY KEY (cluster, name));
    INSERT INTO nodes (cluster, name, grp, ordinal, instance_id, address, mac, phase, generation)
      VALUES ('c', 'c-compute-1', 'compute', 1, 'i-0', '10.0.0.2', 'm', 'configured', 2);
    UPDATE meta SET value='2' WHERE key='schema_version';
    """)
    db.commit()
    db.close()
    st = Store(tmp_path / "state.db")
    assert st.meta("schema_version") == SCHEMA_VERSION == 10
    # schema 6: an operation's details (a deep health check's configurations) read back decoded
    assert "details" in {r[1] for r in st._db.execute("PRAGMA table_info(operations)")}
    n = st.node("c", "c-compute-1")
    assert (n.phase, n.generation, n.configured_at) == ("configured", 2, None)
    st.update_node("c", "c-compute-1", configured_at=123.5)
    assert st.nodes("c")[0].configured_at == 123.5
    st.close()
    assert Store(tmp_path / "state.db").node("c", "c-compute-1").configured_at == 123.5  # reopened: no-op
