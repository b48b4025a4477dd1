"""The layout rules of issue 13: no import cycle in lab/, no module over 400 lines."""

from __future__ import annotations

from pathlib import Path

from lab import importgraph

LAB = Path(importgraph.__file__).resolve().parent
MAX_LINES = 400


def test_cycle_finder_finds_a_cycle_and_only_it():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert importgraph.cycles(edges) == [["a", "b", "c"]]


def test_graph_sees_lazy_and_relative_imports(tmp_path):
    pkg = tmp_path / "lab"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "one.py").write_text("from . import two\n")
    (pkg / "sub" / "two.py").write_text("def f():\n    from lab import top\n")
    (pkg / "top.py").write_text("import lab.sub.one\n")
    edges = importgraph.graph(pkg)
    assert edges["lab.sub.one"] == {"lab.sub.two"}
    assert edges["lab.sub.two"] == {"lab.top"}
    assert importgraph.cycles(edges) == [["lab.sub.one", "lab.sub.two", "lab.top"]]


def test_lab_has_no_import_cycle():
    found = importgraph.cycles(importgraph.graph())
    assert found == [], f"import cycles in lab/ (python -m lab.importgraph): {found}"


def test_no_module_over_400_lines():
    big = {str(p.relative_to(LAB)): n for p in LAB.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}, f"modules over {MAX_LINES} lines: {big}"
