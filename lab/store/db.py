"""The store: one SQLite file under $SLURMLAB_HOME, schema versioned, every change a transaction.

Several processes use the file at once (the engine, the CLI, the API server); each change is one
transaction, and `snapshot()` reads a cluster, its groups and its nodes in one read transaction so
the engine never plans from a half-applied request. The tables and their upgrades: lab/store/schema.py;
the row types: lab/store/rows.py (imported from here too).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from lab.store import schema
from lab.store.rows import (JSON_COLUMNS, NODE_COLS, ClusterRow, EventRow, ExtensionRow, GroupRow, NodeRow, OperationRow,
                            node_of, row_of)
from lab.store.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION", "ClusterRow", "EventRow", "ExtensionRow", "GroupRow", "NodeRow", "OperationRow", "Store"]


def _insert(db: sqlite3.Connection, table: str, d: dict, verb: str = "INSERT") -> sqlite3.Cursor:
    """`verb` INTO `table` the columns and values of `d`."""
    return db.execute(f"{verb} INTO {table} ({','.join(d)}) VALUES ({','.join('?' * len(d))})", tuple(d.values()))


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
        schema.prepare(self._db, path, self.tx)

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
        """Injected faults: {"seed": int, "launch_failure_rate": float, "health_check_failure_rate":
        float, "extension_unhealthy_rate": float}, or {} (none)."""
        return self.meta("faults", {}) or {}

    def set_faults(self, seed: int | None, launch_failure_rate: float, health_check_failure_rate: float = 0.0,
                   extension_unhealthy_rate: float = 0.0) -> None:
        rates = {"launch_failure_rate": float(launch_failure_rate),
                 "health_check_failure_rate": float(health_check_failure_rate),
                 "extension_unhealthy_rate": float(extension_unhealthy_rate)}
        rates = {k: v for k, v in rates.items() if v}
        self.set_meta("faults", {"seed": seed or 0, **rates} if rates else None)

    # ---------------------------------------------------------------- clusters
    def add_cluster(self, c: ClusterRow, groups: list[GroupRow]) -> None:
        with self.tx() as db:
            d = asdict(c)
            d["spec"] = json.dumps(d["spec"])
            _insert(db, "clusters", d)
            for g in groups:
                self._put_group(db, g)

    def _put_group(self, db, g: GroupRow) -> None:
        d = asdict(g)
        d["partitions"] = json.dumps(d["partitions"])
        _insert(db, "groups", d, "INSERT OR REPLACE")

    def put_group(self, g: GroupRow) -> None:
        with self.tx() as db:
            self._put_group(db, g)

    def delete_group(self, cluster: str, name: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM groups WHERE cluster=? AND name=?", (cluster, name))

    def cluster(self, name: str) -> ClusterRow | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM clusters WHERE name=?", (name,)).fetchone()
        return row_of(ClusterRow, r) if r else None

    def clusters(self) -> list[ClusterRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM clusters ORDER BY created_at").fetchall()
        return [row_of(ClusterRow, r) for r in rows]

    def update_cluster(self, name: str, **vals) -> None:
        if "spec" in vals and not isinstance(vals["spec"], str):
            vals["spec"] = json.dumps(vals["spec"])
        with self.tx() as db:
            sets = ",".join(f"{k}=?" for k in vals)
            db.execute(f"UPDATE clusters SET {sets} WHERE name=?", (*vals.values(), name))

    def delete_cluster(self, name: str) -> None:
        with self.tx() as db:
            for t in ("nodes", "groups", "events", "operations", "extensions", "extension_samples"):
                db.execute(f"DELETE FROM {t} WHERE cluster=?", (name,))
            db.execute("DELETE FROM clusters WHERE name=?", (name,))

    def groups(self, cluster: str) -> list[GroupRow]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM groups WHERE cluster=? ORDER BY rowid", (cluster,)).fetchall()
        return [row_of(GroupRow, r) for r in rows]

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
                cur = self._db.execute(f"SELECT {NODE_COLS} FROM nodes WHERE cluster=? ORDER BY grp, ordinal", (cluster,))
                cur.row_factory = None
                nodes = cur.fetchall()
            finally:
                if own:
                    self._db.execute("COMMIT")
        return (row_of(ClusterRow, r) if r else None, [row_of(GroupRow, g) for g in groups], [node_of(n) for n in nodes])

    # ---------------------------------------------------------------- nodes
    def nodes(self, cluster: str) -> list[NodeRow]:
        with self._lock:
            cur = self._db.execute(f"SELECT {NODE_COLS} FROM nodes WHERE cluster=? ORDER BY grp, ordinal", (cluster,))
            cur.row_factory = None
            rows = cur.fetchall()
        return [node_of(r) for r in rows]

    def node(self, cluster: str, name: str) -> NodeRow | None:
        with self._lock:
            cur = self._db.execute(f"SELECT {NODE_COLS} FROM nodes WHERE cluster=? AND name=?", (cluster, name))
            cur.row_factory = None
            r = cur.fetchone()
        return node_of(r) if r else None

    def add_node(self, n: NodeRow, *, if_absent: bool = False) -> bool:
        """Insert a node; with if_absent, a name already taken is left alone (returns False)."""
        with self.tx() as db:
            d = asdict(n)
            return _insert(db, "nodes", d, "INSERT OR IGNORE" if if_absent else "INSERT").rowcount > 0

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
            for k in JSON_COLUMNS & d.keys():  # the columns row_of() decodes
                d[k] = json.dumps(d[k]) if d[k] is not None else None
            _insert(db, "operations", d)

    def operations(self, cluster: str, status: str | None = None) -> list[OperationRow]:
        q, args = "SELECT * FROM operations WHERE cluster=?", [cluster]
        if status:
            q += " AND status=?"
            args.append(status)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY created_at, rowid", args).fetchall()
        return [row_of(OperationRow, r) for r in rows]

    def set_operation_details(self, op_id: str, details: dict) -> None:
        with self.tx() as db:
            db.execute("UPDATE operations SET details=? WHERE id=?", (json.dumps(details), op_id))

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
        return [row_of(EventRow, r) for r in rows]

    def event(self, cluster: str, event_id: int) -> EventRow | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM events WHERE cluster=? AND id=?", (cluster, event_id)).fetchone()
        return row_of(EventRow, r) if r else None

    # ---------------------------------------------------------------- extensions (docs/adr/0017)
    def add_extension(self, e: ExtensionRow) -> bool:
        """Insert an extension; False (nothing written) when the cluster has one of that name already."""
        with self.tx() as db:
            d = {k: json.dumps(v) if k in JSON_COLUMNS else v for k, v in asdict(e).items()}
            return _insert(db, "extensions", d, "INSERT OR IGNORE").rowcount > 0

    def extension(self, cluster: str, name: str) -> ExtensionRow | None:
        with self._lock:
            r = self._db.execute("SELECT * FROM extensions WHERE cluster=? AND name=?", (cluster, name)).fetchone()
        return row_of(ExtensionRow, r) if r else None

    def extensions(self, cluster: str | None = None) -> list[ExtensionRow]:
        """A cluster's extensions (every cluster's with None), oldest first."""
        q, args = "SELECT * FROM extensions", ()
        if cluster is not None:
            q, args = q + " WHERE cluster=?", (cluster,)
        with self._lock:
            rows = self._db.execute(q + " ORDER BY created_at, rowid", args).fetchall()
        return [row_of(ExtensionRow, r) for r in rows]

    def update_extension(self, cluster: str, name: str, **vals) -> None:
        vals = {k: json.dumps(v) if k in JSON_COLUMNS else v for k, v in vals.items()}
        with self.tx() as db:
            sets = ",".join(f"{k}=?" for k in vals)
            db.execute(f"UPDATE extensions SET {sets} WHERE cluster=? AND name=?", (*vals.values(), cluster, name))

    def delete_extension(self, cluster: str, name: str) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM extensions WHERE cluster=? AND name=?", (cluster, name))

    def add_extension_sample(self, cluster: str, sample: dict, keep: int = 120) -> None:
        """Keep one metrics sample (docs/adr/0017's shape) of the cluster; only the newest `keep` stay."""
        with self.tx() as db:
            db.execute("INSERT INTO extension_samples (cluster, time, sample) VALUES (?,?,?)",
                       (cluster, float(sample.get("time") or time.time()), json.dumps(sample)))
            db.execute("DELETE FROM extension_samples WHERE cluster=? AND id NOT IN (SELECT id FROM extension_samples"
                       " WHERE cluster=? ORDER BY id DESC LIMIT ?)", (cluster, cluster, max(0, int(keep))))

    def extension_samples(self, cluster: str, limit: int = 120) -> list[dict]:
        """The cluster's newest `limit` metrics samples, oldest first."""
        with self._lock:
            rows = self._db.execute("SELECT sample FROM extension_samples WHERE cluster=? ORDER BY id DESC LIMIT ?",
                                    (cluster, max(0, int(limit)))).fetchall()
        return [json.loads(r[0]) for r in reversed(rows)]
