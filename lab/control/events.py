"""The event-id codec: a store event's number as the UUID-shaped EventId of SageMaker's model
(ClusterEventSummary.EventId), and back. The API server and the CLI use the same form."""

from __future__ import annotations

import zlib

_MIDDLE = "-0000-4000-8000-"


def _cluster_tag(cluster: str) -> str:
    return f"{zlib.crc32(cluster.encode()):08x}"


def event_id(cluster: str, ident: int) -> str:
    """A store event id as the model's UUID-shaped EventId (the API server uses the same form)."""
    return f"{_cluster_tag(cluster)}{_MIDDLE}{ident:012x}"


def event_number(cluster: str, eid: str) -> int | None:
    """The store event id inside `eid`, None when `eid` is not an EventId of this cluster."""
    try:
        head, _, tail = eid.partition(_MIDDLE)
        if head != _cluster_tag(cluster) or not tail:
            return None
        return int(tail, 16)
    except (ValueError, AttributeError):
        return None
