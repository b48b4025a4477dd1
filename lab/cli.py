"""slurmlab's command line: parse, call the core, render. Exit codes: lab/exitcodes.py."""

from __future__ import annotations

import logging
import os
import sys
from typing import Optional

import typer

from lab import __version__, exitcodes
from lab.errors import LabError
from lab.output import Output, Progress, err, out, print_json

app = typer.Typer(
    help="Real Slurm clusters from local VMs, provisioned the way SageMaker HyperPod does it.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
host_app = typer.Typer(help="The host: network namespace, libvirtd, storage pool.", no_args_is_help=True)
box_app = typer.Typer(help="The VM box (Debian 13 + Slurm 24.11), built locally from Debian's mirror.",
                      no_args_is_help=True)
app.add_typer(host_app, name="host")
app.add_typer(box_app, name="box")

OutputOpt = typer.Option(Output.text, "--output", "-o", help="text for people, json for programs")


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="debug logging on stderr")) -> None:
    logging.basicConfig(level=logging.DEBUG if verbose else logging.WARNING, format="%(name)s: %(message)s")


@app.command()
def version(output: Output = OutputOpt) -> None:
    """Print slurmlab's version."""
    if output == Output.json:
        print_json({"version": __version__})
    else:
        out.print(f"slurmlab {__version__}")


# ---------------------------------------------------------------- doctor
@app.command()
def doctor(output: Output = OutputOpt) -> None:
    """Check the host: tools, KVM, namespace, libvirt, box, memory, disk. Each problem comes with its fix."""
    from lab import doctor as doc

    results = doc.run_probes()
    blocking = doc.blocking_failures(results)
    if output == Output.json:
        print_json({"ok": not blocking, "probes": [r.as_dict() for r in results]})
    else:
        for r in results:
            mark = "[green]ok  [/green]" if r.ok else ("[red]FAIL[/red]" if r.severity == doc.BLOCKING else "[yellow]warn[/yellow]")
            out.print(f"{mark} {r.title}: {r.detail}")
            if r.fix:
                out.print(f"       fix: {r.fix}")
        out.print("all blocking checks pass" if not blocking else f"{len(blocking)} blocking problem(s)")
    raise typer.Exit(exitcodes.HOST if blocking else exitcodes.OK)


# ---------------------------------------------------------------- host
@host_app.command("up")
def host_up(output: Output = OutputOpt) -> None:
    """Create the namespace, start virtlogd + libvirtd in it, create the storage pool. Idempotent."""
    from lab.host import libvirtd, mode

    libvirtd.up()
    st = libvirtd.daemon_state("libvirtd")
    data = {"mode": mode.detect(), "netns": os.environ.get("SLURMLAB_NETNS", "slurmlab") if mode.uses_netns() else None,
            "libvirtd_pid": st.pid, "uri": libvirtd.URI, "pool": libvirtd.POOL}
    if output == Output.json:
        print_json(data)
    else:
        out.print(f"host ready: mode={data['mode']} netns={data['netns']} libvirtd pid={st.pid} pool={libvirtd.POOL}")


@host_app.command("down")
def host_down(output: Output = OutputOpt) -> None:
    """Stop the lab's libvirtd and remove its namespace (refuses while VMs exist)."""
    from lab.host import libvirtd

    done = libvirtd.down()
    if output == Output.json:
        print_json({"stopped": done})
    else:
        for d in done or ["nothing to stop"]:
            out.print(d)


@host_app.command("status")
def host_status(output: Output = OutputOpt) -> None:
    """Show the host mode, the namespace and the daemons."""
    from lab.host import kvm, libvirtd, mode

    k = kvm.detect()
    data = {
        "mode": mode.detect(),
        "netns": str(libvirtd.netns_path()) if mode.uses_netns() else None,
        "netns_present": libvirtd.netns_path().exists() if mode.uses_netns() else None,
        "daemons": {n: vars(libvirtd.daemon_state(n)) for n in ("virtlogd", "libvirtd")},
        "kvm": vars(k),
    }
    if output == Output.json:
        print_json(data)
    else:
        out.print(f"mode: {data['mode']}  namespace: {data['netns']} present={data['netns_present']}")
        for n, d in data["daemons"].items():
            out.print(f"{n}: pid={d['pid']} in_netns={d['in_netns']}")
        out.print(f"driver: {k.driver} ({k.reason})")


