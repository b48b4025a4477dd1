"""lab/settings.py is the one place that names the SLURMLAB_* variables (issue 27): every module of
lab/ reads them through it, docs/settings.md is its table, and every name the project uses is in it."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from lab import settings

REPO = Path(settings.__file__).resolve().parent.parent
LAB = REPO / "lab"
NAME = re.compile(r"SLURMLAB_[A-Z0-9_]+")

def direct_names(path: Path) -> list[tuple[int, str]]:
    """The string literals of `path` that are exactly a SLURMLAB_* name: `os.environ["X"]`,
    `os.environ.get("X")`, `os.getenv("X")`, `monkeypatch.setenv("X")`, `ENV = "X"`... (a mention
    inside a longer text, e.g. a docstring or a message, is not one)."""
    tree = ast.parse(path.read_text(), str(path))
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and NAME.fullmatch(n.value)]


def offenders(root: Path = LAB) -> dict[str, list[tuple[int, str]]]:
    out = {}
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root.parent).as_posix()
        if rel != "lab/settings.py" and (found := direct_names(p)):
            out[rel] = found
    return out


def test_the_checker_sees_reads_writes_and_indirections_but_not_prose(tmp_path):
    pkg = tmp_path / "lab"
    pkg.mkdir()
    (pkg / "settings.py").write_text('HOME = "SLURMLAB_HOME"\n')
    (pkg / "a.py").write_text('import os\nx = os.environ.get("SLURMLAB_HOME")\ny = os.environ["SLURMLAB_POOL"]\n')
    (pkg / "b.py").write_text('import os\nENV = "SLURMLAB_NETNS"\nos.environ[ENV] = "x"\nz = os.getenv("SLURMLAB_X")\n')
    (pkg / "c.py").write_text('"""State in $SLURMLAB_HOME."""\nmsg = f"set SLURMLAB_POOL to {1}"\nfrom lab import settings\n'
                              'v = settings.HOME.get()\n')
    assert offenders(pkg) == {"lab/a.py": [(2, "SLURMLAB_HOME"), (3, "SLURMLAB_POOL")],
                              "lab/b.py": [(2, "SLURMLAB_NETNS"), (4, "SLURMLAB_X")]}


def test_lab_reads_slurmlab_variables_only_through_settings():
    found = offenders()
    assert found == {}, f"read these through lab.settings (settings.X.get(), settings.X.name): {found}"


def test_every_name_the_project_uses_is_in_the_table():
    used = set()
    for folder in ("lab", "roles", "playbooks", "scripts", "tests", "bench", "docs"):
        for p in (REPO / folder).rglob("*"):
            if p.is_file() and p.suffix not in (".png", ".pyc", ".golden") and p.name != Path(__file__).name:
                used |= set(NAME.findall(p.read_text(errors="replace")))
    used |= set(NAME.findall((REPO / "README.md").read_text()))
    missing = sorted(used - set(settings.BY_NAME))
    assert missing == [], f"add them to lab/settings.py (and regenerate docs/settings.md): {missing}"
    assert len(settings.BY_NAME) == len(settings.ALL), "a name is in the table twice"


def test_docs_table_is_generated_from_the_settings():
    text = (REPO / "docs" / "settings.md").read_text()
    assert text == settings.markdown(), "regenerate: python -m lab.settings > docs/settings.md"


def test_a_setting_is_read_at_use_and_falls_back_to_its_default(monkeypatch):
    s = settings.MAX_NODES_PER_GROUP
    monkeypatch.delenv(s.name, raising=False)
    assert s.get() == 64 and not s.is_set()
    for raw, value in [("100", 100), (" 7 ", 7), ("", 64), ("  ", 64), ("x", 64), ("0", 64), ("-3", 64)]:
        monkeypatch.setenv(s.name, raw)
        assert s.get() == value, raw


@pytest.mark.parametrize("setting,raw,value", [
    (settings.HOME, "/tmp/h", Path("/tmp/h")),
    (settings.HOME, "", None),
    (settings.HOST_MODE, "netns", "netns"),
    (settings.HOST_MODE, "docker", None),
    (settings.DRIVER, "qemu", "qemu"),
    (settings.VERIFY_BACKEND, "ssh", "ssh"),
    (settings.VERIFY_BACKEND, "paramiko", "ansible"),
    (settings.BOOT_SLOTS, "0", 0),
    (settings.BOOT_SLOTS, "-1", None),
    (settings.CONTROLLER_NICE, "0", 0),
    (settings.CONTROLLER_NICE, "x", -5),
    (settings.DEBIAN_MIRROR, " http://m/debian ", "http://m/debian"),
    (settings.HOST_LOST_S, "20", 20.0),
])
def test_each_setting_parses_as_its_old_reader_did(monkeypatch, setting, raw, value):
    monkeypatch.setenv(setting.name, raw)
    assert setting.get() == value
