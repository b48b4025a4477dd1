"""YAML that remembers where things are: parse once, keep the node tree, map field paths to lines."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from lab.errors import SpecError

from .problems import Loc, Problem


@dataclass
class YamlDoc:
    """The data of a YAML document, its node tree (for line numbers) and its name for messages."""

    data: Any
    root: yaml.Node | None
    source: str
    duplicates: list[Problem]

    def line_of(self, loc: Loc) -> int:
        """1-based line of the field at `loc`: the line of its key for a mapping member, of the item
        for a list entry; as far down the path as the document goes (a missing field -> its parent)."""
        node = self.root
        if node is None:
            return 1
        line = node.start_mark.line + 1
        for part in loc:
            if isinstance(node, yaml.MappingNode) and isinstance(part, str):
                for key, value in node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == part:
                        line = key.start_mark.line + 1
                        node = value
                        break
                else:
                    return line
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        return line

    def place(self, problems: list[Problem]) -> list[Problem]:
        for p in problems:
            if p.line is None:
                p.line = self.line_of(p.loc)
        return problems


def parse(text: str, source: str) -> YamlDoc:
    """Parse one YAML document. A syntax error is a SpecError naming `source:line:column`."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        # Before construction: merge keys (`<<`) are flattened into the nodes by it.
        duplicates = duplicate_keys(root)
        data = loader.construct_document(root) if root is not None else None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        what = e.problem or "invalid YAML"
        if e.context:
            cm = e.context_mark
            at = f" at line {cm.line + 1}, column {cm.column + 1}" if cm and cm is not mark else ""
            what += f" ({e.context}{at})"
        raise SpecError(f"{where}: YAML syntax error: {what}", "fix the YAML there") from None
    except yaml.YAMLError as e:
        raise SpecError(f"{source}: YAML error: {e}", "fix the YAML") from None
    finally:
        loader.dispose()
    return YamlDoc(data=data, root=root, source=source, duplicates=duplicates)


def read(path: Path) -> YamlDoc:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: no such file", "check the path") from None
    except (OSError, UnicodeDecodeError) as e:
        raise SpecError(f"{path}: cannot read: {e}", "check the file") from None
    return parse(text, str(path))


def duplicate_keys(root: yaml.Node | None) -> list[Problem]:
    """YAML silently keeps the last of two equal keys; a spec with one is almost always a mistake."""
    problems: list[Problem] = []

    def walk(node: yaml.Node | None, loc: Loc, seen_nodes: set[int]) -> None:
        if node is None or id(node) in seen_nodes:
            return
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            first: dict[str, int] = {}
            for key, value in node.value:
                if not isinstance(key, yaml.ScalarNode):
                    continue
                line = key.start_mark.line + 1
                if key.value in first and key.value != "<<":
                    problems.append(
                        Problem(
                            loc + (key.value,),
                            f"duplicate key (first at line {first[key.value]}); YAML keeps only the last one",
                            "remove one of them",
                            line=line,
                        )
                    )
                first.setdefault(key.value, line)
                walk(value, loc + (key.value,), seen_nodes)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, loc + (i,), seen_nodes)

    walk(root, (), set())
    return problems
