"""One default tuning database for the API and the CLI: the user's log layered over the
records shipped with Kiln; new measurements never go into the package (issue 14)."""
from __future__ import annotations

import hashlib
import inspect
import subprocess
import sys

import pytest

import kiln
from kiln.autotune.database import Database, Record
from kiln.autotune.default_db import DEFAULT, open_database, shipped_db_path, user_db_path
from kiln.autotune.dispatch import canonical_target
from kiln.autotune.task import Task


def _digest(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def test_the_api_and_the_cli_default_to_the_same_database():
    assert inspect.signature(kiln.compile).parameters["db"].default == DEFAULT
    assert inspect.signature(kiln.tune).parameters["db"].default == DEFAULT


def test_shipped_records_are_package_data():
    path = shipped_db_path()
    assert path is not None and path.name == "kiln.db" and path.stat().st_size > 1 << 20


def test_layered_reads_see_both_and_writes_go_to_the_user_log(tmp_path):
    task = Task.from_op("matmul", (8, 16, 24))
    target = canonical_target("native")
    base = Database(tmp_path / "shipped.db")
    base.commit_task(task.workload_key, "matmul", [])
    base.commit_record(Record(task.workload_key, target, {"s0/unroll": 0}, (2e-3,), "OK"))
    base.close()
    before = _digest(tmp_path / "shipped.db")
    db = Database(tmp_path / "user" / "tuning.db", base=tmp_path / "shipped.db")
    db.commit_record(Record(task.workload_key, target, {"s0/unroll": 1}, (1e-3,), "OK"))
    records = db.records(task.workload_key, target)
    assert [r.costs for r in records] == [(2e-3,), (1e-3,)] or len(records) == 2
    assert db.best(task.workload_key, target)[0].config == {"s0/unroll": 1}
    assert {r.record_id > 0 for r in records} == {True, False}      # base ids are negative
    assert db.task_info(task.workload_key)["description"] == "matmul"
    assert [row["trials"] for row in db.summary()] == [2]
    db.close()
    assert _digest(tmp_path / "shipped.db") == before
    alone = Database(tmp_path / "user" / "tuning.db")
    assert len(alone.records(task.workload_key, target)) == 1


def test_default_is_the_user_log_over_the_shipped_one(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "mine.db"))
    db = open_database(DEFAULT)
    assert db.path == user_db_path() == tmp_path / "mine.db"
    assert db.base == shipped_db_path()
    assert open_database(None) is None
    assert open_database(str(tmp_path / "x.db")).base is None


def test_kiln_tune_writes_new_measurements_to_the_user_log(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "mine.db"))
    shipped = shipped_db_path()
    before = _digest(shipped)
    task = Task.from_op("matmul", (8, 8, 8))
    result = kiln.tune(task, trials=2, search="random")
    assert result.measured == 2
    mine = Database(tmp_path / "mine.db")
    assert len(mine.records(task.workload_key, canonical_target("native"))) == 2
    assert _digest(shipped) == before


def test_kiln_tune_with_no_database_keeps_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("KILN_TUNING_DB", str(tmp_path / "mine.db"))
    result = kiln.tune(Task.from_op("matmul", (8, 8, 8)), trials=2, db=None, search="random")
    assert result.measured == 2 and result.best_config is not None
    assert not (tmp_path / "mine.db").exists()


@pytest.mark.slow
def test_cli_logs_names_both_layers(tmp_path):
    env = {"KILN_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
           "KILN_TUNING_DB": str(tmp_path / "mine.db")}
    proc = subprocess.run([sys.executable, "-m", "kiln", "logs"], capture_output=True,
                          text=True, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "mine.db" in out and "kiln.db" in out
