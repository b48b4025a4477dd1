"""The operations the CLI (and later the API) call: create, describe, list nodes, delete, wait.

They write desired state into the store and make sure the engine process runs; the engine does
the work. Shapes follow HyperPod's DescribeCluster / ListClusterNodes responses.
"""

from __future__ import annotations

import datetime as dt
import time
import zlib
from collections.abc import Callable

from lab.engine import daemon
from lab.engine.plan import node_status
from lab.errors import Conflict, NotFound
from lab.store.db import ClusterRow, GroupRow, Store

REGION = "us-east-1"
ACCOUNT = "000000000000"


def arn(name: str) -> str:
    return f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:cluster/{zlib.crc32(name.encode()):08x}{name[:4]}"


def _ts(t: float | None):
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat() if t else None


def create(st: Store, spec, provider: str = "vagrant", start_engine: bool = True) -> ClusterRow:
    """Record a new cluster (status Creating) from a validated ClusterSpec; the engine builds it."""
    from lab.spec.catalog import load_catalog

    if st.cluster(spec.name):
        raise Conflict(f"a cluster named '{spec.name}' already exists",
                       f"pick another ClusterName, or delete it first: slurmlab delete-cluster {spec.name}")
    catalog = load_catalog()
    stored = spec.to_dict()
    groups = []
    for g, raw in zip(spec.InstanceGroups, stored["InstanceGroups"]):
        size = catalog.size(g.instance_type)
        if g.lifecycle_dir:  # resolved against the spec's folder at load time: keep the absolute path
            raw["LifeCycleConfig"]["SourceS3Uri"] = str(g.lifecycle_dir)
        groups.append(GroupRow(cluster=spec.name, name=g.name, instance_type=g.instance_type,
                               node_type=g.node_type, target_count=g.InstanceCount,
                               partitions=[g.partition_name] if g.partition_name else [],
                               cpus=size.vcpus, memory_mib=size.memory_mib, status="Creating"))
    used = {c.net_index for c in st.clusters()}
    net_index = next(i for i in range(1, 250) if i not in used)
    row = ClusterRow(name=spec.name, arn=arn(spec.name), status="Creating", failure_message=None, spec=stored,
                     provider=provider, net_index=net_index, created_at=time.time())
    st.add_cluster(row, groups)
    st.add_event(spec.name, "Cluster", "Info", f"cluster {spec.name} requested: "
                 + ", ".join(f"{g.name} {g.target_count}x {g.instance_type}" for g in groups))
    if start_engine:
        daemon.ensure_running()
    return row


def get(st: Store, name: str) -> ClusterRow:
    c = st.cluster(name)
    if c is None:
        raise NotFound(f"no cluster named '{name}'", "list them with: slurmlab list-clusters")
    return c


def delete(st: Store, name: str, start_engine: bool = True) -> None:
    c = get(st, name)
    if c.status != "Deleting":
        st.update_cluster(name, status="Deleting")
        st.add_event(name, "Cluster", "Info", f"cluster {name} is Deleting")
    if start_engine:
        daemon.ensure_running()


def describe(st: Store, name: str) -> dict:
    c = get(st, name)
    nodes = st.nodes(name)
    spec_groups = {g["InstanceGroupName"]: g for g in c.spec.get("InstanceGroups", [])}
    groups = []
    for g in st.groups(name):
        sg = spec_groups.get(g.name, {})
        groups.append({
            **{k: v for k, v in sg.items() if k not in ("InstanceCount",)},
            "InstanceGroupName": g.name,
            "InstanceType": g.instance_type,
            "CurrentCount": sum(1 for n in nodes if n.grp == g.name and n.phase == "running"),
            "TargetCount": g.target_count,
            "Status": g.status,
        })
    out = {
        "ClusterArn": c.arn,
        "ClusterName": c.name,
        "ClusterStatus": c.status,
        "CreationTime": _ts(c.created_at),
        "InstanceGroups": groups,
        "NodeRecovery": c.spec.get("NodeRecovery", "Automatic"),
        "Orchestrator": c.spec.get("Orchestrator", {"Slurm": {"SlurmConfigStrategy": "Managed"}}),
    }
    if c.spec.get("NodeProvisioningMode"):
        out["NodeProvisioningMode"] = c.spec["NodeProvisioningMode"]
    if c.failure_message:
        out["FailureMessage"] = c.failure_message
    out["Lab"] = {"Provider": c.provider, "InServiceTime": _ts(c.in_service_at), "FullSizeTime": _ts(c.full_size_at)}
    return out


def list_nodes(st: Store, name: str) -> list[dict]:
    get(st, name)
    types = {g.name: g.instance_type for g in st.groups(name)}
    out = []
    for n in st.nodes(name):
        status = {"Status": node_status(n.phase)}
        if n.message:
            status["Message"] = n.message
        out.append({
            "InstanceGroupName": n.grp,
            "InstanceId": n.instance_id,
            "NodeLogicalId": n.name,
            "InstanceType": types.get(n.grp),
            "LaunchTime": _ts(n.launched_at),
            "InstanceStatus": status,
            "PrivatePrimaryIp": n.address,
            "PrivateDnsHostname": n.name,
        })
    return out


def wait(st: Store, name: str, until: str, on_change: Callable[[dict, list[dict]], None] | None = None,
         timeout: float = 3600, poll: float = 1.0) -> dict:
    """Poll until `until` (InService | FullSize | Deleted | Failed) holds; raise TimeoutError else."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        c = st.cluster(name)
        if c is None:
            if until == "Deleted":
                return {}
            raise NotFound(f"cluster '{name}' disappeared")
        d, nodes = describe(st, name), list_nodes(st, name)
        snap = (d["ClusterStatus"], [(g["InstanceGroupName"], g["CurrentCount"], g["Status"]) for g in d["InstanceGroups"]],
                [(n["NodeLogicalId"], n["InstanceStatus"].get("Status"), n["InstanceStatus"].get("Message")) for n in nodes])
        if snap != last and on_change:
            on_change(d, nodes)
        last = snap
        if d["ClusterStatus"] == "Failed":
            return d
        if until == "InService" and d["ClusterStatus"] == "InService":
            return d
        if until == "FullSize" and c.full_size_at:
            return d
        if time.monotonic() > deadline:
            raise TimeoutError(f"cluster {name} did not reach {until} in {timeout:.0f} s")
        if not daemon.running_pid():
            daemon.ensure_running()
        time.sleep(poll)
