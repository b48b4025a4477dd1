"""Benchmark: a class's day under faults on real VMs (issue 45): every job a student submits ends in
Slurm's accounting with a final state, and none is lost.

One cluster, SPEC (default examples/cluster.yaml: controller, login, 2 compute), created with
`--users N` in a private $SLURMLAB_HOME (a new /tmp/slurmlab-classday-*, kept for its logs). For
--minutes T, N students (threads; default 8, 30 min) each submit one piece of work from the login node
every 20-60 s (seeded), as themselves, each with a job name of its own:

  batch     sbatch --wrap 'sleep 5-40'                 (Slurm requeues it when its node fails)
  array     sbatch --array=1-3 --wrap 'sleep 5-20'
  srun      srun -N1 (a step of 2-10 s; the student waits for it)
  resume    srun --auto-resume=1 -N1 (a step of 20-40 s: run again when its node fails)

Faults, one every T/7 (in this order; `--no-faults`: none):

  slurmd_stopped      compute-1's slurmd stopped (the lab restarts it)
  vm_destroyed        compute-2's domain destroyed (NodeRecovery Automatic brings it back)
  action_replace      compute-1 set down with reason Action:Replace (replaced under its name)
  vm_hung             compute-2's kernel panics (found by its silent agent, rebooted)
  slurmctld_killed    slurmctld SIGKILLed (systemd starts it again)
  node_cut_off        compute-1's link down for 60 s, then up

Each fault's times are measured: until the node is not usable (Slurm or the lab saw it), the lab's first
event about it (detection), and until it is Running and usable in Slurm again (recovery; for slurmctld:
`sinfo` answers). Then the submissions stop and the queue drains: what is still queued 15 min later is
noted (cancelled_at_end) and cancelled. sacct (with -D: every run of a requeued job) says what became of
each job:

  completed   every run of it (each array task) ended COMPLETED at last
  by_fault    it ended NODE_FAIL (or its srun failed with its node) and did not ask to run again
  rerun       a run ended NODE_FAIL, and a later run (a requeue, an --auto-resume restart) COMPLETED
  other       it ended otherwise (FAILED, CANCELLED, TIMEOUT ...)
  refused     the student's command failed and Slurm has no record of it (the student was told)
  lost        no final state in sacct although the command succeeded (the goal is 0)

The engine's CPU and memory are sampled every 15 s. At the end the cluster is deleted and what it left
in libvirt, on disk or as processes is listed (the goal is nothing).

Output: JSON on stdout and in bench/results/class_day-<time>.json, a summary on stderr.

    sudo .venv/bin/python bench/class_day.py [SPEC] [--students N] [--minutes T] [--seed S] [--no-faults]
"""

from __future__ import annotations

import json
import random
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: the repository's bench package
from bench.faultlab import PANIC, PANIC_IN_S, Lab  # noqa: E402
from bench.faults_parts import set_link  # noqa: E402
from bench.onecluster import REPO, parse_spec, sl, start  # noqa: E402

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
         "DEADLINE"}
BY_NODE = {"NODE_FAIL", "BOOT_FAIL"}
KINDS = (("batch", 40), ("array", 15), ("srun", 25), ("resume", 20))
FAULTS = ("slurmd_stopped", "vm_destroyed", "action_replace", "vm_hung", "slurmctld_killed", "node_cut_off")


def say(msg: str) -> None:
    print(f"class_day: [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------ what a student does
def work(kind: str, name: str, rng: random.Random) -> str:
    """The shell command of one piece of work, named `name` in Slurm."""
    if kind == "batch":
        return f"sbatch --parsable -J {name} -p dev --wrap 'sleep {rng.randint(5, 40)}'"
    if kind == "array":
        return f"sbatch --parsable -J {name} -p dev --array=1-3 --wrap 'sleep {rng.randint(5, 20)}'"
    if kind == "srun":
        return f"srun -J {name} -p dev -N1 sh -c 'sleep {rng.randint(2, 10)}; hostname'"
    return f"srun --auto-resume=1 -J {name} -p dev -N1 sh -c 'sleep {rng.randint(20, 40)}; hostname'"


def pick(rng: random.Random) -> str:
    return rng.choices([k for k, _ in KINDS], weights=[w for _, w in KINDS])[0]


# ------------------------------------------------------------------------------------ what became of it
def runs_by_name(sacct: str) -> dict[str, dict[str, list[str]]]:
    """`sacct -a -D -X -n -P -o JobName,JobID,State` lines -> name -> task -> the states of its runs, oldest
    first. The task is an array job's index ("" for other jobs), so that every run of one piece of work is
    in one list: a requeue (the same JobID again) and an --auto-resume restart (a new job of the same
    name). "CANCELLED by 1001" is CANCELLED."""
    out: dict[str, dict[str, list[str]]] = {}
    for line in sacct.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0] or not parts[2].split():
            continue
        name, jobid, state = parts[0], parts[1], parts[2].split()[0]
        task = jobid.split("_", 1)[1] if "_" in jobid else ""
        out.setdefault(name, {}).setdefault(task, []).append(state)
    return out


