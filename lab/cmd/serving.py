"""`slurmlab verify` (the testinfra suite against a cluster) and `slurmlab serve` (HyperPod's API)."""

from __future__ import annotations

import logging
import os
from typing import Optional

import typer

from lab import exitcodes, settings
from lab.cmd.base import app, store
from lab.output import err


@app.command("verify")
def verify(
    name: str = typer.Argument(..., help="cluster name (its inventory: $SLURMLAB_HOME/clusters/NAME/inventory.yml)"),
    junit: Optional[str] = typer.Option(None, "--junit", help="also write JUnit XML to this file"),
    inventory: Optional[str] = typer.Option(None, "--inventory", help="check the cluster of this Ansible inventory instead"),
    select: Optional[str] = typer.Option(None, "-k", help="only the checks whose names match this pytest -k expression, "
                                         "e.g. -k slurmd"),
    tests: list[str] = typer.Option([], "--tests", metavar="DIR", help="also run your own testinfra checks "
                                    "(test_*.py) in this folder, with the suite's fixtures (cluster, node, sinfo...); "
                                    "repeatable"),
) -> None:
    """Check a running cluster (munge, daemons, jobs, names, SSH, clocks) with a testinfra suite, and your own
    checks (--tests). Exit 0 only when all pass."""
    from pathlib import Path

    from lab import verify as v
    from lab.errors import NotFound

    own = v.user_tests(tests)  # a bad folder stops here, before an inventory is written
    if inventory:
        inv = Path(inventory).expanduser()
    else:
        from lab.verify import inventory as verify_inventory

        inv, skipped = verify_inventory.write(store(), name)
        if skipped:
            err.print(f"not checked (not running): {', '.join(skipped)}", markup=False, highlight=False)
    if not inv.is_file():
        fix = ("check the path given to --inventory" if inventory else
               "create the cluster first (slurmlab create-cluster), or pass --inventory PATH for another cluster")
        raise NotFound(f"no Ansible inventory at {inv}", fix)
    ssh = None
    if not inventory:  # a slurmlab cluster: plain ssh through the lab's namespace (docs/verify.md)
        from lab.providers.reach import cluster_ssh_exe

        ssh = cluster_ssh_exe(name)
    rc = v.run(inv, Path(junit).expanduser() if junit else None, extra_args=("-k", select) if select else (),
               ssh_executable=ssh, tests=own)
    if rc == 5:
        err.print("error: the verify suite collected no tests (empty inventory groups?)", markup=False, highlight=False)
        rc = exitcodes.FAILURE
    raise typer.Exit(rc)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="address to listen on (127.0.0.1: this machine only; any other "
                             "address needs --auth)"),
    port: int = typer.Option(8008, help="TCP port (0 picks a free one)"),
    provider: str = typer.Option("vagrant", help="vagrant (real VMs) or sim (simulated nodes, no VMs)"),
    capacity_file: Optional[str] = typer.Option(None, "--capacity", help="capacity file (YAML) to apply at start"),
    state_dir: Optional[str] = typer.Option(None, "--state-dir", help="state directory (default $SLURMLAB_HOME)"),
    log_requests: bool = typer.Option(True, "--log-requests/--no-log-requests", help="one line per request on stderr"),
    region: Optional[str] = typer.Option(None, help="the region in the ARNs of clusters created by unsigned requests "
                                         "(a signed request's own region wins; under --auth requests must be signed for it; default "
                                         "$SLURMLAB_REGION or us-east-1)"),
    account_id: Optional[str] = typer.Option(None, "--account-id", help="the account in the ARNs (12 digits; default "
                                             "$SLURMLAB_ACCOUNT_ID or 000000000000)"),
    rooms: bool = typer.Option(True, "--rooms/--no-rooms", help="open each cluster's room: its login node's ssh for the "
                               "students on a port of this machine (slurmlab describe-cluster shows it)"),
    room_address: Optional[str] = typer.Option(None, "--room-address", help="the address the rooms listen on (default "
                                               "$SLURMLAB_ROOM_ADDRESS or 0.0.0.0: every address of this machine)"),
    auth: bool = typer.Option(False, "--auth", help="check SigV4 signatures against the students' keys (slurmlab "
                              "students add): each student sees only their own clusters, within a quota"),
) -> None:
    """Serve HyperPod's cluster API (AWS JSON 1.1) for boto3 and the AWS CLI, and the web console at /."""
    from pathlib import Path

    if state_dir:
        os.environ[settings.HOME.name] = str(Path(state_dir).expanduser().resolve())
    from lab import api, paths

    if log_requests:
        logging.getLogger("lab.api").setLevel(logging.INFO)

    from lab.providers import registry

    # rooms only where VMs can be: a simulated login node runs no sshd
    room_at = (room_address or settings.ROOM_ADDRESS.get()) if rooms and not registry.info(provider).simulated else None

    def ready(server) -> None:
        url = server.url
        err.print(f"slurmlab serve: SageMaker API on {url}  (provider {provider}, state {paths.home()})", markup=False, highlight=False)
        if room_at is not None:
            err.print(f"  rooms:    students ssh -p PORT STUDENT@<this machine> on {room_at}, one port per cluster from "
                      f"{settings.ROOM_FIRST_PORT.get()} (slurmlab describe-cluster NAME shows it; --no-rooms: none)",
                      markup=False, highlight=False)
        if auth:
            _auth_banner(server)
            return
        err.print(f"  console:  {url}/", markup=False, highlight=False)
        err.print(f"  boto3:    boto3.client('sagemaker', endpoint_url='{url}', region_name='us-east-1', "
                  "aws_access_key_id='x', aws_secret_access_key='x')", markup=False, highlight=False)
        err.print(f"  AWS CLI:  aws sagemaker list-clusters --endpoint-url {url} --region us-east-1", markup=False, highlight=False)
        err.print("  Ctrl-C stops the server (the engine keeps building; it stops by itself when idle)", markup=False, highlight=False)

    api.run(host=host, port=port, provider=provider, capacity_file=capacity_file,
            on_ready=ready, region=region, account=account_id, auth=auth, room_address=room_at)
    err.print("slurmlab serve: stopped", markup=False, highlight=False)


def _auth_banner(server) -> None:
    """How students connect to a server with --auth (no secret is printed)."""
    url, region, students = server.url, server.lab.region, server.lab.students.students()
    host = server.server_address[0]
    if host in ("0.0.0.0", "::"):
        url = url.replace(f"//{host}", "//<this machine's address>").replace("//[::]", "//<this machine's address>")
    names = [s.Name + (" (instructor)" if s.Instructor else "") for s in students]
    lines = [f"  auth:     every request signed with a student's key for region {region}; "
             f"{len(students)} student(s): {', '.join(names) or 'none yet (slurmlab students add NAME)'}",
             f"  boto3:    boto3.client('sagemaker', endpoint_url='{url}', region_name='{region}', "
             "aws_access_key_id=<their AccessKeyId>, aws_secret_access_key=<their SecretAccessKey>)",
             f"  AWS CLI:  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... aws sagemaker list-clusters --endpoint-url {url} "
             f"--region {region}",
             f"  console:  {url}/  (user name: an instructor's access key id, password: their secret access key)",
             "  Ctrl-C stops the server (the engine keeps building; it stops by itself when idle)"]
    for line in lines:
        err.print(line, markup=False, highlight=False)
