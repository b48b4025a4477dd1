"""What the one-cluster benchmarks share (checkpoint_restore.py, jupyter_hub.py): the command line
(one SPEC, default examples/cluster.yaml), a private lab home in /tmp, the spec's cluster name, the
result's first keys, and `slurmlab` run from the repository (an error carries its stderr's tail)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def parse_spec(argv: list[str] | None, doc: str, help_text: str, more=None) -> argparse.Namespace:
    """SPEC, and the options `more(parser)` adds."""
    ap = argparse.ArgumentParser(description=doc.split("\n")[0])
    ap.add_argument("spec", nargs="?", default=str(REPO / "examples" / "cluster.yaml"), help=help_text)
    if more:
        more(ap)
    return ap.parse_args(argv)


def start(spec_arg: str, prefix: str) -> tuple[Path, str, Path, dict]:
    """(the spec's path, its ClusterName, a new private $SLURMLAB_HOME, the result so far)."""
    spec = Path(spec_arg).resolve()
    name = yaml.safe_load(spec.read_text())["ClusterName"]
    home = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ["SLURMLAB_HOME"] = str(home)
    res: dict = {"spec": str(spec.relative_to(REPO) if spec.is_relative_to(REPO) else spec), "home": str(home)}
    return spec, name, home, res


def sl(*args, timeout=2400) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd=REPO)
    if p.returncode != 0:
        raise RuntimeError(f"slurmlab {' '.join(args)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


def teardown(name: str) -> None:
    """Delete the cluster and stop the private home's engine, whatever happened before (errors ignored)."""
    subprocess.run([sys.executable, "-m", "lab", "delete-cluster", name], cwd=REPO, capture_output=True,
                   timeout=900, stdin=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "lab", "engine", "stop"], cwd=REPO, capture_output=True, timeout=120)


def finish(bench: str, res: dict) -> None:
    """The result as JSON in bench/results/BENCH-<time>.json and on stdout; exit 1 when it has an error."""
    import json
    import time

    out = REPO / "bench" / "results" / f"{bench}-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(json.dumps(res, indent=2))
    sys.exit(1 if "error" in res else 0)
