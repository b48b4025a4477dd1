"""A protected group resumed through the lab's own controls (POST /_lab/groups) and the CLI
(`slurmlab resume-group`); bad requests name the field and change nothing."""

from __future__ import annotations

import pytest

from lab.errors import UsageError
from tests.api.seed import seed_cluster


def test_a_protected_group_is_resumed_through_the_lab_api(api):
    seed_cluster(api.store, "demo", computes=1)
    api.store.update_group("demo", "compute", failures=5, failed_at=1.0, protected="5 failures in a row")
    from lab.control import views

    assert views.describe(api.store, "demo")["Lab"]["ProtectedGroups"] == {"compute": "5 failures in a row"}
    status, answer = api.post("/_lab/groups", {"ClusterName": "demo", "InstanceGroupName": "compute", "Action": "Resume"})
    assert status == 200 and answer["WasProtected"] is True, answer
    g = next(g for g in api.store.groups("demo") if g.name == "compute")
    assert (g.failures, g.protected) == (0, None)
    assert any(e.description.startswith("instance group compute resumed (it was protected: 5 failures")
               for e in api.store.events("demo"))


@pytest.mark.parametrize("body, code, says", [
    ({"ClusterName": "ghost", "InstanceGroupName": "compute", "Action": "Resume"}, "ResourceNotFound", "ghost"),
    ({"ClusterName": "demo", "InstanceGroupName": "gpu", "Action": "Resume"}, "ResourceNotFound", "no instance group 'gpu'"),
    ({"ClusterName": "demo", "InstanceGroupName": "compute", "Action": "Pause"}, "ValidationException", "Action"),
    ({"ClusterName": "demo", "Action": "Resume"}, "ValidationException", "InstanceGroupName"),
    ({"ClusterName": "demo", "InstanceGroupName": "compute", "Action": "Resume", "Extra": 1}, "ValidationException", "Extra"),
])
def test_bad_group_requests_name_the_field(api, body, code, says):
    seed_cluster(api.store, "demo", computes=1)
    api.store.update_group("demo", "compute", failures=5, failed_at=1.0, protected="5 failures in a row")
    before = (api.store.groups("demo"), api.store.nodes("demo"))
    status, answer = api.post("/_lab/groups", body)
    assert status in (400, 404) and answer["__type"] == code and says in answer["message"], answer
    assert (api.store.groups("demo"), api.store.nodes("demo")) == before


def test_the_cli_resumes_a_group_and_refuses_an_unknown_one(api, monkeypatch):
    from typer.testing import CliRunner

    from lab.cli import app
    from lab.engine import daemon

    monkeypatch.setattr(daemon, "ensure_running", lambda: 0)
    seed_cluster(api.store, "demo", computes=1)
    api.store.update_group("demo", "compute", failures=5, failed_at=1.0, protected="5 failures in a row")
    r = CliRunner().invoke(app, ["resume-group", "demo", "compute"])
    assert r.exit_code == 0 and "demo/compute: resumed" in r.output, r.output
    r = CliRunner().invoke(app, ["resume-group", "demo", "gpu"])  # lab.cli's main turns it into exit 2 and a fix
    assert isinstance(r.exception, UsageError) and "no instance group 'gpu'" in str(r.exception)
