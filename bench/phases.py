"""Per-node phases of a cluster's creation, for bench/cluster_timeline.py (pure: no VMs, no I/O).

A node's phases are {"launch": [start, end], "boot": [...], "configure": [...], "join": [...]} in
seconds from the cluster's create; a phase that was not observed is left out, and gaps between
phases are waits (for other nodes, for the controller, for Ansible's next play).

Continuous (the engine; from its store):
  launch     node planned (its "planned" event) -> launched_at: waits for the controller, for
             capacity, for a retry, then the launch call itself starts
  boot       launched_at -> booted_at: `vagrant up NODE` until the VM answers ssh
  configure  booted_at -> the node's "<type> ready" event (controller, login) or its
             "compute configured, waiting to join Slurm" event (compute)
  join       that event -> joined_at: the batch join (slurm.conf, one reconfigure, slurmd up)

How each VM came up (warm start, docs/adr/0011): the engine's "<node>: VM up" event, with
"(forked from template <key> in N s)" for a fork ("from role template": docs/adr/0022); "<node>: booted cold: <why>" (a Warning) when a
warm node fell back to a cold boot.

Naive (bench/naive.py; from the clock, libvirt and Ansible's events):
  launch     start -> the node's libvirt domain is defined
  boot       domain defined -> the VM answers ssh
  configure  the host's first Ansible task -> its last task before join.yml's plays
  join       that -> join.yml's wait task saw the node idle in sinfo (compute nodes only)
"""

from __future__ import annotations

import datetime as dt
import re
import statistics

PHASES = ("launch", "boot", "configure", "join")

# Event descriptions written by lab/engine/engine.py
JOINED = "joined Slurm with one reconfigure"
LEFT = "drained and removed from slurm.conf"
READY_SUFFIXES = (" ready", " configured, waiting to join Slurm")
VM_UP = re.compile(r"^(?P<node>\S+): VM up(?: \(forked from (?P<role>role )?template (?P<template>\S+) in "
                   r"(?P<seconds>[0-9.]+) s\))?$")
BOOTED_COLD = ": booted cold: "

# What bench/naive.py reads in Ansible's events (names in playbooks/ and roles/)
JOIN_WAIT_TASK = "Wait for the controller to report the node usable"
RECONFIGURE_HANDLER = "Reconfigure slurmctld"


def _seg(phases: dict, name: str, start: float | None, end: float | None, origin: float) -> None:
    if start is None or end is None or end < start:
        return
    phases[name] = [round(start - origin, 1), round(end - origin, 1)]


# ------------------------------------------------------------------------------------ continuous
def ready_times(events, joined_at: dict[str, float | None]) -> dict[str, float]:
    """Per node, when configuring ended: its last ready/configured event, and if the node joined,
    the last one up to joined_at (a retried configure counts once, the one that led to the join).
    A controller's or login node's ready event is written just after its joined_at: 1 s of slack."""
    out: dict[str, float] = {}
    for e in events:
        if not e.node or not e.description.startswith(f"{e.node}: "):
            continue
        if not e.description.endswith(READY_SUFFIXES):
            continue
        j = joined_at.get(e.node)
        if j is not None and e.time > j + 1.0:
            continue
        if e.time >= out.get(e.node, float("-inf")):
            out[e.node] = e.time
    return out


def planned_times(events) -> dict[str, float]:
    out: dict[str, float] = {}
    for e in events:
        if e.node and e.description.startswith(f"node {e.node} planned"):
            out.setdefault(e.node, e.time)
    return out


def continuous_phases(cluster, groups, nodes, events) -> dict[str, dict[str, list[float]]]:
    """Phases of every node from the store's rows (ClusterRow, GroupRows, NodeRows, EventRows)."""
    origin = cluster.created_at
    planned = planned_times(events)
    ready = ready_times(events, {n.name: n.joined_at for n in nodes})
    out: dict[str, dict[str, list[float]]] = {}
    for n in nodes:
        p: dict[str, list[float]] = {}
        _seg(p, "launch", planned.get(n.name, origin), n.launched_at, origin)
        _seg(p, "boot", n.launched_at, n.booted_at, origin)
        r = ready.get(n.name)
        if r is not None and n.booted_at is not None and r >= n.booted_at:
            _seg(p, "configure", n.booted_at, r, origin)
            _seg(p, "join", r, n.joined_at, origin)
        else:  # no configured event (a store older than that event): configure and join in one
            _seg(p, "configure", n.booted_at, n.joined_at, origin)
        out[n.name] = p
    return out


def node_types(groups, nodes) -> dict[str, str]:
    types = {g.name: g.node_type for g in groups}
    return {n.name: types.get(n.grp, "") for n in nodes}


def reconfigures(events) -> int:
    """`scontrol reconfigure` runs of the engine: one per join batch and one per leave batch."""
    return sum(1 for e in events if JOINED in e.description or LEFT in e.description)


