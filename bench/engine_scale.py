"""Benchmark: the engine's own cost at scale (sim provider, in-process engine, virtual time).

One cluster of N nodes in 20 instance groups (1 controller, 1 login, 18 compute groups sharing the
rest) is created on the sim provider with seeded random launch failures (faults:
launch_failure_rate 0.1); it must reach its targets. Then two compute groups grow by 5 nodes each
at once (BatchAddClusterNodes, faults off): those 10 nodes arrive together and must join with one
reconfigure. Reported for N = 100, 300, 1000:

  cpu_s              the process's CPU time (time.process_time) from create to full size: engine,
                     store (SQLite on disk), sim provider and configurer, all in this process
  cpu_ms_per_node    cpu_s / N (flat when the growth is linear)
  passes             engine passes (one per tick of 1 virtual second, or per simulated event)
  launches, injected_failures, retries seen
  joins, batches     join calls (one `scontrol reconfigure` each) and batches of compute nodes that
                     finished configuring at the same instant; joins_per_batch should be <= 1
                     (batches that arrive while a join runs are merged into the next one)
  add_batch_joins    join calls for the 10 nodes added together (should be 1)
  idle_pass_ms       CPU of one engine pass once the cluster is at full size (the daemon makes one
                     a second: its steady-state cost)

Time is virtual: boots (1 s), configures (0.5 s), joins (0.3 s) and backoffs (10 s base) take no
wall time, so CPU time is the engine's work alone. Output: JSON on stdout and
bench/results/engine_scale-<time>.json. About 10-40 s on 2 shared cores.

    .venv/bin/python bench/engine_scale.py [N ...] [--results DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lab.configure.sim import SimConfigurer  # noqa: E402
from lab.control import clusters  # noqa: E402
from lab.engine.engine import Engine  # noqa: E402
from lab.providers.sim import SimProvider, VirtualClock  # noqa: E402
from lab.spec import spec_from_request  # noqa: E402
from lab.store.db import Store  # noqa: E402

GROUPS = 20
FAILURE_RATE = 0.1
SEED = 42
SETTLE = 8


class CountingConfigurer(SimConfigurer):
    """Records when each compute node finished configuring: nodes done at one instant are a batch."""

    def __init__(self, clock, **kw):
        super().__init__(sleep=clock.sleep, **kw)
        self.clock = clock
        self.ready_at: dict[str, float] = {}

    async def configure_async(self, ctx, node, node_type):
        await super().configure_async(ctx, node, node_type)
        if node_type == "Compute":
            self.ready_at[node] = self.clock()


def request(n: int) -> dict:
    computes = n - 2
    per, extra = divmod(computes, GROUPS - 2)
    groups = [
        {"InstanceGroupName": "controller", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "SlurmConfig": {"NodeType": "Controller"}},
        {"InstanceGroupName": "login", "InstanceType": "ml.t3.medium", "InstanceCount": 1,
         "SlurmConfig": {"NodeType": "Login"}},
    ]
    for i in range(GROUPS - 2):
        groups.append({"InstanceGroupName": f"c{i:02d}", "InstanceType": "ml.c5.large",
                       "InstanceCount": per + (1 if i < extra else 0),
                       "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["dev"]}})
    return {"ClusterName": "bench", "NodeProvisioningMode": "Continuous", "NodeRecovery": "Automatic",
            "InstanceGroups": groups}


async def drive(eng: Engine, clock: VirtualClock, st: Store, done, max_passes: int = 5000) -> int:
    passes = 0
    while not done():
        if passes >= max_passes:
            raise SystemExit("the cluster did not reach its targets")
        await eng.step()
        passes += 1
        for _ in range(SETTLE):
            await asyncio.sleep(0)
        nxt = clock.next_wake()
        target = clock.t + eng.tuning.tick
        if nxt is not None:
            target = min(target, nxt)
        elif not any(not t.done() for t in eng.tasks.values()):
            # idle: jump to the next retry (one query, as a person watching the clock would)
            row = st._db.execute("SELECT MIN(retry_at) FROM nodes WHERE retry_at > ?", (clock.t,)).fetchone()
            if row and row[0]:
                target = max(target, row[0])
        clock.advance_to(target)
        for _ in range(SETTLE):
            await asyncio.sleep(0)
    return passes


def full(st: Store, name: str) -> bool:
    c, groups, nodes = st.snapshot(name)
    if c.full_size_at is None or c.status != "InService":
        return False
    running: dict[str, int] = {}
    for x in nodes:
        if x.phase == "running":
            running[x.grp] = running.get(x.grp, 0) + 1
    return all(running.get(g.name, 0) == g.target_count for g in groups) and len(nodes) == sum(
        g.target_count for g in groups)


async def run(n: int, workdir: Path) -> dict:
    clock = VirtualClock()
    st = Store(workdir / f"state-{n}.db")
    prov = SimProvider(1.0, clock=clock, sleep=clock.sleep)
    conf = CountingConfigurer(clock, configure_time=0.5, join_time=0.3, leave_time=0.2)
    eng = Engine(st, prov, conf, clock=clock, seed=SEED)
    st.set_faults(SEED, FAILURE_RATE)
    spec = spec_from_request(request(n), max_nodes_per_group=64, check_files=False)

    t0, w0 = time.process_time(), time.perf_counter()
    clusters.create(st, spec, provider="sim", start_engine=False)
    passes = await drive(eng, clock, st, lambda: full(st, "bench"))
    cpu = time.process_time() - t0
    wall = time.perf_counter() - w0
    virtual = clock.t - 1000.0
    joins, joined = eng.stats["joins"], eng.stats["joined_nodes"]
    batches = len(set(conf.ready_at.values()))
    failures = sum(1 for e in st.events("bench", limit=10**7) if "injected launch failure" in e.description)

    # nodes arriving together: 10 at once, no faults -> one join
    st.set_faults(SEED, 0)
    j0 = eng.stats["joins"]
    res = clusters.add_nodes(st, "bench", [{"InstanceGroupName": "c00", "IncrementTargetCountBy": 5},
                                           {"InstanceGroupName": "c01", "IncrementTargetCountBy": 5}])
    added = [x["NodeLogicalId"] for x in res["Successful"]]
    await drive(eng, clock, st, lambda: all(st.node("bench", x).phase == "running" for x in added))
    add_joins = eng.stats["joins"] - j0
    # the steady state: what one pass costs when nothing changes (the daemon makes one a second)
    t1 = time.process_time()
    for _ in range(20):
        await eng.step()
    idle_ms = (time.process_time() - t1) / 20 * 1000
    await eng.drain()
    assert len(prov.vms["bench"]) == len(st.nodes("bench")) == n + 10
    return {
        "nodes": n, "groups": GROUPS, "cpu_s": round(cpu, 3), "cpu_ms_per_node": round(1000 * cpu / n, 3),
        "wall_s": round(wall, 3), "virtual_s": round(virtual, 1), "passes": passes,
        "launches": eng.stats["launches"], "injected_failures": failures,
        "joins": joins, "joined_nodes": joined, "batches": batches,
        "joins_per_batch": round(joins / batches, 3) if batches else None,
        "add_batch_nodes": len(added), "add_batch_joins": add_joins, "idle_pass_ms": round(idle_ms, 2),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("sizes", nargs="*", type=int, metavar="N", help="cluster sizes (default 100 300 1000)")
    ap.add_argument("--results", type=Path, default=REPO / "bench" / "results", metavar="DIR",
                    help="where the JSON goes (default bench/results)")
    args = ap.parse_args(argv)
    if any(n < GROUPS for n in args.sizes):
        ap.error(f"N is at least {GROUPS} (one node per instance group)")
    args.sizes = args.sizes or [100, 300, 1000]
    return args


def summarize(out: list[dict]) -> dict:
    """The runs with their CPU and size relative to the smallest (the first) run."""
    base = out[0]
    for r in out:
        r["cpu_ratio_vs_smallest"] = round(r["cpu_s"] / base["cpu_s"], 2) if base["cpu_s"] else None
        r["size_ratio_vs_smallest"] = round(r["nodes"] / base["nodes"], 2)
    return {"benchmark": "engine_scale", "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "failure_rate": FAILURE_RATE, "seed": SEED, "runs": out}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    sizes = args.sizes
    out = []
    with tempfile.TemporaryDirectory(prefix="slurmlab-bench-") as d:
        for n in sizes:
            out.append(asyncio.run(run(n, Path(d))))
            print(json.dumps(out[-1]), file=sys.stderr)
    result = summarize(out)
    dest = args.results
    dest.mkdir(parents=True, exist_ok=True)
    (dest / f"engine_scale-{time.strftime('%Y%m%d-%H%M%S')}.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
