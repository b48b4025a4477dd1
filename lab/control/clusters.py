"""The operations the CLI and the API call, in one place to import them from:

    commands  create, update, delete
    batches   add_nodes, delete_nodes, reboot_nodes, replace_nodes
    views     describe, list_nodes, describe_node, list_events, describe_event, gpus, get, arn
    waiting   wait
    events    event_id (the EventId codec)

Requests write desired state into the store; the engine process does the work. Shapes follow
HyperPod's responses (botocore's SageMaker service model).
"""

from __future__ import annotations

from lab.control.batches import add_nodes, delete_nodes, reboot_nodes, replace_nodes
from lab.control.commands import MAX_CLUSTERS, ClusterLimit, NameTaken, _group_rows, check_new, create, delete, update
from lab.control.events import event_id
from lab.control.views import (
    arn,
    describe,
    describe_event,
    describe_node,
    get,
    gpus,
    image_version_status,
    list_events,
    list_nodes,
)
from lab.control.waiting import wait
from lab.errors import Conflict, NotFound, UsageError

__all__ = [
    "MAX_CLUSTERS", "ClusterLimit", "Conflict", "NameTaken", "NotFound", "UsageError", "_group_rows", "add_nodes",
    "arn", "check_new", "create", "delete", "delete_nodes", "describe", "describe_event", "describe_node",
    "event_id", "get", "gpus", "image_version_status", "list_events", "list_nodes", "reboot_nodes", "replace_nodes", "update", "wait",
]
