"""Transfer learning: a cost model trained on an earlier task ranks a related task's candidates
better than one trained on that task's few rows alone; feature vectors stored with records are
the prior of later runs; tasks tuned together share one model."""
import random
import sqlite3

import numpy as np
import pytest

from kiln.autotune.cost_model import (CostModelPool, XGBCostModel, kendall_tau,
                                      normalize_throughput)
from kiln.autotune.database import Database, Record
from kiln.autotune.features import FEATURE_VERSION, N_FEATURES
from kiln.autotune.measure import MeasureOptions, Runner
from kiln.autotune.search import Featurizer, SearchConfig
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.autotune.transfer import load_prior
from kiln.autotune.tuner import TaskTuner, canonical_target

FAST = MeasureOptions(timeout=30.0, repeat=1, min_repeat_seconds=0.0)


def _synthetic_seconds(config: dict, lanes: int, flops: float) -> float:
    """A deterministic roofline-style law shared by every matmul shape: full vector lanes,
    parallel outer loops, unrolled register tiles and a local accumulator help; tiles whose
    working set overflows 32 KiB hurt. Same law for tasks A and B, so transfer can work."""
    mid_i, inner_i = config["s0/tile/0"]
    mid_j, inner_j = config["s0/tile/1"]
    k = config["s0/reduce/0"]
    speed = 1.0
    if config["s0/vectorize"] and inner_j >= lanes:
        speed *= lanes * (1.0 if inner_j % lanes == 0 else 0.6)
    elif config["s0/vectorize"] and inner_j > 1:
        speed *= inner_j / 2
    speed *= 1.0 + 0.9 * min(config["s0/parallel"], 1)
    if config["s0/unroll"]:
        speed *= 1.0 + 0.5 * min(inner_i, 4) / 4
    if config["s0/local"]:
        speed *= 1.4
    tile_bytes = 4 * (mid_i * inner_i * k + k * mid_j * inner_j)
    speed /= 1.0 + max(0.0, np.log2(tile_bytes / 32768.0))
    return flops * 1e-12 / speed


def _task_rows(shape, n, seed):
    task = Task.from_op("matmul", shape)
    space = SearchSpace(task)
    lanes = space.default_config()["s0/lanes"]
    rng = random.Random(seed)
    configs = [space.sample(rng) for _ in range(n)]
    X, ok = Featurizer(space).matrix(configs)
    seconds = np.array([_synthetic_seconds(c, lanes, task.flops) for c in configs])
    return task, configs, X[ok], seconds[ok]


def test_model_pretrained_on_task_a_ranks_task_b_better_than_b_rows_alone():
    _, _, XA, secA = _task_rows((128, 128, 128), 120, seed=1)
    yA = normalize_throughput(secA)
    own_taus, transfer_taus, prior_only_taus = [], [], []
    for seed in range(3):
        _, _, XB, secB = _task_rows((64, 256, 96), 88, seed=10 + seed)
        yB = normalize_throughput(secB)
        X_few, y_few, X_test, y_test = XB[:8], yB[:8], XB[8:], yB[8:]
        own = XGBCostModel(seed=seed)
        own.fit(X_few, y_few)
        own_taus.append(kendall_tau(own.predict(X_test), y_test))
        pool = CostModelPool(XGBCostModel(seed=seed))
        pool.set_rows("A", XA, yA, prior=True)
        pool.fit()
        prior_only_taus.append(kendall_tau(pool.predict(X_test), y_test))
        pool.set_rows("B", X_few, y_few)
        pool.fit()
        transfer_taus.append(kendall_tau(pool.predict(X_test), y_test))
    # an untrained model predicts a constant (tau 0); A's model alone already ranks B well
    assert np.mean(prior_only_taus) > 0.4, prior_only_taus
    assert np.mean(transfer_taus) > np.mean(own_taus) + 0.15, (transfer_taus, own_taus)


def test_pool_keeps_live_rows_over_prior_and_weights_prior_groups():
    rng = np.random.default_rng(0)
    pool = CostModelPool(XGBCostModel(n_rounds=5), prior_weight=0.25)
    X, y = rng.normal(size=(6, N_FEATURES)), np.linspace(0.1, 1, 6)
    pool.set_rows("live", X, y)
    pool.set_rows("live", X[:2], y[:2], prior=True)       # a prior never replaces live rows
    assert len(pool.rows["live"][1]) == 6 and pool.prior == set()
    pool.set_rows("old", X[:3], y[:3], prior=True)
    pool.set_rows("flat", X[:3], np.ones(3), prior=True)  # no spread: adds no ranking pairs
    assert pool.prior == {"old", "flat"} and pool.n_rows == 12
    pool.fit()
    assert pool.model.n_trained == 9
    pool.set_rows("old", X, y)                            # the task now tunes live
    assert pool.prior == {"flat"}


def _commit_rows(db, task, configs, X, seconds, target):
    db.commit_task(task.workload_key, task.description, task.shapes, task.flops)
    for config, vector, sec in zip(configs, X, seconds):
        db.commit_record(Record(task.workload_key, target, config, (float(sec),), "OK"),
                         vector, FEATURE_VERSION)


