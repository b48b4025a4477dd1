"""The store's rows as dataclasses, and how a SQLite row becomes one (JSON columns decoded)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field, fields

@dataclass
class ClusterRow:
    name: str
    arn: str
    status: str
    failure_message: str | None
    spec: dict
    provider: str
    net_index: int
    created_at: float
    in_service_at: float | None = None
    full_size_at: float | None = None
    unobserved_since: float | None = None  # the provider could not be asked since then (stale state)
    unobserved_reason: str | None = None
    host: str | None = None  # the libvirt host its VMs run on (None: not placed, or a provider with one host)
    # slurmctld does not answer the engine's Slurm poll (lab/engine/watching.py): why, since when
    slurm_problem: str | None = None
    slurm_problem_since: float | None = None

    def group_spec(self, group: str) -> dict:
        """The instance group's entry of the request (spec["InstanceGroups"]); {} when it has none."""
        return next((g for g in self.spec.get("InstanceGroups", []) if g.get("InstanceGroupName") == group), {})


@dataclass
class GroupRow:
    cluster: str
    name: str
    instance_type: str
    node_type: str
    target_count: int
    partitions: list[str]
    cpus: int
    memory_mib: int
    status: str
    # failures of its nodes in a row (launch, configure, recovery by reboot or replace), the newest
    # when; at PROTECT_AFTER the group is protected (lab/engine/recovery.py): the reason, nothing retried
    failures: int = 0
    failed_at: float | None = None
    protected: str | None = None


@dataclass
class NodeRow:
    cluster: str
    name: str
    grp: str
    ordinal: int
    instance_id: str
    address: str
    mac: str
    phase: str
    message: str = ""
    attempts: int = 0
    retry_at: float = 0.0
    launched_at: float | None = None
    booted_at: float | None = None
    joined_at: float | None = None
    pending: str | None = None  # a request on the node: delete | reboot | replace (written by the API side)
    generation: int = 0  # bumped each time the node gets a new instance (replace, recovery)
    # when a compute node last became `configured` (the join batching window reads it); None: not
    # configured since its VM (re)started, or a row written before schema 3
    configured_at: float | None = None
    # the box the node's VM is made from (UpdateClusterSoftware sets it); None: the cluster's (Lab.Box)
    image: str | None = None
    # Slurm's view of a running node (lab/engine/recovery.py): its trouble as shown ("down* (Not
    # responding)"; None: healthy), since when the engine sees it, the recovery steps taken since
    slurm: str | None = None
    slurm_since: float | None = None
    repairs: int = 0
    # the image release (lab/box/releases.py) its VM was made from, set at each launch; None: not known
    release: str | None = None


@dataclass
class EventRow:
    id: int
    time: float
    cluster: str
    grp: str | None
    node: str | None
    resource_type: str
    level: str
    description: str
    operation_id: str | None = None
    instance_id: str | None = None


@dataclass
class OperationRow:
    """One API request that changes the cluster (UpdateCluster, BatchAddClusterNodes, ...), in flight
    until the engine sees its groups (or nodes) settled."""

    id: str
    cluster: str
    kind: str
    groups: list[str]
    nodes: list[str]
    status: str  # InProgress | Completed | Failed | Superseded
    created_at: float
    finished_at: float | None = None
    message: str = ""
    undo: dict | None = field(default=None)
    # group -> {"Original": {CurrentCount, TargetCount, MinCount?}, "Desired": {TargetCount, MinCount?}}
    scaling: dict | None = field(default=None)
    # a deep health check: {"Configurations": [...the request's...], "Checks": {node: [check, ...]}}
    details: dict | None = field(default=None)


@dataclass
class ExtensionRow:
    """One cluster extension (CreateClusterExtension, docs/adr/0017-cluster-extensions.md): the wish the
    engine makes every running node match, and what it found."""

    cluster: str
    name: str
    arn: str
    version: str
    config: dict  # the requests' configuration as given (Update merges into it, RFC 7386)
    settings: dict  # `config` over the defaults: what is installed (DescribeClusterExtension shows it)
    status: str  # the model's ExtensionStatus: Creating | Active | Updating | Deleting | Degraded | *Failed
    created_at: float
    modified_at: float
    installed: list[str] = field(default_factory=list)  # nodes it runs on with `version` and `settings`
    failed: dict[str, str] = field(default_factory=dict)  # nodes the last apply or remove failed on: why
    unhealthy: dict[str, str] = field(default_factory=dict)  # members that did not answer the last probe: why
    issues: list[dict] = field(default_factory=list)  # Health.Issues: [{Code, Message, NodeCount}]
    message: str = ""  # why the last apply or remove failed
    tags: list[dict] = field(default_factory=list)
    probed_at: float | None = None


JSON_COLUMNS = {"spec", "partitions", "groups", "nodes", "undo", "scaling", "details",
                "config", "settings", "installed", "failed", "unhealthy", "issues", "tags"}
_FIELDS: dict[type, tuple[str, ...]] = {}


def row_of(cls, r: sqlite3.Row):
    """The dataclass `cls` from a row read by name (JSON columns decoded; columns it lacks left out)."""
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    keys = r.keys()
    vals = {}
    for k in names:
        if k not in keys:
            continue
        v = r[k]
        if k in JSON_COLUMNS and isinstance(v, str):
            v = json.loads(v)
        vals[k] = v
    return cls(**vals)


def node_of(r: tuple) -> NodeRow:
    # The hot path (every engine step reads every node): positional, no dict.
    return NodeRow(*r)


NODE_COLS = ",".join(f.name for f in fields(NodeRow))
