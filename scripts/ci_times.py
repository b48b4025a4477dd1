"""Where a test run's time went (issue 43): each phase's seconds and the slowest tests, from pytest's
JUnit XML and the seconds the Makefile noted for the phases before pytest.

    python scripts/ci_times.py JUNIT [JUNIT ...] [--phases artifacts/phases] [--total-s N] [--json OUT]

Phases: setup (packages, virtualenv, libvirtd, the box and its templates) and lint, as `make test` noted
them (a line "NAME SECONDS" each in --phases); unit, api and e2e, the sums of pytest's own test times
under tests/unit, tests/api and tests/e2e (set-up and teardown of fixtures included), over every JUnit
file given. `make test` runs pytest in parallel streams (scripts/streams.py), one JUnit file each, and
notes each stream's wall time as a line "stream:NAME SECONDS": those are `streams`, not phases (the
phases then add up to more than the total). --json writes {"total_s", "phases": {name: seconds},
"streams": {name: seconds}, "tests": {id: seconds}, "failed": {id: first line}}, the shape of bench/results/ci-<time>.json.
Standard library only: it runs before and after the virtualenv exists.
"""

from __future__ import annotations

import argparse
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

SLOWEST = 15
TEST_PHASES = ("unit", "api", "e2e")


def _test_id(case) -> str:
    """A JUnit testcase's id: tests/<dir>/<file>.py::<name>."""
    return f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name', '')}"


def test_times(junit: Path) -> dict[str, float]:
    """test id (tests/<dir>/<file>::<name>) -> seconds."""
    out: dict[str, float] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        name = _test_id(case)
        out[name] = out.get(name, 0.0) + float(case.get("time") or 0.0)
    return out


def failures(junit: Path) -> dict[str, str]:
    """test id -> the first line of its failure or error, for each test that did not pass."""
    out: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        if bad is not None:
            first = (bad.get("message") or bad.text or "").strip().splitlines()
            out[_test_id(case)] = (first[0] if first else bad.tag)[:200]
    return out


def phase_of(test_id: str) -> str:
    parts = test_id.split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" and parts[1] in TEST_PHASES else "other"


def summary(tests: dict[str, float], before: dict[str, float], total_s: float | None) -> dict:
    phases = {k: v for k, v in before.items() if not k.startswith("stream:")}
    streams = {k.split(":", 1)[1]: round(v, 1) for k, v in before.items() if k.startswith("stream:")}
    for t, s in tests.items():
        p = phase_of(t)
        phases[p] = phases.get(p, 0.0) + s
    res = {"phases": {k: round(v, 1) for k, v in phases.items()}, "tests": {k: round(v, 1) for k, v in tests.items()}}
    if streams:
        res["streams"] = streams
    if total_s is not None:
        res["total_s"] = round(total_s, 1)
    return res


def read_phases(path: Path | None) -> dict[str, float]:
    out: dict[str, float] = {}
    if path is None or not path.exists():
        return out
    for line in path.read_text().splitlines():
        f = line.split()
        if len(f) == 2:
            try:
                out[f[0]] = out.get(f[0], 0.0) + float(f[1])
            except ValueError:
                continue
    return out


def _own_cpu(per: dict[str, float], own: list[str] | None) -> float:
    """The CPU of the test's own clusters' VMs; without a list of them, its largest cluster's."""
    return sum(per.get(c, 0.0) for c in own) if own else max(per.values(), default=0.0)


def read_vm_cpu(path: Path | None) -> tuple[dict[str, dict[str, float]], dict[str, list[str]]]:
    """From tests/e2e/vmcpu.py's lines: {test: {cluster: CPU seconds of its VMs during the test}}, and
    {test: the clusters of its own lab home} where a line names them."""
    cpu: dict[str, dict[str, float]] = {}
    own: dict[str, list[str]] = {}
    if path is None or not path.exists():
        return cpu, own
    for line in path.read_text().splitlines():
        try:
            d = json.loads(line)
            cpu[d["test"]] = {str(k): float(v) for k, v in d["vm_cpu_s"].items()}
            if d.get("own"):
                own[d["test"]] = [str(c) for c in d["own"]]
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return cpu, own


def render(res: dict) -> str:
    lines = ["ci: time per phase: " + ", ".join(f"{k} {v:.0f} s" for k, v in res["phases"].items())
             + (f" (total {res['total_s']:.0f} s)" if "total_s" in res else "")]
    if res.get("streams"):
        lines.append("ci: pytest's streams, in parallel: " + ", ".join(f"{k} {v:.0f} s" for k, v in res["streams"].items()))
    slow = sorted(res["tests"].items(), key=lambda kv: -kv[1])[:SLOWEST]
    lines.append(f"ci: the {len(slow)} slowest tests:")
    lines += [f"ci: {s:8.1f} s  {t}" for t, s in slow]
    if res.get("vm_cpu"):  # each cluster's VMs during the test: the test's own, and the other stream's
        own = res.get("vm_own", {})
        costly = sorted(res["vm_cpu"].items(), key=lambda kv: -_own_cpu(kv[1], own.get(kv[0])))[:SLOWEST]
        lines.append(f"ci: the {len(costly)} tests whose own clusters' VMs used the most CPU (artifacts/test-vm-cpu.jsonl):")
        lines += [f"ci: {_own_cpu(per, own.get(t)):8.1f} s  {t}  ("
                  + ", ".join(f"{c} {v:.0f} s" for c, v in sorted(per.items(), key=lambda kv: -kv[1])[:3]) + ")"
                  for t, per in costly]
    # last, so that the tail of a CI log names what failed
    bad = res.get("failed", {})
    lines.append(f"ci: {len(bad)} test(s) failed" + (":" if bad else ""))
    lines += [f"ci: FAILED {t}: {why}" for t, why in sorted(bad.items())]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("junit", type=Path, nargs="+")
    ap.add_argument("--phases", type=Path, help="lines 'NAME SECONDS' noted before pytest (make test)")
    ap.add_argument("--total-s", type=float)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--vm-cpu", type=Path, help="tests/e2e/vmcpu.py's lines: the CPU of the VMs during each test")
    args = ap.parse_args(argv)
    tests: dict[str, float] = {}
    failed: dict[str, str] = {}
    for junit in args.junit:
        if not junit.exists():
            print(f"ci: no {junit}: pytest did not get to write it", file=sys.stderr)
            return 1
        tests.update(test_times(junit))
        failed.update(failures(junit))
    res = summary(tests, read_phases(args.phases), args.total_s)
    res["failed"] = failed
    vm, own = read_vm_cpu(args.vm_cpu)
    if vm:
        res["vm_cpu"] = vm
        if own:
            res["vm_own"] = own
    print(render(res))
    if args.json:
        args.json.write_text(json.dumps(res, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
