"""The cluster commands (HyperPod's operations by name): create, describe, list, delete, the batch
node operations, and `up` (`ssh` is with the other ways in: lab/cmd/forward.py)."""

from __future__ import annotations

from typing import Optional

import typer

from lab import exitcodes
from lab.cmd.base import JupyterOpt, OutputOpt, Watcher, app, box_progress, print_accounts, print_cluster, store, with_accounts
from lab.errors import LabError
from lab.output import Output, Progress, err, out, print_json


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
    jupyter: Optional[bool] = JupyterOpt,
    output: Output = OutputOpt,
) -> None:
    """Create a cluster from a spec: controller first, then login and compute nodes in parallel."""
    from lab.control import clusters
    from lab.workflows import create

    sp = create.load(spec, users, jupyter)
    st, row = create.create(sp, provider=provider, capacity_file=capacity_file)
    d = clusters.describe(st, row.name)
    if wait:
        d = clusters.wait(st, row.name, wait_for, on_change=Watcher(output == Output.json), timeout=timeout)
    if output == Output.json:
        print_json(with_accounts(d, row.name))
    else:
        print_cluster(d)
        print_accounts(row.name)
        if not wait:
            out.print(f"watch it: slurmlab describe-cluster {row.name}   (engine log: {store().path.parent / 'engine.log'})")
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
    from lab.control import clusters

    st = store()
    if wait_for:
        if wait_for not in ("InService", "FullSize"):
            raise LabError(f"--wait-for {wait_for}: unknown state", "use InService or FullSize")
        d = clusters.wait(st, name, wait_for, on_change=Watcher(output == Output.json), timeout=timeout)
    else:
        d = clusters.describe(st, name)
    print_json(d) if output == Output.json else print_cluster(d)


@app.command("list-clusters")
def list_clusters(output: Output = OutputOpt) -> None:
    """Every cluster of this lab with its status."""
    from lab.osutil import iso

    st = store()
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
    from lab.control import clusters

    st = store()
    nodes = clusters.list_nodes(st, name)
    gpus = clusters.gpus(st, name)
    host = st.cluster(name).host  # every node of a cluster is on its host (lab/providers/placement.py)
    if output == Output.json:
        print_json({"ClusterNodeSummaries": [
            {**n, "Lab": {"Gpus": (g := gpus.get(n["InstanceGroupName"], 0)), "GpusEmulated": g > 0,
                          **({"Host": host} if host else {})}}
            for n in nodes]})
        return
    for n in nodes:
        s = n["InstanceStatus"]
        g = gpus.get(n["InstanceGroupName"], 0)
        gpu = f"{g} GPU{'s' if g > 1 else ''} (emulated)" if g else ""
        image = n.get("ImageVersionStatus")  # the image release, flagged when a newer one is there (issue 32)
        release = (n.get("CurrentImageReleaseVersion") or "-") + (f" ({image})" if image not in (None, "UpToDate") else "")
        out.print(f"{n['NodeLogicalId']:<26} {n['InstanceGroupName']:<12} {s['Status']:<9} {n['PrivatePrimaryIp']:<14} "
                  f"{(host or '-'):<8} {release:<11} {gpu + '  ' if gpu else ''}{s.get('Message', '')}", markup=False)


@app.command("describe-cluster-node")
def describe_cluster_node(name: str, node: str = typer.Argument(..., help="node name or instance id"),
                          output: Output = OutputOpt) -> None:
    """One node (HyperPod's DescribeClusterNode) with the lab's view: phase, pending work, its box."""
    from lab.control import clusters

    d = clusters.describe_node(store(), name, node)
    if output == Output.json:
        print_json({"NodeDetails": d})
        return
    s, lab = d["InstanceStatus"], d["Lab"]
    out.print(f"{d['NodeLogicalId']}  {d['InstanceId']}  {d['InstanceGroupName']}  {d['InstanceType']}  "
              f"{d['PrivatePrimaryIp']}\n  status: {s['Status']}{'  ' + s['Message'] if s.get('Message') else ''}\n"
              f"  box: {lab['Box']}  phase: {lab['Phase']}  pending: {lab['Pending'] or '-'}  host: {lab.get('Host') or '-'}",
              markup=False, highlight=False)