def vm_starts(events) -> dict[str, dict]:
    """Per node, how its VM came up: {"start": "Warm", "template": key, "fork_s": N, "at": t} for a fork,
    {"start": "Cold", "at": t} for a boot (`at`: when it answered ssh). A node launched twice keeps its last."""
    out: dict[str, dict] = {}
    for e in events:
        m = VM_UP.match(e.description)
        if not m or (e.node and e.node != m["node"]):
            continue
        d: dict = {"start": "Warm" if m["template"] else "Cold", "at": e.time}
        if m["template"]:
            d.update(template=m["template"], fork_s=float(m["seconds"]), role_template=bool(m["role"]))
        out[m["node"]] = d
    return out


def cold_fallbacks(events) -> dict[str, str]:
    """Nodes meant to be forked that booted cold, with the engine's reason (its last one per node)."""
    return {e.node: e.description.split(BOOTED_COLD, 1)[1] for e in events
            if e.node and e.description.startswith(f"{e.node}{BOOTED_COLD}")}


def _median(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 1) if values else None


def scale_out_summary(nodes, requested_at: float, events) -> dict:
    """A batch of nodes added together at `requested_at` (BatchAddClusterNodes), from their NodeRows
    and the cluster's events. Per node: boot_to_ssh_s (launched_at -> booted_at), join_latency_s
    (booted_at -> joined_at), request_to_running_s (requested_at -> joined_at), request_to_ssh_s
    (requested_at -> its "VM up" event), start (Warm/Cold) and fork_s. For the batch: the medians of
    those, fork_request_to_ssh_s (the median over the forked nodes only), all_running_s (the request ->
    the last node Running; None until every node is), joins (join batches since the request)."""
    starts = vm_starts(events)
    per: dict[str, dict] = {}
    for n in sorted(nodes, key=lambda x: x.name):
        d: dict = {}
        if n.launched_at and n.booted_at:
            d["boot_to_ssh_s"] = round(n.booted_at - n.launched_at, 1)
        if n.booted_at and n.joined_at:
            d["join_latency_s"] = round(n.joined_at - n.booted_at, 1)
        if n.joined_at:
            d["request_to_running_s"] = round(n.joined_at - requested_at, 1)
        s = starts.get(n.name)
        if s:
            d["start"] = s["start"]
            d["request_to_ssh_s"] = round(s["at"] - requested_at, 1)
            if "fork_s" in s:
                d["fork_s"] = s["fork_s"]
        per[n.name] = d
    out: dict = {"nodes": per, "count": len(per)}
    if len(per) == 1:
        out["node"] = next(iter(per))
    for k in ("boot_to_ssh_s", "join_latency_s", "request_to_running_s", "request_to_ssh_s"):
        out[k] = _median(d.get(k) for d in per.values())
    out["forked"] = sum(1 for d in per.values() if d.get("start") == "Warm")
    out["fork_request_to_ssh_s"] = _median(d.get("request_to_ssh_s") for d in per.values() if d.get("start") == "Warm")
    running = [n.joined_at for n in nodes if n.phase == "running" and n.joined_at]
    out["all_running_s"] = round(max(running) - requested_at, 1) if nodes and len(running) == len(nodes) else None
    out["joins"] = sum(1 for e in events if JOINED in e.description and e.time >= requested_at)
    return out


# ------------------------------------------------------------------------------------ naive
def ansible_event(ev: dict, received: float) -> dict:
    """The little bench/naive.py keeps of one ansible-runner event."""
    data = ev.get("event_data") or {}
    t = received
    created = ev.get("created")
    if created:
        try:
            c = dt.datetime.fromisoformat(str(created).replace("Z", "+00:00"))
            t = (c if c.tzinfo else c.replace(tzinfo=dt.timezone.utc)).timestamp()
        except ValueError:
            pass
    res = data.get("res") if isinstance(data.get("res"), dict) else {}
    return {"t": t, "event": ev.get("event", ""), "host": data.get("host"), "play": data.get("play"),
            "task": data.get("task"), "changed": bool(res.get("changed"))}


def _host_result(e: dict) -> bool:
    ev = e["event"]
    return (ev.startswith("runner_on_") or ev.startswith("runner_item_on_")) and ev != "runner_on_start"


def naive_phases(origin: float, types: dict[str, str], defined: dict[str, float], ssh: dict[str, float],
                 events: list[dict], join_plays: set[str], ansible_start: float | None,
                 ansible_end: float | None) -> dict[str, dict[str, list[float]]]:
    """Phases of every node of the naive run. `events` are ansible_event() records of the one
    site.yml run; `join_plays` the play names of join.yml."""
    out: dict[str, dict[str, list[float]]] = {}
    for node, typ in types.items():
        mine = [e for e in events if e["host"] == node]
        setup = [e for e in mine if e["play"] not in join_plays]
        joining = [e for e in mine if e["play"] in join_plays]
        starts = [e["t"] for e in setup if e["event"] == "runner_on_start"]
        ends = [e["t"] for e in setup if _host_result(e)]
        cfg_start = min(starts) if starts else ansible_start
        cfg_end = max(ends) if ends else ansible_end
        p: dict[str, list[float]] = {}
        if node in defined:
            _seg(p, "launch", origin, defined[node], origin)
            _seg(p, "boot", defined[node], ssh.get(node), origin)
        else:
            _seg(p, "boot", origin, ssh.get(node), origin)
        _seg(p, "configure", cfg_start, cfg_end, origin)
        if typ == "Compute":
            waited = [e["t"] for e in joining if e["event"] == "runner_on_ok" and e["task"] == JOIN_WAIT_TASK]
            done = [e["t"] for e in joining if _host_result(e)]
            joined = min(waited) if waited else (max(done) if done else ansible_end)
            _seg(p, "join", cfg_end, joined, origin)
        out[node] = p
    return out


