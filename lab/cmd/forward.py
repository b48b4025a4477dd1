"""The ways in to a node. `slurmlab ssh NAME NODE [-- COMMAND]`: a shell, or a command over a connection
kept for a minute (lab/providers/kept.py). `slurmlab forward NAME NODE PORT`: a loopback port of this
machine to a port of a node, until Ctrl-C; `slurmlab open NAME`: the same to the cluster's JupyterHub.

As `kubectl port-forward` does: the cluster's network stays where it is (the lab's namespace, or a
remote host); this machine gets 127.0.0.1:LOCAL, and every connection to it is made to the node from
there (lab/providers/forward.py). For a web page on a node: Prometheus on the controller of a
cluster with sagemaker-observability is `slurmlab forward NAME controller 9090`.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Optional

import typer

from lab.cmd.base import OutputOpt, app, node_named, store, vm_node
from lab.errors import LabError
from lab.output import Output, out, print_json


@app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def ssh(ctx: typer.Context, name: str, node: str = typer.Argument(..., help="node name, or a group name for its first node")) -> None:
    """Open a shell on a node (or run the command given after --, over a connection kept for a minute),
    with the cluster's own key."""
    from lab.providers import kept
    from lab.providers.reach import cluster_ssh_exe
    from lab.workspace import ClusterDir

    match = node_named(store(), name, node)
    if ctx.args and not ctx.args[0].startswith("-"):  # a command (not ssh's own options): kept connection
        cmd = kept.command(name, match.address, ctx.args)
        os.execv(cmd[0], cmd)
    cmd = [cluster_ssh_exe(name), "-i", str(ClusterDir(name).ssh_key), "-o", "StrictHostKeyChecking=no",
           "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"vagrant@{match.address}", *ctx.args]
    os.execv(cmd[0], cmd)


@app.command("forward")
def forward(
    name: str = typer.Argument(..., help="cluster name"),
    node: str = typer.Argument(..., help="node name, or a group name for its first node"),
    port: int = typer.Argument(..., min=1, max=65535, help="the node's TCP port"),
    local_port: int = typer.Option(0, "--local-port", min=0, max=65535, help="port on 127.0.0.1 (0: a free one)"),
    output: Output = OutputOpt,
) -> None:
    """Forward 127.0.0.1:LOCAL of this machine to PORT of a node, until Ctrl-C (nothing binds beyond loopback)."""
    match = vm_node(store(), name, node, "have no ports")
    f, dial = _listen(name, match.address, port, local_port)
    local = f"127.0.0.1:{f.port}"
    if output == Output.json:
        print_json({"ClusterName": name, "Node": match.name, "Port": port, "Local": local, "Url": f"http://{local}/"})
    else:
        out.print(f"forwarding {local} -> {match.name}:{port} (Ctrl-C stops)\n  http://{local}/",
                  markup=False, highlight=False)
    _serve(f, dial)


@app.command("open")
def open_hub(
    name: str = typer.Argument(..., help="cluster name"),
    local_port: int = typer.Option(0, "--local-port", min=0, max=65535, help="port on 127.0.0.1 (0: a free one)"),
    browser: bool = typer.Option(True, "--browser/--no-browser", help="open the page in this machine's browser"),
    output: Output = OutputOpt,
) -> None:
    """The cluster's JupyterHub (Lab.Jupyter) on this machine's loopback until Ctrl-C: prints its URL and
    opens it in a browser where there is one."""
    import webbrowser

    from lab.control import jupyter

    st = store()
    login = jupyter.hub_node(st, name)
    f, dial = _listen(name, login.address, jupyter.PORT, local_port)
    url = f"http://127.0.0.1:{f.port}{jupyter.path(name)}"
    if output == Output.json:
        print_json({"ClusterName": name, "Node": login.name, "Url": url})
    else:
        out.print(f"JupyterHub of {name} on {login.name} (Ctrl-C stops)\n  {url}\n"
                  f"  log in as a student of `slurmlab users show {name}` with the shared password",
                  markup=False, highlight=False)
    if browser and output != Output.json:
        try:
            webbrowser.open(url)
        except webbrowser.Error:
            pass  # no browser here: the URL is printed
    _serve(f, dial)


def _listen(name: str, address: str, port: int, local_port: int):
    """A Forward on 127.0.0.1:local_port to address:port, and its dialer (lab/providers/forward.py)."""
    from lab.providers import forward as fwd
    from lab.providers import placement

    dial = fwd.dialer_for(placement.host_of(name))
    try:
        return fwd.Forward(dial, address, port, local_port), dial
    except OSError as e:
        dial.close()
        raise LabError(f"cannot listen on 127.0.0.1:{local_port}: {e.strerror}",
                       "choose another --local-port, or 0 for a free one") from None


def _serve(f, dial) -> None:
    """Until Ctrl-C or SIGTERM; then nothing of it is left."""
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, lambda *_: f.close())
    try:
        f.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        f.close()
        dial.close()


