#!/usr/bin/python3
"""Slurm's metrics in Prometheus's text format, for the sagemaker-observability extension
(roles/observability, docs/adr/0017-cluster-extensions.md). Runs on the controller; Prometheus reads
it on localhost.

Built from `sinfo --json` (nodes by state, CPUs allocated and in all, memory in all) and `squeue --json`
(jobs by state, by partition and state, with --per-user by user and state, memory allocated) of Slurm
24.11; the field names were read off recorded output (tests/unit/data/slurm-*.json). Both commands cost
an emulated controller 1-2 s each, so they run at most once per --max-age seconds (a little less than
the scrape interval): every request in between gets the cached text. Python 3's standard library only:
the node has nothing else.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

NODE_STATES = ("idle", "allocated", "mixed", "down", "drain", "other")
JOB_STATES = ("running", "pending")
COMMAND_TIMEOUT_S = 60


def node_state(flags: list[str]) -> str:
    """One of NODE_STATES for Slurm's state flags (`["IDLE", "DRAIN"]` is drain, `["DOWN",
    "NOT_RESPONDING"]` down, a base state with no flag that takes it out of service is itself)."""
    flags = [str(f).upper() for f in flags or ()]
    if "DOWN" in flags:
        return "down"
    if "DRAIN" in flags or "DRAINING" in flags or "DRAINED" in flags:
        return "drain"
    base = flags[0].lower() if flags else "other"
    return base if base in ("idle", "allocated", "mixed") else "other"


def _number(v) -> int:
    """Slurm's numbers: a plain one, or `{"set": true, "infinite": false, "number": N}`."""
    if isinstance(v, dict):
        return int(v.get("number") or 0) if v.get("set", True) and not v.get("infinite") else 0
    return int(v or 0)


def parse_sinfo(doc: dict) -> tuple[dict[str, str], dict, int, list[str]]:
    """(node -> state, cpus {allocated, total}, memory MiB in all, partitions) from `sinfo --json`.
    A line is one partition's nodes of one state: a node in two partitions is in two lines and counted
    once. A line's CPUs are sums over its nodes; its memory is the nodes' least and most (exact when
    they are equal: a lab group is one instance type). Its `memory.allocated` is not a sum (two nodes
    with 576 and 100 MiB allocated showed 100): the jobs' allocations say that (parse_squeue)."""
    states: dict[str, str] = {}
    cpus = {"allocated": 0, "total": 0}
    mem_total = 0
    partitions: list[str] = []
    for line in doc.get("sinfo") or ():
        part = ((line.get("partition") or {}).get("name")) or ""
        if part and part not in partitions:
            partitions.append(part)
        names = list((line.get("nodes") or {}).get("nodes") or ())
        new = [n for n in names if n not in states]
        if not new:
            continue
        for n in new:
            states[n] = node_state((line.get("node") or {}).get("state") or ())
        share = len(new) / len(names)  # a line some of whose nodes another partition counted
        c, m = line.get("cpus") or {}, line.get("memory") or {}
        cpus["allocated"] += round(_number(c.get("allocated")) * share)
        cpus["total"] += round(_number(c.get("total")) * share)
        mem_total += (_number(m.get("minimum")) + _number(m.get("maximum"))) * len(new) // 2
    return states, cpus, mem_total, partitions


HOLDING = ("running", "completing", "suspended")  # job states that hold memory on their nodes


def parse_squeue(doc: dict) -> list[dict]:
    """[{state, partitions, user, memory_mib}] of every job `squeue --json` lists (state lower-case:
    running, pending, completing, ...; a pending job may wait in several partitions; memory_mib: what
    its allocation holds on all its nodes, 0 unless it holds any)."""
    out = []
    for j in doc.get("jobs") or ():
        flags = j.get("job_state") or ["UNKNOWN"]
        state = str(flags[0] if isinstance(flags, list) else flags).lower()
        parts = [p for p in str(j.get("partition") or "").split(",") if p]
        held = 0
        if state in HOLDING:
            for a in ((j.get("job_resources") or {}).get("nodes") or {}).get("allocation") or ():
                held += _number((a.get("memory") or {}).get("allocated"))
        out.append({"state": state, "partitions": parts, "user": str(j.get("user_name") or j.get("user_id") or ""),
                    "memory_mib": held})
    return out


def summary(states: dict[str, str], cpus: dict, mem_total: int, partitions: list[str], jobs: list[dict],
            per_user: bool) -> dict:
    """The Slurm part of the extension's metrics sample (docs/adr/0017's shape)."""
    nodes = dict.fromkeys(NODE_STATES, 0)
    for s in states.values():
        nodes[s] += 1
    counts = dict.fromkeys(JOB_STATES, 0)
    parts = {p: dict.fromkeys(JOB_STATES, 0) for p in partitions}
    users: dict[str, dict[str, int]] = {}
    for j in jobs:
        counts[j["state"]] = counts.get(j["state"], 0) + 1
        if j["state"] not in JOB_STATES:
            continue
        for p in j["partitions"]:
            parts.setdefault(p, dict.fromkeys(JOB_STATES, 0))[j["state"]] += 1
        if j["user"]:
            users.setdefault(j["user"], dict.fromkeys(JOB_STATES, 0))[j["state"]] += 1
    mem = {"allocated": sum(j.get("memory_mib", 0) for j in jobs), "total": mem_total}
    out = {"nodes": nodes, "jobs": counts, "cpus": dict(cpus), "memory_mib": mem, "partitions": parts}
    if per_user:
        out["users"] = users
    return out


def _label(v: str) -> str:
    return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _value(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else repr(float(v))


def render(s: dict | None, *, ok: bool, seconds: float, updated: float) -> str:
    """Prometheus's text exposition format of a summary (None: Slurm did not answer)."""
    out: list[str] = []

    def family(name: str, help_: str, samples: list[tuple[dict, float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} gauge")
        for labels, v in samples:
            inner = ",".join(f'{k}="{_label(x)}"' for k, x in labels.items())
            out.append(f"{name}{{{inner}}} {_value(v)}" if inner else f"{name} {_value(v)}")

    family("slurm_exporter_up", "1 when the last sinfo and squeue answered", [({}, 1 if ok else 0)])
    family("slurm_exporter_refresh_seconds", "how long the last sinfo and squeue took", [({}, round(seconds, 3))])
    family("slurm_exporter_refresh_timestamp_seconds", "when Slurm was last asked", [({}, round(updated, 3))])
    if s is not None:
        family("slurm_nodes", "compute nodes by Slurm state", [({"state": k}, v) for k, v in s["nodes"].items()])
        family("slurm_jobs", "jobs by state", [({"state": k}, v) for k, v in sorted(s["jobs"].items())])
        family("slurm_partition_jobs", "running and pending jobs by partition",
               [({"partition": p, "state": k}, v) for p, c in sorted(s["partitions"].items()) for k, v in c.items()])
        family("slurm_cpus_allocated", "CPUs allocated to jobs", [({}, s["cpus"]["allocated"])])
        family("slurm_cpus_total", "CPUs of the compute nodes", [({}, s["cpus"]["total"])])
        family("slurm_memory_allocated_bytes", "memory allocated to jobs",
               [({}, s["memory_mib"]["allocated"] * 1048576)])
        family("slurm_memory_total_bytes", "memory Slurm may schedule on the compute nodes",
               [({}, s["memory_mib"]["total"] * 1048576)])
        if "users" in s:
            family("slurm_user_jobs", "running and pending jobs by user",
                   [({"user": u, "state": k}, v) for u, c in sorted(s["users"].items()) for k, v in c.items()])
    return "\n".join(out) + "\n"


def _json_of(argv: list[str]) -> dict:
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=COMMAND_TIMEOUT_S)
    if p.returncode != 0:
        said = (p.stderr or p.stdout).strip().splitlines()
        raise RuntimeError(f"{argv[0]} exit {p.returncode}: {said[-1] if said else ''}")
    return json.loads(p.stdout)


class Cache:
    """The rendered text, made again when it is older than `max_age` seconds (one refresh at a time:
    a request that comes during one waits for it and gets its text)."""

    def __init__(self, max_age: float, per_user: bool, ask=_json_of, clock=time.monotonic):
        self.max_age, self.per_user, self.ask, self.clock = max_age, per_user, ask, clock
        self.text: str | None = None
        self.made = 0.0
        self.refreshes = 0
        self._lock = threading.Lock()

    def get(self) -> str:
        with self._lock:
            if self.text is None or self.clock() - self.made >= self.max_age:
                self.text = self._refresh()
                self.made = self.clock()
            return self.text

    def _refresh(self) -> str:
        self.refreshes += 1
        t0 = time.monotonic()
        try:
            states, cpus, mem_total, parts = parse_sinfo(self.ask(["sinfo", "--json"]))
            jobs = parse_squeue(self.ask(["squeue", "--json"]))
            s, ok = summary(states, cpus, mem_total, parts, jobs, self.per_user), True
        except (OSError, ValueError, RuntimeError, subprocess.SubprocessError) as e:
            print(f"slurm_exporter: {e}", file=sys.stderr, flush=True)
            s, ok = None, False
        return render(s, ok=ok, seconds=time.monotonic() - t0, updated=time.time())


def handler_for(cache: Cache):
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path.split("?")[0] not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = cache.get().encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # one line per scrape would fill the journal
            pass

    return Handler


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", default="127.0.0.1:9102", help="ADDRESS:PORT")
    ap.add_argument("--max-age", type=float, default=55, help="seconds a reading of Slurm is served again")
    ap.add_argument("--per-user", action="store_true", help="jobs by user too (slurmMetrics level ADVANCED)")
    a = ap.parse_args(argv)
    host, _, port = a.listen.rpartition(":")
    server = HTTPServer((host or "127.0.0.1", int(port)), handler_for(Cache(a.max_age, a.per_user)))
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
