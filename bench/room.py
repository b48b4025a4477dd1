"""Benchmark: a workshop room across two hosts, one of them remote (issue 29, docs/workshop.md §10).

Real VMs; run as root on a host set up by `make up` (libvirtd, the box and its templates), with no
other VMs running. Everything happens in a private $SLURMLAB_HOME (a new /tmp/slurmlab-bench-room-*,
kept for its logs):

1. `slurmlab host simulate room-b --remote`: a second host reached only over qemu+ssh (lab/host/rig.py),
   then `slurmlab host prepare room-b` (its templates uploaded before the class; `--cold-host`: not).
   Each host is limited to one student's cluster and a little more (`host limit`), so the clusters
   spread by room: the first placed goes local (ties go local), the next to room-b, and so on.
2. `slurmlab students add s1..sN --max-clusters 1`, an instructor, `slurmlab serve --auth --port 0`.
3. Every student at once, with boto3 and their own key: CreateCluster (a controller and one compute
   node, examples/lifecycle), then DescribeCluster until InService and `srun -N1 hostname` on its
   controller until it answers. Per student, in seconds from their create: time_to_inservice_s,
   time_to_first_job_s; its host (`Lab.Host`).
4. Each student's second CreateCluster: refused by the quota (ResourceLimitExceeded expected).
   A checkpoint of a cluster on room-b, then its restore: both in room-b's pool (ADR 0035); their seconds
   as the CLI waits, and the restore over that cluster's time_to_first_job_s (its rebuild); srun after.
5. Every student deletes their cluster; `host remove room-b`; then nothing of any student's cluster may
   be left on either host (domains, volumes incl. the uploaded munge key, networks: lab.providers.
   leftovers.find) and no rig process.

Measured: all_first_job_s (the last student's first job: when the whole room can work), per host the
students' median time_to_first_job_s, and the ratio remote / local of those medians (nodes on both
hosts are forks of the templates; the remote's go up to its pool first: ADR 0026). From engine.log, each Ansible run's
seconds per playbook and host, and remote / local of their means (the runs share the two cores, so this
is the room's cost, not ssh's alone).

Output: the JSON on stdout and in bench/results/room-<time>.json; progress on stderr. Exit 1 when a
student's cluster did not run a job, a refusal did not come, or something was left.

    .venv/bin/python bench/room.py [--students N]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REMOTE = "room-b"
ROLE = "arn:aws:iam::000000000000:role/lab"
CLUSTER_MIB = 768 + 768  # ml.t3.medium controller + ml.c5.large compute on this lab's shapes


def say(msg: str) -> None:
    print(f"[room {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sl(*args: str, check: bool = True, timeout: float = 1800) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "lab", *args], capture_output=True, text=True, timeout=timeout,
                       stdin=subprocess.DEVNULL, cwd=REPO)
    if check and p.returncode != 0:
        raise RuntimeError(f"slurmlab {' '.join(args)} exited {p.returncode}: {p.stdout[-1500:]}{p.stderr[-1500:]}")
    return p


def client(url: str, key: dict):
    import boto3

    return boto3.client("sagemaker", endpoint_url=url, region_name="us-east-1",
                        aws_access_key_id=key["AccessKeyId"], aws_secret_access_key=key["SecretAccessKey"])


def request(name: str) -> dict:
    lifecycle = {"SourceS3Uri": str(REPO / "examples" / "lifecycle"), "OnCreate": "on_create.sh"}
    return dict(ClusterName=name, NodeProvisioningMode="Continuous", NodeRecovery="Automatic", InstanceGroups=[
        {"InstanceGroupName": "controller", "InstanceType": "ml.t3.medium", "InstanceCount": 1, "ExecutionRole": ROLE,
         "SlurmConfig": {"NodeType": "Controller"}, "LifeCycleConfig": lifecycle},
        {"InstanceGroupName": "compute", "InstanceType": "ml.c5.large", "InstanceCount": 1, "ExecutionRole": ROLE,
         "SlurmConfig": {"NodeType": "Compute", "PartitionNames": ["dev"]}, "LifeCycleConfig": lifecycle}])


def one_student(url: str, key: dict, name: str, out: dict, timeout: float) -> None:
    c = client(url, key)
    t0 = time.monotonic()
    c.create_cluster(**request(name))
    while time.monotonic() - t0 < timeout:
        status = c.describe_cluster(ClusterName=name)["ClusterStatus"]
        if status == "InService" and "time_to_inservice_s" not in out:
            out["time_to_inservice_s"] = round(time.monotonic() - t0, 1)
            say(f"{name}: InService after {out['time_to_inservice_s']} s")
        if status in ("Failed", "RollingBack"):
            out["error"] = f"cluster {status}"
            return
        if "time_to_inservice_s" in out:
            p = sl("ssh", name, "controller", "--", "timeout 60 srun --immediate=30 -N1 hostname", check=False, timeout=120)
            if p.returncode == 0 and p.stdout.strip().startswith(f"{name}-compute"):
                out["time_to_first_job_s"] = round(time.monotonic() - t0, 1)
                say(f"{name}: first job after {out['time_to_first_job_s']} s")
                return
        time.sleep(5)
    out["error"] = f"no job within {timeout:.0f} s"


def remote_checkpoint(name: str, row: dict, failures: list[str]) -> dict:
    """Checkpoint `name` (on the remote host), then restore it: the seconds of each as the CLI waits for
    them, and the restore over the cluster's own first job (its rebuild)."""
    out: dict = {"cluster": name}
    for what, args in (("create", ("checkpoint", "create", name, "t1", "--output", "json")),
                       ("restore", ("checkpoint", "restore", name, "t1", "--output", "json"))):
        t = time.monotonic()
        p = sl(*args, check=False, timeout=600)
        out[f"{what}_s"] = round(time.monotonic() - t, 1)
        if p.returncode:
            failures.append(f"checkpoint {what} on the remote host failed: {(p.stdout + p.stderr).strip()[-300:]}")
            return out
        out[f"{what}_message"] = json.loads(p.stdout).get("Message")
    listed = json.loads(sl("checkpoint", "list", name, "--output", "json").stdout)["Checkpoints"]
    out["host"], out["size_bytes"] = listed[0].get("Host"), listed[0]["SizeBytes"]
    p = sl("ssh", name, "controller", "--", "timeout 60 srun --immediate=30 -N1 hostname", check=False, timeout=120)
    out["srun_after_restore"] = p.returncode == 0
    if p.returncode:
        failures.append("no job ran after the restore on the remote host")
    if "time_to_first_job_s" in row:
        out["ratio_restore_over_rebuild"] = round(out["restore_s"] / row["time_to_first_job_s"], 3)
    return out


