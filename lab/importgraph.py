"""The import graph of the `lab` package, read from the source (nothing is imported), and its
cycles: between modules, and between packages (`lab.configure`, `lab.providers`, ...; a top-level
module such as `lab.doctor` is a package of its own). `python -m lab.importgraph` prints every
cycle and exits 1 if there is one (tests/unit/test_layout.py runs the same checks in CI).

Every `import` counts, also those inside functions (a lazy import is still a dependency:
it only hides the cycle until run time). `from pkg import name` points at `pkg.name` when
that is a module, else at `pkg`. A package's `__init__` is not counted as imported by its
own submodules (that is Python's loading order, not a dependency of the code)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def modules(root: Path = ROOT) -> dict[str, Path]:
    base = root.parent
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(base).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _resolve(mod: str, node: ast.ImportFrom, is_pkg: bool) -> str:
    if not node.level:
        return node.module or ""
    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    top = root.name
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                src = _resolve(mod, node, path.name == "__init__.py")
                targets = [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else src for a in node.names]
            for t in targets:
                while t and t not in mods:
                    t = t.rpartition(".")[0]
                if t and t.split(".")[0] == top and t != mod and not mod.startswith(t + "."):
                    edges[mod].add(t)
    return edges


def package(mod: str) -> str:
    """`lab.configure.base` -> `lab.configure`; a top-level module is its own package."""
    return ".".join(mod.split(".")[:2])


def package_graph(edges: dict[str, set[str]], ignore=()) -> dict[str, set[str]]:
    """The packages and the packages each imports (from `edges`, less the module edges `ignore`)."""
    skip = set(ignore)
    out: dict[str, set[str]] = {}
    for mod, targets in edges.items():
        src = package(mod)
        out.setdefault(src, set())
        for t in targets:
            if package(t) != src and (mod, t) not in skip:
                out[src].add(package(t))
    return out


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10000))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(out)


def package_cycles(edges: dict[str, set[str]], ignore=()) -> list[tuple[list[str], list[str]]]:
    """Each package cycle, with the module imports that make it (`a.x -> b.y`)."""
    packages = package_graph(edges, ignore)
    skip = set(ignore)
    out = []
    for comp in cycles(packages):
        inside = set(comp)
        why = sorted(f"{m} -> {t}" for m, ts in edges.items() for t in ts
                     if package(m) in inside and package(t) in inside and package(m) != package(t) and (m, t) not in skip)
        out.append((comp, why))
    return out


def main() -> int:
    edges = graph()
    found = cycles(edges)
    for comp in found:
        inside = set(comp)
        print("cycle: " + ", ".join(comp))
        for m in comp:
            print(f"  {m} -> " + ", ".join(sorted(edges[m] & inside)))
    pkg_found = package_cycles(edges)
    for comp, why in pkg_found:
        print("package cycle: " + ", ".join(comp))
        for line in why:
            print(f"  {line}")
    n = sum(len(v) for v in edges.values())
    print(f"{len(edges)} modules, {n} imports, {len(found)} cycle(s); "
          f"{len(package_graph(edges))} packages, {len(pkg_found)} package cycle(s)")
    return 1 if found or pkg_found else 0


if __name__ == "__main__":
    raise SystemExit(main())
