"""Requests and store contents for API tests that need no engine."""

from __future__ import annotations

import time
from pathlib import Path

from lab.control import clusters
from lab.engine.bookkeeping import instance_id
from lab.spec import spec_from_request
from lab.store.db import NodeRow, Store

ROLE = "arn:aws:iam::000000000000:role/lab"
LIFECYCLE = str(Path(__file__).resolve().parents[2] / "examples" / "lifecycle")


def group(name: str, node_type: str, count: int, itype: str = "ml.t3.medium", **extra) -> dict:
    g = {"InstanceGroupName": name, "InstanceType": itype, "InstanceCount": count, "ExecutionRole": ROLE,
         "SlurmConfig": {"NodeType": node_type}, "LifeCycleConfig": {"SourceS3Uri": LIFECYCLE, "OnCreate": "on_create.sh"}}
    if node_type == "Compute":
        g["SlurmConfig"]["PartitionNames"] = ["dev"]
    g.update(extra)
    return g


def create_request(name: str = "demo", computes: int = 2, continuous: bool = True, login: bool = True,
                   compute_type: str = "ml.c5.large", extra_computes: dict[str, int] | None = None) -> dict:
    groups = [group("controller", "Controller", 1)]
    if login:
        groups.append(group("login", "Login", 1))
    groups.append(group("compute", "Compute", computes, compute_type))
    for gname, n in (extra_computes or {}).items():
        groups.append(group(gname, "Compute", n, compute_type))
    req = {"ClusterName": name, "InstanceGroups": groups, "NodeRecovery": "Automatic",
           "Orchestrator": {"Slurm": {"SlurmConfigStrategy": "Managed"}}}
    if continuous:
        req["NodeProvisioningMode"] = "Continuous"
    return req


def seed_cluster(st: Store, name: str = "demo", computes: int = 2, pending: int = 0, status: str = "InService",
                 request: dict | None = None, created_at: float | None = None) -> None:
    """A cluster as the engine would leave it: every node running, except the last `pending` compute
    nodes, which wait for capacity (never launched, phase failed with an InsufficientCapacity message)."""
    spec = spec_from_request(request or create_request(name, computes), max_nodes_per_group=10000)
    row = clusters.create(st, spec, provider="sim", start_engine=False)
    if created_at:
        st.update_cluster(name, created_at=created_at)
    now = time.time()
    k = 0
    for g in st.groups(name):
        for i in range(1, g.target_count + 1):
            k += 1
            node = f"{name}-{g.name}-{i}"
            waiting = g.node_type == "Compute" and i > g.target_count - pending
            st.add_node(NodeRow(
                cluster=name, name=node, grp=g.name, ordinal=i, instance_id=instance_id(name, node),
                address=f"10.{k // 250}.{row.net_index}.{k % 250 + 1}",
                mac=f"52:54:00:00:{k // 256:02x}:{k % 256:02x}",
                phase="failed" if waiting else "running",
                message=("InsufficientCapacity: no ml.c5.large capacity left in the lab (1 of 1 in use); "
                         "retried when capacity appears") if waiting else "",
                launched_at=None if waiting else now, booted_at=None if waiting else now, joined_at=None if waiting else now))
        st.update_group(name, g.name, status="Degraded" if (g.node_type == "Compute" and pending) else "InService")
    st.update_cluster(name, status=status, in_service_at=now)
    st.add_event(name, "InstanceGroup", "Warning", "instance group compute is Degraded", grp="compute")
    if pending:
        st.add_event(name, "Instance", "Warning", f"{name}-compute-{computes}: InsufficientCapacity (next try in 10 s)",
                     grp="compute", node=f"{name}-compute-{computes}")
    st.add_event(name, "Instance", "Info", f"{name}-controller-1: controller ready", grp="controller", node=f"{name}-controller-1")
    st.add_event(name, "Cluster", "Info", f"cluster {name} is {status}")
