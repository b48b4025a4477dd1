"""tests/e2e/fullconfig.py (issue 43): a full configuration's fingerprints kept between runs, keyed by
what shapes a node."""

from __future__ import annotations

import pytest

from tests.e2e import fullconfig


@pytest.fixture
def tree(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    for f in ("roles/common/tasks/main.yml", "playbooks/nodes.yml", "lab/configure/runner.py",
              "lab/engine/daemon.py", "lab/cli.py", "examples/workshop.yaml", "examples/lifecycle/on_create.sh",
              "pyproject.toml", "tests/e2e/equivalence.py"):
        (repo / f).parent.mkdir(parents=True, exist_ok=True)
        (repo / f).write_text(f"# {f}\n")
    box = tmp_path / "box" / "box.img"
    box.parent.mkdir()
    box.write_bytes(b"disk")
    monkeypatch.setattr(fullconfig, "REPO", repo)
    monkeypatch.setenv("SLURMLAB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("SLURMLAB_E2E_TWIN", raising=False)
    return repo, box


def test_a_file_that_reaches_a_node_changes_the_key_and_the_engine_does_not(tree):
    repo, box = tree
    k = fullconfig.key(box)
    (repo / "lab/engine/daemon.py").write_text("# the engine changed\n")
    (repo / "lab/cli.py").write_text("# the CLI changed\n")
    assert fullconfig.key(box) == k
    for f in ("roles/common/tasks/main.yml", "playbooks/nodes.yml", "lab/configure/runner.py",
              "examples/lifecycle/on_create.sh", "pyproject.toml"):
        before = fullconfig.key(box)
        (repo / f).write_text((repo / f).read_text() + "# changed\n")
        assert fullconfig.key(box) != before, f


def test_another_box_changes_the_key(tree):
    _, box = tree
    k = fullconfig.key(box)
    box.write_bytes(b"another disk")
    assert fullconfig.key(box) != k


def test_kept_prints_come_back_for_their_key_only_and_a_forced_build_ignores_them(tree, monkeypatch):
    _, box = tree
    k = fullconfig.key(box)
    assert fullconfig.load(k) is None
    fullconfig.save(k, {"controller": "## packages\nslurmctld 24.11\n"})
    assert fullconfig.load(k) == {"controller": "## packages\nslurmctld 24.11\n"}
    assert fullconfig.load("another") is None
    fullconfig.save("another", {"login": "x"})  # a new key's prints replace the old ones
    assert fullconfig.load(k) is None and fullconfig.load("another") == {"login": "x"}
    monkeypatch.setenv("SLURMLAB_E2E_TWIN", "build")
    assert fullconfig.load("another") is None
