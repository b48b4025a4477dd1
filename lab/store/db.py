"""The store: one SQLite file under $SLURMLAB_HOME, schema versioned, every change a transaction.

Several processes use the file at once (the engine, the CLI, the API server); each change is one
transaction, and `snapshot()` reads a cluster, its groups and its nodes in one read transaction so
the engine never plans from a half-applied request.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

SCHEMA_VERSION = 3

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS clusters (
  name TEXT PRIMARY KEY, arn TEXT NOT NULL, status TEXT NOT NULL, failure_message TEXT,
  spec TEXT NOT NULL, provider TEXT NOT NULL, net_index INTEGER NOT NULL,
  created_at REAL NOT NULL, in_service_at REAL, full_size_at REAL
);
CREATE TABLE IF NOT EXISTS groups (
  cluster TEXT NOT NULL, name TEXT NOT NULL, instance_type TEXT NOT NULL, node_type TEXT NOT NULL,
  target_count INTEGER NOT NULL, partitions TEXT NOT NULL, cpus INTEGER NOT NULL, memory_mib INTEGER NOT NULL,
  status TEXT NOT NULL, PRIMARY KEY (cluster, name)
);
CREATE TABLE IF NOT EXISTS nodes (
  cluster TEXT NOT NULL, name TEXT NOT NULL, grp TEXT NOT NULL, ordinal INTEGER NOT NULL,
  instance_id TEXT NOT NULL, address TEXT NOT NULL, mac TEXT NOT NULL,
  phase TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', attempts INTEGER NOT NULL DEFAULT 0,
  retry_at REAL NOT NULL DEFAULT 0, launched_at REAL, booted_at REAL, joined_at REAL,
  pending TEXT, generation INTEGER NOT NULL DEFAULT 0, configured_at REAL,
  PRIMARY KEY (cluster, name)
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, cluster TEXT NOT NULL, grp TEXT, node TEXT,
  resource_type TEXT NOT NULL, level TEXT NOT NULL, description TEXT NOT NULL,
  operation_id TEXT, instance_id TEXT
);
CREATE INDEX IF NOT EXISTS events_cluster ON events (cluster, id);
CREATE TABLE IF NOT EXISTS capacity (instance_type TEXT PRIMARY KEY, available INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS arrivals (
  id INTEGER PRIMARY KEY AUTOINCREMENT, instance_type TEXT NOT NULL, due REAL NOT NULL,
  count INTEGER NOT NULL, applied INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS operations (
  id TEXT PRIMARY KEY, cluster TEXT NOT NULL, kind TEXT NOT NULL, groups TEXT NOT NULL, nodes TEXT NOT NULL,
  status TEXT NOT NULL, created_at REAL NOT NULL, finished_at REAL, message TEXT NOT NULL DEFAULT '',
  undo TEXT
);
CREATE INDEX IF NOT EXISTS operations_cluster ON operations (cluster, status);
"""

# Columns added after schema 1: (table, column, declaration). An older file is upgraded in place.
ADDED_COLUMNS = [
    # schema 2
    ("nodes", "pending", "TEXT"),
    ("nodes", "generation", "INTEGER NOT NULL DEFAULT 0"),
    ("events", "operation_id", "TEXT"),
    ("events", "instance_id", "TEXT"),
    # schema 3
    ("nodes", "configured_at", "REAL"),
]


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
    status: str  # InProgress | Completed | Failed
    created_at: float
    finished_at: float | None = None
    message: str = ""
    undo: dict | None = field(default=None)


_JSON = {"spec", "partitions", "groups", "nodes", "undo"}
_FIELDS: dict[type, tuple[str, ...]] = {}


def _row(cls, r: sqlite3.Row):
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(f.name for f in fields(cls))
    keys = r.keys()
    vals = {}
    for k in names:
        if k not in keys:
            continue
        v = r[k]
        if k in _JSON and isinstance(v, str):
            v = json.loads(v)
        vals[k] = v
    return cls(**vals)


def _node_row(r: tuple) -> NodeRow:
    # The hot path (every engine step reads every node): positional, no dict.
    return NodeRow(*r)


_NODE_COLS = ",".join(f.name for f in fields(NodeRow))


