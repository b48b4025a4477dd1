"""Simulated capacity per instance type, on top of the host's real memory: the one place that says
which nodes hold an instance (`in_use`) and whether one more fits (`short_of`).

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
      health_check_failure_rate: 0.5  # 0..1, sim provider only: a simulated deep health check fails
      extension_unhealthy_rate: 0.3   # 0..1, sim provider only: a node's simulated extension (metrics
                                      # exporter) does not answer one probe (DescribeClusterExtension's Health)

The file is read into pydantic models (CapacityFile); every problem is reported at once as
`file:line: field path: what is wrong; fix` (lab/spec/problems.py), like a cluster spec.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lab.errors import SpecError
from lab.spec import yamlsrc
from lab.spec.catalog import check_instance_type
from lab.spec.problems import Problem, SpecInvalid

# Phases in which a node holds an instance of its type (and a failed node whose VM had booted).
HOLDING = {"launching", "booted", "configuring", "configured", "joining", "running", "removing", "rebooting",
           "replacing"}


# ---------------------------------------------------------------- accounting
def holds_instance(n) -> bool:
    """Whether the node (a lab.store.db.NodeRow) holds an instance of its group's type."""
    return n.phase in HOLDING or (n.phase == "failed" and bool(n.booted_at))


def in_use(snapshots: Iterable[tuple]) -> Counter:
    """Instances held per type, from store snapshots (cluster, groups, nodes)."""
    used: Counter = Counter()
    for _c, groups, nodes in snapshots:
        types = {g.name: g.instance_type for g in groups}
        for n in nodes:
            if holds_instance(n):
                used[types.get(n.grp)] += 1
    return used


def used(st) -> Counter:
    """Instances held per type across the whole lab (every cluster of the store)."""
    return in_use(s for s in (st.snapshot(c.name) for c in st.clusters()) if s[0] is not None)


def short_of(instance_type: str, limits: dict[str, int], used: Counter) -> str | None:
    """None when one more instance of the type fits, else why not."""
    if instance_type not in limits:
        return None
    avail = limits[instance_type]
    if used[instance_type] < avail:
        return None
    return (f"InsufficientCapacity: no {instance_type} capacity left in the lab "
            f"({used[instance_type]} of {avail} in use); retried when capacity appears")


def launch_fault(faults: dict, cluster: str, node: str, generation: int, attempt: int) -> str | None:
    """Whether this launch attempt fails by injection (same seed, same answer); the reason if so."""
    rate = float((faults or {}).get("launch_failure_rate") or 0)
    if rate <= 0:
        return None
    seed = (faults or {}).get("seed") or 0
    if random.Random(f"{seed}/{cluster}/{node}/{generation}/{attempt}").random() >= rate:
        return None
    return f"injected launch failure (faults: launch_failure_rate {rate:g}, seed {seed}); transient, retried"


def health_faults(faults: dict, op_id: str, targets: dict[str, list[str]]) -> dict[str, list[str]]:
    """The sim provider's deep health checks: each node fails one of its checks with the chance
    `health_check_failure_rate` (same seed and operation, same answer: a check run again after an
    engine restart agrees), labelled simulated. node -> failures."""
    rate = float((faults or {}).get("health_check_failure_rate") or 0)
    seed = (faults or {}).get("seed") or 0
    out: dict[str, list[str]] = {}
    for node, checks in targets.items():
        r = random.Random(f"{seed}/{node}/{op_id}")
        out[node] = []
        if rate > 0 and r.random() < rate:
            out[node] = [f"{r.choice(checks)}: simulated failure (faults: health_check_failure_rate {rate:g}, "
                         f"seed {seed})"]
    return out


