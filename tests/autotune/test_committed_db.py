"""The committed tuning log fits today's search spaces: a space change that strands records
fails here, in CI, not in a user's compile (issue 14)."""
from __future__ import annotations

import shutil

import pytest

from kiln.autotune.database import SCHEMA_VERSION, Database
from kiln.autotune.default_db import shipped_db_path
from tests.task_catalog import check_database


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


@pytest.mark.slow
def test_every_committed_choice_fits_todays_space_and_trains_the_zero_shot_model(tmp_path):
    """The committed confirmations (`kiln confirm` over the bundled and models_zoo models at
    one thread) name configs that fit today's spaces, carry today's feature layout, and
    are enough labels for the zero-shot model."""
    from kiln.autotune import zero_shot as Z
    from kiln.autotune.dispatch import canonical_target
    from kiln.autotune.space.rules import SearchSpace
    from tests import models_zoo
    from kiln.graph.compile.model import model_tasks
    from tests.task_catalog import tasks_by_key
    target = canonical_target("native")
    db = Database(shipped_db_path())
    choices = db.latest_choices()
    assert len(choices) > 250
    tasks = {t: tasks_by_key(t) for t in {choice.target for choice in choices}}
    for build in (models_zoo.regnetx_like, models_zoo.rexnet_like, models_zoo.mobilenetv3_like,
                  models_zoo.vit_tiny_like, models_zoo.densenet_like):
        for mt in model_tasks(build(), target):
            for known in tasks.values():
                known.setdefault(mt.task.workload_key, mt.task)
    missing, misfit = [], []
    for choice in choices:
        task = tasks[choice.target].get(choice.task_key)
        if task is None:
            missing.append(choice.task_key)
            continue
        space = SearchSpace(task.retargeted(choice.target), choice.threads)
        for row in choice.candidates:
            if space.misfit(row["config"]) is not None:
                misfit.append((task.name, row["source"], space.misfit(row["config"])))
    assert missing == [] and misfit == [], (missing[:3], misfit[:3])
    X, y = Z.training_rows(db, choices[0].target)     # the ISA the confirmations ran on
    assert len(y) > 1000 and X.shape[1] == 2 * len(choices[0].candidates[0]["features"])