class Store:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._depth = 0
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        got = None
        if self._db.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
            got = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if got is not None and int(got[0]) > SCHEMA_VERSION:
            raise RuntimeError(f"state schema {got[0]} is newer than {SCHEMA_VERSION}: move {path} away")
        self._db.executescript(SCHEMA)
        self._migrate()
        if got is None:
            self._db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    def _migrate(self) -> None:
        with self.tx() as db:
            for table, col, decl in ADDED_COLUMNS:
                have = {r[1] for r in db.execute(f"PRAGMA table_info({table})")}
                if col not in have:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; nested calls (same thread) join the outer one."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._db
                finally:
                    self._depth -= 1
                return
            self._db.execute("BEGIN IMMEDIATE")
            self._depth = 1
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._depth = 0

    def close(self) -> None:
        self._db.close()

    # ---------------------------------------------------------------- meta
    def meta(self, key: str, default=None):
        with self._lock:
            r = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return json.loads(r[0]) if r else default

    def set_meta(self, key: str, value) -> None:
        with self.tx() as db:
            if value is None:
                db.execute("DELETE FROM meta WHERE key=?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def faults(self) -> dict:
        """Injected faults: {"seed": int, "launch_failure_rate": float}, or {} (none)."""
        return self.meta("faults", {}) or {}

    def set_faults(self, seed: int | None, launch_failure_rate: float) -> None:
        self.set_meta("faults", {"seed": seed or 0, "launch_failure_rate": float(launch_failure_rate)}
                      if launch_failure_rate else None)

    # ---------------------------------------------------------------- clusters
    def add_cluster(self, c: ClusterRow, groups: list[GroupRow]) -> None:
        with self.tx() as db:
            d = asdict(c)
            d["spec"] = json.dumps(d["spec"])
            db.execute(f"INSERT INTO clusters ({','.join(d)}) VALUES ({','.join('?' * len(d))})", tuple(d.values()))
            for g in groups:
                self._put_group(db, g)

    def _put_group(self, db, g: GroupRow) -> None:
        d = asdict(g)
        d["partitions"] = json.dumps(d["partitions"])
        db.execute(f"INSERT OR REPLACE INTO groups ({','.join(d)}) VALUES ({','.join('?' * len(d))})", tuple(d.values()))

    def put_group(self, g: GroupRow) -> None:
        with self.tx() as db:
            self._put_group(db, g)

    def delete_group(self, cluster: str, name: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM groups WHERE cluster=? AND name=?", (cluster, name))

    def cluster(self, name: str) -> ClusterRow | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM clusters WHERE name=?", (name,)).fetchone()
        return _row(ClusterRow, r) if r else None

    def clusters(self) -> list[ClusterRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM clusters ORDER BY created_at").fetchall()
        return [_row(ClusterRow, r) for r in rows]

    def update_cluster(self, name: str, **vals) -> None:
        if "spec" in vals and not isinstance(vals["spec"], str):
            vals["spec"] = json.dumps(vals["spec"])
        with self.tx() as db:
            sets = ",".join(f"{k}=?" for k in vals)
            db.execute(f"UPDATE clusters SET {sets} WHERE name=?", (*vals.values(), name))

    def delete_cluster(self, name: str) -> None:
        with self.tx() as db:
            for t in ("nodes", "groups", "events", "operations"):
                db.execute(f"DELETE FROM {t} WHERE cluster=?", (name,))
            db.execute("DELETE FROM clusters WHERE name=?", (name,))

    def groups(self, cluster: str) -> list[GroupRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM groups WHERE cluster=? ORDER BY rowid", (cluster,)).fetchall()
        return [_row(GroupRow, r) for r in rows]

    def update_group(self, cluster: str, name: str, **vals) -> None:
        with self.tx() as db:
            sets = ",".join(f"{k}=?" for k in vals)
            db.execute(f"UPDATE groups SET {sets} WHERE cluster=? AND name=?", (*vals.values(), cluster, name))

    def snapshot(self, cluster: str) -> tuple[ClusterRow | None, list[GroupRow], list[NodeRow]]:
        """The cluster, its groups and its nodes as of one instant (one read transaction)."""
        with self._lock:
            own = not self._depth
            if own:
                self._db.execute("BEGIN")
            try:
                r = self._db.execute("SELECT * FROM clusters WHERE name=?", (cluster,)).fetchone()
                groups = self._db.execute("SELECT * FROM groups WHERE cluster=? ORDER BY rowid", (cluster,)).fetchall()
                cur = self._db.execute(f"SELECT {_NODE_COLS} FROM nodes WHERE cluster=? ORDER BY grp, ordinal", (cluster,))
                cur.row_factory = None
                nodes = cur.fetchall()
            finally:
                if own:
                    self._db.execute("COMMIT")
        return (_row(ClusterRow, r) if r else None, [_row(GroupRow, g) for g in groups], [_node_row(n) for n in nodes])

    # ---------------------------------------------------------------- nodes
    def nodes(self, cluster: str) -> list[NodeRow]:
        with self._lock:
            cur = self._db.execute(f"SELECT {_NODE_COLS} FROM nodes WHERE cluster=? ORDER BY grp, ordinal", (cluster,))
            cur.row_factory = None
            rows = cur.fetchall()
        return [_node_row(r) for r in rows]

    def node(self, cluster: str, name: str) -> NodeRow | None:
        with self._lock:
            cur = self._db.execute(f"SELECT {_NODE_COLS} FROM nodes WHERE cluster=? AND name=?", (cluster, name))
            cur.row_factory = None
            r = cur.fetchone()
        return _node_row(r) if r else None

    def add_node(self, n: NodeRow, *, if_absent: bool = False) -> bool:
        """Insert a node; with if_absent, a name already taken is left alone (returns False)."""
        with self.tx() as db:
            d = asdict(n)
            verb = "INSERT OR IGNORE" if if_absent else "INSERT"
            cur = db.execute(f"{verb} INTO nodes ({','.join(d)}) VALUES ({','.join('?' * len(d))})", tuple(d.values()))
            return cur.rowcount > 0

    def update_node(self, cluster: str, name: str, **vals) -> None:
        with self.tx() as db:
            sets = ",".join(f"{k}=?" for k in vals)
            db.execute(f"UPDATE nodes SET {sets} WHERE cluster=? AND name=?", (*vals.values(), cluster, name))

    def delete_node(self, cluster: str, name: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM nodes WHERE cluster=? AND name=?", (cluster, name))

    def delete_nodes(self, cluster: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM nodes WHERE cluster=?", (cluster,))

    # ---------------------------------------------------------------- operations
    def add_operation(self, op: OperationRow) -> None:
        with self.tx() as db:
            d = asdict(op)
            for k in ("groups", "nodes", "undo"):
                d[k] = json.dumps(d[k]) if d[k] is not None else None
            db.execute(f"INSERT INTO operations ({','.join(d)}) VALUES ({','.join('?' * len(d))})", tuple(d.values()))

    def operations(self, cluster: str, status: str | None = None) -> list[OperationRow]:
        q, args = "SELECT * FROM operations WHERE cluster=?", [cluster]
        if status:
            q += " AND status=?"
            args.append(status)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY created_at, rowid", args).fetchall()
        return [_row(OperationRow, r) for r in rows]

    def finish_operation(self, op_id: str, status: str, message: str = "", when: float | None = None) -> None:
        with self.tx() as db:
            db.execute("UPDATE operations SET status=?, message=?, finished_at=? WHERE id=? AND status='InProgress'",
                       (status, message, when or time.time(), op_id))

    # ---------------------------------------------------------------- capacity
    def capacity(self) -> dict[str, int]:
        with self._lock:
            return {r[0]: r[1] for r in self._db.execute("SELECT instance_type, available FROM capacity")}

    def set_capacity(self, instance_type: str, available: int | None) -> None:
        with self.tx() as db:
            if available is None:
                db.execute("DELETE FROM capacity WHERE instance_type=?", (instance_type,))
            else:
                db.execute("INSERT OR REPLACE INTO capacity VALUES (?, ?)", (instance_type, available))

    def add_arrival(self, instance_type: str, due: float, count: int) -> None:
        with self.tx() as db:
            db.execute("INSERT INTO arrivals (instance_type, due, count) VALUES (?,?,?)", (instance_type, due, count))

    def pending_arrivals(self) -> list[tuple[int, str, float, int]]:
        with self._lock:
            return [tuple(r) for r in self._db.execute(
                "SELECT id, instance_type, due, count FROM arrivals WHERE applied=0 ORDER BY due")]

    def apply_arrival(self, arrival_id: int) -> tuple[str, int] | None:
        """Add an arrival's count to its type's capacity, once. Returns (type, new available)."""
        with self.tx() as db:
            r = db.execute("SELECT instance_type, count FROM arrivals WHERE id=? AND applied=0", (arrival_id,)).fetchone()
            if r is None:
                return None
            t, n = r
            db.execute("UPDATE arrivals SET applied=1 WHERE id=?", (arrival_id,))
            cur = db.execute("SELECT available FROM capacity WHERE instance_type=?", (t,)).fetchone()
            if cur is None:  # unlimited already: nothing to add
                return t, -1
            db.execute("UPDATE capacity SET available=? WHERE instance_type=?", (cur[0] + n, t))
            return t, cur[0] + n

    def retry_now(self, instance_type: str) -> int:
        """Failed nodes of this type retry at once (capacity appeared). Returns how many."""
        with self.tx() as db:
            cur = db.execute(
                "UPDATE nodes SET retry_at=0 WHERE phase='failed' AND retry_at>0 AND EXISTS (SELECT 1 FROM groups g "
                "WHERE g.cluster=nodes.cluster AND g.name=nodes.grp AND g.instance_type=?)", (instance_type,))
            return cur.rowcount

    # ---------------------------------------------------------------- events
    def add_event(self, cluster: str, resource_type: str, level: str, description: str,
                  grp: str | None = None, node: str | None = None, when: float | None = None,
                  operation_id: str | None = None, instance_id: str | None = None) -> None:
        with self.tx() as db:
            iid = instance_id
            if node and iid is None:
                r = db.execute("SELECT instance_id FROM nodes WHERE cluster=? AND name=?", (cluster, node)).fetchone()
                iid = r[0] if r else None
            db.execute(
                "INSERT INTO events (time, cluster, grp, node, resource_type, level, description, operation_id, instance_id)"
                " VALUES (?,?,?,?,?,?,?,?,?)",
                (when or time.time(), cluster, grp, node, resource_type, level, description, operation_id, iid),
            )

    def events(self, cluster: str, after_id: int = 0, limit: int = 1000) -> list[EventRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM events WHERE cluster=? AND id>? ORDER BY id LIMIT ?", (cluster, after_id, limit)
            ).fetchall()
        return [_row(EventRow, r) for r in rows]

    def event(self, cluster: str, event_id: int) -> EventRow | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM events WHERE cluster=? AND id=?", (cluster, event_id)).fetchone()
        return _row(EventRow, r) if r else None
