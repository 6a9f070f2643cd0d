"""Transfer learning: earlier tasks' measurements as a prior for the cost model.

A log does not hold the DAGs of the tasks in it, so features of old records cannot be
recomputed; the tuner stores each measured candidate's feature vector with its record instead
(`Database.commit_record(..., features=)`), and a new run loads those vectors of the other
tasks on the same target into the shared `CostModelPool` as prior groups. The model is then
trained before the task's first measurement, so the very first batch is already model-guided.
On by default (tune_task / tune_tasks `transfer=True`): in `tune_search_efficiency.py
--transfer` (conv 64x14x14 tuned 24 trials, 3 seeds, prior = 60 records of conv 32x28x28) the
prior run ended ahead on every seed; tests/autotune/test_transfer.py checks the ranking gain.
"""
from __future__ import annotations

import logging

from .cost_model import CostModelPool, normalize_throughput
from .database import Database
from .features import FEATURE_VERSION

log = logging.getLogger(__name__)


def load_prior(pool: CostModelPool, db: Database, target: str, exclude_task: str | None = None,
               per_task: int = 256, max_tasks: int = 32, max_rows: int = 1024) -> int:
    """Add the stored feature rows of `target`'s tasks (but `exclude_task`) to `pool` as prior
    groups: at most `max_tasks` tasks (those with the most rows), each with its newest rows,
    at most `max_rows` in all (a refit stays cheap); returns the row count."""
    by_task = db.feature_rows(target, FEATURE_VERSION, exclude_task, per_task)
    ranked = sorted(by_task.items(), key=lambda kv: -len(kv[1][1]))[:max_tasks]
    share = max(2, max_rows // max(1, len(ranked)))
    added = 0
    for task_key, (X, seconds) in ranked:
        X, seconds = X[-share:], seconds[-share:]
        y = normalize_throughput(seconds)
        if len(y) < 2 or not (y > 0).any():
            continue
        pool.set_rows(task_key, X, y, prior=True)
        added += len(y)
    if added:
        log.info("cost model prior: %d rows of %d earlier task(s) on %s", added,
                 len(pool.prior), target)
        pool.fit()
    return added
