"""Benchmark: what JupyterHub (Lab.Jupyter, issue 31) costs a cluster, and a student's time to a notebook.

One run, real VMs (root, a host set up by `make up`, no other VMs running), in a private
$SLURMLAB_HOME (a new /tmp/slurmlab-bench-hub-*, kept for its logs). SPEC (default
examples/cluster.yaml: controller, login, 2 compute) is built twice, one after the other, every node
forked from its template:

  without      `create-cluster --no-jupyter --users 3`: the baseline
  with         `create-cluster --jupyter --users 3`: the same spec with the hub on the login node
  *.inservice_s   create until InService (the login node Running: its configure includes the hub's start)
  *.full_s        create until full size
  ratio_inservice with.inservice_s / without.inservice_s
  session      a student in headless Chromium through `slurmlab open` (tests/e2e/hub.py): running_s
               (the spawn button to the job RUNNING in squeue), ready_s (to JupyterLab answering), and
               the cell's `srun hostname`
  hub_rss_mb   the hub and its proxy's resident memory on the login node

With `--starts N` it measures instead whether the hub comes up every time (issue 44): N clusters with
the hub, one after the other, each until InService, then the hub's /hub/health through its proxy and
how often systemd restarted the hub and its proxy, then deleted:

  starts[]     inservice_s, health ("answers", or why not), restarts {unit: NRestarts}
  starts_ok    how many answered 200 with no restart

Output: JSON on stdout and in bench/results/jupyter_hub-<time>.json. Each cluster is deleted after it.

    sudo .venv/bin/python bench/jupyter_hub.py [SPEC] [--starts N]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's bench package
from bench.onecluster import REPO, parse_spec, sl, start  # noqa: E402

HUB_RSS = "ps -eo rss=,args= | awk '/jupyterhub|configurable-http-proxy/ && !/awk/ {s += $1} END {print s + 0}'"


def say(msg: str) -> None:
    print(f"jupyter_hub: [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def conclude(res: dict) -> dict:
    """ratio_inservice: with the hub over without (both measured in this run)."""
    res["ratio_inservice"] = round(res["with"]["inservice_s"] / res["without"]["inservice_s"], 3)
    return res


def build(spec: Path, name: str, flag: str) -> dict:
    t0 = time.monotonic()
    sl("create-cluster", "--spec", str(spec), flag, "--users", "3", "--wait", "--wait-for", "InService")
    got = {"inservice_s": round(time.monotonic() - t0, 1)}
    sl("describe-cluster", name, "--wait-for", "FullSize")
    got["full_s"] = round(time.monotonic() - t0, 1)
    return got


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    def more(ap: argparse.ArgumentParser) -> None:
        ap.add_argument("--starts", type=int, default=0, metavar="N",
                        help="instead: N clusters with the hub in a row, each checked for a hub that answers")

    return parse_spec(argv, __doc__, "the cluster spec, with a login group (default examples/cluster.yaml)", more)


def one_start(spec: Path, name: str) -> dict:
    """A cluster with the hub until InService; what its hub answers and how often its units restarted."""
    from lab.configure import hubstate

    got = build(spec, name, "--jupyter")
    got.pop("full_s")

    def on(command: str) -> str:
        return sl("ssh", name, "login", "--", command, timeout=300).stdout

    # the engine's own probe of the hub (through its proxy), asked on the login node itself
    why = hubstate.parse(on(hubstate.command(name, [("login", "127.0.0.1")])), ["login"]).get("login", "not asked")
    got["health"] = why or "answers"
    units = ("jupyterhub-proxy", "jupyterhub")
    counts = on(f"systemctl show -p NRestarts --value {' '.join(units)}").split()
    got["restarts"] = dict(zip(units, map(int, counts)))
    got["ok"] = not why and not any(got["restarts"].values())
    return got


def starts(spec: Path, name: str, n: int, res: dict) -> None:
    res["starts"] = []
    for i in range(n):
        res["starts"].append(one_start(spec, name))
        say(f"start {i + 1}/{n}: {res['starts'][-1]}")
        sl("delete-cluster", name, timeout=900)
    res["starts_ok"] = sum(s["ok"] for s in res["starts"])


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spec, name, home, res = start(args.spec, "slurmlab-bench-hub-")
    try:
        if args.starts:
            starts(spec, name, args.starts, res)
        for way, flag in () if args.starts else (("without", "--no-jupyter"), ("with", "--jupyter")):
            res[way] = build(spec, name, flag)
            say(f"{way} the hub: InService in {res[way]['inservice_s']} s, full size in {res[way]['full_s']} s")
            if way == "with":
                from tests.e2e.hub import student_session

                def on(node: str, command: str) -> str:
                    return sl("ssh", name, node, "--", command, timeout=300).stdout

                password = json.loads(sl("users", "show", name, "--output", "json").stdout)["Password"]
                seen = student_session(name, password, on, home / "shots", home / "chromium")
                res["session"] = {k: (round(v, 1) if isinstance(v, float) else v) for k, v in seen.items()
                                  if k in ("running_s", "ready_s", "output", "job")}
                res["hub_rss_mb"] = round(int(on("login", HUB_RSS).strip() or 0) / 1024, 1)
                say(f"a student's notebook: job running after {res['session']['running_s']} s, JupyterLab after "
                    f"{res['session']['ready_s']} s; the hub uses {res['hub_rss_mb']} MB")
            sl("delete-cluster", name, timeout=900)
        if not args.starts:
            conclude(res)
    except Exception as e:  # noqa: BLE001 - the result says what failed
        res["error"] = str(e)[:2000]
        subprocess.run([sys.executable, "-m", "lab", "delete-cluster", name], cwd=REPO, capture_output=True,
                       timeout=900, stdin=subprocess.DEVNULL)
    finally:
        subprocess.run([sys.executable, "-m", "lab", "engine", "stop"], cwd=REPO, capture_output=True, timeout=120)
    out = REPO / "bench" / "results" / f"jupyter_hub-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    sys.exit(1 if "error" in res or res.get("starts_ok", args.starts) < args.starts else 0)


if __name__ == "__main__":
    main()
