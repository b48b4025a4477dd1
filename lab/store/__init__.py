"""SQLite state (stdlib sqlite3, WAL): clusters, instance groups, nodes, events."""

from lab.store.db import Store

__all__ = ["Store"]
