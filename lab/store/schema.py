"""The store's schema: the tables, their version, and the columns added since schema 1 (an older
file is upgraded in place, a newer one refused)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

SCHEMA_VERSION = 10

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS clusters (
  name TEXT PRIMARY KEY, arn TEXT NOT NULL, status TEXT NOT NULL, failure_message TEXT,
  spec TEXT NOT NULL, provider TEXT NOT NULL, net_index INTEGER NOT NULL,
  created_at REAL NOT NULL, in_service_at REAL, full_size_at REAL,
  unobserved_since REAL, unobserved_reason TEXT, host TEXT
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
CREATE TABLE IF NOT EXISTS extensions (
  cluster TEXT NOT NULL, name TEXT NOT NULL, arn TEXT NOT NULL, version TEXT NOT NULL,
  config TEXT NOT NULL, settings TEXT NOT NULL, status TEXT NOT NULL,
  installed TEXT NOT NULL DEFAULT '[]', failed TEXT NOT NULL DEFAULT '{}', unhealthy TEXT NOT NULL DEFAULT '{}',
  issues TEXT NOT NULL DEFAULT '[]',
  message TEXT NOT NULL DEFAULT '', tags TEXT NOT NULL DEFAULT '[]',
  created_at REAL NOT NULL, modified_at REAL NOT NULL, probed_at REAL,
  PRIMARY KEY (cluster, name)
);
CREATE TABLE IF NOT EXISTS extension_samples (
  id INTEGER PRIMARY KEY AUTOINCREMENT, cluster TEXT NOT NULL, time REAL NOT NULL, sample TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS extension_samples_cluster ON extension_samples (cluster, id);
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
    # schema 4: the engine could not observe the cluster's VMs since then, and why (NULL: it can)
    ("clusters", "unobserved_since", "REAL"),
    ("clusters", "unobserved_reason", "TEXT"),
    # schema 5: a scaling operation's groups before and after (DescribeClusterOperation's ScalingDetails)
    ("operations", "scaling", "TEXT"),
    # schema 6: a deep health check's configurations (DescribeClusterOperation's DeepHealthCheckDetails)
    ("operations", "details", "TEXT"),
    ("nodes", "image", "TEXT"),  # the box a node's VM is made from (UpdateClusterSoftware), NULL: the cluster's
    # schema 7: the libvirt host the cluster was placed on (lab/providers/placement.py), NULL: not placed
    ("clusters", "host", "TEXT"),
    # schema 8: Slurm's view (lab/engine/recovery.py): a node's Slurm trouble, since when, the recovery
    # steps taken; a group's failures in a row and its protected mode; a controller that does not answer
    ("nodes", "slurm", "TEXT"),
    ("nodes", "slurm_since", "REAL"),
    ("nodes", "repairs", "INTEGER NOT NULL DEFAULT 0"),
    ("groups", "failures", "INTEGER NOT NULL DEFAULT 0"),
    ("groups", "failed_at", "REAL"),
    ("groups", "protected", "TEXT"),
    ("clusters", "slurm_problem", "TEXT"),
    ("clusters", "slurm_problem_since", "REAL"),
    # schema 9: the tables `extensions` and `extension_samples` (new tables), and this column of a table
    # written by an early schema 9
    ("extensions", "failed", "TEXT NOT NULL DEFAULT '{}'"),
    # schema 10: the image release a node's VM was made from (issue 32, lab/box/releases.py)
    ("nodes", "release", "TEXT"),
]


def prepare(db: sqlite3.Connection, path: Path, tx) -> None:
    """Create the tables of a new file, upgrade an older one (in the transaction `tx()` opens);
    refuse a file written by a newer slurmlab."""
    got = None
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='meta'").fetchone():
        got = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if got is not None and int(got[0]) > SCHEMA_VERSION:
        raise RuntimeError(f"state schema {got[0]} is newer than {SCHEMA_VERSION}: move {path} away")
    db.executescript(SCHEMA)
    with tx() as d:
        for table, col, decl in ADDED_COLUMNS:
            have = {r[1] for r in d.execute(f"PRAGMA table_info({table})")}
            if col not in have:
                d.execute(f"ALTER TABLE {table} ADD COLUMN {col} {decl}")
        d.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    if got is None:
        db.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
