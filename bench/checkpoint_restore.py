"""Benchmark: restoring a checkpoint against rebuilding the same cluster from nothing (issue 14).

One run, real VMs (root, a host set up by `make up`, no other VMs running), in a private
$SLURMLAB_HOME (a new /tmp/slurmlab-bench-ckpt-*, kept for its logs). The cluster is SPEC (default
examples/cluster.yaml: controller, login, 2 compute).

  rebuild_s     create-cluster until the cluster is at full size (every node Running, joined): what
                "delete and create again" costs, the baseline
  checkpoint_s  `slurmlab checkpoint create` (command to done: pause, save every VM, copy the disks,
                resume)
  restore_s     `slurmlab checkpoint restore` after the cluster was broken (a compute node scaled in,
                slurmctld stopped): command to done, guest clocks set included
  ratio         restore_s / rebuild_s (the issue's goal: <= 0.1)
  srun_ok       `srun -N<compute nodes>` answered from every compute node after the restore
  size_bytes    the checkpoint's files on disk

Output: JSON on stdout and in bench/results/checkpoint_restore-<time>.json. The cluster is deleted at
the end (its checkpoints with it).

    sudo .venv/bin/python bench/checkpoint_restore.py [SPEC]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's bench package
from bench.onecluster import finish, parse_spec, sl, start, teardown  # noqa: E402



def say(msg: str) -> None:
    print(f"checkpoint_restore: [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def conclude(res: dict, compute: list[str], srun_hosts: list[str]) -> dict:
    """The result's verdict: srun_ok (every compute node answered the job after the restore) and
    ratio (restore_s / rebuild_s; issue 14's goal: <= 0.1)."""
    res["srun_ok"] = sorted(srun_hosts) == sorted(compute)
    res["ratio"] = round(res["restore_s"] / res["rebuild_s"], 3)
    return res


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    return parse_spec(argv, __doc__, "the cluster spec (default examples/cluster.yaml)")


def main(argv: list[str] | None = None) -> None:
    spec, name, home, res = start(parse_args(argv).spec, "slurmlab-bench-ckpt-")
    try:
        t0 = time.monotonic()
        sl("create-cluster", "--spec", str(spec), "--wait", "--wait-for", "FullSize")
        res["rebuild_s"] = round(time.monotonic() - t0, 1)
        say(f"built in {res['rebuild_s']} s")
        nodes = json.loads(sl("list-cluster-nodes", name, "--output", "json").stdout)["ClusterNodeSummaries"]
        compute = sorted(n["NodeLogicalId"] for n in nodes if n["InstanceGroupName"] == "compute")
        t0 = time.monotonic()
        made = json.loads(sl("checkpoint", "create", name, "bench", "--output", "json").stdout)
        res["checkpoint_s"] = round(time.monotonic() - t0, 1)
        res["checkpoint"] = made["Message"]
        listed = json.loads(sl("checkpoint", "list", name, "--output", "json").stdout)["Checkpoints"]
        res["size_bytes"] = listed[0]["SizeBytes"]
        say(f"checkpoint in {res['checkpoint_s']} s ({res['size_bytes'] >> 20} MiB)")
        sl("batch-delete-cluster-nodes", name, compute[-1])
        sl("describe-cluster", name, "--wait-for", "FullSize", "--timeout", "900")
        sl("ssh", name, "controller", "--", "sudo systemctl stop slurmctld")
        t0 = time.monotonic()
        back = json.loads(sl("checkpoint", "restore", name, "bench", "--output", "json").stdout)
        res["restore_s"] = round(time.monotonic() - t0, 1)
        res["restore"] = back["Message"]
        out = sl("ssh", name, "login", "--", f"timeout 120 srun -p dev -N{len(compute)} hostname").stdout.split()
        conclude(res, compute, out)
        say(f"restored in {res['restore_s']} s: ratio {res['ratio']} of the rebuild; srun across {compute}: "
            f"{res['srun_ok']}")
    except Exception as e:  # noqa: BLE001 - the result says what failed
        res["error"] = str(e)[:2000]
    finally:
        teardown(name)
    finish("checkpoint_restore", res)


if __name__ == "__main__":
    main()
