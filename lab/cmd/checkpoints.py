"""The checkpoint group: save a whole running cluster at one moment and put it back (issue 14;
lab/control/checkpoints.py). create and restore wait for the engine to finish, with progress on stderr."""

from __future__ import annotations

import time

import typer

from lab.cmd.base import OutputOpt, app, store
from lab.errors import LabError
from lab.output import Output, Progress, out, print_json

checkpoint_app = typer.Typer(help="Cluster checkpoints: save every VM of a cluster (memory and disks) and put "
                                  "the cluster back to that moment in seconds.", no_args_is_help=True)
app.add_typer(checkpoint_app, name="checkpoint")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def _wait(name: str, op_id: str, verb: str, output: Output, timeout: float = 1800) -> dict:
    st, say = store(), Progress(quiet=output == Output.json)
    t0, shown = time.monotonic(), None
    while time.monotonic() - t0 < timeout:
        op = next((o for o in st.operations(name) if o.id == op_id), None)
        if op is None:
            raise LabError(f"cluster {name} is gone: the {verb} did not finish")
        if op.status != "InProgress":
            if op.status != "Completed":
                raise LabError(f"{verb} failed: {op.message}", f"slurmlab list-cluster-events {name}")
            return {"OperationId": op.id, "Status": op.status, "Message": op.message,
                    "Seconds": round(time.monotonic() - t0, 1)}
        nodes = {n.name: n.phase for n in st.nodes(name)}
        busy = [n for n, ph in nodes.items() if ph not in ("running", "failed", "lost")]
        now = f"waiting for {', '.join(busy)} to finish what it does" if busy else f"{verb} under way"
        if now != shown:
            say(now)
            shown = now
        time.sleep(0.25)  # a restore takes seconds: a poll a second added up to one of them
    raise LabError(f"the {verb} did not finish within {timeout:.0f} s", f"slurmlab list-cluster-events {name}")


def _run(name: str, tag: str, kind: str, verb: str, output: Output) -> None:
    from lab.control import checkpoints

    op = checkpoints.request(store(), name, tag, kind, start_engine=True)
    res = _wait(name, op, verb, output)
    if output == Output.json:
        print_json({**res, "Tag": tag})
    else:
        out.print(res["Message"], markup=False)


@checkpoint_app.command("create")
def create(name: str, tag: str, output: Output = OutputOpt) -> None:
    """Save every VM of the cluster at one moment, with the engine's record of it; the cluster runs on."""
    from lab.engine.checkpointing import CHECKPOINT

    _run(name, tag, CHECKPOINT, f"checkpoint {tag}", output)


@checkpoint_app.command("restore")
def restore(name: str, tag: str, output: Output = OutputOpt) -> None:
    """Put the cluster back as the checkpoint has it: every VM with its memory (no boot), nodes added since
    removed, removed ones back, the guests' clocks set to now."""
    from lab.engine.checkpointing import RESTORE

    _run(name, tag, RESTORE, f"restore of checkpoint {tag}", output)


@checkpoint_app.command("list")
def listing(name: str, output: Output = OutputOpt) -> None:
    """The cluster's checkpoints, oldest first, with their size on disk."""
    from lab.control import checkpoints
    from lab.osutil import iso

    rows = checkpoints.listing(store(), name)
    if output == Output.json:
        print_json({"Checkpoints": [checkpoints.as_json(r) for r in rows]})
        return
    for r in rows:
        out.print(f"{r['tag']:<20} {iso(r['created'])}  {_mib(r['size']):>9}  {len(r['nodes'])} VM(s)  host {r.get('host', 'local')}"
                  + ("  (simulated)" if r.get("simulated") else ""), markup=False, highlight=False)
    if not rows:
        out.print(f"no checkpoints of {name} (make one: slurmlab checkpoint create {name} TAG)", markup=False)


@checkpoint_app.command("delete")
def delete(name: str, tag: str, output: Output = OutputOpt) -> None:
    """Remove one checkpoint and its files."""
    from lab.control import checkpoints

    checkpoints.delete(store(), name, tag)
    if output == Output.json:
        print_json({"Tag": tag, "Deleted": True})
    else:
        out.print(f"checkpoint {tag} deleted")
