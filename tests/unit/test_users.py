"""Student accounts (lab/users.py), their CLI (`users show/add/remove`, `--users`), the inventory
variables they and the emulated GPUs become. No VM: playbooks and the engine are stand-ins."""

from __future__ import annotations

import json
import stat
import warnings
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from lab import users, wordlist
from lab.cli import app
from lab.configure import inventory as inv
from lab.errors import LabError, NotFound, SpecError, UsageError
from lab.spec import LabUsers
from lab.store.db import GroupRow, NodeRow
from lab.workspace import ClusterDir
from tests.specs import BASE, GPU, with_compute

REPO = Path(__file__).resolve().parents[2]
SPEC = with_compute(1, BASE + GPU)  # controller, compute (1 node), gpu (ml.g5.12xlarge)


@pytest.fixture
def no_engine(monkeypatch):
    """clusters.create(start_engine=True) must not start a real engine process in a unit test."""
    from lab.engine import daemon

    monkeypatch.setattr(daemon, "ensure_running", lambda: 0)


def spec_file(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "spec.yaml"
    p.write_text(SPEC + extra)
    return p


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


# ------------------------------------------------------------------------------ the password
def test_wordlist_and_passphrase():
    assert len(set(wordlist.WORDS)) == len(wordlist.WORDS) >= 256
    assert all(w.isalpha() and w.islower() and len(w) <= 6 for w in wordlist.WORDS)
    phrases = {wordlist.passphrase() for _ in range(20)}
    assert len(phrases) > 1
    for p in phrases:
        words = p.split("-")
        assert len(words) == 4 and all(w in wordlist.WORDS for w in words)


def test_hash_is_sha512_crypt_that_glibc_verifies():
    h = users.hash_password("correct-horse-battery-staple")
    assert h.startswith("$6$") and users.verify_password("correct-horse-battery-staple", h)
    assert not users.verify_password("wrong-horse-battery-staple", h)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        crypt = pytest.importorskip("crypt", reason="Python's crypt module (glibc crypt(3)) is gone from 3.13 on")
    assert crypt.crypt("correct-horse-battery-staple", h) == h  # what /etc/shadow's check computes


# ------------------------------------------------------------------------------ the file
def test_create_writes_a_private_file(lab_home):
    acc = users.create("demo", LabUsers(Count=3))
    path = ClusterDir("demo").users
    assert path == lab_home / "clusters" / "demo" / "secrets" / "users.json"
    assert mode(path) == 0o600 and mode(path.parent) == 0o700 and mode(ClusterDir("demo").root) == 0o700
    data = json.loads(path.read_text())
    assert data["users"] == [{"name": "user01", "uid": 5001}, {"name": "user02", "uid": 5002},
                             {"name": "user03", "uid": 5003}]
    assert data["account"] == "workshop" and data["removed"] == []
    assert len(data["password"].split("-")) == 4 and data["password"] == acc.password
    assert users.verify_password(acc.password, data["password_hash"])
    assert users.load("demo") == acc
    assert users.load("other") is None


def test_create_takes_the_spec_password_and_prefix(lab_home):
    acc = users.create("demo", LabUsers(Count=2, Prefix="stu", Password="correct-horse"))
    assert acc.password == "correct-horse" and acc.names == ["stu01", "stu02"]
    assert users.verify_password("correct-horse", acc.password_hash)


def test_uids_are_stable_and_never_given_twice(lab_home):
    users.create("demo", LabUsers(Count=3))
    ch = users.remove("demo", ["user03"])
    assert ch.changed == ["user03"] and ch.accounts.removed == ["user03"]
    ch = users.add("demo", ["user04"])
    assert [(u.name, u.uid) for u in ch.accounts.users] == [("user01", 5001), ("user02", 5002), ("user04", 5004)]
    ch = users.add("demo", ["user03"])  # back, with a new uid, and no longer to be deleted
    assert ch.accounts.users[-1].uid == 5005 and ch.accounts.removed == []
    assert {u.name: u.uid for u in users.load("demo").users} == {"user01": 5001, "user02": 5002, "user04": 5004,
                                                                  "user03": 5005}
    assert mode(ClusterDir("demo").users) == 0o600


def test_add_and_remove_are_idempotent(lab_home):
    users.create("demo", LabUsers(Count=2))
    ch = users.add("demo", ["user02", "user03"])
    assert ch.changed == ["user03"] and ch.unchanged == ["user02"] and not ch.created
    users.remove("demo", ["user01"])
    ch = users.remove("demo", ["user01"])
    assert ch.changed == [] and ch.unchanged == ["user01"] and ch.accounts.removed == ["user01"]


def test_bad_names_change_nothing(lab_home):
    users.create("demo", LabUsers(Count=2))
    before = ClusterDir("demo").users.read_text()
    with pytest.raises(UsageError) as ei:
        users.add("demo", ["User1", "root", "user09", "user09", "x" * 33, "systemd-foo"])
    msg = ei.value.message
    assert "5 problems" in msg
    for words in ("'User1' is not a valid user name", "'root' is a system account's name", "'user09' is named twice",
                  "has 33 characters; a user name has at most 32", "'systemd-foo' is a system account's name"):
        assert words in msg, msg
    with pytest.raises(UsageError, match="no account named 'user07'") as ei:
        users.remove("demo", ["user01", "user07"])
    assert "the accounts are: user01, user02" in ei.value.fix
    with pytest.raises(UsageError, match="no user names given"):
        users.add("demo", [])
    assert ClusterDir("demo").users.read_text() == before


def test_accounts_are_capped(lab_home):
    users.create("demo", LabUsers(Count=199))
    with pytest.raises(UsageError, match="would have 201 student accounts; at most 200"):
        users.add("demo", ["extra1", "extra2"])
    assert len(users.add("demo", ["extra1"]).accounts.users) == 200


def test_add_to_a_cluster_without_accounts_makes_the_file(lab_home):
    with pytest.raises(NotFound, match="has no student accounts") as ei:
        users.remove("demo", ["user01"])
    assert "--users N" in ei.value.fix and "slurmlab users add demo user01" in ei.value.fix
    ch = users.add("demo", ["user01"])
    assert ch.created and ch.accounts.users[0].uid == 5001 and len(ch.accounts.password.split("-")) == 4
    assert mode(ClusterDir("demo").users) == 0o600


def test_a_damaged_file_is_a_clear_error(lab_home):
    users.create("demo", LabUsers(Count=1))
    ClusterDir("demo").users.write_text("{not json")
    with pytest.raises(LabError, match="is not a student accounts file"):
        users.load("demo")


def test_name_range():
    assert users.name_range(["user01", "user02", "user03"]) == "user01..user03"
    assert users.name_range(["user01", "user03", "user04"]) == "user01, user03, user04"
    assert users.name_range(["a1", "b2", "c3"]) == "a1, b2, c3"
    assert users.name_range(["user01", "user02"]) == "user01, user02"


# ------------------------------------------------------------------------------ inventory
def test_inventory_vars(lab_home):
    assert users.inventory_vars(None) == {"slurmlab_users": [], "slurmlab_users_password_hash": "",
                                          "slurmlab_users_account": "workshop", "slurmlab_users_removed": []}
    users.create("demo", LabUsers(Count=2))
    acc = users.remove("demo", ["user02"]).accounts
    v = users.inventory_vars(acc)
    assert v == {"slurmlab_users": [{"name": "user01", "uid": 5001}], "slurmlab_users_password_hash": acc.password_hash,
                 "slurmlab_users_account": "workshop", "slurmlab_users_removed": ["user02"]}
    assert acc.password not in json.dumps(v)


def _ctx(**kw) -> inv.ClusterContext:
    groups = [GroupRow("demo", "controller", "ml.t3.medium", "Controller", 1, [], 1, 768, "InService"),
              GroupRow("demo", "compute", "ml.c5.large", "Compute", 1, ["dev"], 1, 768, "InService"),
              GroupRow("demo", "gpu", "ml.g5.12xlarge", "Compute", 1, ["dev"], 2, 2048, "InService")]
    nodes = [NodeRow("demo", f"demo-{g}-1", g, 1, f"i-{i}", f"10.0.0.{i + 2}", "", "running")
             for i, g in enumerate(("controller", "compute", "gpu"))]
    return inv.ClusterContext("demo", groups, nodes, ssh_key=Path("/k"), munge_key=Path("/m"), ssh_executable="ssh", **kw)


def test_inventory_carries_users_and_gpus(lab_home):
    acc = users.create("demo", LabUsers(Count=2))
    data = inv.build(_ctx(users=users.inventory_vars(acc), gpus={"gpu": 2, "compute": 0, "controller": 0}))
    v = data["all"]["vars"]
    assert v["slurmlab_users"] == [{"name": "user01", "uid": 5001}, {"name": "user02", "uid": 5002}]
    assert v["slurmlab_users_password_hash"] == acc.password_hash and v["slurmlab_users_account"] == "workshop"
    assert v["slurmlab_users_removed"] == []
    hosts = {h: hv for g in data["all"]["children"].values() for h, hv in g["hosts"].items()}
    assert {h: hv["slurmlab_gpus"] for h, hv in hosts.items()} == {"demo-controller-1": 0, "demo-compute-1": 0,
                                                                    "demo-gpu-1": 2}
    assert {n["name"]: n["gpus"] for n in v["slurmlab_slurm_nodes"]} == {"demo-compute-1": 0, "demo-gpu-1": 2}
    # no accounts, no GPUs given: the same variables, empty
    v = inv.build(_ctx())["all"]["vars"]
    assert v["slurmlab_users"] == [] and v["slurmlab_users_password_hash"] == "" and v["slurmlab_users_removed"] == []
    assert all(n["gpus"] == 0 for n in v["slurmlab_slurm_nodes"])


def _real_cluster(tmp_path, extra: str = "", running=("demo-controller-1", "demo-compute-1", "demo-gpu-1")):
    """SPEC in the store (provider vagrant, no engine), its nodes as `running` says."""
    from lab.control import clusters
    from lab.engine import daemon
    from lab.spec import load_spec

    st = daemon.store()
    clusters.create(st, load_spec(spec_file(tmp_path, extra)), provider="vagrant", start_engine=False,
                    prepare_host=False)
    for i, g in enumerate(("controller", "compute", "gpu")):
        name = f"demo-{g}-1"
        st.add_node(NodeRow("demo", name, g, 1, f"i-{i}", f"10.0.0.{i + 2}", "", "running" if name in running else "failed"))
    return st


def test_configurer_context_reads_accounts_and_gpus(lab_home, tmp_path):
    from lab.configure.ansible import AnsibleConfigurer

    st = _real_cluster(tmp_path, "Lab:\n  Users: 2\n  Gpus: {gpu: 3}\n")
    ctx = AnsibleConfigurer("ssh").context(st.cluster("demo"), st.groups("demo"), st.nodes("demo"))
    assert ctx.gpus == {"controller": 0, "compute": 0, "gpu": 3}
    assert [u["name"] for u in ctx.users["slurmlab_users"]] == ["user01", "user02"]
    assert ctx.users["slurmlab_users_password_hash"] == users.load("demo").password_hash


def test_inventory_with_the_hash_is_private(lab_home, tmp_path, monkeypatch):
    """run_playbook writes the inventory (it has the password hash) 0600; ansible-runner is a stand-in."""
    import sys
    import types

    from lab.configure import runner
    from lab.configure.ansible import AnsibleConfigurer

    st = _real_cluster(tmp_path, "Lab:\n  Users: 2\n")
    ctx = AnsibleConfigurer("ssh").context(st.cluster("demo"), st.groups("demo"), st.nodes("demo"))
    fake = types.SimpleNamespace(run=lambda **kw: types.SimpleNamespace(rc=0, status="successful", stats={}, events=[]))
    monkeypatch.setitem(sys.modules, "ansible_runner", fake)
    runner.run_playbook(ctx, "users.yml", workdir=ClusterDir("demo").root)
    written = [ClusterDir("demo").inventory, *ClusterDir("demo").root.glob("ansible/*/inventory.yml")]
    assert len(written) == 2
    for p in written:
        assert mode(p) == 0o600
        assert yaml.safe_load(p.read_text())["all"]["vars"]["slurmlab_users_password_hash"].startswith("$6$")


# ------------------------------------------------------------------------------ the CLI
def test_cli_users_zero_or_too_many_creates_nothing(lab_home, tmp_path, no_engine):
    from lab.engine import daemon

    for n in ("0", "201"):
        res = CliRunner().invoke(app, ["create-cluster", "--spec", str(spec_file(tmp_path)), "--provider", "sim",
                                       "--users", n])
        e = res.exception
        assert isinstance(e, UsageError) and e.exit_code == 2, res.output
        assert e.message == f"--users (Lab.Users.Count): {n} is not a user count from 1 to 200"
    assert daemon.store().clusters() == [] and not (lab_home / "clusters").exists()


def test_cli_bad_lab_in_spec_creates_nothing(lab_home, tmp_path, no_engine):
    from lab.engine import daemon

    path = spec_file(tmp_path, "Lab:\n  Users: {Count: 3, Prefix: Root, Password: short}\n  Gpus: {compute: 1}\n")
    res = CliRunner().invoke(app, ["create-cluster", "--spec", str(path), "--provider", "sim"])
    e = res.exception
    assert isinstance(e, SpecError) and e.exit_code == 2
    for words in (":16: Lab.Users.Prefix: 'Root' is not a valid user name prefix", ":16: Lab.Users.Password:",
                  ":17: Lab.Gpus.compute: ml.c5.large has no GPUs"):
        assert words in e.message, e.message
    assert daemon.store().clusters() == [] and not (lab_home / "clusters").exists()


def test_cli_create_show_add_remove_on_sim(lab_home, tmp_path, no_engine):
    from lab.engine import daemon

    path = spec_file(tmp_path, "Lab:\n  Users: {Count: 9, Password: correct-horse-battery}\n")
    res = CliRunner().invoke(app, ["create-cluster", "--spec", str(path), "--provider", "sim", "--users", "3"])
    assert res.exit_code == 0, res.output
    assert "student accounts: user01..user03  password: correct-horse-battery  (slurmlab users show demo)" in res.output
    # the password is in the accounts file only, not in the store
    assert "Password" not in daemon.store().cluster("demo").spec["Lab"]["Users"]
    assert daemon.store().cluster("demo").spec["Lab"]["Users"]["Count"] == 3

    res = CliRunner().invoke(app, ["users", "show", "demo"])
    assert res.exit_code == 0 and "user01..user03" in res.output and "correct-horse-battery" in res.output
    assert "workshop" in res.output

    res = CliRunner().invoke(app, ["users", "add", "demo", "user04", "user02"])
    assert res.exit_code == 0, res.output
    assert "added: user04" in res.output and "already added: user02" in res.output and "simulated" in res.output
    res = CliRunner().invoke(app, ["users", "remove", "demo", "user01", "-o", "json"])
    data = json.loads(res.output)
    assert data["Changed"] == ["user01"] and data["Removed"] == ["user01"] and data["Simulated"] is True
    assert [u["Name"] for u in data["Users"]] == ["user02", "user03", "user04"]
    assert "Password" not in data and "correct-horse" not in res.output  # shown by `users show` only

    res = CliRunner().invoke(app, ["users", "show", "demo", "-o", "json"])
    data = json.loads(res.output)
    assert data["Password"] == "correct-horse-battery" and data["Account"] == "workshop"
    assert data["Users"][-1] == {"Name": "user04", "Uid": 5004}


def test_cli_create_json_has_the_accounts(lab_home, tmp_path, no_engine):
    res = CliRunner().invoke(app, ["create-cluster", "--spec", str(spec_file(tmp_path)), "--provider", "sim",
                                   "--users", "2", "-o", "json"])
    d = json.loads(res.output)
    assert d["Lab"]["Users"]["Names"] == ["user01", "user02"] and len(d["Lab"]["Users"]["Password"].split("-")) == 4
    # describe-cluster does not show it
    res = CliRunner().invoke(app, ["describe-cluster", "demo", "-o", "json"])
    assert "Users" not in json.loads(res.output)["Lab"]


def test_cli_show_errors(lab_home, tmp_path, no_engine):
    res = CliRunner().invoke(app, ["users", "show", "nope"])
    assert isinstance(res.exception, NotFound) and "no cluster named 'nope'" in res.exception.message
    CliRunner().invoke(app, ["create-cluster", "--spec", str(spec_file(tmp_path)), "--provider", "sim"])
    assert not ClusterDir("demo").users.exists()
    res = CliRunner().invoke(app, ["users", "show", "demo"])
    e = res.exception
    assert isinstance(e, NotFound) and e.message == "cluster 'demo' has no student accounts"
    assert e.fix == "create the cluster with --users N, or run slurmlab users add demo user01"
    res = CliRunner().invoke(app, ["users", "add", "nope", "user01"])
    assert isinstance(res.exception, NotFound)


def test_cli_add_pushes_to_the_running_nodes(lab_home, tmp_path, monkeypatch):
    from lab.configure import runner

    _real_cluster(tmp_path, "Lab:\n  Users: 2\n", running=("demo-controller-1", "demo-gpu-1"))
    calls = []

    def run_playbook(ctx, playbook, *, workdir, **kw):
        calls.append((playbook, sorted(n.name for n in ctx.nodes), [u["name"] for u in ctx.users["slurmlab_users"]],
                      workdir))

    monkeypatch.setattr(runner, "run_playbook", run_playbook)
    res = CliRunner().invoke(app, ["users", "add", "demo", "user03"])
    assert res.exit_code == 0, res.output
    assert calls == [("users.yml", ["demo-controller-1", "demo-gpu-1"], ["user01", "user02", "user03"],
                      ClusterDir("demo").root)]
    assert "nodes updated: 2" in res.output


def test_cli_failed_push_names_the_node_and_keeps_the_change(lab_home, tmp_path, monkeypatch):
    from lab.configure import runner

    _real_cluster(tmp_path, "Lab:\n  Users: 2\n")

    def run_playbook(ctx, playbook, **kw):
        raise runner.PlaybookFailed(runner.PlaybookResult(playbook, False, {}, {"demo-gpu-1": "task 'x' failed: boom"}))

    monkeypatch.setattr(runner, "run_playbook", run_playbook)
    res = CliRunner().invoke(app, ["users", "remove", "demo", "user02"])
    e = res.exception
    assert isinstance(e, LabError) and e.exit_code == 1
    assert "demo-gpu-1" in e.message and "boom" in e.message
    assert "slurmlab users remove demo user02" in e.fix
    assert users.load("demo").removed == ["user02"]  # kept: the same command retries
    monkeypatch.setattr(runner, "run_playbook", lambda ctx, playbook, **kw: None)
    res = CliRunner().invoke(app, ["users", "remove", "demo", "user02"])
    assert res.exit_code == 0 and "already removed: user02" in res.output


def test_list_cluster_nodes_shows_gpus_in_the_cli_only(lab_home, tmp_path):
    from lab.control import clusters
    from lab.engine import daemon

    _real_cluster(tmp_path, "Lab:\n  Gpus: {gpu: 2}\n")
    res = CliRunner().invoke(app, ["list-cluster-nodes", "demo", "-o", "json"])
    got = {n["NodeLogicalId"]: n["Lab"] for n in json.loads(res.output)["ClusterNodeSummaries"]}
    assert got["demo-gpu-1"] == {"Gpus": 2, "GpusEmulated": True}
    assert got["demo-compute-1"] == {"Gpus": 0, "GpusEmulated": False}
    text = CliRunner().invoke(app, ["list-cluster-nodes", "demo"]).output
    assert "2 GPUs (emulated)" in text
    # HyperPod's ListClusterNodes (the API shares clusters.list_nodes) has no lab field
    assert all("Lab" not in n for n in clusters.list_nodes(daemon.store(), "demo"))


def test_cli_room_of_a_simulated_or_unknown_cluster_is_refused(lab_home, tmp_path, no_engine):
    """`slurmlab room`: a simulated login node runs no sshd, and describe shows no room for it; an unknown
    cluster is named. Nothing is opened or given a port."""
    res = CliRunner().invoke(app, ["create-cluster", "--spec", str(spec_file(tmp_path)), "--provider", "sim",
                                   "--users", "2"])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["room", "demo"])  # the error as lab.cli's main prints it
    assert res.exit_code != 0 and "simulated cluster" in res.exception.message, res.output
    assert "Room" not in json.loads(CliRunner().invoke(app, ["describe-cluster", "demo", "-o", "json"]).output)["Lab"]
    res = CliRunner().invoke(app, ["room", "nope"])
    assert res.exit_code != 0 and "nope" in res.exception.message, res.output
    assert not list((lab_home / "clusters").glob("*/room.json"))
