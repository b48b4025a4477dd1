"""`slurmlab metrics NAME`: the numbers the console's metrics view draws, in the terminal (issue 30).

The engine keeps the cluster's newest metrics samples (docs/adr/0017-cluster-extensions.md's shape)
while its sagemaker-observability extension runs. Text: the newest sample as a summary (Slurm's nodes
by state, jobs, CPUs and memory allocated, partitions, users when the configuration asks for them,
every node's load), with `--last N` a line per sample before it. JSON: the extension's status and the
samples, oldest first, as GET /_lab/metrics answers.
"""

from __future__ import annotations

import time
from typing import Optional

import typer

from lab.cmd.base import OutputOpt, app, store
from lab.errors import UsageError
from lab.output import Output, out, print_json

KEPT = 120  # the store keeps the newest 120 samples of a cluster
STATES = ("idle", "allocated", "mixed", "down", "drain", "other")


def _say(text: str) -> None:
    out.print(text, markup=False, highlight=False)


def _extension(st, name: str) -> dict | None:
    """The cluster's sagemaker-observability extension: name, version, status, nodes, health (None: none)."""
    from lab.control import extensions
    from lab.spec.extensions import OBSERVABILITY

    from lab.errors import NotFound

    if st.extension(name, OBSERVABILITY) is None:
        return None
    try:
        d = extensions.describe(st, name, OBSERVABILITY)
    except NotFound:  # deleted meanwhile
        return None
    x = d["ExtensionDetails"]
    return {"ExtensionName": x["ExtensionName"], "ExtensionVersion": x["ExtensionVersion"], "Status": x["Status"],
            "NodeSummary": d["NodeSummary"], **({"Health": d["Health"]} if "Health" in d else {})}


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "-"


def _clock(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "--:--:--"


def _counts(d: dict) -> str:
    return f"running {d.get('running', 0)}, pending {d.get('pending', 0)}"


def summary(name: str, ext: dict | None, sample: dict, kept: int, now: float | None = None) -> list[str]:
    """The newest sample as lines a person reads."""
    now = time.time() if now is None else now
    slurm, nodes = sample.get("slurm") or {}, sample.get("nodes") or {}
    t = sample.get("time")
    head = f"{name}  sample of {_clock(t)} ({max(0, round(now - t)) if t else '?'} s ago, {kept} kept)"
    if ext:
        head += f"  {ext['ExtensionName']} {ext['ExtensionVersion']} {ext['Status']}"
    lines = [head + ("  simulated" if sample.get("simulated") else "")]
    for issue in (ext or {}).get("Health", {}).get("Issues", []):
        lines.append(f"  {issue['Code']} ({issue['NodeCount']} node(s)): {issue['Message']}")
    states = slurm.get("nodes") or {}
    lines.append("  Slurm nodes  " + "  ".join(f"{s} {states.get(s, 0)}" for s in STATES))
    lines.append(f"  jobs         {_counts(slurm.get('jobs') or {})}")
    cpus, mem = slurm.get("cpus") or {}, slurm.get("memory_mib") or {}
    lines.append(f"  CPUs         {cpus.get('allocated', 0)} of {cpus.get('total', 0)} allocated "
                 f"({_pct(cpus.get('allocated', 0), cpus.get('total', 0))})")
    lines.append(f"  memory       {mem.get('allocated', 0)} of {mem.get('total', 0)} MiB allocated "
                 f"({_pct(mem.get('allocated', 0), mem.get('total', 0))})")
    for title, key in (("partition", "partitions"), ("user", "users")):
        for k, v in sorted((slurm.get(key) or {}).items()):
            lines.append(f"  {title:<12} {k}: {_counts(v)}")
    if nodes:
        lines.append(f"  {'node':<28} {'load1':>6}  memory used")
    for n, v in sorted(nodes.items()):
        if not v.get("up", True):
            lines.append(f"  {n:<28} {'down':>6}  (its exporter does not answer)")
            continue
        used, total = v.get("mem_used_mib", 0), v.get("mem_total_mib", 0)
        lines.append(f"  {n:<28} {v.get('load1', 0):>6.2f}  {used} of {total} MiB ({_pct(used, total)})")
    return lines


def history(samples: list[dict]) -> list[str]:
    """One line per sample, oldest first: the view's charts as a table."""
    lines = [f"  {'time':<8}  {'idle':>4} {'alloc':>5} {'mixed':>5} {'down':>4} {'drain':>5}  {'run':>4} {'pend':>4}  "
             f"{'CPU':>4} {'mem':>4}  {'max load':>8}"]
    for s in samples:
        sl = s.get("slurm") or {}
        st, jobs, cpus, mem = sl.get("nodes") or {}, sl.get("jobs") or {}, sl.get("cpus") or {}, sl.get("memory_mib") or {}
        loads = [v.get("load1", 0) for v in (s.get("nodes") or {}).values() if v.get("up", True)]
        lines.append(f"  {_clock(s.get('time')):<8}  {st.get('idle', 0):>4} {st.get('allocated', 0):>5} {st.get('mixed', 0):>5} "
                     f"{st.get('down', 0):>4} {st.get('drain', 0):>5}  {jobs.get('running', 0):>4} {jobs.get('pending', 0):>4}  "
                     f"{_pct(cpus.get('allocated', 0), cpus.get('total', 0)):>4} "
                     f"{_pct(mem.get('allocated', 0), mem.get('total', 0)):>4}  "
                     f"{max(loads) if loads else 0:>8.2f}")
    return lines


@app.command("metrics")
def metrics(
    name: str,
    last: Optional[int] = typer.Option(None, "--last", help=f"samples to show, newest last (1..{KEPT}; text: the "
                                       f"newest only, json: every kept one)"),
    output: Output = OutputOpt,
) -> None:
    """The cluster's metrics from its sagemaker-observability extension: Slurm's nodes by state, jobs, CPUs
    and memory allocated, every node's load (the console's metrics view draws them over time)."""
    from lab.control.views import get

    if last is not None and not 1 <= last <= KEPT:
        raise UsageError(f"--last: {last} is not a whole number from 1 to {KEPT}", f"give e.g. --last 10 (the store keeps {KEPT})")
    st = store()
    get(st, name)  # NotFound for a cluster that is not there
    ext = _extension(st, name)
    samples = st.extension_samples(name, last or (KEPT if output == Output.json else 1))
    if output == Output.json:
        print_json({"ClusterName": name, "Extension": ext, "Samples": samples})
        return
    if not samples:
        why = (f"{ext['ExtensionName']} is {ext['Status']}: the first sample comes one scrape interval after it is "
               f"Active (slurmlab describe-cluster-extension {name})" if ext else
               f"it has no sagemaker-observability extension (slurmlab create-cluster-extension {name})")
        _say(f"no metrics of {name} yet: {why}")
        return
    kept = len(st.extension_samples(name, KEPT))
    for line in summary(name, ext, samples[-1], kept):
        _say(line)
    if len(samples) > 1:
        _say(f"the last {len(samples)} samples (CPU and mem: allocated):")
        for line in history(samples):
            _say(line)
