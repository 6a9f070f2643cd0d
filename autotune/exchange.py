"""Sharing tuning records between machines: `kiln logs --export FILE.jsonl [--model M]` and
`kiln logs --import FILE.jsonl`.

The file is plain JSON, one object a line (never pickle: a file from another machine is
data, not code): a header naming the format and the schema and Kiln versions that wrote it,
then tasks, records (with their provenance and feature vectors) and confirmations. An import
is an upsert: it reads the file into a scratch log and merges that (autotune/merge.py), so a
record or confirmation the log already holds, by content, is skipped and importing twice
adds nothing; the whole import is one transaction. A record of another CPU is kept as it is,
under its own target: a compile applies it only where it fits (Database.best with
similar_cpus, the layered lookup of autotune/dispatch.py).
"""
from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Iterable

import numpy as np

from ..te.errors import TuningDatabaseError
from .database import SCHEMA_VERSION, Choice, Database, _parse_line, kiln_version
from .features import FEATURE_VERSION, N_FEATURES
from .merge import MergeCounts, merge_database

FORMAT = "kiln-tuning-log"
FORMAT_VERSION = 1


def export_log(db: Database, path: str | Path, task_keys: Iterable[str] | None = None) -> str:
    """Write `db`'s own records (not the shipped base's), tasks and confirmations to `path`;
    with `task_keys`, only those tasks'. Returns a count for the user."""
    keys = None if task_keys is None else set(task_keys)
    conn = db._db.conn
    n_tasks = n_records = n_choices = 0
    with open(path, "w") as fh:
        fh.write(json.dumps({"kind": "header", "format": FORMAT,
                             "format_version": FORMAT_VERSION, "schema_version": SCHEMA_VERSION,
                             "kiln_version": kiln_version(), "feature_version": FEATURE_VERSION,
                             "exported_at": time.time()}, sort_keys=True) + "\n")
        for row in db._db.query("SELECT * FROM main.tasks ORDER BY workload_key"):
            if keys is not None and row["workload_key"] not in keys:
                continue
            task = dict(row)
            task["shapes"] = json.loads(task["shapes"])
            fh.write(json.dumps({"kind": "task", **task}, sort_keys=True) + "\n")
            n_tasks += 1
        rows = db._db.query(
            "SELECT r.*, f.version AS feature_version, f.vector AS feature_vector FROM "
            "main.records r LEFT JOIN main.features f ON f.record_id = r.id ORDER BY r.id")
        for row in rows:
            if keys is not None and row["task_key"] not in keys:
                continue
            obj = {"kind": "record", **db._to_record(row).to_json()}
            if row["feature_vector"] is not None:
                vector = np.frombuffer(row["feature_vector"], dtype=np.float32)
                obj["features"] = {"version": row["feature_version"] or "",
                                   "vector": [float(x) for x in vector]}
            fh.write(json.dumps(obj, sort_keys=True) + "\n")
            n_records += 1
        if "choices" in db._db.table_names():
            for row in db._db.query("SELECT * FROM main.choices ORDER BY id"):
                if keys is not None and row["task_key"] not in keys:
                    continue
                choice = db._to_choice(row)
                fh.write(json.dumps({"kind": "choice", "task_key": choice.task_key,
                                     "target": choice.target, "threads": choice.threads,
                                     "config": choice.config, "is_default": choice.is_default,
                                     "seconds": choice.seconds,
                                     "default_seconds": choice.default_seconds,
                                     "best_record_seconds": choice.best_record_seconds,
                                     "candidates": list(choice.candidates),
                                     "timestamp": choice.timestamp,
                                     "kiln_version": choice.kiln_version}) + "\n")
                n_choices += 1
    del conn
    return f"{n_records} record(s), {n_choices} confirmation(s) of {n_tasks} task(s)"


def _check_header(path, obj: dict) -> None:
    where = f"{path}, line 1"
    if obj.get("format") != FORMAT:
        raise TuningDatabaseError(f"{where}: not a Kiln tuning log export (format "
                                  f"{obj.get('format')!r}, expected {FORMAT!r})")
    version = obj.get("format_version")
    if not isinstance(version, int) or not 1 <= version <= FORMAT_VERSION:
        raise TuningDatabaseError(f"{where}: export format version {version!r}; this Kiln reads "
                                  f"1 to {FORMAT_VERSION}: import it with a newer Kiln")
    schema = obj.get("schema_version")
    if not isinstance(schema, int) or not 1 <= schema <= SCHEMA_VERSION:
        raise TuningDatabaseError(
            f"{where}: written with record schema {schema!r} (Kiln {obj.get('kiln_version')}); "
            f"this Kiln reads schemas 1 to {SCHEMA_VERSION}: import it with a newer Kiln")


def _choice(path, lineno: int, obj: dict) -> Choice:
    try:
        return Choice(obj["task_key"], obj["target"], int(obj["threads"]), dict(obj["config"]),
                      bool(obj["is_default"]), float(obj["seconds"]),
                      float(obj["default_seconds"]), float(obj["best_record_seconds"]),
                      tuple(obj.get("candidates", ())), float(obj["timestamp"]),
                      str(obj.get("kiln_version", "0+unknown")))
    except (KeyError, TypeError, ValueError) as exc:
        raise TuningDatabaseError(f"{path}, line {lineno}: bad confirmation line ({exc!r})") \
            from None


def _provenance(path, lineno: int, obj: dict) -> dict:
    worker, provenance = obj.get("worker"), obj.get("provenance")
    if worker is not None and not isinstance(worker, str):
        raise TuningDatabaseError(f"{path}, line {lineno}: 'worker' must be text or null")
    if provenance is not None and not isinstance(provenance, dict):
        raise TuningDatabaseError(f"{path}, line {lineno}: 'provenance' must be an object "
                                  "or null")
    return {"worker": worker, "provenance": provenance}


def import_log(db: Database, path: str | Path) -> MergeCounts:
    """Upsert the file's tasks, records and confirmations into `db` (see the module
    docstring); a bad line rejects the whole file, naming the line."""
    path = Path(path)
    if not path.is_file():
        raise TuningDatabaseError(f"cannot import '{path}': no such file")
    lengths: dict[str, tuple[int, int]] = {FEATURE_VERSION: (N_FEATURES, 0)}
    with tempfile.TemporaryDirectory(prefix="kiln-import-") as tmp:
        scratch = Database(Path(tmp) / "import.db")
        try:
            with open(path) as fh:
                for lineno, line in enumerate(fh, start=1):
                    if not line.strip():
                        continue
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise TuningDatabaseError(f"{path}, line {lineno}: malformed JSON "
                                                  f"({exc.msg})") from None
                    kind = obj.get("kind") if isinstance(obj, dict) else None
                    if lineno == 1 and kind == "header":
                        _check_header(path, obj)
                    elif kind == "header":
                        raise TuningDatabaseError(f"{path}, line {lineno}: a header line "
                                                  "after the first")
                    elif kind == "choice":
                        scratch.commit_choice(_choice(path, lineno, obj))
                    else:
                        what, parsed = _parse_line(path, lineno, line, None, lengths)
                        if what == "task":
                            scratch.commit_task(parsed["workload_key"],
                                                parsed.get("description", ""),
                                                parsed.get("shapes"), parsed.get("flops") or 0.0)
                            continue
                        record, features = parsed
                        record = replace(record, **_provenance(path, lineno, obj))
                        if features is None:
                            scratch.commit_record(record)
                        else:
                            scratch.commit_record(record, features[1], features[0])
        finally:
            scratch.close()
        db.ensure_provenance()
        return merge_database(db, Path(tmp) / "import.db")