def ansible_reconfigures(events: list[dict]) -> int:
    """`scontrol reconfigure` runs in one Ansible run (the handler's changed results)."""
    return sum(1 for e in events if e["event"] == "runner_on_ok" and e["task"] == RECONFIGURE_HANDLER and e["changed"])


# ------------------------------------------------------------------------------------ ratios
def _ratio(a, b) -> float | None:
    return round(a / b, 2) if a is not None and b else None


WAYS = ("warm", "cold", "naive")  # bench/cluster_timeline.py's ways; warm and cold are the engine's


def measured(way: dict | None) -> bool:
    return isinstance(way, dict) and way.get("time_to_first_job_s") is not None


def cold_boot_to_ssh(cold: dict | None) -> float | None:
    """A cold VM's boot-to-ssh in this run: the mean over the cold way's compute nodes of the create."""
    if not isinstance(cold, dict):
        return None
    types = cold.get("node_types") or {}
    boots = [v for k, v in (cold.get("boot_to_ssh_s") or {}).items() if types.get(k) == "Compute"]
    return round(statistics.mean(boots), 1) if boots else None


def join_ratios(continuous: dict) -> dict:
    """One engine way's own ratios: the create's mean join latency (answers ssh -> Running) over its
    controller's boot-to-ssh, and the scale-out's join latency over its boot-to-ssh (medians of the
    batch; the create's ratio when there was no scale-out)."""
    joins = list((continuous.get("join_latency_s") or {}).values())
    one = continuous.get("one_vm_boot_to_ssh_s")
    create = _ratio(statistics.mean(joins), one) if joins else None
    so = continuous.get("scale_out") or {}
    scale = _ratio(so.get("join_latency_s"), so.get("boot_to_ssh_s")) if so.get("join_latency_s") is not None else create
    return {"create_join_latency_over_boot_to_ssh": create, "join_latency_over_boot_to_ssh": scale}


def ratios(result: dict) -> dict:
    """The closing note's numbers, from a result with the ways "warm", "cold", "naive" (each a dict, an
    {"error": ...} or None). Left out when a side is missing:
      time_to_{first_job,full_size}_{warm_over_naive,cold_over_naive,warm_over_cold}
      cold_boot_to_ssh_s          a cold VM's boot-to-ssh (cold_boot_to_ssh)
      warm_scale_out_request_to_running_over_cold_boot_to_ssh
                                  the warm scale-out's request -> Running in Slurm (median) over it
      warm_fork_request_to_ssh_over_cold_boot_to_ssh
                                  a fork's request -> answers ssh (median of the warm scale-out's forks) over it
      scale_out_all_running_warm_over_cold
      warm_* / cold_*             join_ratios() of each engine way"""
    ways = {k: result.get(k) if measured(result.get(k)) else None for k in WAYS}
    out: dict = {}
    for a, b in (("warm", "naive"), ("cold", "naive"), ("warm", "cold")):
        if ways[a] and ways[b]:
            for m in ("time_to_first_job", "time_to_full_size"):
                out[f"{m}_{a}_over_{b}"] = _ratio(ways[a].get(f"{m}_s"), ways[b].get(f"{m}_s"))
    boot = cold_boot_to_ssh(ways["cold"])
    if boot is not None:
        out["cold_boot_to_ssh_s"] = boot
    warm_so = (ways["warm"] or {}).get("scale_out") or {}
    cold_so = (ways["cold"] or {}).get("scale_out") or {}
    if boot and warm_so.get("request_to_running_s") is not None:
        out["warm_scale_out_request_to_running_over_cold_boot_to_ssh"] = _ratio(warm_so["request_to_running_s"], boot)
    if boot and warm_so.get("fork_request_to_ssh_s") is not None:
        out["warm_fork_request_to_ssh_over_cold_boot_to_ssh"] = _ratio(warm_so["fork_request_to_ssh_s"], boot)
    if warm_so.get("all_running_s") is not None and cold_so.get("all_running_s"):
        out["scale_out_all_running_warm_over_cold"] = _ratio(warm_so["all_running_s"], cold_so["all_running_s"])
    for k in ("warm", "cold"):
        if ways[k]:
            out.update({f"{k}_{name}": v for name, v in join_ratios(ways[k]).items() if v is not None})
    return out


def one_vm_boot(boot_to_ssh: dict[str, float], types: dict[str, str]) -> float | None:
    ctl = [v for k, v in boot_to_ssh.items() if types.get(k) == "Controller"]
    if ctl:
        return ctl[0]
    return min(boot_to_ssh.values()) if boot_to_ssh else None