@app.command("room")
def room(
    name: str = typer.Argument(..., help="cluster name"),
    address: Optional[str] = typer.Option(None, "--address", help="the address of this machine to listen on (default "
                                          "$SLURMLAB_ROOM_ADDRESS or 0.0.0.0: every address)"),
    output: Output = OutputOpt,
) -> None:
    """Open the cluster's room until Ctrl-C or the cluster's deletion: its login node's ssh for the students,
    on the cluster's port of this machine (`slurmlab serve` opens it by itself). Students only: never the
    admin user; repeated failed logins from one address are slowed; each connection is written to room.log."""
    import time

    from lab import settings, users
    from lab.control import clusters
    from lab.room import door, ports
    from lab.workspace import ClusterDir

    st = store()
    why = ports.no_room(clusters.get(st, name))
    if why == ports.SIMULATED:
        raise LabError(f"{name} is a simulated cluster: its login node is not a VM and runs no sshd",
                       "create the cluster with the default (real VM) provider")
    if why == ports.NO_ACCOUNTS:
        raise LabError(f"cluster '{name}' has no student accounts: nobody could log in through its room",
                       users.no_accounts_fix(name))
    bind = address or settings.ROOM_ADDRESS.get()
    keeper = door.Keeper(bind, "slurmlab room", only=name)
    stop = {"why": ""}

    def _term(*_):
        stop["why"] = "closed: stopped"
    signal.signal(signal.SIGTERM, _term)
    said = None
    try:
        while not stop["why"]:
            want = keeper.sync(st)[name]
            problem = keeper.problems.get(name)
            if problem:
                holder = ports.status(name)
                raise LabError(f"room of {name}: {problem}" + (f" (open already: {holder['By']})" if holder["Open"] else ""),
                               "the room is open: nothing to do (stop that process first to open it here)"
                               if holder["Open"] else f"free port {holder['Port']} (ss -ltnp 'sport = :{holder['Port']}' "
                               "shows what holds it), or listen on another --address")
            if want.why == "deleted":
                stop["why"] = f"closed: cluster {name} was deleted"
                break
            now = "open" if want.address else f"waiting: {want.why}"
            if now != said:
                said = now
                st_ = ports.status(name)
                if output == Output.json:
                    print_json({"ClusterName": name, "Room": st_, "State": now})
                elif want.address:
                    out.print(f"room of {name} open on {bind}:{st_['Port']} -> its login node's ssh (Ctrl-C closes it)\n"
                              f"  students: {st_['Ssh']}  (the password of `slurmlab users show {name}`)\n"
                              f"  connections: {ClusterDir(name).root / 'room.log'}", markup=False, highlight=False)
                else:
                    out.print(f"room of {name}: {now}", markup=False, highlight=False)
                sys.stdout.flush()
            time.sleep(2)
    except KeyboardInterrupt:
        stop["why"] = "closed: stopped"
    finally:
        keeper.close()
    if output != Output.json:
        out.print(f"room of {name} {stop['why'] or 'closed'}", markup=False, highlight=False)
