"""`slurmlab forward NAME NODE PORT`: a loopback port of this machine to a port of a node, until Ctrl-C.

As `kubectl port-forward` does: the cluster's network stays where it is (the lab's namespace, or a
remote host); this machine gets 127.0.0.1:LOCAL, and every connection to it is made to the node from
there (lab/providers/forward.py). For a web page on a node: Prometheus on the controller of a
cluster with sagemaker-observability is `slurmlab forward NAME controller 9090`.
"""

from __future__ import annotations

import signal
import sys

import typer

from lab.cmd.base import OutputOpt, app, store, vm_node
from lab.errors import LabError
from lab.output import Output, out, print_json


@app.command("forward")
def forward(
    name: str = typer.Argument(..., help="cluster name"),
    node: str = typer.Argument(..., help="node name, or a group name for its first node"),
    port: int = typer.Argument(..., min=1, max=65535, help="the node's TCP port"),
    local_port: int = typer.Option(0, "--local-port", min=0, max=65535, help="port on 127.0.0.1 (0: a free one)"),
    output: Output = OutputOpt,
) -> None:
    """Forward 127.0.0.1:LOCAL of this machine to PORT of a node, until Ctrl-C (nothing binds beyond loopback)."""
    from lab.providers import forward as fwd
    from lab.providers import placement

    match = vm_node(store(), name, node, "have no ports")
    dial = fwd.dialer_for(placement.host_of(name))
    try:
        f = fwd.Forward(dial, match.address, port, local_port)
    except OSError as e:
        dial.close()
        raise LabError(f"cannot listen on 127.0.0.1:{local_port}: {e.strerror}",
                       "choose another --local-port, or 0 for a free one") from None
    local = f"127.0.0.1:{f.port}"
    if output == Output.json:
        print_json({"ClusterName": name, "Node": match.name, "Port": port, "Local": local, "Url": f"http://{local}/"})
    else:
        out.print(f"forwarding {local} -> {match.name}:{port} (Ctrl-C stops)\n  http://{local}/",
                  markup=False, highlight=False)
    sys.stdout.flush()
    signal.signal(signal.SIGTERM, lambda *_: f.close())
    try:
        f.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        f.close()
        dial.close()