@app.command("list-cluster-events")
def list_cluster_events(
    name: str,
    last: int = typer.Option(0, "--last", min=0, help="only the newest N events (0: all)"),
    output: Output = OutputOpt,
) -> None:
    """The cluster's events (HyperPod's ListClusterEvents), oldest first."""
    from lab.control import clusters

    events = clusters.list_events(store(), name)
    if last:
        events = events[-last:]
    if output == Output.json:
        print_json({"Events": events})
        return
    for e in events:
        out.print(f"{e['EventTime'][:19]}  {e['EventLevel']:<5}  {e['Description']}", markup=False, highlight=False)


@app.command("list-cluster-operations")
def list_cluster_operations(
    name: str,
    status: Optional[str] = typer.Option(None, "--status", help="InProgress, Superseded or Done"),
    output: Output = OutputOpt,
) -> None:
    """The cluster's scaling operations and deep health checks (HyperPod's ListClusterOperations), newest first."""
    from lab.control.operations import list_operations

    ops = list_operations(store(), name, Status=status)
    if output == Output.json:
        print_json({"ClusterOperationSummaries": ops})
        return
    for o in ops:
        out.print(f"{o['CreationTime'][:19]}  {o['OperationId']}  {o['Type']:<15} {o['Status']}", markup=False,
                  highlight=False)


@app.command("describe-cluster-operation")
def describe_cluster_operation(name: str, operation_id: str, output: Output = OutputOpt) -> None:
    """One operation with its groups before and after, or its health checks (HyperPod's DescribeClusterOperation)."""
    from lab.control.operations import describe_operation

    op = describe_operation(store(), name, operation_id)
    if output == Output.json:
        print_json(op)
        return
    out.print(f"{op['OperationId']}  {op['Type']}  {op['Status']}  created {op['CreationTime'][:19]}", markup=False,
              highlight=False)
    for d in op.get("DeepHealthCheckDetails", []):
        out.print(f"  {d['InstanceGroupName']:<12} {', '.join(d['DeepHealthChecks'])} on "
                  f"{', '.join(d.get('InstanceIds') or ['every node'])}", markup=False, highlight=False)
    for d in op.get("ScalingDetails", []):
        was, want = d.get("Original", {}), d.get("Desired", {})
        out.print(f"  {d['InstanceGroupName']:<12} {was.get('CurrentCount', '?')} running, target "
                  f"{was.get('TargetCount', '?')} -> {want.get('TargetCount', '?')}", markup=False, highlight=False)


@app.command("start-cluster-health-check")
def start_cluster_health_check(
    name: str,
    group: str = typer.Argument(..., help="the instance group to check"),
    instance_ids: list[str] = typer.Option([], "--instance-id", help="only these instances (repeat); default: all"),
    checks: list[str] = typer.Option(["InstanceStress"], "--check",
                                     help="InstanceStress, InstanceConnectivity or MultiNodeTrainingValidation (repeat)"),
    output: Output = OutputOpt,
) -> None:
    """Deep health checks (HyperPod's StartClusterHealthCheck): the nodes go into a Slurm maintenance
    reservation, are checked inside, and a node that fails is rebooted or replaced (NodeRecovery)."""
    from lab.control import health

    cfg = {"InstanceGroupName": group, "DeepHealthChecks": checks, **({"InstanceIds": instance_ids} if instance_ids else {})}
    op = health.start(store(), name, [cfg], start_engine=True)
    if output == Output.json:
        print_json({"OperationId": op})
        return
    out.print(f"deep health check {op} started (watch: slurmlab list-cluster-nodes {name}; "
              f"slurmlab describe-cluster-operation {name} {op})", markup=False, highlight=False)


