"""One spec problem (where, what, fix) and the error that carries all of them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lab.errors import SpecError

Loc = tuple[str | int, ...]


def path_str(loc: Loc) -> str:
    """('InstanceGroups', 1, 'SlurmConfig') -> 'InstanceGroups[1].SlurmConfig'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


@dataclass
class Problem:
    """`loc` is the field path (list indexes from 0); `what` says what is wrong, `fix` how to fix it."""

    loc: Loc
    what: str
    fix: str | None = None
    line: int | None = None  # 1-based, filled in for YAML sources

    @property
    def path(self) -> str:
        return path_str(self.loc)

    def format(self, source: str | None = None) -> str:
        where = ""
        if source:
            where = f"{source}:{self.line}: " if self.line else f"{source}: "
        text = f"{where}{self.path}: {self.what}"
        return f"{text}; {self.fix}" if self.fix else text


class SpecInvalid(SpecError):
    """A cluster spec (YAML file or CreateCluster/UpdateCluster request) with one or more problems.

    `message` has one line per problem: `<file>:<line>: <field path>: <what is wrong>; <fix>`
    (no `<file>:<line>: ` for a request). `problems` keeps them as objects for the API.
    """

    def __init__(self, problems: Iterable[Problem], source: str | None = None, what: str = "cluster spec"):
        self.problems = sorted(problems, key=lambda p: p.line or 0)
        self.source = source
        lines = [p.format(source) for p in self.problems]
        n = len(lines)
        where = f"{source}: " if source else ""
        head = f"{where}{n} problem{'s' if n != 1 else ''} in the {what}:"
        fix = f"edit {source} as each line above says" if source else "correct the request as each line above says"
        super().__init__(head + "\n" + "\n".join("  " + line for line in lines), fix)
