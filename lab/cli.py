"""slurmlab's command line: parse, call the core, render. Exit codes: lab/exitcodes.py.

The commands live by area in lab/cmd/ (base: the app and the renderers; hosts: doctor, host, box;
clusters: the cluster and node operations, ssh, up; extensions: the cluster extensions; metrics: their numbers; logs: a node's
logs; serving: verify, serve; reframe: reframe-config; users; checkpoints); the capacity and engine groups are here. `slurmlab --help` lists them in the order they register.
"""

from __future__ import annotations

import importlib
import sys

import typer

from lab import exitcodes
from lab.cmd.base import OutputOpt, app
from lab.cmd.base import store as _store
from lab.errors import LabError
from lab.output import Output, err, out, print_json

# The areas register their commands in this order, the order of `slurmlab --help`: version (base),
# doctor, the host and box groups (hosts, hostlist: the lab's libvirt hosts), the cluster commands and up, verify and serve, reframe-config, the users
# group, the students group; the capacity and engine groups follow below.
for _area in ("hosts", "hostlist", "clusters", "extensions", "metrics", "logs", "lifecycle", "forward", "serving", "reframe", "users",
              "students", "checkpoints"):
    importlib.import_module(f"lab.cmd.{_area}")

capacity_app = typer.Typer(help="Simulated capacity per instance type (the lab's 'insufficient capacity' day).",
                           no_args_is_help=True)
app.add_typer(capacity_app, name="capacity")


def load_capacity_file(st, path: str) -> None:
    """Apply a capacity file: limits now, arrivals counted from now, faults if it has them."""
    from lab import capacity

    capacity.apply(st, capacity.load(path))


@capacity_app.command("show")
def capacity_show(output: Output = OutputOpt) -> None:
    """Limits per instance type, what is in use, and arrivals still to come."""
    from lab import capacity

    state = capacity.state(_store())
    rows, arrivals = state["Capacity"], state["Arrivals"]
    if output == Output.json:
        print_json(state)
        return
    for r in rows:
        out.print(f"{r['InstanceType']:<16} in use {r['InUse']}  available {'unlimited' if r['Available'] is None else r['Available']}")
    for a in arrivals:
        out.print(f"arriving: {a['Count']} x {a['InstanceType']} in {a['InSeconds']} s")
    if state.get("Faults"):
        out.print(f"faults: {state['Faults']}")
    if not rows and not arrivals:
        out.print("no limits: every instance type is unlimited (the host's memory still counts)")


@capacity_app.command("set")
def capacity_set(instance_type: str, available: str = typer.Argument(..., help="a count, or 'unlimited'")) -> None:
    """Set how many instances of a type may run at once; waiting nodes of the type retry at once."""
    from lab.spec.catalog import check_instance_type

    check_instance_type(instance_type)
    if available != "unlimited" and (not available.isdigit()):
        raise LabError(f"available '{available}' is not a count", "give a whole number >= 0, or 'unlimited'")
    st = _store()
    st.set_capacity(instance_type, None if available == "unlimited" else int(available))
    n = st.retry_now(instance_type)
    out.print(f"{instance_type}: {available} available; {n} waiting node(s) retry now")


@capacity_app.command("load")
def capacity_load(path: str) -> None:
    """Apply a capacity file (limits now, arrivals counted from now)."""
    load_capacity_file(_store(), path)
    out.print(f"capacity from {path} applied")


# ---------------------------------------------------------------- engine
engine_app = typer.Typer(help="The background engine that builds the clusters.", no_args_is_help=True)
app.add_typer(engine_app, name="engine")


@engine_app.command("status")
def engine_status(output: Output = OutputOpt) -> None:
    """Is the engine running, and where is its log."""
    from lab import paths
    from lab.engine import daemon

    pid = daemon.running_pid()
    data = {"running": bool(pid), "pid": pid, "log": str(paths.home() / "engine.log"), "state": str(paths.home())}
    print_json(data) if output == Output.json else out.print(f"engine running={data['running']} pid={pid} log={data['log']}")


@engine_app.command("start")
def engine_start() -> None:
    """Start the engine if it is not running (any cluster command does this by itself)."""
    from lab.engine import daemon

    out.print(f"engine running, pid {daemon.ensure_running()}")


@engine_app.command("stop")
def engine_stop() -> None:
    """Stop the engine (clusters keep their VMs; the next command resumes the work)."""
    from lab.engine import daemon

    out.print("engine stopped" if daemon.stop() else "engine was not running")


def main() -> None:
    try:
        app()
    except LabError as e:
        err.print(f"[red]error:[/red] {e.message}", markup=True, highlight=False)
        if e.fix:
            err.print(f"  fix: {e.fix}", markup=False, highlight=False)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(exitcodes.INTERRUPTED)