# ---------------------------------------------------------------- box
def _box_progress(line: str) -> None:
    """The box builder's lines carry their own elapsed time."""
    err.print(line, markup=False, highlight=False)


@box_app.command("build")
def box_build(
    name: Optional[str] = typer.Option(None, help="box name (default slurmlab/trixie-slurm)"),
    force: bool = typer.Option(False, help="rebuild even when the cached box is current"),
    output: Output = OutputOpt,
) -> None:
    """Build the Debian 13 + Slurm 24.11 box from Debian's mirror and add it to Vagrant (cached by inputs)."""
    from lab import box

    info = box.build(name or box.DEFAULT_BOX, force=force, progress=_box_progress)
    if output == Output.json:
        print_json(vars(info))
    else:
        out.print(f"box {info.name} ready ({(info.size_bytes or 0) / 2**20:.0f} MiB, inputs {info.inputs_hash[:12]})")


@box_app.command("list")
def box_list(output: Output = OutputOpt) -> None:
    """List Vagrant's libvirt boxes and whether slurmlab built them from the current inputs."""
    from lab import box

    boxes = box.list_boxes()
    if output == Output.json:
        print_json([vars(b) for b in boxes])
    else:
        if not boxes:
            out.print("no boxes; run `slurmlab box build`")
        for b in boxes:
            out.print(f"{b.name}  added={b.added}  inputs={b.inputs_hash[:12] if b.inputs_hash else '-'}  built={b.built_at or '-'}")


# ---------------------------------------------------------------- clusters
def _store():
    from lab.engine import daemon

    return daemon.store()


class _Watcher:
    """Prints what changed (cluster, groups, nodes) as timestamped lines on stderr."""

    def __init__(self, quiet: bool = False):
        self.progress = Progress(quiet)
        self.seen: dict[str, tuple] = {}

    def __call__(self, d: dict, nodes: list[dict]) -> None:
        groups = "  ".join(f"{g['InstanceGroupName']} {g['CurrentCount']}/{g['TargetCount']} {g['Status']}"
                           for g in d["InstanceGroups"])
        key = (d["ClusterStatus"], groups)
        if self.seen.get("_cluster") != key:
            self.seen["_cluster"] = key
            self.progress(f"[bold]{d['ClusterName']}[/bold] {d['ClusterStatus']}  {groups}")
        for n in nodes:
            st = n["InstanceStatus"]
            k = (st.get("Status"), st.get("Message"))
            if self.seen.get(n["NodeLogicalId"]) != k:
                self.seen[n["NodeLogicalId"]] = k
                msg = f" - {st['Message']}" if st.get("Message") else ""
                self.progress(f"  {n['NodeLogicalId']:<28} {st.get('Status'):<8}{msg}")


def _print_cluster(d: dict) -> None:
    out.print(f"{d['ClusterName']}  {d['ClusterStatus']}  ({d['Lab']['Provider']})")
    if d.get("FailureMessage"):
        out.print(f"  failure: {d['FailureMessage']}")
    for g in d["InstanceGroups"]:
        out.print(f"  {g['InstanceGroupName']:<14} {g['InstanceType']:<14} {g['CurrentCount']}/{g['TargetCount']}  {g['Status']}")


def _check_box(name: Optional[str]) -> None:
    """The spec's box (or the default) must be added to Vagrant before any VM starts."""
    from lab import box
    from lab.errors import NotFound

    name = name or box.DEFAULT_BOX
    if name == box.DEFAULT_BOX:
        if not box.is_current(name):
            raise NotFound(f"box {name} is missing or out of date", "slurmlab box build")
        return
    if not any(b.name == name and b.added for b in box.list_boxes()):
        raise NotFound(f"box {name} (Lab.Box in the spec) is not added to Vagrant",
                       f"vagrant box add --name {name} FILE.box, or remove Lab.Box to use {box.DEFAULT_BOX}")


