"""Benchmark: how fast a real cluster becomes useful, built the continuous way and the naive way.

Real VMs; run as root on a host set up by `make up` (libvirtd, the box), with no other VMs
running (they share the CPU). The continuous way took about 10 min on 2 cores without KVM; the
naive way is of the same order. Everything happens in a private $SLURMLAB_HOME (a new
/tmp/slurmlab-bench-*, kept afterwards for its logs), one way after the other, for SPEC (default
examples/small.yaml); the cluster's name is the spec's, so no other cluster of that name may exist
in libvirt (the naive way refuses to start then):

1. continuous: `slurmlab create-cluster` and the engine (controller first, then login and compute
   in parallel; InService early; compute nodes join in batches, one reconfigure each). From the
   engine's store and the clock, in seconds from create:
     time_to_inservice_s   -> ClusterStatus InService
     time_to_first_job_s   -> the first `srun -N1 hostname` that succeeds on the login node (polled)
     time_to_full_size_s   -> every group at its target
     boot_to_ssh_s         per node: launch -> the VM answers ssh
     one_vm_boot_to_ssh_s  the controller's boot_to_ssh (it boots alone)
     join_latency_s        per compute node: the VM answers ssh -> Running in Slurm
     reconfigures          join batches (one `scontrol reconfigure` each)
     phases                per node: launch, boot, configure, join (bench/phases.py defines them)
     controller_boot_to_ssh_s, controller_ssh_to_serving_s   the controller (it gates InService)
     scale_out             one compute node added to the idle cluster (batch-add-cluster-nodes):
                           its boot_to_ssh_s (one VM booting alone) and join_latency_s
   then `slurmlab delete-cluster` and `slurmlab engine stop`. $SLURMLAB_CONTROLLER_NICE=0 turns the
   controller's CPU priority off (lab/providers/priority.py), to compare.
2. naive (bench/naive.py; left out with --skip-naive): the same spec with every VM in one
   `vagrant up`, one Ansible run of playbooks/site.yml over all nodes, then the first job; then
   every VM, volume and the network removed. In seconds from its first step: time_to_first_job_s,
   time_to_full_size_s (the Ansible run ended: every node configured and joined), setup_s,
   vagrant_up_s, ansible_s, boot_to_ssh_s (`vagrant up` started -> the VM answers ssh),
   join_latency_s (answers ssh -> idle in Slurm), reconfigures (0 expected), phases.
3. ratios: time to first job and to full size, continuous / naive; the scale-out node's join latency
   over its own boot-to-ssh (join_latency_over_boot_to_ssh); the create's mean join latency over the
   controller's boot-to-ssh (create_join_latency_over_boot_to_ssh; the old definition: all VMs now
   boot at once, so the create's nodes also wait for the controller).

Output: the JSON on stdout and in bench/results/cluster_timeline-<time>.json, its picture in
bench/results/cluster_timeline-<time>.png (bench/timeline_png.py: a bar per node and phase, both
ways on one time axis), progress and a closing note with the ratios on stderr. A failed naive run
still writes the continuous results (its error under "naive") and exits 1 (130 on Ctrl-C).
SIGTERM and SIGHUP act as Ctrl-C: the running way's cluster is removed before the script exits.

    .venv/bin/python bench/cluster_timeline.py [SPEC] [--skip-naive]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


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


def continuous(spec: Path) -> dict:
    """Create the cluster through the CLI and the engine, measure, delete it."""
    from bench import phases as ph
    from bench.naive import srun_once
    from lab.engine import daemon
    from lab.spec import load_spec

    name = load_spec(spec).name
    st = daemon.store()
    first_job = None
    t_start = time.time()
    seen: tuple = ()
    try:
        say(f"continuous: create-cluster {name}")
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
                say(f"continuous: [{time.time() - c.created_at:6.1f}s] {c.status}, {len(running)}/{len(nodes)} nodes "
                    f"running{', full size' if c.full_size_at else ''}")
            if first_job is None and c.status == "InService" and any(groups[n.grp].node_type == "Compute" for n in running):
                entry = next((n for n in running if groups[n.grp].node_type == "Login"), None) or \
                    next(n for n in running if groups[n.grp].node_type == "Controller")
                ok, _ = srun_once(name, entry.address)
                if ok:
                    first_job = time.time()
                    say(f"continuous: first job ran at {first_job - c.created_at:.1f} s")
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
        result = {
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
        }
        one = ph.one_vm_boot(boot, types)
        result["one_vm_boot_to_ssh_s"] = round(one, 1) if one is not None else None
        ctl = next((n for n in nodes if gtype[n.grp] == "Controller"), None)
        if ctl and ctl.booted_at and ctl.joined_at:
            result["controller_boot_to_ssh_s"] = round(ctl.booted_at - ctl.launched_at, 1)
            result["controller_ssh_to_serving_s"] = round(ctl.joined_at - ctl.booted_at, 1)
        result["controller_nice"] = os.environ.get("SLURMLAB_CONTROLLER_NICE", "-5 (default)")
        result["boot_slots"] = daemon.boot_slots().get("vagrant")  # None: every VM boots at once
        result["scale_out"] = scale_out(st, name, gtype)
    finally:
        say("continuous: delete-cluster")
        p = sl("delete-cluster", name, check=False, timeout=900)
        if p.returncode != 0:
            say(f"continuous: delete-cluster failed ({p.returncode}): {(p.stdout + p.stderr).strip()[-1500:]}")
        sl("engine", "stop", check=False)
        st.close()
    return result


def scale_out(st, name: str, gtype: dict[str, str]) -> dict:
    """One compute node added to the running, idle cluster (BatchAddClusterNodes): its VM boots
    alone, so its boot-to-ssh is one VM's, and its join latency (the VM answers ssh -> Running
    in Slurm) is the cost of a join by itself."""
    group = next(g for g, t in gtype.items() if t == "Compute")
    before = {n.name for n in st.nodes(name)}
    t0 = time.time()
    say(f"continuous: scale-out: batch-add-cluster-nodes {name} {group} --count 1")
    sl("batch-add-cluster-nodes", name, group, "--count", "1")
    while time.time() - t0 < 1800:
        new = [n for n in st.nodes(name) if n.name not in before]
        if new and new[0].phase == "running" and new[0].joined_at:
            n = new[0]
            out = {"node": n.name, "boot_to_ssh_s": round(n.booted_at - n.launched_at, 1),
                   "join_latency_s": round(n.joined_at - n.booted_at, 1),
                   "request_to_running_s": round(n.joined_at - t0, 1)}
            say(f"continuous: scale-out: {n.name} booted in {out['boot_to_ssh_s']} s, joined "
                f"{out['join_latency_s']} s after it answered ssh")
            return out
        time.sleep(1)
    return {"error": "the added node did not join within 30 min"}


def note(result: dict) -> str:
    c, n, r = result["continuous"], result.get("naive") or {}, result["ratios"]
    lines = [f"continuous: InService {c['time_to_inservice_s']} s, first job {c['time_to_first_job_s']} s, "
             f"full size {c['time_to_full_size_s']} s, {c['reconfigures']} reconfigure(s)"]
    if "time_to_first_job_s" in n:
        lines.append(f"naive:      first job {n['time_to_first_job_s']} s, full size {n['time_to_full_size_s']} s "
                     f"(vagrant up {n['vagrant_up_s']} s, Ansible {n['ansible_s']} s), {n['reconfigures']} reconfigure(s)")
        lines.append(f"time to first job, continuous / naive: {r.get('time_to_first_job_continuous_over_naive')}; "
                     f"time to full size: {r.get('time_to_full_size_continuous_over_naive')}")
    elif n.get("error"):
        lines.append(f"naive:      failed: {n['error']}")
    so = c.get("scale_out") or {}
    if "join_latency_s" in so:
        lines.append(f"scale-out of one node: boot-to-ssh {so['boot_to_ssh_s']} s, join latency {so['join_latency_s']} s: "
                     f"{r.get('join_latency_over_boot_to_ssh')}")
    if c.get("controller_ssh_to_serving_s") is not None:
        lines.append(f"controller: boot-to-ssh {c['controller_boot_to_ssh_s']} s, ssh -> slurmctld serving "
                     f"{c['controller_ssh_to_serving_s']} s (nice {c.get('controller_nice')})")
    lines.append(f"create: join latency / the controller's boot-to-ssh ({c.get('one_vm_boot_to_ssh_s')} s): "
                 f"{r.get('create_join_latency_over_boot_to_ssh')}")
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=str(REPO / "examples" / "small.yaml"))
    ap.add_argument("--skip-naive", action="store_true", help="measure the continuous way only")
    ap.add_argument("--png-from", metavar="JSON", help="only redraw the picture of a saved result (next to it)")
    args = ap.parse_args()
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

    say(f"state in {home}")
    result: dict = {"spec": _rel(spec), "continuous": continuous(spec)}
    status = 0
    if args.skip_naive:
        result["naive"] = None
    else:
        try:
            result["naive"] = naive.run(spec)  # tears its cluster down before it returns or raises
        except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - the continuous numbers are kept
            status = 130 if isinstance(e, KeyboardInterrupt) else 1
            result["naive"] = {"error": f"{type(e).__name__}: {e}"[:2000], "logs": str(home / "naive-logs")}
    result["ratios"] = phases.ratios(result["continuous"], result["naive"])
    result["driver"] = kvm.detect().driver
    out = REPO / "bench" / "results"
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
