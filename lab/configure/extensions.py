"""The real sagemaker-observability extension seen from the lab (docs/adr/0017-cluster-extensions.md):
the role's variables from an extension's configuration (playbooks/extension.yml, roles/observability),
and the probe: Prometheus on the controller asked over the kept ssh connection (the one
lab/configure/slurmstate.py polls Slurm through; the box has python3 but no curl) for its targets and one
instant query, turned into the members that do not answer and one metrics sample.

Everything but `probe`'s ssh call is pure: `role_vars`, `parse` and the functions it uses work on
records and Prometheus's JSON answers (tests/unit/test_observability.py feeds them recorded ones).
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time

from lab.configure.base import Extension, Probe
from lab.configure.inventory import ClusterContext
from lab.spec.extensions import scrape_interval, settings

PROMETHEUS_PORT = 9090
PROBE_TIMEOUT_S = 60
# every series the sample needs, and whether each target (node exporters, the Slurm exporter) answered
# at least once in the last two scrapes (`up_recent`): one missed scrape (a restart during an update, a slow emulated node) is not
# enough to call a member unhealthy
SERIES = '{__name__=~"slurm_.+|node_load1|node_memory_MemTotal_bytes|node_memory_MemAvailable_bytes"}'
# (a label of its own: `or` keeps only series whose labels, the name aside, the left side lacks)
RECENT = ('label_replace(label_replace(max_over_time(up[%ds]), "__name__", "up_recent", "", ""),'
          ' "probe", "recent", "", "")')
NODE_STATES = ("idle", "allocated", "mixed", "down", "drain", "other")
JOB_STATES = ("running", "pending")
MIB = 1048576

# Run with python3 on the controller: Prometheus's targets and the query, as one JSON line
REMOTE = """
import json, urllib.parse, urllib.request
base = "http://127.0.0.1:%d/api/v1/"
out = {}
try:
    for key, path in (("targets", "targets?state=active"), ("query", "query?" + urllib.parse.urlencode({"query": %r}))):
        with urllib.request.urlopen(base + path, timeout=20) as r:
            out[key] = json.load(r)
except Exception as e:
    out["error"] = "%%s: %%s" %% (type(e).__name__, e)
print(json.dumps(out))
"""


def query(ext: Extension) -> str:
    """The probe's one instant query: SERIES and `up_recent` over two scrape intervals (and a little)."""
    window = 2 * scrape_interval(settings(ext.config)) + 5
    return f"{SERIES} or {RECENT % window}"


def remote(ext: Extension) -> str:
    """The Python the probe runs on the controller."""
    return REMOTE % (PROMETHEUS_PORT, query(ext))


def levels(ext: Extension) -> tuple[str, str]:
    """(nodeMetrics level, slurmMetrics level) of the extension's configuration."""
    mp = settings(ext.config).get("metricsProvider") or {}
    return (mp.get("nodeMetrics") or {}).get("level", "BASIC"), (mp.get("slurmMetrics") or {}).get("level", "BASIC")


def role_vars(ext: Extension, state: str = "present") -> dict:
    """roles/observability's variables (playbooks/extension.yml's extravars) for `ext`."""
    node, slurm = levels(ext)
    return {"observability_state": state, "observability_members": sorted(ext.members),
            "observability_node_level": node, "observability_slurm_level": slurm,
            "observability_scrape_interval": scrape_interval(settings(ext.config))}