def _with_users(sp, count: Optional[int]):
    """The spec with --users applied (Lab.Users.Count), checked like the spec's own Lab.Users."""
    if count is None:
        return sp
    from lab.errors import UsageError
    from lab.spec import with_users
    from lab.spec.rules import user_count_problem

    bad = user_count_problem(count)
    if bad:
        raise UsageError(f"--users (Lab.Users.Count): {bad[0]}", bad[1])
    return with_users(sp, count)


def _with_accounts(d: dict, name: str) -> dict:
    """create-cluster's and up's JSON: the student accounts (and their password) under Lab.Users."""
    from lab import users

    acc = users.load(name)
    if acc is not None:
        d = {**d, "Lab": {**d.get("Lab", {}), "Users": {"Names": acc.names, "Password": acc.password,
                                                         "Account": acc.account}}}
    return d


def _print_accounts(name: str) -> None:
    from lab import users

    acc = users.load(name)
    if acc is not None and acc.users:
        out.print(f"student accounts: {users.name_range(acc.names)}  password: {acc.password}  "
                  f"(slurmlab users show {name})", markup=False)


@app.command("create-cluster")
def create_cluster(
    spec: str = typer.Option(..., "--spec", help="cluster spec (YAML, HyperPod CreateCluster field names)"),
    wait: bool = typer.Option(False, "--wait", help="wait until the cluster has its full size (or fails)"),
    wait_for: str = typer.Option("FullSize", help="with --wait: InService or FullSize"),
    timeout: float = typer.Option(3600, help="seconds to wait at most"),
    capacity_file: Optional[str] = typer.Option(None, "--capacity", help="capacity file (YAML) to apply first"),
    provider: str = typer.Option("vagrant", "--provider",
                                 help="vagrant (real VMs) or sim (simulated VMs, no Slurm inside: API practice)"),
    users: Optional[int] = typer.Option(None, "--users", help="student accounts user01..userNN (sets Lab.Users.Count)"),
    output: Output = OutputOpt,
) -> None:
    """Create a cluster from a spec: controller first, then login and compute nodes in parallel."""
    from lab import capacity
    from lab.engine import clusters
    from lab.host import libvirtd
    from lab.spec import load_spec

    if provider not in ("vagrant", "sim"):
        from lab.errors import UsageError

        raise UsageError(f"--provider: unknown provider '{provider}'", "use vagrant (real VMs) or sim (simulated VMs)")
    sp = _with_users(load_spec(spec), users)
    if provider == "vagrant":
        _check_box(sp.box)
    if capacity_file:
        capacity.load(capacity_file)  # validate before anything changes
    st = _store()
    clusters.check_new(st, sp.name)  # the name clash (or the lab's limit) before touching the host
    if provider == "vagrant":
        libvirtd.up()
    if capacity_file:
        load_capacity_file(st, capacity_file)
    row = clusters.create(st, sp, provider=provider)
    d = clusters.describe(st, row.name)
    if wait:
        d = clusters.wait(st, row.name, wait_for, on_change=_Watcher(output == Output.json), timeout=timeout)
    if output == Output.json:
        print_json(_with_accounts(d, row.name))
    else:
        _print_cluster(d)
        _print_accounts(row.name)
        if not wait:
            out.print(f"watch it: slurmlab describe-cluster {row.name}   (engine log: {_store().path.parent / 'engine.log'})")
    if d.get("ClusterStatus") == "Failed":
        raise typer.Exit(exitcodes.FAILURE)


@app.command("describe-cluster")
def describe_cluster(
    name: str,
    wait_for: Optional[str] = typer.Option(None, "--wait-for", help="InService or FullSize: watch until then"),
    timeout: float = typer.Option(3600, help="seconds to wait at most"),
    output: Output = OutputOpt,
) -> None:
    """Cluster status, and per instance group CurrentCount, TargetCount, Status."""
    from lab.engine import clusters

    st = _store()
    if wait_for:
        if wait_for not in ("InService", "FullSize"):
            raise LabError(f"--wait-for {wait_for}: unknown state", "use InService or FullSize")
        d = clusters.wait(st, name, wait_for, on_change=_Watcher(output == Output.json), timeout=timeout)
    else:
        d = clusters.describe(st, name)
    print_json(d) if output == Output.json else _print_cluster(d)


