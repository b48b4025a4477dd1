"""`slurmlab verify --tests DIR`: a user's own checks beside the suite, with the suite's fixtures (no VMs)."""

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lab import verify
from lab.cli import app
from lab.errors import UsageError
from tests.unit.test_verify import INVENTORY, _real_cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "verify-tests"

# A user's check: it needs the plugin's `cluster` and its parametrization of `node`, and the
# `site` fixture of the folder's own conftest.py. It runs no command on a node (there is none).
USER_TEST = """\
def test_mine(cluster, node, site):
    assert node in cluster.nodes and site == "lab"
    assert cluster.slurm_name(node) == {"ctl": "ctl", "login1": "login1", "c1": "c1", "c2": "c2"}[node]
"""
USER_CONFTEST = """\
import pytest


@pytest.fixture
def site():
    return "lab"
"""


@pytest.fixture
def inventory(tmp_path) -> Path:
    p = tmp_path / "inventory.yml"
    p.write_text(INVENTORY)
    return p


@pytest.fixture
def checks(tmp_path) -> Path:
    d = tmp_path / "elsewhere" / "checks"
    d.mkdir(parents=True)
    (d / "test_mine.py").write_text(USER_TEST)
    (d / "conftest.py").write_text(USER_CONFTEST)
    return d


def test_command_line_holds_the_folders_and_the_fixture_plugin(inventory, checks, tmp_path):
    other = tmp_path / "more"
    other.mkdir()
    cmd = verify.command(inventory, None, ("-k", "mine"), [checks, other])
    assert cmd[3:6] == [str(verify.SUITE), str(checks), str(other)]
    i = cmd.index(verify.FIXTURES)
    assert cmd[i - 1] == "-p" and verify.FIXTURES == "lab.verify.suite.fixtures"
    assert f"--rootdir={verify.SUITE}" in cmd and cmd[-2:] == ["-k", "mine"]
    assert "-p" in verify.command(inventory) and verify.FIXTURES in verify.command(inventory)  # also without --tests


def test_cli_passes_the_folders_to_the_run(lab_home, monkeypatch, checks):
    _real_cluster(lab_home)
    calls = []
    monkeypatch.setattr(verify, "run", lambda i, j, extra_args=(), ssh_executable=None, tests=():
                        calls.append((extra_args, tests)) or 0)
    res = CliRunner().invoke(app, ["verify", "demo", "--tests", str(checks), "--tests", str(EXAMPLES), "-k", "mine"])
    assert res.exit_code == 0, res.output
    assert calls == [(("-k", "mine"), [checks.resolve(), EXAMPLES.resolve()])]


def _folder(d: Path, case: str) -> Path:
    """A bad --tests path in `d`, of the kind `case`."""
    if case == "missing":
        return d / "missing"
    if case == "a file":
        (d / "test_x.py").write_text("")
        return d / "test_x.py"
    if case == "no test file":
        (d / "helpers.py").write_text("")
    if case == "hidden only":
        (d / ".hidden").mkdir()
        (d / ".hidden" / "test_x.py").write_text("")
    if case == "the suite's name":
        (d / "test_cluster.py").write_text("")
    return d


@pytest.mark.parametrize("case,words", [
    ("missing", ["no such folder", "missing", "examples/verify-tests"]),
    ("a file", ["not a folder", "examples/verify-tests"]),
    ("no test file", ["no test_*.py or *_test.py file", "examples/verify-tests"]),
    ("hidden only", ["no test_*.py or *_test.py file"]),
    ("the suite's name", ["test_cluster.py", "built-in suite", "rename"]),
])
def test_bad_folders_are_refused_before_anything_runs(lab_home, monkeypatch, tmp_path, case, words):
    d = tmp_path / "mine"
    d.mkdir()
    monkeypatch.setattr(verify, "run", lambda *a, **k: pytest.fail("ran"))
    res = CliRunner().invoke(app, ["verify", "nope", "--tests", str(_folder(d, case))])  # before the cluster is looked up
    assert isinstance(res.exception, UsageError) and res.exception.exit_code == 2
    text = str(res.exception)
    assert all(w in text for w in words) and "\n  fix: " in text, text


def test_two_folders_with_the_same_file_are_refused(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "test_x.py").write_text("")
    assert verify.user_tests([tmp_path / "a"]) == [(tmp_path / "a").resolve()]
    with pytest.raises(UsageError, match="would be reported as test_x.py"):
        verify.user_tests([tmp_path / "a", tmp_path / "b"])


def test_a_user_folder_gets_the_fixtures_beside_the_suite(inventory, checks, tmp_path):
    """The real command line: the suite and a folder outside its rootdir; -k picks the user's check
    only (no node is reachable); JUnit names it by its path inside the folder."""
    junit = tmp_path / "j.xml"
    r = subprocess.run(verify.command(inventory, junit, ("-k", "mine or inventory_groups"), [checks]),
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5 passed" in r.stdout and "deselected" in r.stdout
    cases = {(c.get("classname"), c.get("name")) for c in ET.parse(junit).iter("testcase")}
    assert cases == {("test_cluster", "test_inventory_groups")} | {
        ("test_mine", f"test_mine[{n}]") for n in ("c1", "c2", "ctl", "login1")}


def _plain_pytest(folder: Path, inventory: Path, *extra: str) -> subprocess.CompletedProcess:
    """pytest on `folder` alone (not the suite, so not its conftest.py): the fixtures come from `extra`."""
    cmd = [sys.executable, "-m", "pytest", str(folder), f"--ansible-inventory={inventory}", "--hosts=ansible://all",
           "--force-ansible", "-p", "no:cacheprovider", "-o", "addopts=", f"--rootdir={folder}", "-q", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=folder)


def test_the_fixtures_come_from_the_plugin(inventory, checks):
    """Without the plugin the user's check has no `cluster`; with `-p lab.verify.suite.fixtures` it passes."""
    without = _plain_pytest(checks, inventory)
    assert without.returncode != 0 and "fixture 'cluster' not found" in without.stdout, without.stdout
    with_plugin = _plain_pytest(checks, inventory, "-p", verify.FIXTURES)
    assert with_plugin.returncode == 0 and "4 passed" in with_plugin.stdout, with_plugin.stdout + with_plugin.stderr


def test_the_example_folder_is_accepted_and_collected(inventory):
    assert verify.user_tests([EXAMPLES]) == [EXAMPLES.resolve()]
    r = subprocess.run(verify.command(inventory, None, ("--collect-only", "-qq", "-k", "chrony or default_partition"),
                                      [EXAMPLES]), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    ids = {line.strip() for line in r.stdout.splitlines() if "::" in line}
    assert ids == {"test_site.py::test_the_default_partition_is_ours_and_every_compute_node_has_one"} | {
        f"test_site.py::test_chrony_follows_the_controller[{n}]" for n in ("c1", "c2", "ctl", "login1")}, r.stdout
