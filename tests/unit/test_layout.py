"""The layout rules of issues 13 and 27: no import cycle in lab/, between modules or between packages;
no module over 400 lines."""

from __future__ import annotations

import re
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


def test_package_cycles_are_found_with_the_imports_that_make_them():
    """Modules without a cycle (a.x -> b.y, b.z -> a.w) whose packages form one (a <-> b)."""
    edges = {"lab.a.x": {"lab.b.y"}, "lab.b.y": set(), "lab.b.z": {"lab.a.w"}, "lab.a.w": set(), "lab.c": {"lab.a.x"}}
    assert importgraph.cycles(edges) == []
    assert importgraph.package_graph(edges) == {"lab.a": {"lab.b"}, "lab.b": {"lab.a"}, "lab.c": {"lab.a"}}
    assert importgraph.package_cycles(edges) == [(["lab.a", "lab.b"], ["lab.a.x -> lab.b.y", "lab.b.z -> lab.a.w"])]
    assert importgraph.package_cycles(edges, ignore=[("lab.b.z", "lab.a.w")]) == []


def test_lab_has_no_package_cycle():
    found = importgraph.package_cycles(importgraph.graph())
    assert found == [], f"package cycles in lab/ (python -m lab.importgraph): {found}"


def test_no_provider_name_is_compared_outside_the_providers():
    """What a provider can do is asked of lab/providers/registry.py (`info(name)`), never read off
    its name."""
    pattern = re.compile(r"""[!=]=\s*["'](sim|vagrant)["']|["'](sim|vagrant)["']\s*[!=]=|in \(["'](sim|vagrant)["']""")
    found = [f"{p.relative_to(LAB)}:{i}" for p in LAB.rglob("*.py") if p.parent.name != "providers"
             for i, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == [], found


def test_no_module_over_400_lines():
    big = {str(p.relative_to(LAB)): n for p in LAB.rglob("*.py")
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}, f"modules over {MAX_LINES} lines: {big}"