@app.command("delete-cluster")
def delete_cluster(
    name: str,
    wait: bool = typer.Option(True, "--wait/--no-wait", help="wait until every VM, volume and network is gone"),
    leftovers: bool = typer.Option(False, "--leftovers", help="no cluster of this lab has NAME: remove what this "
                                   "machine still holds under it (a killed run's VMs, network, checkpoints)"),
    output: Output = OutputOpt,
) -> None:
    """Delete a cluster: every domain, volume, network and key of it."""
    from lab.control import clusters, commands

    st = store()
    if leftovers:
        gone = commands.remove_leftovers(st, name)
        if output == Output.json:
            print_json({"ClusterName": name, "Removed": gone})
        else:
            out.print("\n".join(f"removed {g}" for g in gone) or f"nothing left under the name {name}",
                      markup=False, highlight=False)
        return
    clusters.delete(st, name)
    if wait:
        try:
            clusters.wait(st, name, "Deleted", on_change=Watcher(output == Output.json), timeout=900)
        except KeyboardInterrupt:  # the delete is recorded: the engine finishes it without us
            err.print(f"stopped waiting; the engine goes on deleting {name} "
                      f"(`slurmlab delete-cluster {name}` waits again)", markup=False, highlight=False)
            raise typer.Exit(exitcodes.INTERRUPTED) from None
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
    from lab.control import clusters

    r = clusters.add_nodes(store(), name, [{"InstanceGroupName": group, "IncrementTargetCountBy": count}], start_engine=True)
    _batch_result("adding", r, output)


def _node_op(verb: str, fn_name: str):
    def command(
        name: str,
        nodes: list[str] = typer.Argument(..., help="node names (NodeLogicalId) or instance ids"),
        output: Output = OutputOpt,
    ) -> None:
        from lab.control import clusters

        _batch_result(verb, getattr(clusters, fn_name)(store(), name, nodes, start_engine=True), output)
    return command


app.command("batch-delete-cluster-nodes", help="Scale in: drain these nodes, take them out of Slurm (one reconfigure), "
            "destroy their VMs; each group's target drops by one.")(_node_op("deleting", "delete_nodes"))
app.command("batch-reboot-cluster-nodes", help="Restart these nodes' VMs; each is configured and joins Slurm again.")(
    _node_op("rebooting", "reboot_nodes"))
app.command("batch-replace-cluster-nodes", help="Replace these nodes with fresh VMs under the same names (new instance ids).")(
    _node_op("replacing", "replace_nodes"))


@app.command("resume-group")
def resume_group(
    name: str,
    group: str = typer.Argument(..., help="the instance group to resume"),
    output: Output = OutputOpt,
) -> None:
    """A protected group (its nodes failed 5 times in a row: describe-cluster's Lab.ProtectedGroups)
    tries again: its failed nodes retry now, recovery resumes."""
    from lab.engine import daemon
    from lab.control.commands import resume_group as resume

    r = resume(store(), name, group)
    daemon.ensure_running()
    if output == Output.json:
        print_json(r)
    else:
        out.print(f"{name}/{group}: " + ("resumed" if r["WasProtected"] else "was not protected; nothing to resume")
                  + (f", {r['Retried']} failed node(s) retry now" if r["Retried"] else ""))


