"""The engine's words: action kinds, node phases, and cluster and group statuses, as enums.

They are `StrEnum`s: each member is its string, so the store keeps plain text (a row written before
these existed reads the same) and a member compares equal to its value. Node phases map to
HyperPod's InstanceStatus in lab/engine/plan.py `node_status`."""

from __future__ import annotations

from enum import StrEnum


class Kind(StrEnum):
    """What the planner asks for (lab/engine/plan.py `Action.kind`)."""

    CREATE_NODE = "create_node"  # a node record (quick, in the pass)
    LAUNCH = "launch"
    SHORT = "short"  # no capacity of the node's type: it waits (quick)
    CONFIGURE = "configure"
    JOIN = "join"  # a batch joins Slurm: one slurm.conf change
    LEAVE = "leave"  # a batch leaves Slurm before removal
    DETACH = "detach"  # a batch leaves Slurm to move or to be updated
    LOST = "lost"  # the VM died: NodeRecovery Automatic replaces it
    KEEP_LOST = "keep_lost"  # the VM died: NodeRecovery None keeps it Failure (quick)
    REMOVE = "remove"
    ORPHAN = "orphan"  # a VM with no record
    REBOOT = "reboot"
    REPLACE = "replace"
    HEALTHCHECK = "healthcheck"
    DROP_GROUP = "drop_group"  # a deleted group's record (quick)
    ROLLBACK = "rollback"  # legacy mode: a group cannot reach its count (quick)
    ROLLBACK_CLUSTER = "rollback_cluster"
    DELETE_CLUSTER = "delete_cluster"
    REPAIR = "repair"  # restart slurmd (lab/engine/watching.py asks for it, not the planner)


class Phase(StrEnum):
    """A node's place in its life (nodes.phase)."""

    PLANNED = "planned"
    LAUNCHING = "launching"
    BOOTED = "booted"
    CONFIGURING = "configuring"
    CONFIGURED = "configured"
    JOINING = "joining"
    RUNNING = "running"
    REBOOTING = "rebooting"
    REPLACING = "replacing"
    REMOVING = "removing"
    REMOVED = "removed"
    FAILED = "failed"  # retried at retry_at (never by itself: NO_RETRY)
    LOST = "lost"  # the VM died and is not replaced (NodeRecovery None)


class Status(StrEnum):
    """A cluster's status (HyperPod's ClusterStatus) and an instance group's (InstanceGroupStatus)."""

    CREATING = "Creating"
    IN_SERVICE = "InService"
    UPDATING = "Updating"
    SYSTEM_UPDATING = "SystemUpdating"
    DEGRADED = "Degraded"  # a group only
    ROLLING_BACK = "RollingBack"  # a cluster only
    DELETING = "Deleting"
    FAILED = "Failed"