def verdict(kind: str, tasks: dict[str, list[str]] | None, rc: int | None) -> str:
    """completed, rerun, by_fault, other, refused or lost: what became of one submission (the docstring
    says which is which). `rc`: the student's command's exit status."""
    if not tasks:
        return "refused" if rc not in (0, None) else "lost"
    if (kind == "array" and len(tasks) < 3) or any(not runs or runs[-1] not in FINAL for runs in tasks.values()):
        return "lost"
    finals = [runs[-1] for runs in tasks.values()]
    if all(f == "COMPLETED" for f in finals):
        hit = any(s in BY_NODE or s == "REQUEUED" for runs in tasks.values() for s in runs[:-1])
        return "rerun" if hit else "completed"
    if any(f in BY_NODE for f in finals):
        return "by_fault"
    return "other"


def tally(submitted: list[dict], runs: dict[str, dict[str, list[str]]]) -> dict:
    counts = dict.fromkeys(("completed", "rerun", "by_fault", "other", "refused", "lost"), 0)
    by_kind: dict[str, dict[str, int]] = {}
    lost = []
    for s in submitted:
        v = verdict(s["kind"], runs.get(s["name"]), s.get("rc"))
        counts[v] += 1
        by_kind.setdefault(s["kind"], dict.fromkeys(counts, 0))[v] += 1
        if v in ("lost", "other", "refused"):
            lost.append({k: s.get(k) for k in ("name", "kind", "student", "at_s", "rc", "said")}
                        | {"verdict": v, "runs": runs.get(s["name"])})
    return {"submitted": len(submitted), **counts, "by_kind": by_kind, "not_done": lost[:30]}


def schedule(minutes: float, faults: bool) -> list[tuple[float, str]]:
    """(seconds from the start, fault): one every minutes/7."""
    if not faults:
        return []
    step = minutes * 60 / (len(FAULTS) + 1)
    return [(round(step * (i + 1), 1), f) for i, f in enumerate(FAULTS)]