def extension_faults(faults: dict, cluster: str, extension: str, members, probe: int) -> dict[str, str]:
    """The sim provider's extension probe: each member does not answer with the chance
    `extension_unhealthy_rate` (same seed and probe number, same answer), labelled simulated. node -> why."""
    rate = float((faults or {}).get("extension_unhealthy_rate") or 0)
    seed = (faults or {}).get("seed") or 0
    if rate <= 0:
        return {}
    return {m: f"the node exporter does not answer (simulated: faults extension_unhealthy_rate {rate:g}, seed {seed})"
            for m in members if random.Random(f"{seed}/{cluster}/{extension}/{m}/{probe}").random() < rate}


def state(st, now: float | None = None) -> dict:
    """What `slurmlab capacity show` and GET /_lab/capacity report: limits and use per instance type,
    arrivals still to come, and the injected faults."""
    now = time.time() if now is None else now
    held = used(st)
    limits = st.capacity()
    rows = [{"InstanceType": t, "Available": limits.get(t), "InUse": held.get(t, 0)}
            for t in sorted(set(limits) | {k for k in held if k})]
    arrivals = [{"InstanceType": t, "InSeconds": max(0, round(due - now)), "Count": n}
                for _, t, due, n in st.pending_arrivals()]
    return {"Capacity": rows, "Arrivals": arrivals, "Faults": st.faults()}


def apply(st, cap: CapacityFile, now: float | None = None) -> None:
    """Write a parsed capacity file into the store: limits now (nodes waiting for a type that got
    more retry at once), arrivals counted from `now`, faults if the file has the key."""
    now = time.time() if now is None else now
    for t, n in cap.available.items():
        st.set_capacity(t, n)
        st.retry_now(t)
    for t, arrivals in cap.arrivals.items():
        for a in arrivals:
            st.add_arrival(t, now + a.after_seconds, a.count)
    if cap.faults is not None:
        st.set_faults(cap.faults.seed, cap.faults.launch_failure_rate, cap.faults.health_check_failure_rate,
                      cap.faults.extension_unhealthy_rate)


# ---------------------------------------------------------------- the file
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _none_is_empty(v: Any, empty: Any) -> Any:
    return empty if v is None else v


class Arrival(_Model):
    after_seconds: float = Field(0.0, ge=0)
    count: int = Field(ge=1)


class InstanceTypeCapacity(_Model):
    available: int | None = Field(None, ge=0)
    arrivals: list[Arrival] = Field(default_factory=list)

    @field_validator("available", mode="before")
    @classmethod
    def _given_is_a_count(cls, v: Any) -> Any:
        if v is None:
            raise ValueError("null")
        return v

    @field_validator("arrivals", mode="before")
    @classmethod
    def _no_arrivals(cls, v: Any) -> Any:
        return _none_is_empty(v, [])


class Faults(_Model):
    seed: int = 0
    launch_failure_rate: float = Field(0.0, ge=0, le=1)
    health_check_failure_rate: float = Field(0.0, ge=0, le=1)
    extension_unhealthy_rate: float = Field(0.0, ge=0, le=1)


class CapacityFile(_Model):
    instance_types: dict[str, InstanceTypeCapacity] = Field(default_factory=dict)
    faults: Faults | None = None  # absent: faults unchanged; `faults:` alone: none

    @field_validator("instance_types", mode="before")
    @classmethod
    def _no_types(cls, v: Any) -> Any:
        return _none_is_empty(v, {})

    @field_validator("faults", mode="before")
    @classmethod
    def _no_faults(cls, v: Any) -> Any:
        return _none_is_empty(v, {})

    @property
    def available(self) -> dict[str, int]:
        return {t: c.available for t, c in self.instance_types.items() if c.available is not None}

    @property
    def arrivals(self) -> dict[str, list[Arrival]]:
        return {t: list(c.arrivals) for t, c in self.instance_types.items() if c.arrivals}


