"""Merging tuning logs (autotune/merge.py): everything a compile reads is copied, twice adds
nothing, DEST keeps its rows, bad sources are clear errors."""
import sqlite3

import numpy as np
import pytest

from kiln.autotune.database import SCHEMA_VERSION, Choice, Database, Record
from kiln.autotune.merge import merge_database
from kiln.te.errors import TuningDatabaseError

KEY_A, KEY_B = "a" * 64, "b" * 64


def _log(path, key, costs, description="C = A @ B", choice_at=1000.0):
    db = Database(path)
    db.commit_task(key, description, [["A", [4, 4], "float32"]], flops=128.0)
    for i, cost in enumerate(costs):
        db.commit_record(Record(key, "cpu-a", {"tile": [4, i]}, (cost, cost), "OK",
                                timestamp=100.0 + i, threads=1),
                         np.full(5, cost, dtype=np.float32), "v-test")
    db.commit_record(Record(key, "cpu-a", {"tile": [0, 0]}, (), "WRONG_ANSWER", "boom",
                            timestamp=99.0))
    db.commit_choice(Choice(key, "cpu-a", 1, {"tile": [4, 1]}, False, costs[1], costs[0],
                            min(costs), ({"config": {"tile": [4, 1]}, "ratio": 0.5,
                                          "features": [1.0, 2.0]},), timestamp=choice_at))
    return db


def test_merge_copies_records_features_choices_and_tasks_once(tmp_path):
    src = _log(tmp_path / "src.db", KEY_B, [3e-3, 1e-3])
    src.close()
    dest = _log(tmp_path / "dest.db", KEY_A, [5e-3, 2e-3, 4e-3])
    counts = merge_database(dest, tmp_path / "src.db")
    assert (counts.records, counts.features, counts.choices, counts.tasks) == (3, 2, 1, 1)
    assert [r.mean_cost for r in dest.best(KEY_B, "cpu-a", k=5)] == [1e-3, 3e-3]
    assert len(dest.records(KEY_A, "cpu-a")) == 4           # DEST's own rows stay
    vectors = dest.feature_vectors(KEY_B, "cpu-a", "v-test")
    assert sorted(float(v[0]) for v in vectors.values()) == pytest.approx([1e-3, 3e-3])
    choice = dest.choice(KEY_B, "cpu-a", 1)
    assert choice.config == {"tile": [4, 1]} and choice.candidates[0]["features"] == [1.0, 2.0]
    assert dest.task_info(KEY_B)["description"] == "C = A @ B"
    # a second merge adds nothing
    again = merge_database(dest, tmp_path / "src.db")
    assert (again.records, again.features, again.choices, again.tasks) == (0, 0, 0, 0)
    assert (again.src_records, again.src_choices) == (3, 1)
    assert len(dest.records(KEY_B, "cpu-a")) == 3
    assert dest.choice_stats()[0] == 2
    dest.close()


def test_merge_keeps_dest_task_rows_and_its_newer_choice(tmp_path):
    _log(tmp_path / "src.db", KEY_A, [3e-3, 1e-3], description="from src",
         choice_at=10.0).close()
    dest = _log(tmp_path / "dest.db", KEY_A, [5e-3, 2e-3], description="from dest",
                choice_at=20.0)
    counts = merge_database(dest, tmp_path / "src.db")
    # the failed record is the same row in both logs (same content): copied once
    assert counts.tasks == 0 and counts.records == 2 and counts.choices == 1
    assert dest.task_info(KEY_A)["description"] == "from dest"
    assert dest.choice(KEY_A, "cpu-a", 1).seconds == 2e-3      # the newest confirmation
    assert len(dest.records(KEY_A, "cpu-a")) == 5
    dest.close()


def test_merge_into_an_empty_log_and_from_a_log_without_choices(tmp_path):
    src = Database(tmp_path / "src.db")
    src.commit_task(KEY_B, "x", [])
    src.commit_record(Record(KEY_B, "cpu-a", {"t": 1}, (1e-3,), "OK"))
    src.close()
    dest = Database(tmp_path / "new" / "dest.db")
    counts = merge_database(dest, tmp_path / "src.db")
    assert (counts.records, counts.choices, counts.tasks) == (1, 0, 1)
    assert dest.choice_stats() == (0, 0.0)
    assert "cpu-a" in dest.targets()
    dest.close()


def test_merge_rejects_missing_foreign_newer_and_self(tmp_path):
    dest = Database(tmp_path / "dest.db")
    with pytest.raises(TuningDatabaseError, match="no such file"):
        merge_database(dest, tmp_path / "missing.db")
    (tmp_path / "text.db").write_text("not sqlite at all, " * 100)
    with pytest.raises(TuningDatabaseError, match="text.db.*not a tuning database"):
        merge_database(dest, tmp_path / "text.db")
    conn = sqlite3.connect(tmp_path / "other.db")
    conn.execute("CREATE TABLE records (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    with pytest.raises(TuningDatabaseError, match="other.db.*not a Kiln tuning database"):
        merge_database(dest, tmp_path / "other.db")
    newer = Database(tmp_path / "newer.db")
    newer.commit_record(Record(KEY_A, "cpu-a", {"t": 1}, (1e-3,), "OK"))
    newer._db.conn.execute("UPDATE records SET schema_version = ?", (SCHEMA_VERSION + 1,))
    newer._db.conn.commit()
    newer.close()
    with pytest.raises(TuningDatabaseError, match="newer.db.*schema version"):
        merge_database(dest, tmp_path / "newer.db")
    with pytest.raises(TuningDatabaseError, match="into itself"):
        merge_database(dest, tmp_path / "dest.db")
    assert dest.record_stats()[0] == 0
    dest.close()