# ------------------------------------------------------------------------------------ the probe
def probe(ctx: ClusterContext, ext: Extension) -> Probe:
    """One look through Prometheus on the controller; a controller that cannot be asked is the one
    member named (nothing is known of the others), with no sample."""
    from lab.configure import slurmstate

    ctl = next((n for n in ctx.nodes if n.name == ext.controller), None)
    if ctl is None or not ctl.address:
        return Probe(unhealthy={ext.controller: "the controller has no address"})
    try:
        p = slurmstate.run_on(ctx, ctl.address, "python3 -c " + shlex.quote(remote(ext)), PROBE_TIMEOUT_S, shared=True)
    except subprocess.TimeoutExpired:
        slurmstate._drop_master(ctx, ctl.address)
        return Probe(unhealthy={ext.controller: f"Prometheus did not answer within {PROBE_TIMEOUT_S} s"})
    if p.returncode == 255:
        slurmstate._drop_master(ctx, ctl.address)
        return Probe(unhealthy={ext.controller: f"cannot ssh to the controller: {p.stderr.strip()[-200:]}"})
    try:
        doc = json.loads(p.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        said = (p.stderr or p.stdout).strip().splitlines()
        return Probe(unhealthy={ext.controller: f"the probe printed no answer (exit {p.returncode}"
                                + (f": {said[-1][:200]})" if said else ")")})
    return parse(doc, ext, time.time())


def parse(doc: dict, ext: Extension, now: float) -> Probe:
    """The probe's answer (`{"targets": ..., "query": ...}` or `{"error": ...}`) as a Probe. No sample
    while Prometheus holds no Slurm numbers (not scraped yet after an install, or the Slurm exporter does
    not answer): a gap in the charts, not a row of zeros."""
    if doc.get("error") or not isinstance(doc.get("targets"), dict):
        return Probe(unhealthy={ext.controller: f"Prometheus does not answer: {doc.get('error') or 'no targets'}"})
    targets = active_targets(doc["targets"])
    series = vector(doc.get("query") or {})
    recent = {(labels.get("job", ""), labels.get("node", "")): v for labels, v in series
              if labels.get("__name__") == "up_recent"}
    has_slurm = any(labels.get("__name__") == "slurm_nodes" for labels, _ in series)
    return Probe(unhealthy=unhealthy(targets, ext, recent),
                 sample=sample(series, targets, ext, now) if has_slurm else None)


def active_targets(doc: dict) -> dict[tuple[str, str], dict]:
    """(job, node label) -> {health, error} of /api/v1/targets' active targets."""
    out = {}
    for t in (doc.get("data") or {}).get("activeTargets") or ():
        labels = t.get("labels") or {}
        out[(labels.get("job", ""), labels.get("node", ""))] = {"health": t.get("health", "unknown"),
                                                               "error": t.get("lastError") or ""}
    return out


def vector(doc: dict) -> list[tuple[dict, float]]:
    """(labels with __name__, value) of an instant query's vector result."""
    out = []
    for r in (doc.get("data") or {}).get("result") or ():
        try:
            out.append((r.get("metric") or {}, float(r["value"][1])))
        except (KeyError, IndexError, TypeError, ValueError):
            continue
    return out


def unhealthy(targets: dict[tuple[str, str], dict], ext: Extension,
              recent: dict[tuple[str, str], float] | None = None) -> dict[str, str]:
    """Members whose node exporter does not answer, and the controller when the Slurm exporter does not:
    the target's last scrape failed and none in the last two scrape intervals worked (`recent`: (job,
    node) -> 1 when one did). A target not scraped yet is not counted."""
    out: dict[str, str] = {}
    recent = recent or {}

    def silent(key: tuple[str, str]) -> bool:
        return targets[key]["health"] == "down" and not recent.get(key)

    for m in ext.members:
        if ("node", m) not in targets:
            out[m] = "Prometheus has no target for its node exporter"
        elif silent(("node", m)):
            out[m] = f"node exporter does not answer ({targets['node', m]['error'] or 'down'})"
    slurm = next((key for key in targets if key[0] == "slurm"), None)
    why = ("Prometheus has no target for the Slurm exporter" if slurm is None
           else f"Slurm exporter does not answer ({targets[slurm]['error'] or 'down'})" if silent(slurm) else "")
    if why:
        out[ext.controller] = f"{out[ext.controller]}; {why}" if ext.controller in out else why
    return out


def sample(series: list[tuple[dict, float]], targets: dict[tuple[str, str], dict], ext: Extension,
           now: float) -> dict:
    """The metrics sample (docs/adr/0017's shape, `"simulated": false`)."""
    by: dict[str, list[tuple[dict, float]]] = {}
    for labels, v in series:
        by.setdefault(labels.get("__name__", ""), []).append((labels, v))

    def one(name: str) -> int:
        return int(sum(v for _, v in by.get(name, ())))

    def table(name: str, key: str) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for labels, v in by.get(name, ()):
            if labels.get("state") in JOB_STATES and labels.get(key):
                out.setdefault(labels[key], dict.fromkeys(JOB_STATES, 0))[labels["state"]] = int(v)
        return out

    nodes = dict.fromkeys(NODE_STATES, 0)
    for labels, v in by.get("slurm_nodes", ()):
        nodes[labels.get("state") if labels.get("state") in nodes else "other"] += int(v)
    jobs = dict.fromkeys(JOB_STATES, 0)
    for labels, v in by.get("slurm_jobs", ()):
        if labels.get("state") in jobs:
            jobs[labels["state"]] = int(v)
    slurm = {"nodes": nodes, "jobs": jobs,
             "cpus": {"allocated": one("slurm_cpus_allocated"), "total": one("slurm_cpus_total")},
             "memory_mib": {"allocated": one("slurm_memory_allocated_bytes") // MIB,
                            "total": one("slurm_memory_total_bytes") // MIB},
             "partitions": table("slurm_partition_jobs", "partition")}
    if levels(ext)[1] == "ADVANCED":
        slurm["users"] = table("slurm_user_jobs", "user")

    per_node: dict[str, dict[str, float]] = {}
    for name in ("node_load1", "node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"):
        for labels, v in by.get(name, ()):
            per_node.setdefault(labels.get("node", ""), {})[name] = v
    out_nodes = {}
    for m in sorted(ext.members):
        t, got = targets.get(("node", m)), per_node.get(m, {})
        if t is None or t["health"] != "up":
            out_nodes[m] = {"up": False}
            continue
        entry: dict = {"up": True}
        if "node_load1" in got:
            entry["load1"] = round(got["node_load1"], 2)
        if "node_memory_MemTotal_bytes" in got:
            total = got["node_memory_MemTotal_bytes"]
            entry["mem_used_mib"] = int((total - got.get("node_memory_MemAvailable_bytes", total)) // MIB)
            entry["mem_total_mib"] = int(total // MIB)
        out_nodes[m] = entry
    return {"time": now, "simulated": False, "slurm": slurm, "nodes": out_nodes}
