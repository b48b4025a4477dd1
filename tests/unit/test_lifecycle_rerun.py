"""lab/control/lifecycle.py: `slurmlab lifecycle rerun` asks for new forks of the named nodes, from an edited
folder if given; a bad target, a group without scripts, a bad folder or a busy node are refused with nothing
changed. No VMs: the engine is not started (the e2e test runs it on VMs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lab.control import clusters
from lab.control import lifecycle as lc
from lab.engine import daemon
from lab.errors import Conflict, NotFound, UsageError
from lab.spec import load_spec
from lab.store.db import NodeRow

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


@pytest.fixture
def st(lab_home):
    s = daemon.store()
    clusters.create(s, load_spec(EXAMPLE), provider="sim", start_engine=False)
    for g in s.groups("demo"):
        for o in range(1, g.target_count + 1):
            s.add_node(NodeRow(cluster="demo", name=f"demo-{g.name}-{o}", grp=g.name, ordinal=o, instance_id=f"i-{g.name}{o}",
                               address=f"10.0.0.{o}", mac="", phase="running", generation=1))
    s.update_cluster("demo", status="InService")
    return s


def _pending(s):
    return {n.name: n.pending for n in s.nodes("demo") if n.pending}


def test_a_node_gets_a_new_fork_and_its_scripts_are_the_clusters(st):
    plan = lc.rerun(st, "demo", "demo-compute-2", start_engine=False)
    assert plan["Nodes"] == ["demo-compute-2"] and plan["Generations"] == {"demo-compute-2": 1}
    assert plan["Source"] == {"compute": str(EXAMPLE.parent / "lifecycle")}
    assert _pending(st) == {"demo-compute-2": "replace"}
    op = next(o for o in st.operations("demo") if o.id == plan["OperationId"])
    assert op.kind == "BatchReplaceClusterNodes" and op.nodes == ["demo-compute-2"]


def test_a_group_means_all_its_nodes(st):
    plan = lc.rerun(st, "demo", "compute", start_engine=False)
    assert plan["Nodes"] == ["demo-compute-1", "demo-compute-2"]
    assert set(_pending(st)) == {"demo-compute-1", "demo-compute-2"}


def test_from_an_edited_folder_becomes_the_groups_source(st, tmp_path):
    (tmp_path / "on_create.sh").write_text("echo edited\n")
    plan = lc.rerun(st, "demo", "login", str(tmp_path), start_engine=False)
    assert plan["Source"] == {"login": str(tmp_path)}
    assert st.cluster("demo").group_spec("login")["LifeCycleConfig"]["SourceS3Uri"] == str(tmp_path)
    assert st.cluster("demo").group_spec("compute")["LifeCycleConfig"]["SourceS3Uri"] == str(EXAMPLE.parent / "lifecycle")
    assert any(e.description.startswith(f"login: lifecycle scripts now from {tmp_path}") for e in st.events("demo"))


@pytest.mark.parametrize("ref, source, error, words", [
    ("nosuch", None, NotFound, "no node or group named 'nosuch' (groups: compute, controller, login)"),
    ("compute", "/no/such/folder", UsageError, "folder /no/such/folder does not exist"),
    ("compute", "EMPTY", UsageError, "has no on_create.sh"),
])
def test_bad_requests_change_nothing(st, tmp_path, ref, source, error, words):
    spec_before = st.cluster("demo").spec
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        lc.rerun(st, "demo", ref, str(tmp_path) if source == "EMPTY" else source, start_engine=False)
    assert _pending(st) == {} and st.cluster("demo").spec == spec_before and st.operations("demo")[-1].kind != lc.REPLACE


def test_a_group_without_scripts_needs_a_folder(st, tmp_path):
    spec = st.cluster("demo").spec
    for g in spec["InstanceGroups"]:
        g.pop("LifeCycleConfig", None)
    st.update_cluster("demo", spec=spec)
    with pytest.raises(UsageError, match="group compute of demo has no LifeCycleConfig"):
        lc.rerun(st, "demo", "compute", start_engine=False)
    (tmp_path / "on_create.sh").write_text("true\n")
    assert lc.rerun(st, "demo", "compute", str(tmp_path), start_engine=False)["Source"] == {"compute": str(tmp_path)}


def test_a_busy_node_or_a_cluster_being_deleted_is_refused(st):
    st.update_node("demo", "demo-compute-1", phase="configuring")
    with pytest.raises(Conflict, match="demo-compute-1 of demo is busy"):
        lc.rerun(st, "demo", "compute", start_engine=False)
    assert _pending(st) == {}
    st.update_cluster("demo", status="Deleting")
    with pytest.raises(Conflict, match="demo is Deleting"):
        lc.rerun(st, "demo", "demo-compute-2", start_engine=False)


def test_a_controller_whose_scripts_failed_during_the_create_runs_them_again(st):
    """The create's event names this command: the cluster is still Creating, the node failed."""
    st.update_cluster("demo", status="Creating")
    st.update_node("demo", "demo-controller-1", phase="failed", booted_at=1.0, message="on_create.sh failed")
    assert lc.rerun(st, "demo", "controller", start_engine=False)["Nodes"] == ["demo-controller-1"]
    assert _pending(st) == {"demo-controller-1": "replace"}


def test_a_rerun_that_times_out_ends_its_tail_of_the_scripts_output(st, monkeypatch):
    """`lifecycle rerun`'s follow (lab/cmd/lifecycle.py): a timeout (or Ctrl-C) stops the `tail -F` over ssh."""
    from lab.cmd import lifecycle as cmd
    from lab.errors import LabError

    stopped = []

    class FakeFollow:
        def __init__(self, cluster, node, address, show):
            self.node = node

        def stop(self):
            stopped.append(self.node)

    st.update_cluster("demo", provider="vagrant")
    st.update_node("demo", "demo-compute-1", phase="configuring", generation=2)
    monkeypatch.setattr(cmd, "store", lambda: st)
    monkeypatch.setattr(cmd, "_Follow", FakeFollow)
    plan = {"Nodes": ["demo-compute-1"], "Generations": {"demo-compute-1": 1}}
    with pytest.raises(LabError, match="no result after 0 s: demo-compute-1"):
        calls = iter([0.0, 0.0, 0.0, 5.0, 5.0])
        monkeypatch.setattr(cmd.time, "monotonic", lambda: next(calls, 5.0))
        monkeypatch.setattr(cmd.time, "sleep", lambda s: None)
        cmd._follow("demo", plan, False, lambda m: None, timeout=0)
    assert stopped == ["demo-compute-1"]
