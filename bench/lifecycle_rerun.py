"""Benchmark: `slurmlab lifecycle rerun` against HyperPod's advice for a failed lifecycle script, deleting the
cluster and creating it again (issue 46).

One run, real VMs (root, a host set up by `make up`, no other VMs running), in a private
$SLURMLAB_HOME (a new /tmp/slurmlab-bench-rerun-*, kept for its logs). The cluster is SPEC (default
examples/cluster.yaml: controller, login, 2 compute).

  rebuild_s        create-cluster until the cluster is at full size: what "create it again" costs (the
                   delete before it is not counted), the baseline
  reruns           --runs times (default 3) `slurmlab lifecycle rerun NAME COMPUTE-1 --from DIR`, DIR a copy
                   of the spec's scripts with one step added; each: new_fork_s and scripts_s (the command's own
                   times: request -> the new VM configuring, request -> the scripts' result), command_s (the
                   command from start to exit), idle_s (request -> the node idle in Slurm and Running again), and ok (the
                   added step's file is on the new VM)
  rerun_median_s   the median command_s
  ratio            rerun_median_s / rebuild_s
  goal_met         rerun_median_s <= 30 (the issue's goal on this machine, with forks)

Output: JSON on stdout and in bench/results/lifecycle_rerun-<time>.json. The cluster is deleted at the end.

    sudo .venv/bin/python bench/lifecycle_rerun.py [SPEC] [--runs N]
"""

from __future__ import annotations

import json
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's bench package
from bench.onecluster import finish, parse_spec, sl, start, teardown  # noqa: E402

GOAL_S = 30.0


def say(msg: str) -> None:
    print(f"lifecycle_rerun: [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None = None):
    return parse_spec(argv, __doc__, "the cluster spec (default examples/cluster.yaml)",
                      more=lambda ap: ap.add_argument("--runs", type=int, default=3, help="reruns to time (default 3)"))


def times_of(stderr: str) -> tuple[float, float] | None:
    """(new fork s, scripts' result s) from the command's result line."""
    m = re.search(r"new fork ([0-9.]+) s, scripts' result ([0-9.]+) s", stderr)
    return (float(m[1]), float(m[2])) if m else None


def conclude(res: dict) -> dict:
    runs = [r["command_s"] for r in res["reruns"] if r.get("ok")]
    if runs:
        res["rerun_median_s"] = round(statistics.median(runs), 1)
        res["ratio"] = round(res["rerun_median_s"] / res["rebuild_s"], 3)
        res["goal_met"] = res["rerun_median_s"] <= GOAL_S
    return res


def edited_scripts(spec: Path, home: Path, run: int) -> Path:
    """A copy of the spec's lifecycle folder with a step that writes /etc/bench-rerun (this run's number)."""
    import yaml

    data = yaml.safe_load(spec.read_text())
    src = next(g["LifeCycleConfig"]["SourceS3Uri"] for g in data["InstanceGroups"] if g["InstanceGroupName"] == "compute")
    folder = home / f"lifecycle-{run}"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree((spec.parent / src).resolve(), folder)
    script = folder / "on_create.sh"
    script.write_text(script.read_text() + f'echo "Execute script: ./bench"\necho {run} > /etc/bench-rerun\n')
    return folder


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spec, name, home, res = start(args.spec, "slurmlab-bench-rerun-")
    res["reruns"] = []
    try:
        t0 = time.monotonic()
        sl("create-cluster", "--spec", str(spec), "--wait", "--wait-for", "FullSize")
        res["rebuild_s"] = round(time.monotonic() - t0, 1)
        say(f"built in {res['rebuild_s']} s")
        node = f"{name}-compute-1"
        for run in range(1, args.runs + 1):
            folder = edited_scripts(spec, home, run)
            t0 = time.monotonic()
            p = sl("lifecycle", "rerun", name, node, "--from", str(folder))
            r = {"command_s": round(time.monotonic() - t0, 1)}
            got = times_of(p.stderr)
            if got:
                r["new_fork_s"], r["scripts_s"] = got
            r["ok"] = sl("ssh", name, node, "--", "cat /etc/bench-rerun").stdout.strip() == str(run)
            def status() -> str:
                nodes = json.loads(sl("list-cluster-nodes", name, "--output", "json").stdout)["ClusterNodeSummaries"]
                return next(n["InstanceStatus"]["Status"] for n in nodes if n["NodeLogicalId"] == node)

            # idle in Slurm, and Running for the lab (a rerun of a node still joining is refused as busy)
            while (sl("ssh", name, "controller", "--", f"sinfo -h -N -n {node} -o %T").stdout.strip() != "idle"
                   or status() != "Running"):
                if time.monotonic() - t0 > 600:
                    raise RuntimeError(f"{node} not idle in Slurm 600 s after rerun {run}")
                time.sleep(2)
            r["idle_s"] = round(time.monotonic() - t0, 1)
            res["reruns"].append(r)
            say(f"rerun {run}: {r}")
        conclude(res)
        say(f"median rerun {res.get('rerun_median_s')} s against a rebuild of {res['rebuild_s']} s: "
            f"ratio {res.get('ratio')}, goal (<= {GOAL_S:.0f} s) met: {res.get('goal_met')}")
    except Exception as e:  # noqa: BLE001 - the result says what failed
        res["error"] = str(e)[:2000]
    finally:
        teardown(name)
    finish("lifecycle_rerun", res)


if __name__ == "__main__":
    main()