@app.command("list-clusters")
def list_clusters(output: Output = OutputOpt) -> None:
    """Every cluster of this lab with its status."""
    from lab.osutil import iso

    st = _store()
    items = [{"ClusterName": c.name, "ClusterArn": c.arn, "ClusterStatus": c.status,
              "CreationTime": iso(c.created_at)} for c in st.clusters()]
    if output == Output.json:
        print_json({"ClusterSummaries": items})
    else:
        for i in items or []:
            out.print(f"{i['ClusterName']:<20} {i['ClusterStatus']:<12} {i['CreationTime']}")
        if not items:
            out.print("no clusters")


@app.command("list-cluster-nodes")
def list_cluster_nodes(name: str, output: Output = OutputOpt) -> None:
    """Nodes with group, status (and why), address."""
    from lab.engine import clusters

    st = _store()
    nodes = clusters.list_nodes(st, name)
    gpus = clusters.gpus(st, name)
    if output == Output.json:
        print_json({"ClusterNodeSummaries": [
            {**n, "Lab": {"Gpus": (g := gpus.get(n["InstanceGroupName"], 0)), "GpusEmulated": g > 0}} for n in nodes]})
        return
    for n in nodes:
        s = n["InstanceStatus"]
        g = gpus.get(n["InstanceGroupName"], 0)
        gpu = f"{g} GPU{'s' if g > 1 else ''} (emulated)" if g else ""
        out.print(f"{n['NodeLogicalId']:<26} {n['InstanceGroupName']:<12} {s['Status']:<9} {n['PrivatePrimaryIp']:<14} "
                  f"{gpu + '  ' if gpu else ''}{s.get('Message', '')}")


@app.command("delete-cluster")
def delete_cluster(
    name: str,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="wait until every VM, volume and network is gone"),
    output: Output = OutputOpt,
) -> None:
    """Delete a cluster: every domain, volume, network and key of it."""
    from lab.engine import clusters

    st = _store()
    clusters.delete(st, name)
    if wait:
        clusters.wait(st, name, "Deleted", on_change=_Watcher(output == Output.json), timeout=900)
    if output == Output.json:
        print_json({"ClusterName": name, "Deleted": wait})
    else:
        out.print(f"{name} deleted" if wait else f"{name} is Deleting")


# ---------------------------------------------------------------- node operations (HyperPod's Batch*ClusterNodes)
def _batch_result(op: str, result: dict, output: Output) -> None:
    """Print a Batch*ClusterNodes response; exit 1 when any node was refused (the others go ahead)."""
    if output == Output.json:
        print_json(result)
    else:
        done = result.get("SuccessfulNodeLogicalIds") or [r["NodeLogicalId"] for r in result.get("Successful", [])
                                                          if isinstance(r, dict) and "NodeLogicalId" in r]
        if done:
            out.print(f"{op}: {', '.join(done)}  (watch: slurmlab list-cluster-nodes, describe-cluster --wait-for FullSize)")
    failures = [*result.get("Failed", []), *result.get("FailedNodeLogicalIds", [])]
    for f in failures:
        who = f.get("NodeLogicalId") or f.get("NodeId") or f.get("InstanceGroupName")
        err.print(f"error: {who}: {f.get('Code') or f.get('ErrorCode')}: {f.get('Message')}", markup=False, highlight=False)
    if failures:
        raise typer.Exit(exitcodes.FAILURE)


@app.command("batch-add-cluster-nodes")
def batch_add_cluster_nodes(
    name: str,
    group: str = typer.Argument(..., help="the instance group to grow"),
    count: int = typer.Option(1, "--count", min=1, help="how many nodes to add (IncrementTargetCountBy)"),
    output: Output = OutputOpt,
) -> None:
    """Scale out: add nodes to an instance group; they launch, configure and join Slurm in the background."""
    from lab.engine import clusters

    r = clusters.add_nodes(_store(), name, [{"InstanceGroupName": group, "IncrementTargetCountBy": count}], start_engine=True)
    _batch_result("adding", r, output)