@app.command("move-cluster-nodes")
def move_cluster_nodes(
    name: str,
    source: str = typer.Argument(..., help="the instance group the nodes leave"),
    target: str = typer.Argument(..., help="the instance group they join (same node type and instance type)"),
    nodes: list[str] = typer.Argument(None, help="node names (NodeLogicalId) or instance ids"),
    count: int = typer.Option(0, "--count", min=0, help="or: how many nodes of SOURCE to move (InstanceCount)"),
    output: Output = OutputOpt,
) -> None:
    """Move Running nodes to another instance group (HyperPod's MoveClusterNodes): each keeps its VM,
    leaves Slurm, and joins again with the new group's partitions and lifecycle script."""
    from lab.control import moves

    ids = [x for x in nodes or [] if x.startswith("i-")]
    r = moves.move_nodes(store(), name, source, target, node_ids=ids, logical_ids=[x for x in nodes or [] if x not in ids],
                         count=count or None, start_engine=True)
    _batch_result("moving", r, output)


@app.command("update-cluster-software")
def update_cluster_software(
    name: str,
    groups: list[str] = typer.Option([], "--group", help="an instance group to update (repeat); default: all (the controller last, if it has a state disk)"),
    image_id: Optional[str] = typer.Option(None, "--image-id", help="the box's ImageId (slurmlab box list); default: the default box"),
    release: Optional[str] = typer.Option(None, "--release", help="an ImageReleaseVersion instead (slurmlab box list)"),
    batch: int = typer.Option(1, "--batch", min=1, help="nodes replaced at once (MaximumBatchSize INSTANCE_COUNT)"),
    wait: int = typer.Option(0, "--wait", min=0, max=3600, help="seconds between batches (WaitIntervalInSeconds)"),
    output: Output = OutputOpt,
) -> None:
    """Rolling software update (HyperPod's UpdateClusterSoftware): batch by batch, nodes are drained out of
    Slurm (running jobs end first), replaced with the box, joined and health-checked; a failed check
    rolls the batch back and stops."""
    from lab.control import software

    deployment = {"RollingUpdatePolicy": {"MaximumBatchSize": {"Type": "INSTANCE_COUNT", "Value": batch}},
                  "WaitIntervalInSeconds": wait}
    op = software.update_software(store(), name, groups or None, deployment, image_id, release=release,
                                  start_engine=True)
    if output == Output.json:
        print_json({"OperationId": op})
        return
    out.print(f"software update {op} started (watch: slurmlab list-cluster-events {name}; "
              f"slurmlab describe-cluster {name})", markup=False, highlight=False)


@app.command()
def up(
    spec: str = typer.Argument("examples/cluster.yaml", help="cluster spec"),
    timeout: float = typer.Option(3600, help="seconds to wait at most"),
    users: Optional[int] = typer.Option(None, "--users", help="student accounts user01..userNN (sets Lab.Users.Count)"),
    jupyter: Optional[bool] = JupyterOpt,
    output: Output = OutputOpt,
) -> None:
    """The whole path: host set-up, the box if missing, the cluster, a job on it, how to get in."""
    from lab.control import clusters
    from lab.workflows import create
    from lab.workflows.up import up as bring_up

    progress = Progress(output == Output.json)
    sp = create.load(spec, users, jupyter)
    r = bring_up(sp, users_given=users is not None, timeout=timeout, progress=progress, box_progress=box_progress,
                 watcher=lambda: Watcher(output == Output.json))
    st, name, entry, result = r.store, r.name, r.entry, r.first_job
    if output == Output.json:
        print_json({**with_accounts(clusters.describe(st, name), name), "FirstJob": result,
                    "Ssh": f"slurmlab ssh {name} {entry.name}"})
        return
    print_cluster(clusters.describe(st, name))
    print_accounts(name)
    out.print(f"\nfirst job: {result['command']}\n" + "\n".join(f"  {l}" for l in result["output"].splitlines()))
    out.print(f"\nget in:     slurmlab ssh {name} {entry.name}")
    out.print(f"run a job:  slurmlab ssh {name} {entry.name} -- srun -N{result['nodes']} hostname")
    out.print(f"nodes:      slurmlab list-cluster-nodes {name}")
    out.print(f"verify:     slurmlab verify {name}")
    out.print(f"tear down:  slurmlab delete-cluster {name}")
