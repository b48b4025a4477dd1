"""Benchmark: how fast a real cluster becomes useful, built three ways: warm, cold and naive.

Real VMs; run as root on a host set up by `make up` (libvirtd, the box and its warm-start templates:
`slurmlab box build`), with no other VMs running (they share the CPU). Everything happens in a
private $SLURMLAB_HOME (a new /tmp/slurmlab-bench-*, kept afterwards for its logs and the spec
copies), one way after the other, in the order of --ways, for SPEC (default examples/small.yaml);
the cluster's name is the spec's, so no other cluster of that name may exist in libvirt (the naive
way refuses to start then):

1. warm: `slurmlab create-cluster` and the engine (controller first, then login and compute in
   parallel; InService early; compute nodes join in batches, one reconfigure each), on a copy of
   SPEC with `Lab: {Start: Warm}` (its other Lab keys kept, relative lifecycle folders made
   absolute): every node is forked from its shape's saved template (docs/adr/0011). From the
   engine's store, its events and the clock, in seconds from create:
     time_to_inservice_s   -> ClusterStatus InService
     time_to_first_job_s   -> the first `srun -N1 hostname` that succeeds on the login node (polled)
     time_to_full_size_s   -> every group at its target
     boot_to_ssh_s         per node: launch -> the VM answers ssh (for a fork: fork, identity, ssh)
     one_vm_boot_to_ssh_s  the controller's boot_to_ssh (it boots alone)
     join_latency_s        per compute node: the VM answers ssh -> Running in Slurm
     reconfigures          join batches (one `scontrol reconfigure` each)
     phases                per node: launch, boot, configure, join (bench/phases.py defines them)
     starts                per node: Warm (forked: template, fork_s) or Cold, from its "VM up" event
     forked, cold_fallbacks  how many were forked; the nodes that booted cold instead, with the reason
     template_check        shapes of SPEC with no template before the run (a fork then builds it,
                           and its time is counted), or a failed build (those nodes boot cold)
     controller_boot_to_ssh_s, controller_ssh_to_serving_s   the controller (it gates InService)
     scale_out             --scale-out N compute nodes added at once to the idle cluster
                           (batch-add-cluster-nodes --count N), N capped to what the host's memory
                           holds (lab.providers.placement.room: MemAvailable-like free memory minus
                           lab.host.registry.HOST_RESERVE_MIB; the cap and why in `capped`). Per node
                           and as medians: boot_to_ssh_s, join_latency_s, request_to_running_s
                           (request -> Running in Slurm), request_to_ssh_s (request -> its "VM up"
                           event), start; fork_request_to_ssh_s (the forks' median); all_running_s
                           (request -> every node of the batch Running); joins
   then `slurmlab delete-cluster` and `slurmlab engine stop`. $SLURMLAB_CONTROLLER_NICE=0 turns the
   controller's CPU priority off (lab/providers/priority.py), to compare.
2. cold: the same with `Lab: {Start: Cold}`: every VM booted by `vagrant up` (the same numbers).
3. naive (bench/naive.py): the same spec with every VM in one `vagrant up`, one Ansible run of
   playbooks/site.yml over all nodes, then the first job; then every VM, volume and the network
   removed. In seconds from its first step: time_to_first_job_s, time_to_full_size_s (the Ansible
   run ended: every node configured and joined), setup_s, vagrant_up_s, ansible_s, boot_to_ssh_s
   (`vagrant up` started -> the VM answers ssh), join_latency_s (answers ssh -> idle in Slurm),
   reconfigures (0 expected), phases.
4. ratios (bench/phases.py ratios()): time to first job and to full size, warm / naive, cold / naive,
   warm / cold; a cold VM's boot-to-ssh in this run (the cold way's compute nodes, mean:
   cold_boot_to_ssh_s), and over it the warm scale-out's request -> Running (median) and a fork's
   request -> ssh (median of the warm scale-out's forks); the scale-out's all Running, warm / cold;
   per engine way, its join latency over its boot-to-ssh (warm_/cold_join_latency_over_boot_to_ssh,
   ..._create_join_latency_over_boot_to_ssh).

Output: the JSON on stdout and in bench/results/cluster_timeline-<time>.json (a key per way: "warm",
"cold", "naive", None when not measured; results made before the warm/cold split have "continuous" instead of
"warm" and "cold"), its picture in bench/results/cluster_timeline-<time>.png (bench/timeline_png.py:
a bar per node and phase, a block of bars per way, one time axis), progress and a closing note with
the ratios on stderr. A way that fails leaves its error under its key and the next way runs; the
exit status is then 1 (130 on Ctrl-C, which stops after the running way's teardown). SIGTERM and
SIGHUP act as Ctrl-C: the running way's cluster is removed before the script exits.

    .venv/bin/python bench/cluster_timeline.py [SPEC] [--ways warm,cold,naive] [--scale-out N] [--skip-naive]
                                               [--results DIR]
    .venv/bin/python bench/cluster_timeline.py --png-from bench/results/cluster_timeline-<time>.json
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

WAYS = ("warm", "cold", "naive")
START = {"warm": "Warm", "cold": "Cold"}  # the engine's ways and their Lab.Start


def say(msg: str) -> None:
    print(f"cluster_timeline: {msg}", file=sys.stderr, flush=True)


def sl(*args, check=True, timeout=3600):
    p = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd=REPO)
    if check and p.returncode != 0:
        raise SystemExit(f"slurmlab {' '.join(args)} failed:\n{p.stdout}\n{p.stderr[-3000:]}")
    return p


def _rel(p: Path) -> str:
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(p)


def parse_ways(text: str, skip_naive: bool = False) -> list[str]:
    """--ways as a list in the order given (repeats dropped); --skip-naive drops naive."""
    ways: list[str] = []
    for w in (x.strip().lower() for x in text.split(",")):
        if not w:
            continue
        if w not in WAYS:
            raise ValueError(f"unknown way {w!r}: the ways are {', '.join(WAYS)}")
        if w not in ways:
            ways.append(w)
    if skip_naive and "naive" in ways:
        ways.remove("naive")
    if not ways:
        raise ValueError("no way left to measure")
    return ways


def spec_with_start(spec: Path, start: str, dest: Path) -> Path:
    """Write to `dest` a copy of `spec` with `Lab: {Start: start}` merged into its Lab key (its other
    Lab keys kept) and its lifecycle folders absolute (the copy lives elsewhere: a relative
    SourceS3Uri would resolve against the copy's folder)."""
    from lab.spec import load_spec

    if start not in START.values():
        raise ValueError(f"Lab.Start is Warm or Cold, not {start!r}")
    data = yaml.safe_load(spec.read_text())
    resolved = load_spec(spec)  # SourceS3Uri stored absolute (s3:// kept as given)
    for raw, g in zip(data.get("InstanceGroups") or [], resolved.InstanceGroups):
        lc = raw.get("LifeCycleConfig") if isinstance(raw, dict) else None
        if isinstance(lc, dict) and g.LifeCycleConfig is not None and g.LifeCycleConfig.SourceS3Uri:
            lc["SourceS3Uri"] = g.LifeCycleConfig.SourceS3Uri
    lab = data.get("Lab") if isinstance(data.get("Lab"), dict) else {}
    data["Lab"] = {**lab, "Start": start}
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_text(f"# {spec} with Lab.Start {start} (bench/cluster_timeline.py)\n"
                    + yaml.safe_dump(data, sort_keys=False))
    return dest


def cap_scale_out(requested: int, room_mib: int, node_mib: int, room_cpus: int | None = None,
                  node_cpus: int = 1) -> tuple[int, str | None]:
    """How many of `requested` compute nodes the host holds now: (count, why it is less, or None).
    `room_mib` is the memory free for VMs (the host's reserve already taken off), `room_cpus` the
    vCPUs the lab may still start (None: no limit)."""
    fits = max(room_mib, 0) // node_mib if node_mib > 0 else requested
    why = f"the host has {max(room_mib, 0)} MiB free for VMs and a compute node takes {node_mib} MiB"
    if room_cpus is not None and node_cpus > 0 and max(room_cpus, 0) // node_cpus < fits:
        fits = max(room_cpus, 0) // node_cpus
        why = f"the lab may start {max(room_cpus, 0)} more vCPUs and a compute node takes {node_cpus}"
    n = max(0, min(requested, fits))
    return n, (None if n == requested else f"--scale-out {requested} capped to {n}: {why}")


def host_room(cluster: str | None = None) -> tuple[int, int | None, str]:
    """(MiB free for VMs, vCPUs the lab may still start or None, where it was read): the engine's own
    measure (lab.providers.placement.room: lab.host.registry.available_mib minus HOST_RESERVE_MIB, and
    the host's lab limits), else MemAvailable minus HOST_RESERVE_MIB."""
    from lab.host import registry
    from lab.osutil import meminfo_mib
    from lab.providers import placement

    try:
        host = placement.host_of(cluster) if cluster else registry.get(registry.LOCAL)
        room = placement.room(host)
        if room.reachable:
            return room.memory_mib, room.cpus, f"libvirt on host {room.host}"
    except Exception:  # noqa: BLE001 - libvirtd not up yet: the kernel's count
        pass
    return meminfo_mib() - registry.HOST_RESERVE_MIB, None, "/proc/meminfo MemAvailable"


def compute_shape(spec: Path) -> tuple[int, int, int]:
    """(MiB, vCPUs) of one node of the spec's first compute group, and the spec's total VM MiB."""
    from lab.control import clusters
    from lab.spec import load_spec

    s = load_spec(spec)
    _, groups = clusters._group_rows(s.name, s)
    g = next(g for g in groups if g.node_type == "Compute")
    return g.memory_mib, g.cpus, sum(x.memory_mib * x.target_count for x in groups)


def template_check(spec: Path) -> list[str]:
    """What keeps the warm way from forking every node of `spec` from a ready template: a box that
    cannot be forked, a shape with no template yet (the first fork builds it, inside the measured
    time) or whose build failed (its nodes boot cold). Empty: every shape has its template."""
    from lab import box as boxmod
    from lab.control import clusters
    from lab.host import kvm
    from lab.providers import templates
    from lab.providers.warm import box_supports
    from lab.spec import load_spec

    s = load_spec(spec)
    box = (s.Lab.Box if s.Lab else None) or boxmod.DEFAULT_BOX
    why = box_supports(box)
    if why:
        return [why]
    _, groups = clusters._group_rows(s.name, s)
    driver = kvm.detect().driver
    out = []
    for shape in sorted({templates.Shape(g.cpus, g.memory_mib) for g in groups}, key=str):
        failed = templates.failure(box, shape, driver)
        if failed:
            out.append(f"{shape}: no template to fork, its nodes boot cold: {failed} "
                       "(a failed build is retried after `slurmlab box templates --rebuild`)")
        elif templates.find(box, shape, driver) is None:
            out.append(f"{shape}: no template yet: the first fork builds it, inside the measured time; "
                       "`slurmlab box build` makes it beforehand")
    return out


def continuous(spec: Path, way: str = "warm", scale_n: int = 1) -> dict:
    """Create the cluster through the CLI and the engine, measure, scale out, delete it."""
    from bench import phases as ph
    from bench.naive import srun_once
    from lab.engine import daemon, slots
    from lab.spec import load_spec

    name = load_spec(spec).name
    st = daemon.store()
    first_job = None
    t_start = time.time()
    seen: tuple = ()
    try:
        say(f"{way}: create-cluster {name} ({_rel(spec)})")
        sl("create-cluster", "--spec", str(spec))
        while True:
            c = st.cluster(name)
            if c.status == "Failed":
                raise SystemExit(f"cluster failed: {c.failure_message}")
            groups = {g.name: g for g in st.groups(name)}
            nodes = st.nodes(name)
            running = [n for n in nodes if n.phase == "running"]
            now = (c.status, len(running), bool(c.full_size_at))
            if now != seen:
                seen = now
                say(f"{way}: [{time.time() - c.created_at:6.1f}s] {c.status}, {len(running)}/{len(nodes)} nodes "
                    f"running{', full size' if c.full_size_at else ''}")
            if first_job is None and c.status == "InService" and any(groups[n.grp].node_type == "Compute" for n in running):
                entry = next((n for n in running if groups[n.grp].node_type == "Login"), None) or \
                    next(n for n in running if groups[n.grp].node_type == "Controller")
                ok, _ = srun_once(name, entry.address)
                if ok:
                    first_job = time.time()
                    say(f"{way}: first job ran at {first_job - c.created_at:.1f} s")
            if c.full_size_at and first_job is not None:
                break
            if time.time() - t_start > 3600:
                raise SystemExit("timed out")
            time.sleep(1)
        c, groups, nodes = st.snapshot(name)
        events = st.events(name, limit=100000)
        gtype = {g.name: g.node_type for g in groups}
        types = ph.node_types(groups, nodes)
        boot = {n.name: n.booted_at - n.launched_at for n in nodes if n.booted_at and n.launched_at}
        join = {n.name: n.joined_at - n.booted_at for n in nodes
                if gtype[n.grp] == "Compute" and n.joined_at and n.booted_at}
        joins = [e.description for e in events if ph.JOINED in e.description]
        starts = {k: {f: v for f, v in d.items() if f != "at"} for k, d in sorted(ph.vm_starts(events).items())}
        result = {
            "start": START[way],
            "nodes": len(nodes),
            "time_to_inservice_s": round(c.in_service_at - c.created_at, 1),
            "time_to_first_job_s": round(first_job - c.created_at, 1),
            "time_to_full_size_s": round(c.full_size_at - c.created_at, 1),
            "boot_to_ssh_s": {k: round(v, 1) for k, v in sorted(boot.items())},
            "one_vm_boot_to_ssh_s": None,
            "join_latency_s": {k: round(v, 1) for k, v in sorted(join.items())},
            "join_batches": joins,
            "reconfigures": ph.reconfigures(events),
            "ratio_join_latency_to_boot_to_ssh": round(statistics.mean(join.values()) / statistics.mean(boot.values()), 2)
            if join and boot else None,
            "node_types": types,
            "phases": ph.continuous_phases(c, groups, nodes, events),
            "starts": starts,
            "forked": sum(1 for d in starts.values() if d["start"] == "Warm"),
            "cold_fallbacks": ph.cold_fallbacks(events),
        }
        one = ph.one_vm_boot(boot, types)
        result["one_vm_boot_to_ssh_s"] = round(one, 1) if one is not None else None
        ctl = next((n for n in nodes if gtype[n.grp] == "Controller"), None)
        if ctl and ctl.booted_at and ctl.joined_at:
            result["controller_boot_to_ssh_s"] = round(ctl.booted_at - ctl.launched_at, 1)
            result["controller_ssh_to_serving_s"] = round(ctl.joined_at - ctl.booted_at, 1)
        result["controller_nice"] = os.environ.get("SLURMLAB_CONTROLLER_NICE", "-5 (default)")
        result["boot_slots"] = slots.boot_slots().get("vagrant")  # None: every VM boots at once
        result["fork_slots"] = slots.fork_slots().get("vagrant")
        say(f"{way}: {result['forked']} of {len(nodes)} nodes forked"
            + (f"; booted cold: {result['cold_fallbacks']}" if result["cold_fallbacks"] else ""))
        if scale_n:
            try:
                result["scale_out"] = scale_out(st, name, {g.name: g for g in groups}, scale_n, way)
            except Exception as e:  # noqa: BLE001 - the create's numbers are kept
                result["scale_out"] = {"requested": scale_n, "error": f"{type(e).__name__}: {e}"[:1500]}
    finally:
        say(f"{way}: delete-cluster")
        p = sl("delete-cluster", name, check=False, timeout=900)
        if p.returncode != 0:
            say(f"{way}: delete-cluster failed ({p.returncode}): {(p.stdout + p.stderr).strip()[-1500:]}")
        sl("engine", "stop", check=False)
        st.close()
    return result


def scale_out(st, name: str, groups: dict, count: int, way: str) -> dict:
    """`count` compute nodes added at once to the running, idle cluster (BatchAddClusterNodes), as
    many as the host's memory holds now; measured until every one is Running in Slurm. With one
    node its VM boots alone: its boot-to-ssh is one VM's, its join latency a join by itself."""
    from bench import phases as ph

    group = next(g for g in groups.values() if g.node_type == "Compute")
    room_mib, room_cpus, source = host_room(name)
    n, capped = cap_scale_out(count, room_mib, group.memory_mib, room_cpus, group.cpus)
    base = {"group": group.name, "requested": count, "capped": capped, "room_mib": room_mib, "room_from": source}
    if capped:
        say(f"{way}: scale-out: {capped} (read from {source})")
    if n == 0:
        return {**base, "count": 0, "error": "no room on the host for one more compute node"}
    before = {x.name for x in st.nodes(name)}
    t0 = time.time()
    say(f"{way}: scale-out: batch-add-cluster-nodes {name} {group.name} --count {n}")
    p = sl("batch-add-cluster-nodes", name, group.name, "--count", str(n), check=False)
    added = [x.name for x in st.nodes(name) if x.name not in before]  # written by the command itself
    if p.returncode != 0:
        base["refused"] = f"batch-add-cluster-nodes exited {p.returncode}: {(p.stdout + p.stderr).strip()[-800:]}"
        say(f"{way}: scale-out: {base['refused']}")
        if not added:
            return {**base, "count": 0, "error": base["refused"]}
    n = len(added)
    new: list = []
    deadline = t0 + 1800 + 300 * n
    while time.time() < deadline:
        new = [x for x in st.nodes(name) if x.name in added]
        if len(new) == n and all(x.phase == "running" and x.joined_at for x in new):
            out = {**base, **ph.scale_out_summary(new, t0, st.events(name, limit=100000))}
            say(f"{way}: scale-out of {n}: all Running {out['all_running_s']} s after the request; median "
                f"boot-to-ssh {out['boot_to_ssh_s']} s, request -> ssh {out['request_to_ssh_s']} s, "
                f"join latency {out['join_latency_s']} s ({out['forked']} forked)")
            return out
        time.sleep(1)
    out = {**base, **ph.scale_out_summary(new, t0, st.events(name, limit=100000))}
    out["error"] = (f"{sum(1 for x in new if x.phase == 'running')} of {n} added nodes Running after "
                    f"{deadline - t0:.0f} s")
    return out


def _fmt(v) -> str:
    return "-" if v is None else str(v)


def note(result: dict) -> str:
    """The closing note: a line per way, then the ratios (bench/phases.py ratios())."""
    from bench import phases as ph

    r = result.get("ratios") or {}
    lines = []
    for way in ("continuous", *WAYS):  # "continuous": a result from before the warm/cold split
        d = result.get(way)
        if not isinstance(d, dict):
            continue
        if not ph.measured(d):
            if d.get("error"):
                lines.append(f"{way + ':':<11} failed: {d['error']}")
            continue
        if way == "naive":
            lines.append(f"naive:      first job {d['time_to_first_job_s']} s, full size {d['time_to_full_size_s']} s "
                         f"(vagrant up {d.get('vagrant_up_s')} s, Ansible {d.get('ansible_s')} s), "
                         f"{d.get('reconfigures')} reconfigure(s)")
            continue
        line = (f"{way + ':':<11} InService {d.get('time_to_inservice_s')} s, first job {d['time_to_first_job_s']} s, "
                f"full size {d['time_to_full_size_s']} s, {d.get('reconfigures')} reconfigure(s)")
        if "forked" in d:
            line += f"; {d['forked']} of {d.get('nodes')} nodes forked"
        lines.append(line)
        if d.get("cold_fallbacks"):
            lines.append("            booted cold instead: " + "; ".join(f"{k}: {v}" for k, v in d["cold_fallbacks"].items()))
        if d.get("template_check"):
            lines.append("            templates: " + "; ".join(d["template_check"]))
        so = d.get("scale_out") or {}
        if so.get("count"):
            lines.append(f"            scale-out of {so['count']}" + (f" ({so['capped']})" if so.get("capped") else "")
                         + f": all Running {_fmt(so.get('all_running_s'))} s; median request -> Running "
                         f"{_fmt(so.get('request_to_running_s'))} s, request -> ssh {_fmt(so.get('request_to_ssh_s'))} s, "
                         f"boot-to-ssh {_fmt(so.get('boot_to_ssh_s'))} s, join latency {_fmt(so.get('join_latency_s'))} s"
                         + (f"; {so['error']}" if so.get("error") else ""))
        elif so.get("error"):
            lines.append(f"            scale-out: {so['error']}" + (f" ({so['capped']})" if so.get("capped") else ""))
        if d.get("controller_ssh_to_serving_s") is not None:
            lines.append(f"            controller: boot-to-ssh {d['controller_boot_to_ssh_s']} s, ssh -> slurmctld "
                         f"serving {d['controller_ssh_to_serving_s']} s (nice {d.get('controller_nice')})")
    for m, label in (("time_to_first_job", "time to first job"), ("time_to_full_size", "time to full size")):
        parts = [f"{a}/{b} {r[f'{m}_{a}_over_{b}']}" for a, b in (("warm", "naive"), ("cold", "naive"), ("warm", "cold"))
                 if r.get(f"{m}_{a}_over_{b}") is not None]
        if r.get(f"{m}_continuous_over_naive") is not None:
            parts.append(f"continuous/naive {r[f'{m}_continuous_over_naive']}")
        if parts:
            lines.append(f"{label}: " + ", ".join(parts))
    if r.get("cold_boot_to_ssh_s") is not None:
        lines.append(f"a cold VM's boot-to-ssh (the cold way's compute nodes, mean): {r['cold_boot_to_ssh_s']} s; over it, "
                     f"the warm scale-out's request -> Running: "
                     f"{_fmt(r.get('warm_scale_out_request_to_running_over_cold_boot_to_ssh'))}, a fork's request -> ssh: "
                     f"{_fmt(r.get('warm_fork_request_to_ssh_over_cold_boot_to_ssh'))}")
    if r.get("scale_out_all_running_warm_over_cold") is not None:
        lines.append(f"scale-out, all Running, warm/cold: {r['scale_out_all_running_warm_over_cold']}")
    for way in ("warm", "cold"):
        if r.get(f"{way}_join_latency_over_boot_to_ssh") is not None or r.get(f"{way}_create_join_latency_over_boot_to_ssh") is not None:
            lines.append(f"{way}: join latency / boot-to-ssh: scale-out {_fmt(r.get(f'{way}_join_latency_over_boot_to_ssh'))}, "
                         f"create (over the controller's) {_fmt(r.get(f'{way}_create_join_latency_over_boot_to_ssh'))}")
    if r.get("join_latency_over_boot_to_ssh") is not None:  # a result from before the warm/cold split
        lines.append(f"scale-out: join latency / boot-to-ssh {r['join_latency_over_boot_to_ssh']}; create: "
                     f"{_fmt(r.get('create_join_latency_over_boot_to_ssh'))}")
    return "\n".join(lines)


def redraw(json_path: Path) -> None:
    from bench import timeline_png

    result = json.loads(json_path.read_text())
    png = json_path.with_suffix(".png")
    try:
        bars = timeline_png.draw(result, png)
    except ValueError as e:
        raise SystemExit(f"{json_path}: {e}") from None
    print(png)
    say(f"{len(bars)} bars")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=str(REPO / "examples" / "small.yaml"))
    ap.add_argument("--ways", default=",".join(WAYS),
                    help=f"comma-separated, measured in this order (default {','.join(WAYS)}): warm (the engine, "
                         "Lab.Start Warm), cold (the engine, Lab.Start Cold), naive (bench/naive.py)")
    ap.add_argument("--skip-naive", action="store_true", help="leave the naive way out (as --ways without naive)")
    ap.add_argument("--scale-out", type=int, default=1, metavar="N",
                    help="compute nodes added at once to each engine way's idle cluster (default 1; capped to "
                         "what the host's memory holds then)")
    ap.add_argument("--png-from", metavar="JSON", help="only redraw the picture of a saved result (next to it)")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results", metavar="DIR",
                    help="where the JSON and the PNG go (default bench/results)")
    args = ap.parse_args(argv)
    try:
        args.ways = parse_ways(args.ways, args.skip_naive)
    except ValueError as e:
        ap.error(str(e))
    if args.scale_out < 0:
        ap.error("--scale-out is 0 (none) or more")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.png_from:
        redraw(Path(args.png_from).resolve())
        return

    def interrupt(signum, frame):  # the finally blocks that delete the clusters run on SIGTERM/SIGHUP too
        raise KeyboardInterrupt(signal.Signals(signum).name)

    signal.signal(signal.SIGTERM, interrupt)
    signal.signal(signal.SIGHUP, interrupt)
    spec = Path(args.spec).resolve()
    home = Path(tempfile.mkdtemp(prefix="slurmlab-bench-"))
    os.environ["SLURMLAB_HOME"] = str(home)
    from bench import naive, phases, timeline_png
    from lab.host import kvm

    say(f"state in {home}; ways {', '.join(args.ways)}; scale-out of {args.scale_out}")
    result: dict = {"spec": _rel(spec), "ways": args.ways, "scale_out_requested": args.scale_out,
                    **{w: None for w in WAYS}}
    engine_ways = [w for w in args.ways if w in START]
    if engine_ways and args.scale_out:
        node_mib, node_cpus, cluster_mib = compute_shape(spec)
        room_mib, room_cpus, source = host_room()
        n, why = cap_scale_out(args.scale_out, room_mib - cluster_mib, node_mib)
        if why:
            say(f"warning: with the cluster up (~{cluster_mib} MiB), {why} (now, from {source}; "
                "checked again at the scale-out)")
    checked = None
    if "warm" in args.ways:
        try:
            checked = template_check(spec)
        except Exception as e:  # noqa: BLE001 - a warning only: the run shows what was forked
            checked = [f"could not check the templates: {type(e).__name__}: {e}"]
        for line in checked:
            say(f"warning: warm: {line}")
    status = 0
    for way in args.ways:
        try:
            if way == "naive":
                result["naive"] = naive.run(spec)  # tears its cluster down before it returns or raises
            else:
                copy = spec_with_start(spec, START[way], home / f"{spec.stem}-{way}.yaml")
                result[way] = continuous(copy, way, args.scale_out)
                if way == "warm":
                    result[way]["template_check"] = checked
        except KeyboardInterrupt as e:  # what was measured so far is written; no further way runs
            status = 130
            result[way] = {"error": f"interrupted ({e})", "logs": str(home)}
            break
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the other ways' numbers are kept
            status = 1
            result[way] = {"error": f"{type(e).__name__}: {e}"[:2000],
                           "logs": str(home / "naive-logs") if way == "naive" else str(home)}
            say(f"{way} failed: {result[way]['error']}")
    result["ratios"] = phases.ratios(result)
    result["driver"] = kvm.detect().driver
    out = args.results
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    png = out / f"cluster_timeline-{stamp}.png"
    result["png"] = _rel(png)
    result["note"] = note(result)
    (out / f"cluster_timeline-{stamp}.json").write_text(json.dumps(result, indent=2))
    try:
        timeline_png.draw(result, png)
    except Exception as e:  # noqa: BLE001 - the JSON is written; --png-from redraws it
        say(f"picture failed: {e}")
    print(json.dumps(result, indent=2))
    print(result["note"], file=sys.stderr)
    sys.exit(status)


if __name__ == "__main__":
    main()