def _node_op(verb: str, fn_name: str):
    def command(
        name: str,
        nodes: list[str] = typer.Argument(..., help="node names (NodeLogicalId) or instance ids"),
        output: Output = OutputOpt,
    ) -> None:
        from lab.engine import clusters

        _batch_result(verb, getattr(clusters, fn_name)(_store(), name, nodes, start_engine=True), output)
    return command


app.command("batch-delete-cluster-nodes", help="Scale in: drain these nodes, take them out of Slurm (one reconfigure), "
            "destroy their VMs; each group's target drops by one.")(_node_op("deleting", "delete_nodes"))
app.command("batch-reboot-cluster-nodes", help="Restart these nodes' VMs; each is configured and joins Slurm again.")(
    _node_op("rebooting", "reboot_nodes"))
app.command("batch-replace-cluster-nodes", help="Replace these nodes with fresh VMs under the same names (new instance ids).")(
    _node_op("replacing", "replace_nodes"))


@app.command("ssh", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def ssh(ctx: typer.Context, name: str, node: str = typer.Argument(..., help="node name, or a group name for its first node")) -> None:
    """Open a shell on a node (or run the command given after --), with the cluster's own key."""
    from lab.engine import clusters
    from lab.providers.vagrant import ssh_exe
    from lab.workspace import ClusterDir

    st = _store()
    clusters.get(st, name)
    nodes = st.nodes(name)
    match = next((n for n in nodes if n.name == node), None) or next((n for n in nodes if n.grp == node), None)
    if match is None:
        raise LabError(f"no node '{node}' in cluster {name}", f"list them: slurmlab list-cluster-nodes {name}")
    cmd = [ssh_exe(), "-i", str(ClusterDir(name).ssh_key), "-o", "StrictHostKeyChecking=no",
           "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR", f"vagrant@{match.address}", *ctx.args]
    os.execv(cmd[0], cmd)


@app.command()
def up(
    spec: str = typer.Argument("examples/cluster.yaml", help="cluster spec"),
    timeout: float = typer.Option(3600, help="seconds to wait at most"),
    users: Optional[int] = typer.Option(None, "--users", help="student accounts user01..userNN (sets Lab.Users.Count)"),
    output: Output = OutputOpt,
) -> None:
    """The whole path: host set-up, the box if missing, the cluster, a job on it, how to get in."""
    from lab import box
    from lab.engine import clusters
    from lab.host import libvirtd
    from lab.spec import load_spec

    progress = Progress(output == Output.json)
    sp = _with_users(load_spec(spec), users)
    progress("host: namespace, libvirtd, storage pool")
    libvirtd.up()
    if not box.is_current(sp.box or box.DEFAULT_BOX):
        if sp.box and sp.box != box.DEFAULT_BOX:
            raise LabError(f"box {sp.box} is not added to Vagrant", f"vagrant box add {sp.box} ...")
        box.build(progress=_box_progress)
    st = _store()
    if st.cluster(sp.name) is None:
        clusters.create(st, sp)
    else:
        progress(f"cluster {sp.name} exists: resuming")
        if users is not None:
            progress(f"--users ignored: cluster {sp.name} exists (change its accounts with slurmlab users add/remove)")
        from lab.engine import daemon

        daemon.ensure_running()
    d = clusters.wait(st, sp.name, "FullSize", on_change=_Watcher(output == Output.json), timeout=timeout)
    if d["ClusterStatus"] == "Failed":
        raise LabError(f"cluster {sp.name} failed: {d.get('FailureMessage')}")
    result = run_first_job(st, sp.name, progress)
    login = next((n for n in st.nodes(sp.name) if any(g.name == n.grp and g.node_type == "Login" for g in st.groups(sp.name))), None)
    entry = login or next(n for n in st.nodes(sp.name))
    if output == Output.json:
        print_json({**_with_accounts(clusters.describe(st, sp.name), sp.name), "FirstJob": result,
                    "Ssh": f"slurmlab ssh {sp.name} {entry.name}"})
        return
    _print_cluster(clusters.describe(st, sp.name))
    _print_accounts(sp.name)
    out.print(f"\nfirst job: {result['command']}\n" + "\n".join(f"  {l}" for l in result["output"].splitlines()))
    out.print(f"\nget in:     slurmlab ssh {sp.name} {entry.name}")
    out.print(f"run a job:  slurmlab ssh {sp.name} {entry.name} -- srun -N{result['nodes']} hostname")
    out.print(f"nodes:      slurmlab list-cluster-nodes {sp.name}")
    out.print(f"verify:     slurmlab verify {sp.name}")
    out.print(f"tear down:  slurmlab delete-cluster {sp.name}")


def run_first_job(st, name: str, progress) -> dict:
    """srun -N<compute nodes> hostname from the login node (or the controller)."""
    from lab.configure.remote import run_on_node

    groups = {g.name: g for g in st.groups(name)}
    nodes = st.nodes(name)
    computes = [n for n in nodes if groups[n.grp].node_type == "Compute" and n.phase == "running"]
    login = next((n for n in nodes if groups[n.grp].node_type == "Login" and n.phase == "running"), None)
    entry = login or next(n for n in nodes if groups[n.grp].node_type == "Controller")
    cmd = f"srun -N{len(computes)} hostname"
    progress(f"first job on {entry.name}: {cmd}")
    res = run_on_node(name, entry.address, cmd, timeout=300)
    if res.returncode != 0:
        raise LabError(f"the first job failed on {entry.name}: {res.stdout.strip()}",
                       f"look at the nodes: slurmlab ssh {name} {entry.name} -- sinfo")
    return {"command": cmd, "node": entry.name, "nodes": len(computes), "output": res.stdout}


# ---------------------------------------------------------------- student accounts
users_app = typer.Typer(help="Student accounts: user01..userNN with one shared password, on every node.",
                        no_args_is_help=True)
app.add_typer(users_app, name="users")


def _accounts_data(name: str, acc) -> dict:
    return {"ClusterName": name, "Account": acc.account, "Password": acc.password,
            "Users": [{"Name": u.name, "Uid": u.uid} for u in acc.users], "Removed": list(acc.removed)}


@users_app.command("show")
def users_show(name: str, output: Output = OutputOpt) -> None:
    """The cluster's student accounts, their shared password and Slurm account."""
    from lab import users
    from lab.engine import clusters
    from lab.errors import NotFound

    clusters.get(_store(), name)
    acc = users.load(name)
    if acc is None:
        raise NotFound(f"cluster '{name}' has no student accounts", users.no_accounts_fix(name))
    if output == Output.json:
        print_json(_accounts_data(name, acc))
        return
    out.print(f"{name}: {len(acc.users)} student account{'s' if len(acc.users) != 1 else ''}", markup=False)
    out.print(f"  users:    {users.name_range(acc.names) or '(none)'}", markup=False)
    out.print(f"  password: {acc.password}", markup=False)
    out.print(f"  account:  {acc.account} (Slurm)", markup=False)
    uids = [u.uid for u in acc.users]
    if uids and uids == list(range(uids[0], uids[0] + len(uids))):
        out.print(f"  uids:     {uids[0]}..{uids[-1]} (gid = uid)", markup=False)
    elif uids:
        out.print(f"  uids:     {', '.join(f'{u.name}={u.uid}' for u in acc.users)} (gid = uid)", markup=False)
    if acc.removed:
        out.print(f"  removed:  {', '.join(acc.removed)}", markup=False)


def _push_accounts(name: str, c, verb: str, names: list[str]) -> list[str]:
    """users.yml over the cluster's running nodes; returns their names. A failed run is a LabError
    naming the nodes (users.json keeps the change: the same command again retries)."""
    from lab.configure.runner import PlaybookFailed, run_playbook
    from lab.engine import daemon
    from lab.workspace import ClusterDir

    st = _store()
    running = [n for n in st.nodes(name) if n.phase == "running"]
    if not running:
        return []
    ctx = daemon.make_configurer(c.provider).context(c, st.groups(name), running)
    try:
        run_playbook(ctx, "users.yml", workdir=ClusterDir(name).root)
    except PlaybookFailed as e:
        failures = e.result.failures
        detail = "\n".join(f"  {h}: {m}" for h, m in sorted(failures.items()))
        raise LabError(f"users {verb}: the accounts were not changed on {', '.join(sorted(failures))}:\n{detail}",
                       f"users.json has the change; run the same command again to retry: slurmlab users {verb} "
                       f"{name} {' '.join(names)}") from None
    return [n.name for n in running]


def _users_change(verb: str, name: str, names: list[str], output: Output) -> None:
    from lab import users
    from lab.engine import clusters
    from lab.errors import Conflict

    st = _store()
    c = clusters.get(st, name)
    if c.status in ("Deleting", "Failed", "RollingBack"):
        raise Conflict(f"users {verb}: cluster '{name}' is {c.status}", "change the accounts of a cluster that is "
                       "Creating, InService or Updating")
    change = users.add(name, names) if verb == "add" else users.remove(name, names)
    nodes = [] if c.provider == "sim" else _push_accounts(name, c, verb, names)
    acc = change.accounts
    if output == Output.json:
        data = {**_accounts_data(name, acc), "Changed": change.changed, "Unchanged": change.unchanged,
                "Nodes": nodes, "Simulated": c.provider == "sim"}
        if not change.created:  # the password only where it is new (else: slurmlab users show)
            data.pop("Password")
        print_json(data)
        return
    done = "added" if verb == "add" else "removed"
    if change.changed:
        out.print(f"{done}: {', '.join(change.changed)}", markup=False)
    if change.unchanged:
        out.print(f"already {done}: {', '.join(change.unchanged)}", markup=False)
    if change.created:
        out.print(f"password: {acc.password}  (the same for every student: slurmlab users show {name})", markup=False)
    if c.provider == "sim":
        out.print(f"cluster {name} is simulated (provider sim): users.json updated, no nodes to change", markup=False)
    elif nodes:
        out.print(f"nodes updated: {len(nodes)} ({', '.join(nodes)})", markup=False)
    else:
        out.print("no node is running yet: the nodes get the accounts when they are configured", markup=False)


@users_app.command("add")
def users_add(name: str, user: list[str] = typer.Argument(..., metavar="USER...", help="user names, e.g. user21"),
              output: Output = OutputOpt) -> None:
    """Add student accounts (same password) on every running node; a name that exists is pushed again."""
    _users_change("add", name, user, output)


@users_app.command("remove")
def users_remove(name: str, user: list[str] = typer.Argument(..., metavar="USER...", help="user names"),
                 output: Output = OutputOpt) -> None:
    """Remove student accounts from every running node (nodes that join later delete them too)."""
    _users_change("remove", name, user, output)


# ---------------------------------------------------------------- capacity
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


# ---------------------------------------------------------------- verify
def _verify_inventory(name: str):
    """The inventory of the cluster's nodes that run now, written fresh from the store (the one the
    playbooks leave behind can name a node removed since), as clusters/NAME/verify-inventory.yml."""
    import yaml

    from lab.configure import inventory as inv_mod
    from lab.engine import clusters, daemon
    from lab.osutil import atomic_write
    from lab.workspace import ClusterDir

    st = _store()
    c = clusters.get(st, name)
    if c.provider == "sim":
        raise LabError(f"cluster '{name}' is simulated (provider sim): it has no VMs and no Slurm to verify",
                       "verify a cluster of real VMs (create-cluster without --provider sim)")
    nodes = st.nodes(name)
    running = [n for n in nodes if n.phase == "running"]
    skipped = [n.name for n in nodes if n.phase != "running"]
    if skipped:
        err.print(f"not checked (not running): {', '.join(skipped)}", markup=False, highlight=False)
    ctx = daemon.make_configurer(c.provider).context(c, st.groups(name), running)
    cd = ClusterDir(name)
    path = cd.root / "verify-inventory.yml"
    if cd.root.is_dir():
        atomic_write(path, yaml.safe_dump(inv_mod.build(ctx), sort_keys=True), 0o600)
    return path


@app.command("verify")
def verify(
    name: str = typer.Argument(..., help="cluster name (its inventory: $SLURMLAB_HOME/clusters/NAME/inventory.yml)"),
    junit: Optional[str] = typer.Option(None, "--junit", help="also write JUnit XML to this file"),
    inventory: Optional[str] = typer.Option(None, "--inventory", help="check the cluster of this Ansible inventory instead"),
) -> None:
    """Check a running cluster (munge, daemons, jobs, names, SSH, clocks) with a testinfra suite. Exit 0 only when all pass."""
    from pathlib import Path

    from lab import verify as v
    from lab.errors import NotFound
    from lab.workspace import ClusterDir

    inv = Path(inventory).expanduser() if inventory else _verify_inventory(name)
    if not inv.is_file():
        fix = ("check the path given to --inventory" if inventory else
               "create the cluster first (slurmlab create-cluster), or pass --inventory PATH for another cluster")
        raise NotFound(f"no Ansible inventory at {inv}", fix)
    ssh = None
    if not inventory:  # a slurmlab cluster: plain ssh through the lab's namespace (docs/verify.md)
        from lab.providers.vagrant import ssh_exe

        ssh = ssh_exe()
    rc = v.run(inv, Path(junit).expanduser() if junit else None, ssh_executable=ssh)
    if rc == 5:
        err.print("error: the verify suite collected no tests (empty inventory groups?)", markup=False, highlight=False)
        rc = exitcodes.FAILURE
    raise typer.Exit(rc)


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


# ---------------------------------------------------------------- serve
@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="address to listen on (127.0.0.1: this machine only)"),
    port: int = typer.Option(8008, help="TCP port (0 picks a free one)"),
    provider: str = typer.Option("vagrant", help="vagrant (real VMs) or sim (simulated nodes, no VMs)"),
    capacity_file: Optional[str] = typer.Option(None, "--capacity", help="capacity file (YAML) to apply at start"),
    state_dir: Optional[str] = typer.Option(None, "--state-dir", help="state directory (default $SLURMLAB_HOME)"),
    log_requests: bool = typer.Option(True, "--log-requests/--no-log-requests", help="one line per request on stderr"),
) -> None:
    """Serve HyperPod's cluster API (AWS JSON 1.1) for boto3 and the AWS CLI, and the web console at /."""
    from pathlib import Path

    if state_dir:
        os.environ["SLURMLAB_HOME"] = str(Path(state_dir).expanduser().resolve())
    from lab import api, paths

    if log_requests:
        logging.getLogger("lab.api").setLevel(logging.INFO)

    before_create = None
    if provider == "vagrant":
        def before_create(spec) -> None:  # the host and the box, as create-cluster checks them
            from lab.host import libvirtd

            _check_box(spec.box)
            libvirtd.up()

    def ready(server) -> None:
        url = server.url
        err.print(f"slurmlab serve: SageMaker API on {url}  (provider {provider}, state {paths.home()})", markup=False, highlight=False)
        err.print(f"  console:  {url}/", markup=False, highlight=False)
        err.print(f"  boto3:    boto3.client('sagemaker', endpoint_url='{url}', region_name='us-east-1', "
                  "aws_access_key_id='x', aws_secret_access_key='x')", markup=False, highlight=False)
        err.print(f"  AWS CLI:  aws sagemaker list-clusters --endpoint-url {url} --region us-east-1", markup=False, highlight=False)
        err.print("  Ctrl-C stops the server (the engine keeps building; it stops by itself when idle)", markup=False, highlight=False)

    api.run(host=host, port=port, provider=provider, capacity_file=capacity_file, before_create=before_create,
            on_ready=ready)
    err.print("slurmlab serve: stopped", markup=False, highlight=False)