def test_database_feature_rows_by_target_version_and_task(tmp_path):
    target = canonical_target("native")
    db = Database(tmp_path / "f.db")
    task, configs, X, seconds = _task_rows((32, 32, 32), 5, seed=0)
    _commit_rows(db, task, configs, X, seconds, target)
    db.commit_record(Record(task.workload_key, target, configs[0], (), "COMPILE_ERROR",
                            "boom"), X[0], FEATURE_VERSION)
    db.commit_record(Record(task.workload_key, "llvm -mcpu=other", configs[0], (1.0,), "OK"),
                     X[0], FEATURE_VERSION)
    db.commit_record(Record(task.workload_key, target, configs[1], (1.0,), "OK"),
                     X[1][:4], "v0-old-layout")
    db.commit_record(Record(task.workload_key, target, configs[2], (1.0,), "OK"))
    rows = db.feature_rows(target, FEATURE_VERSION)
    got_X, got_seconds = rows[task.workload_key]
    np.testing.assert_array_equal(got_X, np.vstack([X, X[:1]]))
    np.testing.assert_allclose(got_seconds, list(seconds) + [np.inf])
    assert db.feature_rows(target, FEATURE_VERSION, exclude_task=task.workload_key) == {}
    assert len(db.feature_rows(target, FEATURE_VERSION, per_task=2)[task.workload_key][1]) == 2
    assert len(db.records(task.workload_key, target)) == 8      # records are all kept


def test_log_without_features_table_opens_and_keeps_its_records(tmp_path):
    path = tmp_path / "old.db"
    target = canonical_target("native")
    task = Task.from_op("matmul", (16, 8, 24))
    db = Database(path)
    db.commit_record(Record(task.workload_key, target, {"s0/unroll": 0}, (1e-3,), "OK"))
    db.close()
    conn = sqlite3.connect(path)                 # make it look like a log from before features
    conn.execute("DROP TABLE features")
    conn.commit()
    conn.close()
    db = Database(path)
    assert [r.config for r in db.records(task.workload_key, target)] == [{"s0/unroll": 0}]
    assert db.feature_rows(target, FEATURE_VERSION) == {}
    db.commit_record(Record(task.workload_key, target, {"s0/unroll": 1}, (2e-3,), "OK"),
                     np.zeros(N_FEATURES), FEATURE_VERSION)
    assert len(db.feature_rows(target, FEATURE_VERSION)[task.workload_key][1]) == 1


def test_tuner_starts_trained_from_stored_features_of_another_task(tmp_path):
    target = canonical_target("native")
    db = Database(tmp_path / "p.db")
    task_a, configs, X, seconds = _task_rows((128, 128, 128), 40, seed=2)
    _commit_rows(db, task_a, configs, X, seconds, target)
    task_b = Task.from_op("matmul", (64, 256, 96))
    cold = TaskTuner(task_b, "native", db, "xgb", transfer=False)
    assert not cold.pool.is_trained
    warm = TaskTuner(task_b, "native", db, "xgb", search_config=SearchConfig(seed=3))
    assert warm.pool.is_trained and warm.pool.prior == {task_a.workload_key}
    assert load_prior(CostModelPool(), db, "llvm -mcpu=other") == 0
    capped = CostModelPool()
    assert load_prior(capped, db, target, max_rows=10) == 10     # the newest 10 rows of A
    np.testing.assert_array_equal(capped.rows[task_a.workload_key][0], X[-10:])
    # the first batch is model-guided: scored by the prior, it beats random picks of B
    lanes = warm.space.default_config()["s0/lanes"]
    proposed = warm.search.propose(set(), 12)
    rng = random.Random(5)
    random_picks = [warm.space.sample(rng) for _ in range(12)]

    def mean_speed(cs):
        return np.mean([1.0 / _synthetic_seconds(c, lanes, task_b.flops) for c in cs])

    assert mean_speed(proposed) > 1.5 * mean_speed(random_picks)


@pytest.mark.slow
def test_tasks_tuned_together_share_one_model_and_store_features(tmp_path):
    db = Database(tmp_path / "s.db")
    pool = CostModelPool(XGBCostModel(n_rounds=10))
    tasks = [Task.from_op("matmul", (16, 8, 24)), Task.from_op("matmul", (8, 16, 32))]
    with Runner(FAST) as runner:
        tuners = [TaskTuner(t, "native", db, "xgb", runner, SearchConfig(seed=0), pool=pool)
                  for t in tasks]
        assert all(t.search.pool is pool for t in tuners)
        for tuner in tuners:
            assert tuner.step(3) == 3
    assert set(pool.rows) == {t.workload_key for t in tasks} and not pool.prior
    assert pool.n_rows == 6
    stored = db.feature_rows(canonical_target("native"), FEATURE_VERSION)
    assert {k: len(v[1]) for k, v in stored.items()} == {t.workload_key: 3 for t in tasks}
    for key, (X, _) in stored.items():
        np.testing.assert_array_equal(X, pool.rows[key][0])     # the rows the model used
