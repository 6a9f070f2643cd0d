"""The SQLite tuning database: every measurement, as readable JSON, appended as it happens.

Tables: `targets`, `tasks` (workload key, description, shapes JSON), `records` (one row per
measured candidate) and `features` (the cost-model feature vector of a record, keyed by record
id, so later runs can train on tasks whose DAGs the log does not hold; created when missing, so
older logs open unchanged). WAL mode and a commit after every record, so a killed tuning run
loses at most the trial in flight and a reader can follow a writer. The jsonl exchange format
carries a record's feature vector too, as an optional `features` field.

A `choices` table holds the outcome of confirming a task's leaders (autotune/confirm.py): the
default and the fastest records measured again side by side, and the one that won, which a
compile then takes over the plain minimum of the records (noisy and biased minima: see
`Choice`). Made by the first confirmation: opening a log never writes to it.

A record also stores the thread count it was measured at (`threads`; NULL in logs written
before it existed): the fastest schedule at 1 thread is often not the fastest at 2 (the
parallel loop's split decides), so `best(..., threads=T)` ranks records measured at T first.
"""
from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable

import sqlite3
import urllib.parse

import numpy as np
import sqlite_utils

from ..codegen.target import Target
from ..te.errors import TargetError, TuningDatabaseError
from .features import FEATURE_VERSION, LEGACY_VERSIONS, N_FEATURES, upgrade_vector

# 2: knob names from positions in the canonical DAG (autotune/migrate.py renames schema-1
# configs, which named stages, axes and tensors after the model they were tuned on)
SCHEMA_VERSION = 2
OK_STATUS = "OK"


def kiln_version() -> str:
    """The installed Kiln version (stored with every record so logs can be traced)."""
    try:
        from importlib.metadata import version
        return version("tensorkiln")
    except Exception:  # noqa: BLE001 - not installed as a distribution (source checkout)
        return "0+unknown"


