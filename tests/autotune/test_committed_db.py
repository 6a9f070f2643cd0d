"""The committed tuning log fits today's search spaces: a space change that strands records
fails here, in CI, not in a user's compile (issue 14)."""
from __future__ import annotations

import shutil

import pytest

from kiln.autotune.database import SCHEMA_VERSION, Database
from kiln.autotune.default_db import shipped_db_path
from kiln.graph.task_catalog import check_database


@pytest.mark.slow
def test_every_committed_record_fits_todays_space(tmp_path):
    copy = tmp_path / "kiln.db"
    shutil.copy(shipped_db_path(), copy)          # the check opens it writable (WAL files)
    db = Database(copy)
    report = check_database(db)
    assert report["misfit"] == [], report["misfit"][:5]
    assert report["fit"] > 13000
    # the only records of an older schema are those of tasks no compile produces any more
    # (passes changed since they were measured), marked stale in the file
    assert report["stale"] == report["unknown_task"]
    rows = db._db.conn.execute("SELECT COUNT(*) FROM records WHERE schema_version != ?",
                               (SCHEMA_VERSION,)).fetchone()
    assert rows[0] == report["stale"]
