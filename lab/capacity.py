"""Simulated capacity per instance type, on top of the host's real memory.

A capacity file (YAML) says how many instances of each type may run at once and when more
arrive; types not listed are unlimited. The engine asks `short_of()` before each launch; a
refusal is InsufficientCapacity: an event, a Degraded group, a retry when capacity appears.

    instance_types:
      ml.c5.large:
        available: 1
        arrivals:
          - {after_seconds: 120, count: 1}
    faults:                      # optional: transient launch failures, reproducible from the seed
      seed: 7
      launch_failure_rate: 0.2   # 0..1, the chance that one launch attempt fails
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from lab.spec import yamlsrc
from lab.spec.catalog import check_instance_type
from lab.spec.problems import Problem, SpecInvalid

# Phases in which a node holds an instance of its type.
HOLDING = {"launching", "booted", "configuring", "configured", "joining", "running", "removing", "rebooting",
           "replacing"}


@dataclass(frozen=True)
class Arrival:
    after_seconds: float
    count: int


@dataclass(frozen=True)
class Faults:
    seed: int = 0
    launch_failure_rate: float = 0.0


@dataclass
class CapacityFile:
    available: dict[str, int] = field(default_factory=dict)
    arrivals: dict[str, list[Arrival]] = field(default_factory=dict)
    faults: Faults | None = None


def apply(st, cap: CapacityFile, now: float | None = None) -> None:
    """Write a parsed capacity file into the store: limits now (nodes waiting for a type that got
    more retry at once), arrivals counted from `now`, faults if the file has the key."""
    import time

    now = time.time() if now is None else now
    for t, n in cap.available.items():
        st.set_capacity(t, n)
        st.retry_now(t)
    for t, arrivals in cap.arrivals.items():
        for a in arrivals:
            st.add_arrival(t, now + a.after_seconds, a.count)
    if cap.faults is not None:
        st.set_faults(cap.faults.seed, cap.faults.launch_failure_rate)


def state(st, now: float | None = None) -> dict:
    """What `slurmlab capacity show` and GET /_lab/capacity report: limits and use per instance type,
    arrivals still to come, and the injected faults."""
    import time

    from lab.engine.engine import Engine

    now = time.time() if now is None else now
    used = Engine(st, None, None)._used()
    limits = st.capacity()
    rows = [{"InstanceType": t, "Available": limits.get(t), "InUse": used.get(t, 0)}
            for t in sorted(set(limits) | {k for k in used if k})]
    arrivals = [{"InstanceType": t, "InSeconds": max(0, round(due - now)), "Count": n}
                for _, t, due, n in st.pending_arrivals()]
    out = {"Capacity": rows, "Arrivals": arrivals}
    if hasattr(st, "faults"):
        out["Faults"] = st.faults()
    return out


def launch_fault(faults: dict, cluster: str, node: str, generation: int, attempt: int) -> str | None:
    """Whether this launch attempt fails by injection (same seed, same answer); the reason if so."""
    import random

    rate = float((faults or {}).get("launch_failure_rate") or 0)
    if rate <= 0:
        return None
    seed = (faults or {}).get("seed") or 0
    if random.Random(f"{seed}/{cluster}/{node}/{generation}/{attempt}").random() >= rate:
        return None
    return f"injected launch failure (faults: launch_failure_rate {rate:g}, seed {seed}); transient, retried"


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
        bad((), "must be a mapping with the keys instance_types and/or faults")
        raise SpecInvalid(problems, source, "capacity file")
    for k in data:
        if k not in ("instance_types", "faults"):
            bad((k,), f"unknown key '{k}'", "the top-level keys are instance_types and faults")
    if "faults" in data:
        out.faults = _faults(data["faults"], bad)
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


def _faults(v, bad) -> Faults | None:
    loc = ("faults",)
    if v is None:
        return Faults()
    if not isinstance(v, dict):
        bad(loc, "must be a mapping: {seed: N, launch_failure_rate: R}")
        return None
    ok = True
    for k in v:
        if k not in ("seed", "launch_failure_rate"):
            bad((*loc, k), f"unknown key '{k}'", "use seed and launch_failure_rate")
            ok = False
    seed = v.get("seed", 0)
    if not isinstance(seed, int) or isinstance(seed, bool):
        bad((*loc, "seed"), f"must be a whole number, not {seed!r}")
        ok = False
    rate = v.get("launch_failure_rate", 0)
    if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 <= rate <= 1:
        bad((*loc, "launch_failure_rate"), f"must be a number from 0 to 1, not {rate!r}", "e.g. 0.2 fails one launch in five")
        ok = False
    return Faults(seed, float(rate)) if ok else None


def load(path: str | Path) -> CapacityFile:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        from lab.errors import UsageError

        raise UsageError(f"cannot read capacity file {p}: {e.strerror}", "give the path of a YAML file") from e
    return parse(text, str(p))