# ------------------------------------------------------------------------------------ the cluster
class Day:
    def __init__(self, name: str, home: Path):
        self.name, self.lab = name, Lab(home, name)
        self.c1, self.c2, self.ctl = f"{name}-compute-1", f"{name}-compute-2", f"{name}-controller-1"
        self.t0 = time.time()

    def on(self, node: str, command: str, timeout: float = 900) -> subprocess.CompletedProcess:
        """`command` on a node over a kept connection (as the e2e tests do: no Python start per call)."""
        from lab.cmd.base import node_named
        from lab.engine import daemon
        from lab.providers import kept

        match = node_named(daemon.store(), self.name, node)
        return subprocess.run(kept.command(self.name, match.address, [command]), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def as_student(self, user: str, command: str, timeout: float = 900) -> subprocess.CompletedProcess:
        return self.on("login", f"sudo -u {user} -H -- sh -c {shlex.quote('cd && ' + command)}", timeout)

    def sinfo(self, node: str) -> str:
        p = self.on("controller", f"sinfo -h -N -n {node} -o %T", timeout=120)
        return p.stdout.strip() if p.returncode == 0 else ""

    def usable(self, node: str) -> bool:
        n = self.lab.node(node)
        return (n is not None and n.phase == "running" and n.pending is None
                and self.sinfo(node) in ("idle", "mixed", "allocated", "completing"))

    def event_after(self, t: float, node: str | None) -> float | None:
        """Seconds from t to the lab's first Warning or Error event about `node` (None: the cluster's)."""
        times = [e.time for e in self.lab.st.events(self.name)
                 if e.time >= t and e.level in ("Warning", "Error") and (node is None or e.node == node)]
        return round(min(times) - t, 1) if times else None

    # ---------------------------------------------------------------- faults
    def fault(self, what: str) -> dict:
        t = time.time()
        node = {"slurmd_stopped": self.c1, "vm_destroyed": self.c2, "action_replace": self.c1, "vm_hung": self.c2,
                "node_cut_off": self.c1}.get(what)
        row: dict = {"fault": what, "node": node, "at_s": round(t - self.t0, 1)}
        try:
            if what == "slurmd_stopped":
                self.on(node, "sudo systemctl stop slurmd")
            elif what == "vm_destroyed":
                self.lab.destroy(node)
            elif what == "action_replace":
                self.on("controller", f"sudo scontrol update nodename={node} state=down reason='Action:Replace'")
            elif what == "vm_hung":
                self.on(node, PANIC)
                t += PANIC_IN_S
            elif what == "slurmctld_killed":
                self.on("controller", "sudo systemctl kill -s KILL slurmctld")
                time.sleep(2)
                end = time.monotonic() + 600
                while self.on("controller", "sinfo -h -o %a", timeout=120).returncode != 0 and time.monotonic() < end:
                    time.sleep(2)
                row["recovered_s"] = round(time.time() - t, 1)
                row["detected_s"] = self.event_after(t, None)
                return row
            elif what == "node_cut_off":
                set_link(self.name, node, "down")
                time.sleep(60)
                set_link(self.name, node, "up")
            # Slurm and the lab take a while to see most of these (SlurmdTimeout, the hang watch): first until
            # the node is not usable, then until it is again (the first 12-min run read "usable" at once)
            end = time.monotonic() + 300
            while self.usable(node) and time.monotonic() < end:
                time.sleep(3)
            row["unusable_after_s"] = round(time.time() - t, 1) if not self.usable(node) else None
            end = time.monotonic() + 1200
            while not self.usable(node) and time.monotonic() < end:
                time.sleep(5)
            row["recovered_s"] = round(time.time() - t, 1) if self.usable(node) else None
            row["detected_s"] = self.event_after(t, node)
        except Exception as e:  # noqa: BLE001 - the row says so; the day goes on
            row["error"] = f"{type(e).__name__}: {e}"[:300]
        return row


class EngineUse:
    """The engine's CPU seconds and resident memory, sampled every `every` s (a restarted engine's too)."""

    def __init__(self, every: float = 15):
        self.every, self.samples, self.cpu = every, [], {}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        self._t.start()

    def stop(self) -> dict:
        self._stop.set()
        self._t.join(timeout=30)
        rss = [s["rss_mib"] for s in self.samples]
        span = (self.samples[-1]["t"] - self.samples[0]["t"]) if len(self.samples) > 1 else 0
        cpu = sum(self.cpu.values())
        return {"cpu_s": round(cpu, 1), "cpu_percent": round(100 * cpu / span, 1) if span else None,
                "rss_mib_max": max(rss, default=None), "rss_mib_last": rss[-1] if rss else None,
                "samples": len(self.samples), "engines": len(self.cpu)}

    def _loop(self) -> None:
        import os

        from lab.engine import daemon

        tick = os.sysconf("SC_CLK_TCK")
        while not self._stop.wait(self.every):
            pid = daemon.running_pid()
            if not pid or pid < 0:
                continue
            try:
                stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                rss = next(int(x.split()[1]) for x in Path(f"/proc/{pid}/status").read_text().splitlines()
                           if x.startswith("VmRSS:"))
            except (OSError, StopIteration, IndexError, ValueError):
                continue
            self.cpu[pid] = (int(stat[11]) + int(stat[12])) / tick
            self.samples.append({"t": time.time(), "pid": pid, "rss_mib": rss // 1024})


def student_loop(day: Day, user: str, until: float, seed: int, submitted: list[dict], lock: threading.Lock) -> None:
    rng = random.Random(seed)
    k = 0
    time.sleep(rng.uniform(0, 20))
    while time.time() < until:
        kind = pick(rng)
        k += 1
        name = f"cd-{user}-{k}"
        row = {"name": name, "kind": kind, "student": user, "at_s": round(time.time() - day.t0, 1)}
        try:
            p = day.as_student(user, work(kind, name, rng))
            row.update(rc=p.returncode, said=(p.stdout + p.stderr)[-400:])
        except subprocess.TimeoutExpired:
            row.update(rc=None, said="timed out after 900 s")
        with lock:
            submitted.append(row)
        time.sleep(rng.uniform(20, 60))


def drain(day: Day, timeout: float = 900) -> tuple[float, list[str]]:
    """Wait until the queue is empty. After `timeout`, what is still there ("JOBID|STATE|NAME|USER|TIME")
    is noted and cancelled, so that the day ends (a hung srun holds its allocation; each then shows as
    "other" in the tally)."""
    t0 = time.monotonic()
    left: list[str] = []
    while time.monotonic() - t0 < timeout:
        p = day.on("controller", "squeue -h -a -o %i", timeout=120)
        if p.returncode == 0 and not p.stdout.strip():
            return round(time.monotonic() - t0, 1), left
        time.sleep(10)
    left = day.on("controller", "squeue -h -a -o '%i|%T|%j|%u|%M'", timeout=120).stdout.split()
    say(f"still in the queue after {timeout:.0f} s, cancelled: {left}")
    day.on("controller", "sudo scancel --full " + " ".join(line.split("|")[0] for line in left), timeout=120)
    time.sleep(30)
    return round(time.monotonic() - t0, 1), left


def parse_args(argv: list[str] | None = None):
    def more(ap) -> None:
        ap.add_argument("--students", type=int, default=8)
        ap.add_argument("--minutes", type=float, default=30)
        ap.add_argument("--seed", type=int, default=45)
        ap.add_argument("--no-faults", action="store_true", help="the same day without faults (a baseline)")

    args = parse_spec(argv, __doc__, "the cluster spec, with a login group (default examples/cluster.yaml)", more)
    if not 1 <= args.students <= 50 or not 1 <= args.minutes <= 240:
        raise SystemExit("class_day: --students 1..50 and --minutes 1..240")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    spec, name, home, res = start(args.spec, "slurmlab-classday-")
    res.update(students=args.students, minutes=args.minutes, seed=args.seed, faults=not args.no_faults)
    say(f"state in {home}")
    sl("host", "up", timeout=600)
    t_create = time.monotonic()
    sl("create-cluster", "--spec", str(spec), "--users", str(args.students), "--no-jupyter", "--wait",
       "--wait-for", "FullSize")
    res["create_s"] = round(time.monotonic() - t_create, 1)
    day = Day(name, home)
    use = EngineUse()
    use.start()
    submitted: list[dict] = []
    lock = threading.Lock()
    until = day.t0 + args.minutes * 60
    students = [f"user{i:02d}" for i in range(1, args.students + 1)]
    threads = [threading.Thread(target=student_loop, args=(day, u, until, args.seed * 100 + i, submitted, lock),
                                daemon=True) for i, u in enumerate(students)]
    for t in threads:
        t.start()
    say(f"{len(students)} students for {args.minutes:g} min")
    faults = []
    for at, what in schedule(args.minutes, not args.no_faults):
        time.sleep(max(0.0, day.t0 + at - time.time()))
        say(f"fault {what}")
        faults.append(day.fault(what))
        say(f"  {faults[-1]}")
    for t in threads:
        t.join(timeout=max(0.0, until - time.time()) + 1200)
    res["drain_s"], res["cancelled_at_end"] = drain(day)
    since = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(day.t0 - 3600))  # the guests' clocks may lag
    sacct = day.on("controller", f"sacct -a -D -X -n -P -S {since} -o JobName,JobID,State", timeout=300).stdout
    res["engine"] = use.stop()
    res["faults"] = faults
    res["jobs"] = tally(submitted, runs_by_name(sacct))
    sl("delete-cluster", name, timeout=1200)
    res["leftovers"] = day.lab.leftovers()
    sl("engine", "stop")
    out = REPO / "bench" / "results" / f"class_day-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(res, indent=2))
    print(json.dumps(res, indent=2))
    j = res["jobs"]
    say(f"{j['submitted']} submitted: {j['completed']} completed, {j['rerun']} ran again after a fault, "
        f"{j['by_fault']} ended by a fault, {j['other']} otherwise, {j['refused']} refused, {j['lost']} lost; leftovers: "
        f"{len(res['leftovers'])}; engine {res['engine']['cpu_percent']} % CPU, {res['engine']['rss_mib_max']} MiB")
    sys.exit(0 if j["lost"] == 0 and not res["leftovers"] else 1)


if __name__ == "__main__":
    main()
