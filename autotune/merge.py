"""Merge one tuning log into another: `kiln logs --merge SRC.db [--db DEST]`.

Why: helpers and users tune and confirm into logs of their own (a fresh file keeps a run's
records apart from the shipped ones); the shipped log is then the union of those. A merge
copies everything a later compile or the zero-shot model reads: tasks, targets, records with
their feature vectors, and confirmations (choices, which carry the zero-shot labels).

Rules: a row already in DEST (the same record or confirmation, by its content, not its id)
is not added again, so merging twice adds nothing; DEST's rows are never changed or removed
(a task DEST knows keeps its description); record ids are DEST's own, and each copied
feature vector follows its record. The whole merge is one transaction: a failure leaves DEST
as it was. SRC is opened read-only; a missing file, a file that is not a tuning log, or one
of a newer schema is a TuningDatabaseError naming it.
"""
from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from ..te.errors import TuningDatabaseError
from .database import SCHEMA_VERSION, Database, _sqlite_uri

# the columns that make a row the same row (ids differ between logs)
_RECORD_IDENTITY = ("task_key", "target", "config_key", "costs", "status", "timestamp",
                    "threads")
_CHOICE_IDENTITY = ("task_key", "target", "threads", "config", "timestamp", "candidates")
_REQUIRED = {"tasks": {"workload_key", "description", "shapes"},
             "records": {"id", "task_key", "target", "config", "config_key", "costs",
                         "status", "schema_version", "timestamp"}}


@dataclass(frozen=True)
class MergeCounts:
    """What a merge added to DEST (and what SRC held)."""
    tasks: int
    records: int
    features: int
    choices: int
    src_records: int
    src_choices: int

    def __str__(self) -> str:
        return (f"{self.records} of {self.src_records} record(s) ({self.features} with "
                f"features), {self.choices} of {self.src_choices} confirmation(s) and "
                f"{self.tasks} task(s) added")


def _open_source(path: Path) -> sqlite3.Connection:
    if not path.is_file():
        raise TuningDatabaseError(f"cannot merge '{path}': no such file")
    try:
        conn = sqlite3.connect(_sqlite_uri(path) + "?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        tables = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise TuningDatabaseError(f"cannot merge '{path}': not a tuning database "
                                  f"({exc})") from exc
    for table, needed in _REQUIRED.items():
        columns = _columns(conn, table) if table in tables else set()
        if not needed <= columns:
            conn.close()
            raise TuningDatabaseError(
                f"cannot merge '{path}': not a Kiln tuning database (table '{table}' "
                f"{'lacks ' + ', '.join(sorted(needed - columns)) if columns else 'is missing'})")
    newest = conn.execute("SELECT MAX(schema_version) FROM records").fetchone()[0]
    if newest is not None and newest > SCHEMA_VERSION:
        conn.close()
        raise TuningDatabaseError(
            f"cannot merge '{path}': its records have schema version {newest}, this Kiln "
            f"reads 1 to {SCHEMA_VERSION}; merge it with a newer Kiln")
    return conn


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _new_rows(conn: sqlite3.Connection, source: sqlite3.Connection, table: str,
              columns: list[str], identity: tuple[str, ...]):
    """SRC's rows of `table` (the given columns, in id order) whose identity columns match no
    row of DEST's table nor an earlier row yielded (a column SRC lacks counts as NULL)."""
    known = {tuple(row) for row in conn.execute(
        f"SELECT {', '.join(identity)} FROM main.{table}")}
    for row in source.execute(f"SELECT {', '.join(columns)} FROM {table} ORDER BY id"):
        key = tuple(row[c] if c in columns else None for c in identity)
        if key not in known:
            known.add(key)
            yield row


def merge_database(dest: Database, src: str | Path) -> MergeCounts:
    """Copy `src`'s tasks, targets, records (with feature vectors) and confirmations into
    `dest`'s own file, skipping rows `dest` already holds (see the module docstring)."""
    src = Path(src)
    if src.resolve() == dest.path.resolve():
        raise TuningDatabaseError(f"cannot merge '{src}' into itself")
    source = _open_source(src)
    conn = dest._db.conn
    try:
        src_tables = _tables(source)
        if "choices" in src_tables:
            dest._create_choices()
        conn.execute("BEGIN IMMEDIATE")
        try:
            counts = _copy(source, src_tables, conn)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        source.close()
    dest._choices_found = None
    return counts


def _copy(source: sqlite3.Connection, src_tables: set[str],
          conn: sqlite3.Connection) -> MergeCounts:
    if "targets" in src_tables:
        conn.executemany("INSERT OR IGNORE INTO main.targets (target, first_seen) VALUES (?, ?)",
                         source.execute("SELECT target, first_seen FROM targets").fetchall())
    # a record's target is registered even when SRC has no targets table
    now = time.time()
    conn.executemany("INSERT OR IGNORE INTO main.targets (target, first_seen) VALUES (?, ?)",
                     [(t, now) for t, in source.execute("SELECT DISTINCT target FROM records")])

    task_columns = [c for c in ("workload_key", "description", "shapes", "flops")
                    if c in _columns(source, "tasks")]
    before = conn.total_changes
    conn.executemany(
        f"INSERT OR IGNORE INTO main.tasks ({', '.join(task_columns)}) "
        f"VALUES ({', '.join('?' for _ in task_columns)})",
        source.execute(f"SELECT {', '.join(task_columns)} FROM tasks").fetchall())
    tasks = conn.total_changes - before

    dest_columns = _columns(conn, "records") - {"id"}
    src_columns = _columns(source, "records")
    columns = sorted(dest_columns & src_columns)
    has_features = "features" in src_tables
    records = features = 0
    src_records = source.execute("SELECT COUNT(*) FROM records").fetchone()[0]
    for row in _new_rows(conn, source, "records", ["id"] + columns, _RECORD_IDENTITY):
        cursor = conn.execute(
            f"INSERT INTO main.records ({', '.join(columns)}) "
            f"VALUES ({', '.join('?' for _ in columns)})", [row[c] for c in columns])
        records += 1
        if has_features:
            vector = source.execute("SELECT version, vector FROM features WHERE record_id = ?",
                                    (row["id"],)).fetchone()
            if vector is not None:
                conn.execute("INSERT OR REPLACE INTO main.features (record_id, version, vector) "
                             "VALUES (?, ?, ?)", (cursor.lastrowid, vector[0], vector[1]))
                features += 1

    choices = src_choices = 0
    if "choices" in src_tables:
        choice_columns = sorted((_columns(conn, "choices") - {"id"})
                                & _columns(source, "choices"))
        src_choices = source.execute("SELECT COUNT(*) FROM choices").fetchone()[0]
        for row in _new_rows(conn, source, "choices", choice_columns, _CHOICE_IDENTITY):
            conn.execute(f"INSERT INTO main.choices ({', '.join(choice_columns)}) "
                         f"VALUES ({', '.join('?' for _ in choice_columns)})",
                         [row[c] for c in choice_columns])
            choices += 1
    return MergeCounts(tasks, records, features, choices, src_records, src_choices)
