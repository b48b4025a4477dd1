"""The store's extensions and metrics samples (schema 9, docs/adr/0017-cluster-extensions.md)."""

from __future__ import annotations

import sqlite3

from lab.store.db import SCHEMA_VERSION, ClusterRow, ExtensionRow, Store


def _row(cluster="c", name="sagemaker-observability", **kw) -> ExtensionRow:
    vals = dict(cluster=cluster, name=name, arn=f"arn:x/{cluster}/{name}", version="1.1.0", config={},
                settings={"scrapeIntervalSeconds": 60}, status="Creating", created_at=1.0, modified_at=1.0)
    return ExtensionRow(**{**vals, **kw})


def test_an_extension_row_round_trips_and_a_second_of_a_name_is_refused(tmp_path):
    st = Store(tmp_path / "state.db")
    assert st.add_extension(_row(config={"a": {"b": 1}}))
    assert not st.add_extension(_row(version="1.0.0"))  # one per name per cluster, nothing written
    e = st.extension("c", "sagemaker-observability")
    assert (e.version, e.config, e.installed, e.unhealthy, e.issues) == ("1.1.0", {"a": {"b": 1}}, [], {}, [])
    st.update_extension("c", e.name, status="Degraded", installed=["c-a-1"], unhealthy={"c-a-1": "refused"},
                        issues=[{"Code": "ExtensionUnhealthy", "Message": "m", "NodeCount": 1}], probed_at=5.0)
    e = st.extension("c", e.name)
    assert (e.status, e.installed, e.unhealthy, e.issues[0]["NodeCount"], e.probed_at) == (
        "Degraded", ["c-a-1"], {"c-a-1": "refused"}, 1, 5.0)
    st.add_extension(_row(cluster="d", created_at=2.0))
    assert [x.cluster for x in st.extensions()] == ["c", "d"] and [x.cluster for x in st.extensions("d")] == ["d"]
    st.delete_extension("d", e.name)
    assert st.extensions("d") == [] and st.extension("d", e.name) is None


def test_samples_keep_the_newest_per_cluster_oldest_first(tmp_path):
    st = Store(tmp_path / "state.db")
    for i in range(7):
        st.add_extension_sample("c", {"time": float(i), "n": i}, keep=5)
    st.add_extension_sample("d", {"time": 1.0, "n": 99}, keep=5)
    assert [s["n"] for s in st.extension_samples("c")] == [2, 3, 4, 5, 6]
    assert [s["n"] for s in st.extension_samples("c", limit=2)] == [5, 6]
    assert [s["n"] for s in st.extension_samples("d")] == [99]
    assert st.extension_samples("nope") == []


def test_deleting_a_cluster_deletes_its_extensions_and_samples(tmp_path):
    st = Store(tmp_path / "state.db")
    st.add_cluster(ClusterRow("c", "arn", "InService", None, {}, "sim", 1, 0.0), [])
    st.add_extension(_row())
    st.add_extension_sample("c", {"time": 1.0})
    st.delete_cluster("c")
    assert st.extensions("c") == [] and st.extension_samples("c") == []


def test_a_schema_8_file_gets_the_extension_tables(tmp_path):
    Store(tmp_path / "state.db").close()
    db = sqlite3.connect(str(tmp_path / "state.db"))
    db.executescript("DROP TABLE extensions; DROP TABLE extension_samples;"
                     " UPDATE meta SET value='8' WHERE key='schema_version';")
    db.commit()
    db.close()
    st = Store(tmp_path / "state.db")
    assert st.meta("schema_version") == SCHEMA_VERSION == 10
    assert st.add_extension(_row()) and st.extension("c", "sagemaker-observability").status == "Creating"
    st.add_extension_sample("c", {"time": 1.0})
    assert len(st.extension_samples("c")) == 1