def config_key(config: dict) -> str:
    """A canonical text form of a config: equal configs give equal keys (the `seen` set)."""
    return json.dumps(config, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class Record:
    """One measured candidate: a config of a task on a target and what happened."""

    task_key: str
    target: str
    config: dict
    costs: tuple[float, ...]
    status: str
    error_text: str = ""
    kiln_version: str = field(default_factory=kiln_version)
    schema_version: int = SCHEMA_VERSION
    timestamp: float = field(default_factory=time.time)
    threads: int | None = None      # threads the kernel ran with when measured; None: unknown
    # provenance: the measuring worker's name ("local": this machine's own Runner) and its
    # fingerprint plus the measurement's wall-clock start/end (autotune/cluster/); None in
    # records from before it was stored
    worker: str | None = None
    provenance: dict | None = field(default=None, compare=False)
    # the row's id when read from a log (negative: a record of the read-only base log)
    record_id: int | None = field(default=None, compare=False)

    @property
    def mean_cost(self) -> float:
        """Mean seconds per run; inf when the candidate did not run correctly."""
        if self.status != OK_STATUS or not self.costs:
            return math.inf
        return sum(self.costs) / len(self.costs)

    def to_json(self) -> dict:
        return {"task_key": self.task_key, "target": self.target, "config": self.config,
                "costs": list(self.costs), "status": self.status,
                "error_text": self.error_text, "kiln_version": self.kiln_version,
                "schema_version": self.schema_version, "timestamp": self.timestamp,
                "threads": self.threads, "worker": self.worker, "provenance": self.provenance}


@dataclass(frozen=True)
class Choice:
    """The confirmed schedule of a task on a target at a thread count.

    The minimum over a task's records is a biased pick: each record is one noisy measurement
    taken at its own moment, so the minimum of many favours a lucky one (and the default,
    measured first, read high). A confirmation measures the default and the leading records
    again, interleaved in one process, and keeps the winner here. It stands while no record
    faster than `best_record_seconds` (the fastest record when it was made) has been added.
    """

    task_key: str
    target: str
    threads: int
    config: dict
    is_default: bool
    seconds: float                  # the winner's median time in the confirmation
    default_seconds: float          # the default's, in the same rounds
    best_record_seconds: float      # the fastest record's mean_cost at the time
    candidates: tuple = ()          # ({"config": ..., "seconds": ..., "status": ...}, ...)
    timestamp: float = field(default_factory=time.time)
    kiln_version: str = field(default_factory=kiln_version)

    @property
    def speedup(self) -> float:
        """The default's time over the winner's, in the same rounds (1.0: the default)."""
        return self.default_seconds / self.seconds if self.seconds > 0 else 1.0

    def is_current(self, best_record_seconds: float) -> bool:
        """True while no record faster than the ones confirmed has been added."""
        return best_record_seconds >= self.best_record_seconds * (1 - 1e-9)


_RECORD_FIELDS = ("task_key", "target", "config", "costs", "status")


class Database:
    """A tuning log at `path` (created if missing). Pass it explicitly; there is no global.

    With `base`, the log is layered over a read-only one (the records shipped with Kiln):
    every read sees the records of both, every write goes to `path`. Records of the base
    have negative ids in the union, so ids stay unique."""

    # set by _open: reading one of them opens a lazy database (__getattr__)
    _OPENED = frozenset({"_db", "_records", "_features", "_tasks", "_provenance"})

    def __init__(self, path: str | Path, base: str | Path | None = None, *,
                 lazy: bool = False):
        """`lazy`: open the file on first use, not now (kiln.compile's default database:
        a compile loaded from the model cache reads no record, and opening cost 2 ms of
        its 15)."""
        self.path = Path(path)
        self.base = Path(base) if base is not None else None
        self._choices_found: str | None = None     # where choices are read (_choices_source)
        self._open_lock = threading.Lock()
        if not lazy:
            self._open()

    def __getattr__(self, name: str):
        if name in Database._OPENED and "_open_lock" in self.__dict__:
            with self._open_lock:
                if "_db" not in self.__dict__:
                    self._open()
            return self.__dict__[name]
        raise AttributeError(f"'Database' object has no attribute {name!r}")

    @property
    def opened(self) -> bool:
        """Whether the file is open (a lazy database opens on first use)."""
        return "_db" in self.__dict__

    def ensure_open(self) -> None:
        """Open a lazy database now (opening may touch its WAL file's times)."""
        getattr(self, "_db")

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for attempt in range(50):
            try:
                conn = sqlite3.connect(_sqlite_uri(self.path), uri=True,
                                       check_same_thread=False)
                # no sqlite-utils plugins: Kiln's queries use none, and finding them (entry points
                # of every installed package) cost 4 ms of each compile's start
                self._db = sqlite_utils.Database(conn, execute_plugins=False)
                self._db.conn.execute("PRAGMA busy_timeout = 10000")
                self._db.enable_wal()
                self._create_tables()
                self._attach_base()
                break
            except Exception as exc:  # sqlite3.DatabaseError and friends: not a database file
                # another process creating the file or switching it to WAL: wait, retry
                if "locked" in str(exc) and attempt < 49:
                    time.sleep(0.2)
                    continue
                raise TuningDatabaseError(
                    f"cannot open tuning database '{self.path}': {exc}. Delete or move the "
                    "file to start a fresh log.") from exc

    def _create_tables(self) -> None:
        db = self._db
        if "targets" not in db.table_names():
            db["targets"].create({"target": str, "first_seen": float}, pk="target",
                                 if_not_exists=True)
        if "tasks" not in db.table_names():
            db["tasks"].create({"workload_key": str, "description": str, "shapes": str,
                                "flops": float}, pk="workload_key", if_not_exists=True)
        if "records" not in db.table_names():
            db["records"].create({"id": int, "task_key": str, "target": str, "config": str,
                                  "config_key": str, "costs": str, "mean_cost": float,
                                  "status": str, "error_text": str, "kiln_version": str,
                                  "schema_version": int, "timestamp": float,
                                  "threads": int, "worker": str, "provenance": str},
                                 pk="id", if_not_exists=True)
            db["records"].create_index(["task_key", "target"], if_not_exists=True)
        elif "threads" not in db["records"].columns_dict:
            db["records"].add_column("threads", int)        # a log from before thread counts
        self._provenance = "worker" in db["records"].columns_dict
        if "features" not in db.table_names():
            db["features"].create({"record_id": int, "version": str, "vector": bytes},
                                  pk="record_id", foreign_keys=[("record_id", "records", "id")],
                                  if_not_exists=True)
        db.conn.commit()

    def _create_choices(self) -> None:
        """The choices table, made by the first confirmation (not on open: opening a log to
        read it must not write to it, or its file identity, which keys cached models, would
        change under a reader)."""
        self._db["choices"].create({"id": int, "task_key": str, "target": str, "threads": int,
                                    "config": str, "is_default": int, "seconds": float,
                                    "default_seconds": float, "best_record_seconds": float,
                                    "candidates": str, "timestamp": float,
                                    "kiln_version": str}, pk="id", if_not_exists=True)
        self._db["choices"].create_index(["task_key", "target", "threads"], if_not_exists=True)
        self._db.conn.commit()
        self._choices_found = None          # (the source to read them from has changed)

    def _choices_source(self) -> str | None:
        """The table (or view over this log and the base) to read choices from; None when
        neither log has any. Looked up once it exists (a compile asks per task)."""
        if self._choices_found is not None:
            return self._choices_found
        mine = "choices" in self._db.table_names()
        theirs = self.base is not None and bool(self._db.conn.execute(
            "SELECT 1 FROM base.sqlite_master WHERE type = 'table' AND name = 'choices'"
        ).fetchone())
        if mine and theirs:
            columns = ", ".join(c for c in self._db["choices"].columns_dict if c != "id")
            self._db.conn.execute(
                f"CREATE TEMP VIEW IF NOT EXISTS all_choices AS SELECT id, {columns} FROM "
                f"main.choices UNION ALL SELECT -id AS id, {columns} FROM base.choices")
            self._choices_found = "all_choices"
        else:
            self._choices_found = "main.choices" if mine else "base.choices" if theirs else None
        return self._choices_found

    def _attach_base(self) -> None:
        """Union views over this log and the read-only base: `all_records`, `all_features`,
        `all_tasks` (temporary views may span attached databases)."""
        db = self._db.conn
        if self.base is None:
            self._records, self._features, self._tasks = "records", "features", "tasks"
            return
        if not self.base.is_file():
            raise TuningDatabaseError(f"the base tuning database '{self.base}' does not exist; "
                                      "reinstall Kiln or pass db=<path> to use one log only")
        # immutable: the shipped file is never written, and its folder may be read-only
        db.execute("ATTACH DATABASE ? AS base", (_sqlite_uri(self.base) + "?mode=ro&immutable=1",))
        self._create_records_view()
        db.execute("CREATE TEMP VIEW all_features AS SELECT record_id, version, vector FROM "
                   "main.features UNION ALL SELECT -record_id AS record_id, version, vector "
                   "FROM base.features")
        db.execute("CREATE TEMP VIEW all_tasks AS SELECT * FROM main.tasks UNION ALL "
                   "SELECT * FROM base.tasks WHERE workload_key NOT IN "
                   "(SELECT workload_key FROM main.tasks)")
        self._records, self._features, self._tasks = "all_records", "all_features", "all_tasks"

    def _create_records_view(self) -> None:
        """The union of this log's records and the base's; a column the base lacks (it was
        written before the column existed) reads as NULL there."""
        db = self._db.conn
        mine = [c for c in self._db["records"].columns_dict if c != "id"]
        theirs = {r[1] for r in db.execute("PRAGMA base.table_info(records)")}
        base_columns = ", ".join(c if c in theirs else f"NULL AS {c}" for c in mine)
        db.execute("DROP VIEW IF EXISTS temp.all_records")
        db.execute(f"CREATE TEMP VIEW all_records AS SELECT id, {', '.join(mine)} FROM "
                   f"main.records UNION ALL SELECT -id AS id, {base_columns} FROM base.records")

    def ensure_provenance(self) -> None:
        """Add the provenance columns (worker, provenance JSON) to a log that lacks them:
        a migration that only adds nullable columns, so no record is touched or lost. Made
        on the first record that carries provenance, not on open (opening a log to read it
        never writes to it)."""
        if self._provenance:
            return
        self._db["records"].add_column("worker", str)
        self._db["records"].add_column("provenance", str)
        self._db.conn.commit()
        self._provenance = True
        if self.base is not None:
            self._create_records_view()

    def __repr__(self) -> str:
        over = f" over {self.base}" if self.base is not None else ""
        return f"Database({str(self.path)!r}{over})"

    def close(self) -> None:
        """Fold the write-ahead log into the main file (so it can be committed) and close."""
        if not self.opened:
            return
        self._db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._db.conn.close()

    # ------------------------------------------------------------------ writing

    def commit_task(self, workload_key: str, description: str, shapes: Any,
                    flops: float = 0.0) -> None:
        """Register a task (idempotent); `shapes` is any JSON-able description of its tensors."""
        self._db["tasks"].upsert({"workload_key": workload_key, "description": description,
                                  "shapes": json.dumps(shapes), "flops": float(flops)},
                                 pk="workload_key")
        self._db.conn.commit()

    def _commit_target(self, target: str) -> None:
        self._db.conn.execute("INSERT OR IGNORE INTO targets (target, first_seen) VALUES (?, ?)",
                              (target, time.time()))

    def commit_record(self, record: Record, features: np.ndarray | None = None,
                      feature_version: str = "") -> int:
        """Append one record (and, when given, its feature vector tagged with the feature
        layout's version) and commit at once (a crash later cannot lose it); returns its id."""
        if not 1 <= record.schema_version <= SCHEMA_VERSION:
            raise TuningDatabaseError(
                f"record schema version {record.schema_version} is not one this Kiln reads "
                f"(1 to {SCHEMA_VERSION}); it comes from a newer Kiln: upgrade, or re-tune")
        if record.worker is not None or record.provenance is not None:
            self.ensure_provenance()
        self._commit_target(record.target)
        mean = record.mean_cost
        table = self._db["records"]
        extra = {"worker": record.worker, "provenance": json.dumps(record.provenance)
                 if record.provenance is not None else None} if self._provenance else {}
        table.insert({**extra,
            "task_key": record.task_key, "target": record.target,
            "config": json.dumps(record.config, sort_keys=True),
            "config_key": config_key(record.config), "costs": json.dumps(list(record.costs)),
            "mean_cost": mean if math.isfinite(mean) else None, "status": record.status,
            "error_text": record.error_text, "kiln_version": record.kiln_version,
            "schema_version": record.schema_version, "timestamp": record.timestamp,
            "threads": record.threads})
        record_id = int(table.last_pk)
        if features is not None:
            vector = np.ascontiguousarray(features, dtype=np.float32)
            self._db.conn.execute(
                "INSERT OR REPLACE INTO features (record_id, version, vector) VALUES (?, ?, ?)",
                (record_id, feature_version, vector.tobytes()))
        self._db.conn.commit()
        return record_id

    def commit_choice(self, choice: Choice) -> None:
        """Append a confirmation's outcome (the newest one of a task, target and thread
        count is the one that counts; older ones stay as history)."""
        self._commit_target(choice.target)
        self._create_choices()
        self._db["choices"].insert({
            "task_key": choice.task_key, "target": choice.target, "threads": choice.threads,
            "config": json.dumps(choice.config, sort_keys=True),
            "is_default": int(choice.is_default), "seconds": choice.seconds,
            "default_seconds": choice.default_seconds,
            "best_record_seconds": choice.best_record_seconds,
            "candidates": json.dumps(list(choice.candidates)), "timestamp": choice.timestamp,
            "kiln_version": choice.kiln_version})
        self._db.conn.commit()

    # ------------------------------------------------------------------ reading

    def choice(self, task_key: str, target: str, threads: int) -> Choice | None:
        """The newest confirmation of `task_key` on `target` at `threads`, if any (whether
        it is still current is the caller's question: Choice.is_current)."""
        source = self._choices_source()
        if source is None:
            return None
        rows = list(self._db.query(
            f"SELECT * FROM {source} WHERE task_key = ? AND target = ? AND threads = ? "
            "ORDER BY timestamp DESC, id DESC LIMIT 1", [task_key, target, int(threads)]))
        if not rows:
            return None
        return self._to_choice(rows[0])

    def latest_choices(self, targets: Iterable[str] | None = None) -> list[Choice]:
        """The newest confirmation of every (task, target, thread count), on `targets` or
        all (the zero-shot model's labels: autotune/zero_shot.py)."""
        source = self._choices_source()
        if source is None:
            return []
        rows = self._db.query(
            f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY task_key, target, "
            f"threads ORDER BY timestamp DESC, id DESC) AS rank FROM {source}) "
            "WHERE rank = 1 ORDER BY task_key, target, threads")
        wanted = None if targets is None else set(targets)
        return [self._upgrade_candidates(self._to_choice(row)) for row in rows
                if wanted is None or row["target"] in wanted]

    def _upgrade_candidates(self, choice: Choice) -> Choice:
        """`choice` with its candidates' feature vectors of older layouts in today's where
        features.upgrade_vector can (the others keep their old version, which readers skip)."""
        if not any(c.get("feature_version") in LEGACY_VERSIONS for c in choice.candidates):
            return choice
        dtypes = self._task_dtypes(choice.task_key)
        candidates = []
        for c in choice.candidates:
            vector = c.get("features")
            if c.get("feature_version") in LEGACY_VERSIONS and isinstance(vector, list):
                new = upgrade_vector(c["feature_version"], np.asarray(vector, np.float32),
                                     dtypes)
                if new is not None:
                    c = {**c, "features": [float(x) for x in new],
                         "feature_version": FEATURE_VERSION}
            candidates.append(c)
        return replace(choice, candidates=tuple(candidates))

    def choice_stats(self) -> tuple[int, float]:
        """(confirmations, newest timestamp): a fingerprint of the choices (they are only
        ever appended), part of the zero-shot model's cache key."""
        source = self._choices_source()
        if source is None:
            return 0, 0.0
        n, last = self._db.conn.execute(f"SELECT COUNT(*), MAX(timestamp) FROM {source}"
                                        ).fetchone()
        return int(n), float(last or 0.0)

    def choices_fingerprint(self) -> list:
        """What the confirmations hold, as content (count, newest timestamp, the sum of the
        timestamps and the candidates' total length), never as a path: the zero-shot
        model's cache key, so that a model trained on the shipped log serves every user log
        layered over it that adds no confirmation (autotune/zero_shot.py)."""
        source = self._choices_source()
        if source is None:
            return [0, 0.0, 0.0, 0]
        n, last, total, size = self._db.conn.execute(
            f"SELECT COUNT(*), MAX(timestamp), SUM(timestamp), TOTAL(LENGTH(candidates)) "
            f"FROM {source}").fetchone()
        return [int(n), round(float(last or 0.0), 6), round(float(total or 0.0), 3),
                int(size or 0)]

    @staticmethod
    def _to_choice(row: dict) -> Choice:
        return Choice(row["task_key"], row["target"], row["threads"], json.loads(row["config"]),
                      bool(row["is_default"]), row["seconds"], row["default_seconds"],
                      row["best_record_seconds"], tuple(json.loads(row["candidates"])),
                      row["timestamp"], row["kiln_version"])

    @staticmethod
    def _to_record(row: dict) -> Record:
        return Record(task_key=row["task_key"], target=row["target"],
                      config=json.loads(row["config"]), costs=tuple(json.loads(row["costs"])),
                      status=row["status"], error_text=row["error_text"] or "",
                      kiln_version=row["kiln_version"], schema_version=row["schema_version"],
                      timestamp=row["timestamp"], threads=row.get("threads"),
                      worker=row.get("worker"), provenance=json.loads(row["provenance"])
                      if row.get("provenance") else None, record_id=row.get("id"))

    def records(self, task_key: str, target: str, threads: int | None = None) -> list[Record]:
        """Every record of `task_key` on exactly `target`, oldest first (all statuses); with
        `threads`, only those measured at that count or of unknown count (older logs)."""
        rows = self._db.query(
            f"SELECT * FROM {self._records} WHERE task_key = ? AND target = ? "
            "AND schema_version = ? "
            "AND (? IS NULL OR threads IS NULL OR threads = ?) ORDER BY id",
            [task_key, target, SCHEMA_VERSION, threads, threads])
        return [self._to_record(r) for r in rows]

    def best(self, task_key: str, target: str, k: int = 1, threads: int | None = None,
             similar_cpus: bool = False) -> list[Record]:
        """The k fastest OK records of `task_key` on `target`.

        With `threads`, records measured at that thread count come first, then those of
        unknown thread count (older logs), then the rest, each tier fastest first: a schedule
        measured at 1 thread is no evidence of its speed at 2, so it only fills in when the
        task was never measured at the count asked for.

        similar_cpus: when `target` has no OK record of the task, the best of the CPU with the
        same vector ISA that measured it most (`similar_targets`); each Record's `target`
        names the CPU it was measured on, so the caller can say where a schedule came from.
        Without it, another target's records are never returned."""
        found = self._best_of(task_key, target, k, threads)
        if found or not similar_cpus:
            return found
        for other in self.similar_targets(task_key, target):
            return self._best_of(task_key, other, k, threads)
        return []

    def similar_targets(self, task_key: str, target: str) -> list[str]:
        """Other targets with OK records of `task_key` whose vector ISA (Target.vector_isa)
        is `target`'s, most records first: their schedules are legal here and were tuned for
        the same vector width and register file (a znver4 and a znver5 log, say)."""
        isa = _vector_isa(target)
        if isa is None:
            return []
        rows = self._db.conn.execute(
            f"SELECT target, COUNT(*) AS n FROM {self._records} WHERE task_key = ? AND target != ? "
            "AND status = ? AND schema_version = ? GROUP BY target ORDER BY n DESC, target",
            (task_key, target, OK_STATUS, SCHEMA_VERSION))
        return [other for other, _ in rows if _vector_isa(other) == isa]

    def _best_of(self, task_key: str, target: str, k: int,
                 threads: int | None) -> list[Record]:
        rows = self._db.query(
            f"SELECT * FROM {self._records} WHERE task_key = ? AND target = ? AND status = ? "
            "AND schema_version = ? AND mean_cost IS NOT NULL ORDER BY "
            "CASE WHEN ? IS NULL OR threads = ? THEN 0 WHEN threads IS NULL THEN 1 ELSE 2 END, "
            "mean_cost, id LIMIT ?",
            [task_key, target, OK_STATUS, SCHEMA_VERSION, threads, threads, int(k)])
        return [self._to_record(r) for r in rows]

    def best_per_task(self, targets: Iterable[str], threads: int | None = None
                      ) -> list[tuple[str, dict, list]]:
        """(task key, config, the task's shapes) of the fastest OK record of every task on
        `targets` (at `threads` where the task was measured at that count): the schedules the
        zero-shot ranking borrows for tasks of the same structure (autotune/zero_shot.py)."""
        targets = list(targets)
        if not targets:
            return []
        marks = ",".join("?" * len(targets))
        rows = self._db.conn.execute(
            f"SELECT r.task_key, r.config, t.shapes FROM (SELECT task_key, config, "
            "ROW_NUMBER() OVER (PARTITION BY task_key ORDER BY CASE WHEN ? IS NULL OR "
            "threads = ? THEN 0 ELSE 1 END, mean_cost, id) AS rank "
            f"FROM {self._records} WHERE target IN ({marks}) AND status = ? "
            "AND schema_version = ? AND mean_cost IS NOT NULL) r "
            f"JOIN {self._tasks} t ON t.workload_key = r.task_key WHERE r.rank = 1 "
            "ORDER BY r.task_key", [threads, threads, *targets, OK_STATUS, SCHEMA_VERSION])
        return [(key, json.loads(config), json.loads(shapes)) for key, config, shapes in rows]

    def feature_rows(self, target: str, version: str, exclude_task: str | None = None,
                     per_task: int = 256) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Stored feature vectors of `target`'s records with layout `version`, per task:
        task key -> (X, seconds) with inf for failed candidates; the newest `per_task` of
        each task. Records of other targets are never returned."""
        # (any schema version: a feature vector describes the measured loop nest, not the
        # config's knob names, so a record that no longer fits a space still teaches the model)
        versions = self._readable_versions(version)
        rows = self._db.conn.execute(
            f"SELECT r.task_key, r.mean_cost, r.status, f.vector, f.version "
            f"FROM {self._records} r JOIN {self._features} f ON f.record_id = r.id "
            f"WHERE r.target = ? AND f.version IN ({','.join('?' * len(versions))}) "
            "ORDER BY r.id DESC", (target, *versions))
        out: dict[str, tuple[list, list]] = {}
        for task_key, mean, status, vector, stored in rows:
            if task_key == exclude_task:
                continue
            X, costs = out.setdefault(task_key, ([], []))
            if len(costs) >= per_task:
                continue
            vector = self._upgrade(stored, version, task_key, vector)
            if vector is None:
                continue
            X.append(vector)
            costs.append(mean if status == OK_STATUS and mean is not None else math.inf)
        return {k: (np.stack(X[::-1]), np.array(c[::-1])) for k, (X, c) in out.items()
                if len({len(x) for x in X}) == 1}

    def record_stats(self) -> tuple[int, int, int]:
        """(records, min id, max id): a cheap fingerprint of the log's contents (records are
        only ever added with new ids, or pruned; autotune/zero_shot.py keys its model cache
        by it)."""
        n, lo, hi = self._db.conn.execute(
            f"SELECT COUNT(*), MIN(id), MAX(id) FROM {self._records}").fetchone()
        return int(n), int(lo or 0), int(hi or 0)

    def targets(self) -> list[str]:
        """Every target with records."""
        return [t for (t,) in self._db.conn.execute(
            f"SELECT DISTINCT target FROM {self._records} ORDER BY target")]

    def task_info(self, task_key: str) -> dict | None:
        rows = list(self._db.query(f"SELECT * FROM {self._tasks} WHERE workload_key = ?",
                                   [task_key]))
        if not rows:
            return None
        row = dict(rows[0])
        row["shapes"] = json.loads(row["shapes"])
        return row

    def summary(self) -> list[dict]:
        """One row per (task, target) for `kiln logs`: trials by status, best time, GFLOPS,
        the thread counts measured (None: records from before counts were stored), the
        stale records (`stale`: of an older schema, which no compile applies until they are
        migrated; see prune_stale) and the confirmations (`choices`: thread count -> the
        confirmed record's speedup over the default, None where the default was kept)."""
        out = []
        choices_source = self._choices_source()
        groups = self._db.query(
            "SELECT r.task_key, r.target, t.description, t.flops, MAX(r.timestamp) AS last, "
            "MIN(CASE WHEN r.status = 'OK' AND r.schema_version = ? THEN r.mean_cost END) "
            f"AS best, SUM(r.schema_version != ?) AS stale FROM {self._records} r "
            f"LEFT JOIN {self._tasks} t ON t.workload_key = r.task_key "
            "GROUP BY r.task_key, r.target ORDER BY last", [SCHEMA_VERSION, SCHEMA_VERSION])
        for g in groups:
            counts = {row["status"]: row["n"] for row in self._db.query(
                f"SELECT status, COUNT(*) AS n FROM {self._records} WHERE task_key = ? AND "
                "target = ? GROUP BY status", [g["task_key"], g["target"]])}
            threads = [row["threads"] for row in self._db.query(
                f"SELECT DISTINCT threads FROM {self._records} WHERE task_key = ? AND "
                "target = ? ORDER BY threads", [g["task_key"], g["target"]])]
            # the newest confirmation per thread count: None (the default kept) or the
            # winner's speedup over the default
            choices = {row["threads"]: (None if row["is_default"] else
                                        row["default_seconds"] / row["seconds"])
                       for row in (self._db.query(
                           f"SELECT threads, is_default, seconds, default_seconds FROM "
                           f"{choices_source} WHERE task_key = ? AND target = ? "
                           "ORDER BY timestamp, id", [g["task_key"], g["target"]])
                           if choices_source else ())}
            # provenance: records per measuring worker ("unknown": from before it was stored)
            workers = {row["w"]: row["n"] for row in self._db.query(
                f"SELECT COALESCE(worker, 'unknown') AS w, COUNT(*) AS n FROM {self._records} "
                "WHERE task_key = ? AND target = ? GROUP BY w ORDER BY w",
                [g["task_key"], g["target"]])} if self._has_worker_column() else \
                {"unknown": sum(counts.values())}
            best, flops = g["best"], g["flops"] or 0.0
            out.append({"task_key": g["task_key"], "description": g["description"] or "?",
                        "target": g["target"], "threads": threads,
                        "trials": sum(counts.values()), "stale": int(g["stale"] or 0),
                        "by_status": counts, "best_seconds": best, "choices": choices,
                        "best_gflops": flops / best / 1e9 if best and flops else None,
                        "workers": workers,
                        "last_time": g["last"]})
        return out

    def _has_worker_column(self) -> bool:
        return self._provenance

    # ------------------------------------------------------------------ maintenance

    def legacy_records(self, task_key: str) -> list[tuple[int, dict]]:
        """(id, config) of this log's own records of `task_key` with an older schema (the
        base log, read-only, is never migrated here)."""
        rows = self._db.conn.execute(
            "SELECT id, config FROM main.records WHERE task_key = ? AND schema_version < ?",
            (task_key, SCHEMA_VERSION))
        return [(int(i), json.loads(c)) for i, c in rows]

    def upgrade_records(self, configs: dict[int, dict]) -> int:
        """Store the current-schema `configs` (record id -> config) of older records, in one
        transaction; returns how many."""
        with self._db.conn:
            for record_id, config in configs.items():
                self._db.conn.execute(
                    "UPDATE main.records SET config = ?, config_key = ?, schema_version = ? "
                    "WHERE id = ?", (json.dumps(config, sort_keys=True), config_key(config),
                                     SCHEMA_VERSION, record_id))
        return len(configs)

    def stale_count(self) -> int:
        """Records of this log (not the base) with an older schema."""
        (n,) = self._db.conn.execute("SELECT COUNT(*) FROM main.records WHERE schema_version "
                                     "!= ?", (SCHEMA_VERSION,)).fetchone()
        return int(n)

    def prune_stale(self, record_ids: Iterable[int] = ()) -> int:
        """Delete this log's records of an older schema and the records `record_ids` (those
        a space rejected, see autotune/dispatch.py), with their feature vectors; returns how
        many. The base log is never changed."""
        ids = {int(i) for i in record_ids if int(i) > 0}
        ids |= {int(i) for (i,) in self._db.conn.execute(
            "SELECT id FROM main.records WHERE schema_version != ?", (SCHEMA_VERSION,))}
        with self._db.conn:
            for record_id in ids:
                self._db.conn.execute("DELETE FROM main.features WHERE record_id = ?",
                                      (record_id,))
                self._db.conn.execute("DELETE FROM main.records WHERE id = ?", (record_id,))
        return len(ids)

    # ------------------------------------------------------------------ exchange

    def feature_vectors(self, task_key: str, target: str,
                        version: str) -> dict[str, np.ndarray]:
        """The stored feature vectors of `task_key`'s records on `target` with layout
        `version`, by config key (a resumed run need not lower its measured configs again)."""
        versions = self._readable_versions(version)
        rows = self._db.conn.execute(
            f"SELECT r.config_key, f.vector, f.version FROM {self._records} r "
            f"JOIN {self._features} f ON f.record_id = r.id WHERE r.task_key = ? AND "
            f"r.target = ? AND f.version IN ({','.join('?' * len(versions))}) AND "
            "r.schema_version = ? ORDER BY r.id", (task_key, target, *versions, SCHEMA_VERSION))
        out = {}
        for key, vector, stored in rows:
            vector = self._upgrade(stored, version, task_key, vector)
            if vector is not None:
                out[key] = vector
        return out

    @staticmethod
    def _readable_versions(version: str) -> tuple[str, ...]:
        """The stored layouts a read of `version` takes: today's also reads the older layouts
        features.upgrade_vector carries into it (the rest stay stored, unread)."""
        return (version, *LEGACY_VERSIONS) if version == FEATURE_VERSION else (version,)

    def _upgrade(self, stored: str, version: str, task_key: str,
                 vector: bytes | np.ndarray) -> np.ndarray | None:
        """A stored vector of layout `stored` as one of `version` (None: it cannot be)."""
        if not isinstance(vector, np.ndarray):
            vector = np.frombuffer(vector, dtype=np.float32)
        if stored == version:
            return vector
        return upgrade_vector(stored, vector, self._task_dtypes(task_key))

    def _task_dtypes(self, task_key: str) -> tuple[str, ...]:
        """The dtypes of a task's tensors from its `shapes` (() when unknown)."""
        row = self._db.conn.execute(f"SELECT shapes FROM {self._tasks} WHERE workload_key = ?",
                                    (task_key,)).fetchone()
        try:
            return tuple(str(entry[2]) for entry in json.loads(row[0]))
        except (TypeError, ValueError, IndexError, KeyError):
            return ()

    # ------------------------------------------------------------------ exchange

    def export_jsonl(self, path: str | Path) -> int:
        """Write every record as one JSON object per line (plus task rows); returns the count.

        A record with a stored feature vector gets a `features` field: {"version": layout
        version, "vector": [floats]} (float32 values, so they read back bit for bit).
        """
        n = 0
        with open(path, "w") as fh:
            for row in self._db.query(f"SELECT * FROM {self._tasks} ORDER BY workload_key"):
                task = dict(row)
                task["shapes"] = json.loads(task["shapes"])
                fh.write(json.dumps({"kind": "task", **task}, sort_keys=True) + "\n")
            rows = self._db.query(
                "SELECT r.*, f.version AS feature_version, f.vector AS feature_vector "
                f"FROM {self._records} r LEFT JOIN {self._features} f ON f.record_id = r.id "
                "ORDER BY r.id")
            for row in rows:
                obj = {"kind": "record", **self._to_record(row).to_json()}
                if row["feature_vector"] is not None:
                    vector = np.frombuffer(row["feature_vector"], dtype=np.float32)
                    obj["features"] = {"version": row["feature_version"] or "",
                                       "vector": [float(x) for x in vector]}
                fh.write(json.dumps(obj, sort_keys=True) + "\n")
                n += 1
        return n

    def import_jsonl(self, path: str | Path, target: str | None = None) -> int:
        """Append the records of a jsonl log (and their feature vectors, when the lines carry
        them); reject the whole file on any bad line.

        With `target`, every record must be for that target. Raises TuningDatabaseError naming
        the file, the line and the reason (malformed JSON, missing field, foreign schema, a
        feature vector of the wrong length for its version).
        """
        tasks, records = [], []
        lengths: dict[str, tuple[int, int]] = {FEATURE_VERSION: (N_FEATURES, 0)}
        for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
            if not line.strip():
                continue
            kind, parsed = _parse_line(path, lineno, line, target, lengths)
            (tasks if kind == "task" else records).append(parsed)
        for task in tasks:
            self.commit_task(task["workload_key"], task.get("description", ""),
                             task.get("shapes"), task.get("flops") or 0.0)
        for record, features in records:
            if features is None:
                self.commit_record(record)
            else:
                self.commit_record(record, features[1], features[0])
        return len(records)


def _parse_line(path, lineno: int, line: str, target: str | None,
                lengths: dict[str, tuple[int, int]]) -> tuple[str, Any]:
    """One jsonl line: ("task", dict) or ("record", (Record, (version, vector) or None)).
    `lengths` maps a feature version to (its vector length, the line that set it)."""
    where = f"{path}, line {lineno}"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise TuningDatabaseError(f"{where}: malformed JSON ({exc.msg}); fix or remove the "
                                  "line and import again") from None
    if not isinstance(obj, dict):
        raise TuningDatabaseError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    if obj.get("kind") == "task":
        if "workload_key" not in obj:
            raise TuningDatabaseError(f"{where}: task line without 'workload_key'")
        return "task", obj
    missing = [f for f in _RECORD_FIELDS + ("schema_version",) if f not in obj]
    if missing:
        raise TuningDatabaseError(f"{where}: record is missing field(s) {', '.join(missing)}")
    if obj["schema_version"] not in range(1, SCHEMA_VERSION + 1):
        # (older versions import as stale records, renamed when their task is compiled)
        raise TuningDatabaseError(
            f"{where}: record has schema version {obj['schema_version']}, this Kiln reads "
            f"schema versions 1 to {SCHEMA_VERSION}; re-tune on this version instead of "
            "importing")
    if target is not None and obj["target"] != target:
        raise TuningDatabaseError(
            f"{where}: record is for target '{obj['target']}', expected '{target}'; records of "
            "another target are never applied here (import without target= to keep them apart)")
    if not isinstance(obj["config"], dict) or not isinstance(obj["costs"], list):
        raise TuningDatabaseError(f"{where}: 'config' must be an object and 'costs' a list")
    features = _parse_features(where, obj["features"], lineno, lengths) \
        if obj.get("features") is not None else None
    record = Record(task_key=obj["task_key"], target=obj["target"], config=obj["config"],
                    costs=tuple(float(c) for c in obj["costs"]), status=obj["status"],
                    error_text=obj.get("error_text", ""),
                    kiln_version=obj.get("kiln_version", "0+unknown"),
                    schema_version=obj["schema_version"],
                    timestamp=obj.get("timestamp", time.time()),
                    threads=_parse_threads(where, obj.get("threads")))
    return "record", (record, features)


def _parse_threads(where: str, value: Any) -> int | None:
    """A record line's optional `threads` field: a positive integer, or null (unknown)."""
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise TuningDatabaseError(f"{where}: 'threads' must be a positive integer or null, "
                                  f"got {value!r}")
    return value


def _parse_features(where: str, value: Any, lineno: int,
                    lengths: dict[str, tuple[int, int]]) -> tuple[str, np.ndarray]:
    """A record line's optional `features` field: (layout version, float32 vector).

    The current layout must have N_FEATURES values; any other version must keep one length
    across the file (the first line of that version sets it), so the prior never stacks
    vectors of different layouts.
    """
    if not isinstance(value, dict) or not isinstance(value.get("version"), str) \
            or not isinstance(value.get("vector"), list):
        raise TuningDatabaseError(
            f"{where}: 'features' must be an object with 'version' (text) and 'vector' (a "
            "list of numbers); fix it or drop the field (the record imports without it)")
    version, vector = value["version"], value["vector"]
    if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
               for x in vector):
        raise TuningDatabaseError(f"{where}: feature vector of version '{version}' holds a "
                                  "value that is not a finite number")
    expected, first_line = lengths.setdefault(version, (len(vector), lineno))
    if len(vector) != expected:
        origin = ("this Kiln's feature layout" if version == FEATURE_VERSION
                  else f"line {first_line}, the first vector of that version")
        raise TuningDatabaseError(
            f"{where}: feature vector has {len(vector)} values, but version '{version}' has "
            f"{expected} ({origin}); drop the 'features' field of this line (the record "
            "imports without it) or export the log again")
    return version, np.asarray(vector, dtype=np.float32)


def _sqlite_uri(path: Path) -> str:
    return "file:" + urllib.parse.quote(str(Path(path).resolve()))


def _vector_isa(target: str) -> frozenset[str] | None:
    """The target's vector ISA, or None for a string that is no target Kiln knows (a CPU
    this LLVM does not name): such records are never taken for another CPU's."""
    try:
        return Target.from_string(target).vector_isa()
    except TargetError:
        return None


def iter_ok(records: Iterable[Record]) -> list[Record]:
    """The records that ran correctly."""
    return [r for r in records if r.status == OK_STATUS]
