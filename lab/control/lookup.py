"""A cluster's row by name, or NotFound naming the fix: the one lookup every request starts with. Its own
module, light to import: `slurmlab ssh` needs it and nothing else of the request side."""

from __future__ import annotations

from lab.errors import NotFound
from lab.store.db import ClusterRow, Store


def get(st: Store, name: str) -> ClusterRow:
    c = st.cluster(name)
    if c is None:
        raise NotFound(f"no cluster named '{name}'", "list them with: slurmlab list-clusters")
    return c
