"""Benchmark: how fast a real cluster becomes useful (real VMs; run as root; ~10-15 min on 2 cores).

Creates examples/small.yaml (or SPEC) in a private $SLURMLAB_HOME, records, from the engine's
store and from the clock:
  time_to_inservice   create -> ClusterStatus InService
  time_to_first_job   create -> first `srun -N1 hostname` that succeeds (polled from the login node)
  time_to_full_size   create -> every group at its target
  join_latency        per compute node: VM answers ssh (booted) -> Running in Slurm (joined)
  boot_to_ssh         per node: launch -> VM answers ssh (the baseline the join latency is compared with)
and the ratio join_latency / boot_to_ssh, then deletes the cluster. Output: JSON on stdout and
bench/results/cluster_timeline-<time>.json.

    .venv/bin/python bench/cluster_timeline.py [SPEC]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def sl(*args, check=True, timeout=3600):
    p = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd=REPO)
    if check and p.returncode != 0:
        raise SystemExit(f"slurmlab {' '.join(args)} failed:\n{p.stdout}\n{p.stderr[-3000:]}")
    return p


def main() -> None:
    spec = Path(sys.argv[1] if len(sys.argv) > 1 else REPO / "examples" / "small.yaml").resolve()
    home = Path(tempfile.mkdtemp(prefix="slurmlab-bench-"))
    os.environ["SLURMLAB_HOME"] = str(home)
    sys.path.insert(0, str(REPO))
    from lab.engine import daemon
    from lab.host import kvm
    from lab.spec import load_spec

    name = load_spec(spec).name
    t0 = time.time()
    sl("create-cluster", "--spec", str(spec))
    st = daemon.store()
    first_job = None
    try:
        while True:
            c = st.cluster(name)
            if c.status == "Failed":
                raise SystemExit(f"cluster failed: {c.failure_message}")
            groups = {g.name: g for g in st.groups(name)}
            nodes = st.nodes(name)
            running_compute = [n for n in nodes if groups[n.grp].node_type == "Compute" and n.phase == "running"]
            if first_job is None and c.status == "InService" and running_compute:
                p = sl("ssh", name, "login", "--", "srun -N1 hostname", check=False, timeout=120)
                if p.returncode == 0:
                    first_job = time.time() - t0
            if c.full_size_at and first_job is not None:
                break
            if time.time() - t0 > 3600:
                raise SystemExit("timed out")
            time.sleep(1)
        c = st.cluster(name)
        groups = {g.name: g for g in st.groups(name)}
        nodes = st.nodes(name)
        boot = {n.name: n.booted_at - n.launched_at for n in nodes if n.booted_at and n.launched_at}
        join = {n.name: n.joined_at - n.booted_at for n in nodes
                if groups[n.grp].node_type == "Compute" and n.joined_at and n.booted_at}
        joins = [e.description for e in st.events(name) if "joined Slurm with one reconfigure" in e.description]
        result = {
            "spec": str(spec.relative_to(REPO)) if spec.is_relative_to(REPO) else str(spec),
            "nodes": len(nodes),
            "time_to_inservice_s": round(c.in_service_at - c.created_at, 1),
            "time_to_first_job_s": round(first_job, 1),
            "time_to_full_size_s": round(c.full_size_at - c.created_at, 1),
            "boot_to_ssh_s": {k: round(v, 1) for k, v in sorted(boot.items())},
            "join_latency_s": {k: round(v, 1) for k, v in sorted(join.items())},
            "join_batches": joins,
            "ratio_join_latency_to_boot_to_ssh": round(statistics.mean(join.values()) / statistics.mean(boot.values()), 2),
            "driver": kvm.detect().driver,
        }
    finally:
        sl("delete-cluster", name, check=False, timeout=900)
        sl("engine", "stop", check=False)
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / f"cluster_timeline-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
