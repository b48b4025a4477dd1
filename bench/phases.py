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

Naive (bench/naive.py; from the clock, libvirt and Ansible's events):
  launch     start -> the node's libvirt domain is defined
  boot       domain defined -> the VM answers ssh
  configure  the host's first Ansible task -> its last task before join.yml's plays
  join       that -> join.yml's wait task saw the node idle in sinfo (compute nodes only)
"""

from __future__ import annotations

import datetime as dt
import statistics

PHASES = ("launch", "boot", "configure", "join")

# Event descriptions written by lab/engine/engine.py
JOINED = "joined Slurm with one reconfigure"
LEFT = "drained and removed from slurm.conf"
READY_SUFFIXES = (" ready", " configured, waiting to join Slurm")

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


def ratios(continuous: dict, naive: dict | None) -> dict:
    """The closing note's numbers. One VM's boot-to-ssh is the controller's in the continuous run
    (it boots alone there); a cluster without one takes the fastest boot."""
    out: dict = {}
    if naive and "time_to_first_job_s" in naive:
        out["time_to_first_job_continuous_over_naive"] = _ratio(continuous.get("time_to_first_job_s"),
                                                                naive.get("time_to_first_job_s"))
        out["time_to_full_size_continuous_over_naive"] = _ratio(continuous.get("time_to_full_size_s"),
                                                                naive.get("time_to_full_size_s"))
    joins = list((continuous.get("join_latency_s") or {}).values())
    one = continuous.get("one_vm_boot_to_ssh_s")
    out["create_join_latency_over_boot_to_ssh"] = _ratio(statistics.mean(joins), one) if joins else None
    so = continuous.get("scale_out") or {}
    out["join_latency_over_boot_to_ssh"] = (_ratio(so["join_latency_s"], so["boot_to_ssh_s"])
                                            if "join_latency_s" in so else out["create_join_latency_over_boot_to_ssh"])
    return out


def one_vm_boot(boot_to_ssh: dict[str, float], types: dict[str, str]) -> float | None:
    ctl = [v for k, v in boot_to_ssh.items() if types.get(k) == "Controller"]
    if ctl:
        return ctl[0]
    return min(boot_to_ssh.values()) if boot_to_ssh else None
