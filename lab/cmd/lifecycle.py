"""The lifecycle group: `slurmlab lifecycle rerun NAME NODE|GROUP [--from DIR]`, lifecycle scripts edited
and run again in seconds on new forks (lab/control/lifecycle.py), their output followed live."""

from __future__ import annotations

import subprocess
import threading
import time
from typing import Optional

import typer

from lab import exitcodes
from lab.cmd.base import OutputOpt, app, store
from lab.errors import LabError
from lab.output import Output, Progress, err, out, print_json

LIVE = "/var/log/provision/on-create.out"  # playbooks/lifecycle.yml's slurmlab_lifecycle_live
DONE_PHASES = ("configured", "joining", "running")

lifecycle_app = typer.Typer(help="Lifecycle scripts (LifeCycleConfig): run them again after an edit.", no_args_is_help=True)
app.add_typer(lifecycle_app, name="lifecycle")


class _Follow:
    """`tail -F` of the running scripts' output on one node, each line on stdout as it comes."""

    def __init__(self, cluster: str, node: str, address: str, show: bool):
        from lab.providers import kept

        self.cluster, self.node, self.address, self.show = cluster, node, address, show
        cmd = kept.command(cluster, address, [f"sudo tail -n +1 -F {LIVE} 2>/dev/null"])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                     text=True)
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _say(self, line: str) -> None:
        with self._lock:
            self.lines.append(line)
            if self.show:
                out.print(f"{self.node} | {line}", markup=False, highlight=False)

    def _read(self) -> None:
        for line in self.proc.stdout:
            self._say(line.rstrip("\n"))

    def stop(self) -> None:
        """End the tail; then the lines it had not shown yet (scripts quicker than the tail's ssh login
        under emulation: CI's 7 s configure of a fork), read whole from the file."""
        from lab.providers import kept

        time.sleep(0.5)  # the last lines in flight
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.thread.join(5)
        try:
            r = subprocess.run(kept.command(self.cluster, self.address, [f"sudo cat {LIVE} 2>/dev/null"]),
                               capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return
        for line in r.stdout.splitlines()[len(self.lines):]:
            self._say(line)


def _follow(name: str, plan: dict, show: bool, say, timeout: float) -> list[dict]:
    """Each node from its replacement to its scripts' result: timings (s from the request), the result,
    the message of a failure. The scripts' output is followed on VMs (a simulated node runs none)."""
    from lab.providers import registry

    st, t0 = store(), time.monotonic()
    vms = not registry.info(st.cluster(name).provider).simulated
    todo = {n: {"Node": n, "Seconds": {}} for n in plan["Nodes"]}
    follows: dict[str, _Follow] = {}
    try:
        while any("Result" not in r for r in todo.values()):
            if time.monotonic() - t0 > timeout:
                waiting = ", ".join(n for n, r in todo.items() if "Result" not in r)
                raise LabError(f"no result after {timeout:.0f} s: {waiting}", f"slurmlab list-cluster-events {name}")
            for name_, r in todo.items():
                if "Result" in r:
                    continue
                n = st.node(name, name_)
                now = round(time.monotonic() - t0, 1)
                if n is None:
                    r.update(Result="Failed", Message="the node is gone")
                    continue
                new = n.generation > plan["Generations"][name_]
                if new and "NewInstance" not in r["Seconds"] and n.phase not in ("replacing", "launching", "planned"):
                    r["Seconds"]["NewInstance"] = now
                    say(f"{name_}: new instance {n.instance_id} at {n.address}, configuring")
                if vms and new and n.phase == "configuring" and name_ not in follows and n.address:
                    follows[name_] = _Follow(name, name_, n.address, show)
                if new and (n.phase in DONE_PHASES or n.phase == "failed"):
                    r["Seconds"]["Scripts"] = now
                    r["Result"] = "Succeeded" if n.phase != "failed" else "Failed"
                    if n.phase == "failed":
                        r["Message"] = n.message
                    if name_ in follows:
                        follows.pop(name_).stop()
            time.sleep(0.5)
    finally:  # a timeout or Ctrl-C leaves no `tail -F` over ssh behind
        for f in follows.values():
            f.stop()
    return list(todo.values())


@lifecycle_app.command("rerun")
def rerun(
    name: str,
    target: str = typer.Argument(..., help="a node's name, or a group's name for all its nodes"),
    source: Optional[str] = typer.Option(None, "--from", help="the edited scripts' folder (becomes the groups' "
                                         "LifeCycleConfig.SourceS3Uri); default: the folder the cluster has"),
    follow: bool = typer.Option(True, "--follow/--no-follow", help="show the scripts' output live and wait for "
                                "their result (else return once the new forks are asked for)"),
    timeout: float = typer.Option(1800, help="seconds to wait for the result at most"),
    output: Output = OutputOpt,
) -> None:
    """Run a node's (or a group's) lifecycle scripts again, as edited, on new forks of the same names; the rest of
    the cluster runs on. Exit 0 when the scripts succeeded on every node."""
    from lab.control import lifecycle

    say = Progress(quiet=output == Output.json)
    plan = lifecycle.rerun(store(), name, target, source)
    for g, folder in plan["Source"].items():
        say(f"{g}: scripts from {folder}")
    say(f"replacing {', '.join(plan['Nodes'])} with new forks (operation {plan['OperationId']})")
    if not follow:
        if output == Output.json:
            print_json({k: plan[k] for k in ("Nodes", "OperationId", "Source")})
        return
    results = _follow(name, plan, output != Output.json, say, timeout)
    if output == Output.json:
        print_json({"ClusterName": name, "OperationId": plan["OperationId"], "Source": plan["Source"], "Nodes": results})
    else:
        for r in results:
            s = r["Seconds"]
            times = ", ".join(f"{k} {v:.1f} s" for k, v in (("new fork", s.get("NewInstance")), ("scripts' result",
                                                                                               s.get("Scripts"))) if v)
            err.print(f"{r['Node']}: {r['Result']} ({times})", markup=False, highlight=False)
            if r.get("Message"):
                err.print(f"  {r['Message']}", markup=False, highlight=False)
        if all(r["Result"] == "Succeeded" for r in results):
            err.print(f"the nodes join Slurm now: slurmlab list-cluster-nodes {name}", markup=False, highlight=False)
        else:
            err.print(f"fix the scripts, then again: slurmlab lifecycle rerun {name} {target}"
                      f"{' --from ' + source if source else ''}   (output: slurmlab logs {name} NODE --lifecycle)",
                      markup=False, highlight=False)
    if any(r["Result"] != "Succeeded" for r in results):
        raise typer.Exit(exitcodes.FAILURE)
