"""lab.workflows and the engine's create checks: `up` (host, box, create or resume, wait, first job,
entry node), create-cluster's order of checks, the cluster limit. No VMs: the host, the box, the
wait and the remote job are faked."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lab.control import clusters
from lab.engine import daemon
from lab.errors import Conflict, LabError, NotFound
from lab.spec import load_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.yaml"


@pytest.fixture
def faked(lab_home, monkeypatch):
    """The host set-up, the engine process, the box check and the leftovers check do nothing; say what ran."""
    from lab import box
    from lab.host import libvirtd
    from lab.providers import leftovers

    ran: list[str] = []
    monkeypatch.setattr(libvirtd, "up", lambda: ran.append("host"))
    monkeypatch.setattr(daemon, "ensure_running", lambda: ran.append("engine") or 0)
    monkeypatch.setattr(box, "is_current", lambda name=box.DEFAULT_BOX: True)
    monkeypatch.setattr(box, "require", lambda name: ran.append("box"))
    monkeypatch.setattr(leftovers, "find", lambda cluster: ran.append("leftovers") or [])
    return ran


def _all_running(st, name):
    """The nodes the engine would have made, all running."""
    from lab.store.db import NodeRow

    for g in st.groups(name):
        for o in range(1, g.target_count + 1):
            st.add_node(NodeRow(cluster=name, name=f"{name}-{g.name}-{o}", grp=g.name, ordinal=o,
                                instance_id=f"i-{g.name}{o}", address="10.0.0.1", mac="", phase="running"),
                        if_absent=True)


def test_check_new_is_the_one_name_and_limit_check(faked):
    st = daemon.store()
    clusters.create(st, load_spec(EXAMPLE), provider="sim", start_engine=False)
    with pytest.raises(clusters.NameTaken) as e:
        clusters.check_new(st, "demo")
    assert isinstance(e.value, Conflict) and "already exists" in e.value.message
    with pytest.raises(clusters.NameTaken):
        clusters.create(st, load_spec(EXAMPLE), provider="sim", start_engine=False)


def test_cluster_limit_is_an_error_not_a_crash(faked, monkeypatch):
    from lab.control import commands

    st = daemon.store()
    monkeypatch.setattr(commands, "MAX_CLUSTERS", 1)
    clusters.create(st, load_spec(EXAMPLE), provider="sim", start_engine=False)
    with pytest.raises(clusters.ClusterLimit) as e:
        clusters.check_new(st, "other")
    assert "at most 1 clusters" in e.value.message and e.value.fix


def test_create_checks_the_name_before_touching_the_host(faked):
    from lab.workflows import create

    st = daemon.store()
    clusters.create(st, load_spec(EXAMPLE), provider="sim", start_engine=False)
    faked.clear()
    with pytest.raises(clusters.NameTaken):
        create.create(load_spec(EXAMPLE), provider="vagrant")
    assert faked == []  # the name first, in the create's transaction: neither the box nor the host touched


def test_up_creates_waits_runs_a_first_job_and_names_the_entry(faked, monkeypatch):
    from lab.configure import remote
    from lab.workflows import up

    def fake_wait(st, name, until, on_change=None, timeout=0):
        _all_running(st, name)
        on_change(clusters.describe(st, name), clusters.list_nodes(st, name))
        return {"ClusterStatus": "InService"}

    jobs, said, watched = [], [], []
    monkeypatch.setattr(clusters, "wait", fake_wait)
    monkeypatch.setattr(remote, "run_on_node", lambda cluster, address, cmd, timeout=0: jobs.append(cmd) or
                        subprocess.CompletedProcess(cmd, 0, "demo-compute-1\ndemo-compute-2\n"))
    r = up.up(load_spec(EXAMPLE), users_given=False, timeout=5, progress=said.append, box_progress=said.append,
              watcher=lambda: lambda d, nodes: watched.append(d["ClusterName"]))
    # the host first (with progress), then create's preflight: the box, the host (idempotent), the name's leftovers
    assert faked == ["host", "box", "host", "leftovers", "engine"] and watched == ["demo"]
    computes = [n for n in r.store.nodes("demo") if n.grp == "compute"]
    assert jobs == [f"srun -N{len(computes)} hostname"] and r.first_job["nodes"] == len(computes)
    assert r.entry.grp == "login" and said[0].startswith("host:")
    # again: the cluster exists, it is resumed (no second create)
    faked.clear()
    said.clear()
    up.up(load_spec(EXAMPLE), users_given=True, timeout=5, progress=said.append, box_progress=said.append,
          watcher=lambda: lambda d, nodes: None)
    assert faked == ["host", "engine"] and any("resuming" in s for s in said) and any("--users ignored" in s for s in said)


def test_up_failed_cluster_is_a_lab_error(faked, monkeypatch):
    from lab.workflows import up

    monkeypatch.setattr(clusters, "wait", lambda *a, **k: {"ClusterStatus": "Failed", "FailureMessage": "no room"})
    with pytest.raises(LabError, match="failed: no room"):
        up.up(load_spec(EXAMPLE), users_given=False, timeout=5, progress=lambda s: None, box_progress=lambda s: None)


def test_verify_inventory_of_a_simulated_cluster_is_refused(faked):
    from lab.verify import inventory

    st = daemon.store()
    clusters.create(st, load_spec(EXAMPLE), provider="sim", start_engine=False)
    with pytest.raises(LabError, match="simulated"):
        inventory.write(st, "demo")
    with pytest.raises(NotFound):
        inventory.write(st, "nope")


def test_api_words_the_engine_checks_as_before(faked, monkeypatch):
    """CreateCluster through the API: the engine's NameTaken / ClusterLimit, SageMaker's codes and messages."""
    from lab.api import operations
    from lab.api.model import ApiError
    from lab.control import commands
    from tests.api.seed import create_request

    lab = operations.Lab(store=daemon.store(), provider="sim")
    body = create_request("demo")
    assert operations.call(lab, "CreateCluster", body)["ClusterArn"] == clusters.arn("demo")
    with pytest.raises(ApiError) as e:
        operations.call(lab, "CreateCluster", body)
    assert e.value.code == "ResourceInUse"
    assert e.value.message == "ClusterName: a cluster named 'demo' already exists (pick another name, or DeleteCluster it first)"
    monkeypatch.setattr(commands, "MAX_CLUSTERS", 1)
    with pytest.raises(ApiError) as e:
        operations.call(lab, "CreateCluster", {**body, "ClusterName": "other"})
    assert e.value.code == "ResourceLimitExceeded"
    assert e.value.message == "ClusterName: the lab holds at most 249 clusters; delete one first"  # the real limit


def test_ctrl_c_on_delete_cluster_says_the_engine_goes_on(lab_home, monkeypatch):
    """Ctrl-C while delete-cluster waits: exit 130, the delete stays recorded for the engine to finish."""
    from typer.testing import CliRunner

    from lab.cli import app
    from lab.control import clusters
    from lab.engine import daemon
    from lab.spec import loads_spec
    from tests.simlab import spec_text

    st = daemon.store()
    clusters.create(st, loads_spec(spec_text()), provider="sim", start_engine=False)
    monkeypatch.setattr(daemon, "ensure_running", lambda: None)

    def interrupted(*a, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(clusters, "wait", interrupted)
    r = CliRunner().invoke(app, ["delete-cluster", "demo"])
    assert r.exit_code == 130
    assert "stopped waiting; the engine goes on deleting demo (`slurmlab delete-cluster demo` waits again)" in r.output
    assert st.cluster("demo").status == "Deleting"