def ansible_runs(engine_log: Path, host_of: dict[str, str]) -> dict:
    """Seconds of each Ansible run, per playbook and host (engine.log's runner lines)."""
    runs: dict[str, dict[str, list[float]]] = {}
    pat = re.compile(r"lab\.configure\.runner INFO (\S+) limit=\[([^\]]*)\] ok=True .* ([0-9.]+)s$")
    for line in engine_log.read_text().splitlines():
        m = pat.search(line)
        if not m:
            continue
        first = m.group(2).split(",")[0].strip(" '")
        cluster = first.rsplit("-", 2)[0]
        if cluster in host_of:
            runs.setdefault(m.group(1), {}).setdefault(host_of[cluster], []).append(float(m.group(3)))
    return runs


def _interrupt(*_) -> None:
    raise KeyboardInterrupt  # SIGTERM as Ctrl-C: the teardown below still runs


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--students", type=int, default=2, help="students (clusters), spread over local and room-b")
    ap.add_argument("--cold-host", action="store_true", help="no `host prepare`: the remote's templates go up "
                    "with its first forks, inside the students' time")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a student waits for a first job")
    a = ap.parse_args(argv)
    if a.students < 2:
        ap.error("--students must be 2 or more: one cluster per host at least")
    return a


def main() -> int:
    a = parse_args()
    home = Path(tempfile.mkdtemp(prefix="slurmlab-bench-room-"))
    os.environ["SLURMLAB_HOME"] = str(home)
    say(f"SLURMLAB_HOME={home}")
    names = [f"room{i}" for i in range(1, a.students + 1)]
    result: dict = {"students": a.students, "hosts": ["local", REMOTE], "home": str(home),
                    "date": time.strftime("%Y-%m-%dT%H:%M:%S")}
    server = None
    failures: list[str] = []
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        t = time.monotonic()
        sl("host", "simulate", REMOTE, "--remote")
        result["rig_start_s"] = round(time.monotonic() - t, 1)
        if not a.cold_host:  # the remote's templates go up before the class, as `make up` builds the local ones
            t = time.monotonic()
            result["host_prepare"] = json.loads(sl("host", "prepare", REMOTE, "--shape", "1cpu-768mib", "--output", "json",
                                                 timeout=900).stdout)
            result["host_prepare_s"] = round(time.monotonic() - t, 1)
        per_host = (a.students + 1) // 2
        for h in ("local", REMOTE):
            sl("host", "limit", h, "--memory-mib", str(per_host * CLUSTER_MIB + 400))
        sl("capacity", "set", "ml.c5.large", str(a.students + 2))
        sl("capacity", "set", "ml.t3.medium", str(a.students + 2))
        keys = {n: json.loads(sl("students", "add", f"s-{n}", "--max-clusters", "1", "--output", "json").stdout)
                for n in names}
        teacher = json.loads(sl("students", "add", "teacher", "--instructor", "--output", "json").stdout)
        log = open(home / "serve.log", "w")
        server = subprocess.Popen([sys.executable, "-m", "lab", "serve", "--auth", "--provider", "vagrant", "--port", "0"],
                                  stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO)
        while not (home / "serve.json").exists():
            if server.poll() is not None:
                raise RuntimeError(f"slurmlab serve exited: {(home / 'serve.log').read_text()[-1500:]}")
            time.sleep(0.2)
        time.sleep(0.3)
        url = json.loads((home / "serve.json").read_text())["url"]
        rows = {n: {"student": f"s-{n}", "cluster": n} for n in names}
        threads = []
        for n in names:  # one after the other within a second: the room's first minute
            th = threading.Thread(target=one_student, args=(url, keys[n], n, rows[n], a.timeout), daemon=True)
            th.start()
            threads.append(th)
            time.sleep(1)
        for th in threads:
            th.join()
        for n in names:
            rows[n]["host"] = json.loads(sl("describe-cluster", n, "--output", "json").stdout)["Lab"]["Host"]
            if "time_to_first_job_s" not in rows[n]:
                failures.append(f"{n}: {rows[n].get('error', 'no first job')}")
        result["clusters"] = list(rows.values())
        by_host: dict[str, list[float]] = {}
        for r in rows.values():
            if "time_to_first_job_s" in r:
                by_host.setdefault(r["host"], []).append(r["time_to_first_job_s"])
        result["placement"] = {h: sorted(r["cluster"] for r in rows.values() if r["host"] == h) for h in ("local", REMOTE)}
        result["first_job_median_s"] = {h: statistics.median(v) for h, v in by_host.items()}
        done = [r["time_to_first_job_s"] for r in rows.values() if "time_to_first_job_s" in r]
        result["all_first_job_s"] = max(done) if len(done) == len(rows) else None
        if "local" in by_host and REMOTE in by_host:
            result["ratio_remote_over_local_first_job"] = round(
                result["first_job_median_s"][REMOTE] / result["first_job_median_s"]["local"], 2)
        # refusals: the quota, and a checkpoint on the remote host
        try:
            client(url, keys[names[0]]).create_cluster(**request(f"{names[0]}x"))
            failures.append("a second cluster over the quota was accepted")
            result["quota_refusal"] = None
        except Exception as e:  # noqa: BLE001 - botocore's ClientError, its code is what we keep
            result["quota_refusal"] = getattr(e, "response", {}).get("Error", {}).get("Code", str(e))
        on_remote = result["placement"][REMOTE]
        if on_remote:  # a checkpoint on the remote host: taken and restored in its pool (issue 47)
            result["checkpoint_on_remote"] = remote_checkpoint(on_remote[0], rows[on_remote[0]], failures)
        result["ansible_runs_s"] = ansible_runs(home / "engine.log", {r["cluster"]: r["host"] for r in rows.values()})
        means = {pb: {h: round(statistics.mean(v), 1) for h, v in hosts.items()} for pb, hosts in result["ansible_runs_s"].items()}
        result["ansible_mean_s"] = means
        result["ansible_ratio_remote_over_local"] = {pb: round(m[REMOTE] / m["local"], 2) for pb, m in means.items()
                                                     if REMOTE in m and "local" in m}
        # teardown, each student their own
        t = time.monotonic()
        for n in names:
            client(url, keys[n]).delete_cluster(ClusterName=n)
        inst = client(url, teacher)
        while any(c["ClusterName"] in names for c in inst.list_clusters()["ClusterSummaries"]):
            if time.monotonic() - t > 900:
                failures.append("clusters not deleted within 900 s")
                break
            time.sleep(3)
        result["teardown_s"] = round(time.monotonic() - t, 1)
    except KeyboardInterrupt:
        failures.append("interrupted")
    except Exception as e:  # noqa: BLE001 - reported in the JSON, then the teardown below
        failures.append(f"{type(e).__name__}: {e}")
    finally:
        if server is not None:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
        for n in names:
            sl("delete-cluster", n, check=False, timeout=900)
        from lab.providers import leftovers

        result["left_on_hosts"] = {n: leftovers.find(n) for n in names}
        sl("host", "remove", REMOTE, check=False)
        sl("host", "limit", "local", "--memory-mib", "0", check=False)
        sl("engine", "stop", check=False)
        from lab.host import simulated

        result["rig_left"] = [str(p) for p in (simulated.folder(REMOTE), Path("/run/netns", simulated.netns(REMOTE))) if p.exists()]
    if any(result["left_on_hosts"].values()) or result["rig_left"]:
        failures.append("something was left")
    result["failures"] = failures
    text = json.dumps(result, indent=2)
    print(text)
    dest = REPO / "bench" / "results" / f"room-{time.strftime('%Y%m%d-%H%M%S')}.json"
    dest.write_text(text + "\n")
    say(f"wrote {dest}; {'FAILED: ' + '; '.join(failures) if failures else 'every student ran a job, nothing left'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
