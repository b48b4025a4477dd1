"""Where a cluster's configuration time goes: every Ansible run the engine made for a cluster, per host,
from ansible-runner's job events (issue 42: "show where the time goes").

For each run under `<lab home>/clusters/NAME/ansible/<time>-<seq>-<playbook>/` (what lab/configure/runner.py
keeps):
  playbook, started (its first task's start, UTC), seconds (first task's start -> last task's end)
  hosts{NODE}  tasks (how many ran, ok or changed or failed), skipped, remote_s (the tasks' own seconds,
               summed), slowest [[seconds, task], ...] (the 8 slowest)
A task's seconds are Ansible's own `duration` of that task on that host: for a raw task, the ssh round
trip and the command under emulation; for a local one (assert, set_fact, template lookups), the
controller's Python.

    .venv/bin/python bench/configure_times.py NAME [--home DIR] [--results DIR]

Output: JSON on stdout (and bench/results/configure_times-<time>.json with --results).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

SLOWEST = 8
RAN = ("runner_on_ok", "runner_on_failed")


def summarise(events: list[dict]) -> dict:
    """One run's job events -> {started, seconds, hosts: {host: {tasks, skipped, remote_s, slowest}}}."""
    hosts: dict[str, dict] = {}
    starts, ends = [], []
    for ev in events:
        kind = ev.get("event")
        data = ev.get("event_data") or {}
        host = data.get("host")
        if kind not in (*RAN, "runner_on_skipped") or not host:
            continue
        h = hosts.setdefault(host, {"tasks": 0, "skipped": 0, "remote_s": 0.0, "slowest": []})
        if kind == "runner_on_skipped":
            h["skipped"] += 1
            continue
        seconds = float(data.get("duration") or 0.0)
        h["tasks"] += 1
        h["remote_s"] += seconds
        h["slowest"].append([round(seconds, 2), data.get("task", "")])
        if data.get("start"):
            starts.append(data["start"])
        if data.get("end"):
            ends.append(data["end"])
    for h in hosts.values():
        h["remote_s"] = round(h["remote_s"], 1)
        h["slowest"] = sorted(h["slowest"], key=lambda x: -x[0])[:SLOWEST]
    out: dict = {"hosts": hosts}
    if starts and ends:
        out["started"] = min(starts)
        out["seconds"] = round(_iso(max(ends)) - _iso(min(starts)), 1)
    return out


def _iso(text: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(text).timestamp()


def read_run(run_dir: Path) -> dict:
    events = []
    for f in sorted(run_dir.glob("artifacts/*/job_events/*.json")):
        try:
            events.append(json.loads(f.read_text()))
        except (OSError, ValueError):
            continue  # a run killed while writing one event
    playbook = run_dir.name.split("-", 3)[-1]
    return {"playbook": f"{playbook}.yml", "run": run_dir.name, **summarise(events)}


def cluster_runs(cluster_dir: Path) -> list[dict]:
    """Every kept run of a cluster, oldest first."""
    root = cluster_dir / "ansible"
    return [read_run(d) for d in sorted(root.iterdir()) if d.is_dir()] if root.is_dir() else []


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("name", help="the cluster")
    ap.add_argument("--home", type=Path, help="the lab home (default: $SLURMLAB_HOME or the platform's)")
    ap.add_argument("--results", type=Path, help="also write the JSON into this folder")
    args = ap.parse_args(argv)
    if args.home is None:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from lab import paths

        args.home = paths.home()
    runs = cluster_runs(args.home / "clusters" / args.name)
    if not runs:
        sys.exit(f"configure_times: no Ansible runs kept for {args.name} under {args.home / 'clusters'}")
    res = {"cluster": args.name, "runs": runs}
    text = json.dumps(res, indent=1)
    if args.results:
        args.results.mkdir(parents=True, exist_ok=True)
        (args.results / f"configure_times-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