# (field path with "*" for an instance type and "#" for a list index) -> (what is wrong, fix);
# "{v!r}" is the value given. A path not listed: its last key names it below (_FIELDS).
_SHAPES: dict[tuple, tuple[str, str | None]] = {
    (): ("must be a mapping with the keys instance_types and/or faults", None),
    ("instance_types",): ("must map instance types to {available, arrivals}", None),
    ("instance_types", "*"): ("must be a mapping with available and/or arrivals", None),
    ("instance_types", "*", "arrivals"): ("must be a list", None),
    ("instance_types", "*", "arrivals", "#"): ("an arrival is {after_seconds: N, count: M}", None),
    ("faults",): ("must be a mapping: {seed: N, launch_failure_rate: R, health_check_failure_rate: R, "
                  "extension_unhealthy_rate: R}", None),
}
_FIELDS: dict[str, tuple[str, str | None]] = {
    "available": ("must be a whole number >= 0, not {v!r}", None),
    "after_seconds": ("must be a number of seconds >= 0, not {v!r}", None),
    "count": ("must be a whole number >= 1, not {v!r}", None),
    "seed": ("must be a whole number, not {v!r}", None),
    "launch_failure_rate": ("must be a number from 0 to 1, not {v!r}", "e.g. 0.2 fails one launch in five"),
    "health_check_failure_rate": ("must be a number from 0 to 1, not {v!r}",
                                  "e.g. 0.5 fails one simulated node check in two"),
    "extension_unhealthy_rate": ("must be a number from 0 to 1, not {v!r}",
                                 "e.g. 0.3: a node's simulated exporter misses about one probe in three"),
}
_UNKNOWN_FIX = {(): "the top-level keys are instance_types and faults", ("faults",): "use seed, launch_failure_rate, health_check_failure_rate and "
                "extension_unhealthy_rate",
                ("instance_types", "*"): "use available and arrivals"}


def _shape(loc: tuple) -> tuple:
    return tuple("#" if isinstance(p, int) else "*" if i == 1 and loc[0] == "instance_types" else p
                 for i, p in enumerate(loc))


def _problem(err: dict, doc: yamlsrc.YamlDoc) -> Problem:
    loc, kind, given = tuple(err["loc"]), err["type"], err.get("input")
    if kind == "extra_forbidden":
        parent = _shape(loc[:-1])
        if parent and parent[-1] == "#":  # an arrival with another key
            what, fix, loc = *_SHAPES[parent], loc[:-1]
        else:
            what, fix = f"unknown key '{loc[-1]}'", _UNKNOWN_FIX.get(parent)
    elif kind == "missing":  # an arrival without count
        what, fix, loc = *_SHAPES[_shape(loc[:-1])], loc[:-1]
    elif loc and isinstance(loc[-1], str) and loc[-1] in _FIELDS and _shape(loc) not in _SHAPES:
        what, fix = _FIELDS[loc[-1]]
        what = what.format(v=given)
    else:
        what, fix = _SHAPES.get(_shape(loc), (err["msg"], None))
    return Problem(loc, what, fix, doc.line_of(loc))


def parse(text: str, source: str = "<capacity>") -> CapacityFile:
    doc = yamlsrc.parse(text, source)
    problems: list[Problem] = list(doc.duplicates)
    data = doc.data if doc.data is not None else {}
    types = data.get("instance_types") if isinstance(data, dict) else None
    if isinstance(types, dict):  # the catalog first: it says what is wrong and suggests names
        for t in list(types):
            try:
                check_instance_type(str(t))
            except SpecError as e:
                loc = ("instance_types", t)
                problems.append(Problem(loc, e.message.splitlines()[0], None, doc.line_of(loc)))
                data = {**data, "instance_types": {k: v for k, v in types.items() if k != t}}
                types = data["instance_types"]
    try:
        cap = CapacityFile.model_validate(data)
    except ValidationError as e:
        seen = set()
        for err in e.errors():
            p = _problem(err, doc)
            if (p.loc, p.what) not in seen:
                seen.add((p.loc, p.what))
                problems.append(p)
        cap = None
    if problems:
        raise SpecInvalid(problems, source, "capacity file")
    return cap


def load(path: str | Path) -> CapacityFile:
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        from lab.errors import UsageError

        raise UsageError(f"cannot read capacity file {p}: {e.strerror}", "give the path of a YAML file") from e
    return parse(text, str(p))
