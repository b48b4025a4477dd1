"""The store: one SQLite file under $SLURMLAB_HOME, schema versioned, every change a transaction."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path

SCHEMA_VERSION = 1

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
  PRIMARY KEY (cluster, name)
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, cluster TEXT NOT NULL, grp TEXT, node TEXT,
  resource_type TEXT NOT NULL, level TEXT NOT NULL, description TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_cluster ON events (cluster, id);
CREATE TABLE IF NOT EXISTS capacity (instance_type TEXT PRIMARY KEY, available INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS arrivals (
  id INTEGER PRIMARY KEY AUTOINCREMENT, instance_type TEXT NOT NULL, due REAL NOT NULL,
  count INTEGER NOT NULL, applied INTEGER NOT NULL DEFAULT 0
);
"""


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


def _row(cls, r: sqlite3.Row):
    d = dict(r)
    for k in ("spec", "partitions"):
        if k in d and isinstance(d[k], str):
            d[k] = json.loads(d[k])
    return cls(**{f.name: d[f.name] for f in fields(cls)})


class Store:
    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(SCHEMA)
        got = self._db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
        if got is None:
            self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
        elif int(got[0]) != SCHEMA_VERSION:
            raise RuntimeError(f"state schema {got[0]} is not {SCHEMA_VERSION}: move {path} away")

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def close(self) -> None:
        self._db.close()

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

    def cluster(self, name: str) -> ClusterRow | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM clusters WHERE name=?", (name,)).fetchone()
        return _row(ClusterRow, r) if r else None

    def clusters(self) -> list[ClusterRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM clusters ORDER BY created_at").fetchall()
        return [_row(ClusterRow, r) for r in rows]

    def update_cluster(self, name: str, **vals) -> None:
        with self.tx() as db:
            sets = ",".join(f"{k}=?" for k in vals)
            db.execute(f"UPDATE clusters SET {sets} WHERE name=?", (*vals.values(), name))

    def delete_cluster(self, name: str) -> None:
        with self.tx() as db:
            for t in ("nodes", "groups", "events"):
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

    # ---------------------------------------------------------------- nodes
    def nodes(self, cluster: str) -> list[NodeRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM nodes WHERE cluster=? ORDER BY grp, ordinal", (cluster,)).fetchall()
        return [_row(NodeRow, r) for r in rows]

    def add_node(self, n: NodeRow) -> None:
        with self.tx() as db:
            d = asdict(n)
            db.execute(f"INSERT INTO nodes ({','.join(d)}) VALUES ({','.join('?' * len(d))})", tuple(d.values()))

    def update_node(self, cluster: str, name: str, **vals) -> None:
        with self.tx() as db:
            sets = ",".join(f"{k}=?" for k in vals)
            db.execute(f"UPDATE nodes SET {sets} WHERE cluster=? AND name=?", (*vals.values(), cluster, name))

    def delete_node(self, cluster: str, name: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM nodes WHERE cluster=? AND name=?", (cluster, name))

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
                "UPDATE nodes SET retry_at=0 WHERE phase='failed' AND EXISTS (SELECT 1 FROM groups g WHERE "
                "g.cluster=nodes.cluster AND g.name=nodes.grp AND g.instance_type=?)", (instance_type,))
            return cur.rowcount

    # ---------------------------------------------------------------- events
    def add_event(self, cluster: str, resource_type: str, level: str, description: str,
                  grp: str | None = None, node: str | None = None, when: float | None = None) -> None:
        with self.tx() as db:
            db.execute(
                "INSERT INTO events (time, cluster, grp, node, resource_type, level, description) VALUES (?,?,?,?,?,?,?)",
                (when or time.time(), cluster, grp, node, resource_type, level, description),
            )

    def events(self, cluster: str, after_id: int = 0, limit: int = 1000) -> list[EventRow]:
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM events WHERE cluster=? AND id>? ORDER BY id LIMIT ?", (cluster, after_id, limit)
            ).fetchall()
        return [_row(EventRow, r) for r in rows]
