"""Simulated capacity per instance type, on top of the host's real memory.

A capacity file (YAML) says how many instances of each type may run at once and when more
arrive; types not listed are unlimited. The engine asks `short_of()` before each launch; a
refusal is InsufficientCapacity: an event, a Degraded group, a retry when capacity appears.

    instance_types:
      ml.c5.large:
        available: 1
        arrivals:
          - {after_seconds: 120, count: 1}
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lab.spec import yamlsrc
from lab.spec.catalog import check_instance_type
from lab.spec.problems import Problem, SpecInvalid

# Phases in which a node holds an instance of its type.
HOLDING = {"launching", "booted", "configuring", "configured", "joining", "running", "removing"}


@dataclass(frozen=True)
class Arrival:
    after_seconds: float
    count: int


@dataclass
class CapacityFile:
    available: dict[str, int] = field(default_factory=dict)
    arrivals: dict[str, list[Arrival]] = field(default_factory=dict)


def in_use(nodes, types_by_group: dict[str, str]) -> Counter:
    return Counter(types_by_group.get(n.grp) for n in nodes if n.phase in HOLDING)


def short_of(instance_type: str, limits: dict[str, int], used: Counter) -> str | None:
    """None when one more instance of the type fits, else why not."""
    if instance_type not in limits:
        return None
    avail = limits[instance_type]
    if used[instance_type] < avail:
        return None
    return (f"InsufficientCapacity: no {instance_type} capacity left in the lab "
            f"({used[instance_type]} of {avail} in use); retried when capacity appears")


def parse(text: str, source: str = "<capacity>") -> CapacityFile:
    doc = yamlsrc.parse(text, source)
    problems: list[Problem] = list(doc.duplicates)

    def bad(loc, what, fix=None):
        problems.append(Problem(tuple(loc), what, fix, doc.line_of(tuple(loc))))

    data = doc.data if doc.data is not None else {}
    out = CapacityFile()
    if not isinstance(data, dict):
        bad((), "must be a mapping with the key instance_types")
        raise SpecInvalid(problems, source, "capacity file")
    for k in data:
        if k != "instance_types":
            bad((k,), f"unknown key '{k}'", "the only top-level key is instance_types")
    types = data.get("instance_types") or {}
    if not isinstance(types, dict):
        bad(("instance_types",), "must map instance types to {available, arrivals}")
        types = {}
    for t, v in types.items():
        loc = ("instance_types", t)
        try:
            check_instance_type(str(t))
        except Exception as e:  # noqa: BLE001 - the catalog says what is wrong and suggests names
            bad(loc, str(getattr(e, "message", e)).splitlines()[0])
            continue
        if not isinstance(v, dict):
            bad(loc, "must be a mapping with available and/or arrivals")
            continue
        for k in v:
            if k not in ("available", "arrivals"):
                bad((*loc, k), f"unknown key '{k}'", "use available and arrivals")
        if "available" in v:
            a = v["available"]
            if not isinstance(a, int) or isinstance(a, bool) or a < 0:
                bad((*loc, "available"), f"must be a whole number >= 0, not {a!r}")
            else:
                out.available[str(t)] = a
        for i, arr in enumerate(v.get("arrivals") or []):
            aloc = (*loc, "arrivals", i)
            if not isinstance(arr, dict) or set(arr) - {"after_seconds", "count"} or "count" not in arr:
                bad(aloc, "an arrival is {after_seconds: N, count: M}")
                continue
            sec, cnt = arr.get("after_seconds", 0), arr["count"]
            if not isinstance(sec, (int, float)) or isinstance(sec, bool) or sec < 0:
                bad((*aloc, "after_seconds"), f"must be a number of seconds >= 0, not {sec!r}")
                continue
            if not isinstance(cnt, int) or isinstance(cnt, bool) or cnt < 1:
                bad((*aloc, "count"), f"must be a whole number >= 1, not {cnt!r}")
                continue
            out.arrivals.setdefault(str(t), []).append(Arrival(float(sec), cnt))
        if "arrivals" in v and not isinstance(v.get("arrivals") or [], list):
            bad((*loc, "arrivals"), "must be a list")
    if problems:
        raise SpecInvalid(problems, source, "capacity file")
    return out


def load(path: str | Path) -> CapacityFile:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        from lab.errors import UsageError

        raise UsageError(f"cannot read capacity file {p}: {e.strerror}", "give the path of a YAML file") from e
    return parse(text, str(p))


def host_memory_available_mib() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    return 0
