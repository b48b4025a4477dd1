"""The sim provider's metrics sample (docs/adr/0017-cluster-extensions.md's shape, `"simulated": true`):
plausible numbers made from the cluster's nodes as the store has them (each compute group's CPUs,
memory and partitions) and the simulated Slurm's states, varied from one probe to the next by a seeded
generator (same seed, cluster and probe number: the same sample)."""

from __future__ import annotations

import random

from lab.configure.base import Extension
from lab.spec.catalog import slurm_cpus

SLURM_STATES = ("idle", "allocated", "mixed", "down", "drain", "other")


def _state(broken: tuple[str, str] | None, r: random.Random) -> str:
    if broken is not None:
        s = broken[0].rstrip("*~#!%$@^-").lower()
        return "down" if s.startswith("down") else "drain" if s.startswith("drain") else s if s in SLURM_STATES else "other"
    return r.choices(("idle", "allocated", "mixed"), (4, 3, 2))[0]


def sample(cluster: str, groups, nodes, ext: Extension, unhealthy: dict[str, str], in_slurm: set[str],
           broken: dict[str, tuple[str, str]], now: float, probe: int, seed: int = 0) -> dict:
    """One sample of the cluster: Slurm's nodes, jobs, CPUs and memory, per partition (and per user
    when slurmMetrics.level is ADVANCED); every member's load and memory, none for one that does not
    answer (`unhealthy`)."""
    r = random.Random(f"{seed}/{cluster}/metrics/{probe}")
    by_group = {g.name: g for g in groups}
    members = set(ext.members)
    states = dict.fromkeys(SLURM_STATES, 0)
    jobs = {"running": 0, "pending": 0}
    cpus = {"allocated": 0, "total": 0}
    mem = {"allocated": 0, "total": 0}
    parts: dict[str, dict[str, int]] = {}
    for n in sorted(nodes, key=lambda n: n.name):
        g = by_group.get(n.grp)
        if g is None or g.node_type != "Compute" or n.name not in in_slurm:
            continue
        st = _state(broken.get(n.name), r)
        c = slurm_cpus(g.cpus)  # what slurm.conf gives the node
        if st == "mixed" and c < 2:
            st = "allocated"  # Slurm's mixed is some CPUs allocated: a 1-CPU node has none or all
        states[st] += 1
        share = {"allocated": 1.0, "mixed": 0.5}.get(st, 0.0)
        cpus["total"] += c
        mem["total"] += g.memory_mib
        cpus["allocated"] += max(1, c // 2) if st == "mixed" else int(c * share)
        mem["allocated"] += int(g.memory_mib * share * 0.6)
        running = (st == "allocated") + (st == "mixed")
        jobs["running"] += running
        for p in g.partitions:
            parts.setdefault(p, {"running": 0, "pending": 0})["running"] += running
    jobs["pending"] = r.randint(0, 3) if states["allocated"] + states["mixed"] else 0
    for i in range(jobs["pending"]):
        if parts:
            parts[sorted(parts)[i % len(parts)]]["pending"] += 1
    slurm = {"nodes": states, "jobs": jobs, "cpus": cpus, "memory_mib": mem, "partitions": parts}
    if ((ext.config.get("metricsProvider") or {}).get("slurmMetrics") or {}).get("level") == "ADVANCED":
        users: dict[str, dict[str, int]] = {}
        for kind in ("running", "pending"):
            for _ in range(jobs[kind]):
                users.setdefault(r.choice(("user01", "user02", "user03")), {"running": 0, "pending": 0})[kind] += 1
        slurm["users"] = users
    out_nodes = {}
    for n in sorted(nodes, key=lambda n: n.name):
        if n.name not in members:
            continue
        if n.name in unhealthy:
            out_nodes[n.name] = {"up": False}
            continue
        total = by_group[n.grp].memory_mib if n.grp in by_group else 1024
        load = r.uniform(0.0, 0.3) + (1.0 if states and n.name in in_slurm and r.random() < 0.4 else 0.0)
        out_nodes[n.name] = {"up": True, "load1": round(load, 2), "mem_used_mib": int(total * r.uniform(0.2, 0.6)),
                             "mem_total_mib": total}
    return {"time": now, "simulated": True, "slurm": slurm, "nodes": out_nodes}
