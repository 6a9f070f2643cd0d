"""The tuning loop: records committed as they happen, resume without re-measuring, the best
schedule is rebuilt from the database (and says where it came from)."""
import dataclasses
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from kiln.autotune.database import Database, Record, config_key
from kiln.autotune.measure import MeasureOptions
from kiln.autotune.scheduler import tune_tasks
from kiln.autotune.search import Featurizer
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.autotune.tuner import apply_best, build_best, canonical_target, tune_task
from kiln.schedule.lower import lower

FAST = MeasureOptions(timeout=30.0, repeat=2, min_repeat_seconds=0.0)


def _task():
    return Task.from_op("matmul", (16, 8, 24))


def _keys(records):
    return [config_key(r.config) for r in records]


@pytest.mark.slow
def test_tune_commits_every_trial_and_resumes_without_remeasuring(tmp_path):
    db = Database(tmp_path / "t.db")
    task, target = _task(), canonical_target("native")
    progress = []
    result = tune_task(task, "native", trials=6, db=db, search="xgb", batch_size=3,
                       callback=progress.append, options=FAST)
    records = db.records(task.workload_key, target)
    assert result.measured == 6 and len(records) == 6
    assert len(set(_keys(records))) == 6                     # nothing measured twice
    assert [p.trials_done for p in progress] == [1, 2, 3, 4, 5, 6]
    ok = [r for r in records if r.status == "OK"]
    assert ok, [r.error_text[-200:] for r in records]
    assert result.best_seconds == min(r.mean_cost for r in ok)
    assert result.best_gflops == pytest.approx(task.flops / result.best_seconds / 1e9)

    again = tune_task(task, "native", trials=6, db=db, options=FAST)
    assert again.measured == 0                                # budget already spent
    more = tune_task(task, "native", trials=8, db=db, batch_size=2, options=FAST)
    assert more.measured == 2
    records = db.records(task.workload_key, target)
    assert len(records) == 8 and len(set(_keys(records))) == 8

    kernel = build_best(task, "native", db)
    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (16, 8)).astype(np.float32)
    b = rng.uniform(-1, 1, (8, 24)).astype(np.float32)
    c = np.zeros((16, 24), np.float32)
    kernel(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)


def test_apply_best_says_where_the_schedule_came_from(tmp_path):
    db = Database(tmp_path / "t.db")
    task, target = _task(), canonical_target("native")
    sch, args, source = apply_best(task, "native", db)
    assert source == "default (no tuning records)"
    lower(sch, args, name="mm")
    # a record for another target is never applied here
    db.commit_record(Record(task.workload_key, "llvm -mcpu=other", {"s0/unroll": 0}, (1e-9,),
                            "OK"))
    assert apply_best(task, "native", db)[2] == "default (no tuning records)"
    db.commit_record(Record(task.workload_key, target, {"s0/unroll": 0, "s0/parallel": 0},
                            (1e-3,), "OK"))
    sch, args, source = apply_best(task, "native", db)
    assert source == "database"
    # the schedule came from the stored config (unroll off), not from the default (unroll on)
    assert not any(step.primitive == "unroll" for step in sch.steps)


def test_unknown_search_is_rejected(tmp_path):
    from kiln.te.errors import KilnError
    with pytest.raises(KilnError, match=r"unknown search 'beam'; choose one of: xgb, random"):
        tune_task(_task(), "native", trials=1, db=Database(tmp_path / "t.db"), search="beam")


_CHILD = textwrap.dedent("""
    import sys
    from kiln.autotune.database import Database
    from kiln.autotune.measure import MeasureOptions
    from kiln.autotune.task import Task
    from kiln.autotune.tuner import tune_task
    task = Task.from_op("matmul", (16, 8, 24))
    tune_task(task, "native", trials=200, db=Database(sys.argv[1]), search="random",
              batch_size=4, options=MeasureOptions(timeout=30, repeat=1,
                                                   min_repeat_seconds=0.0))
""")


@pytest.mark.slow
def test_resume_after_sigkill_of_tuning_subprocess(tmp_path):
    path = tmp_path / "killed.db"
    child = subprocess.Popen([sys.executable, "-c", _CHILD, str(path)],
                             start_new_session=True)
    task, target = _task(), canonical_target("native")
    deadline = time.time() + 120
    count = 0
    while time.time() < deadline and count < 3:
        time.sleep(0.3)
        if path.exists():
            count = len(Database(path).records(task.workload_key, target))
        assert child.poll() is None, "the tuning subprocess ended before it was killed"
    os.killpg(child.pid, signal.SIGKILL)        # the tuner and its measurement worker
    assert child.wait() == -signal.SIGKILL
    db = Database(path)
    kept = db.records(task.workload_key, target)
    assert len(kept) >= 3                        # committed records survive the kill
    result = tune_task(task, "native", trials=len(kept) + 2, db=db, search="random",
                       options=FAST)
    assert result.measured == 2                  # only the missing trials are measured
    after = db.records(task.workload_key, target)
    assert _keys(after)[:len(kept)] == _keys(kept)
    assert len(set(_keys(after))) == len(after)  # the rerun skipped every measured config


@pytest.mark.slow
def test_task_scheduler_warms_up_every_task_then_spends_the_budget(tmp_path):
    db = Database(tmp_path / "s.db")
    tasks = [(Task.from_op("matmul", (16, 8, 24)), 1.0),
             (Task.from_op("softmax", (4, 24)), 2.0)]
    reports = tune_tasks(tasks, "native", trials=6, db=db, search="random", batch_size=2,
                         options=FAST)
    assert [r.name for r in reports] == ["matmul_16x8x24", "softmax_4x24"]
    assert all(r.trials >= 2 for r in reports)             # round-robin warm-up
    assert sum(r.trials for r in reports) == 6
    target = canonical_target("native")
    for (task, _), report in zip(tasks, reports):
        assert len(db.records(task.workload_key, target)) == report.trials


def test_a_task_that_stops_improving_yields_the_budget_to_less_tuned_ones():
    """On a resumed run (no improvement anywhere yet) the scheduler's gain of a much-tuned task
    falls below that of a task with few trials, and batches spread by latency share: MobileNetV2
    once gave 600 of 1000 trials to one task and 8 to its 112x112 depthwise convs."""
    from types import SimpleNamespace

    from kiln.autotune.allocation import expected_gain
    big = SimpleNamespace(best_seconds=0.195e-3, n_records=344)
    small = SimpleNamespace(best_seconds=0.224e-3, n_records=8)
    assert expected_gain(small, 1.0, [small.best_seconds], 3) > expected_gain(big, 3.0, [big.best_seconds], 3)
    # simulate 50 batches of 8 that improve nothing: weight x latency 3 : 1 : 1
    tuners = [SimpleNamespace(best_seconds=b, n_records=8) for b in (3e-3, 1e-3, 1e-3)]
    for _ in range(50):
        pick = max(tuners, key=lambda t: expected_gain(t, 1.0, [t.best_seconds], 3))
        pick.n_records += 8
    counts = [t.n_records - 8 for t in tuners]
    assert counts[0] == max(counts) and min(counts) >= 0.15 * sum(counts), counts


def test_keyboard_interrupt_stops_cleanly_keeping_measured_records(tmp_path):
    db = Database(tmp_path / "t.db")
    task = _task()

    def interrupt_after_two(progress):
        if progress.trials_done == 2:
            raise KeyboardInterrupt

    result = tune_task(task, "native", trials=10, db=db, search="random", batch_size=4,
                       callback=interrupt_after_two, options=FAST)
    assert result.interrupted and result.measured == 2 and result.total_trials == 2
    assert len(db.records(task.workload_key, canonical_target("native"))) == 2


def test_task_scheduler_stops_when_every_space_is_exhausted_even_without_a_working_schedule(
        tmp_path, monkeypatch):
    """A small task whose every candidate fails has an infinite 'gain' (no schedule yet);
    once its space is exhausted it must not be picked again, or the loop never ends."""
    from kiln.autotune import scheduler
    from kiln.autotune.measure import MeasureResult, MeasureStatus

    from kiln import te

    def scale(n, m, name):
        x = te.placeholder((n, m), "float32", "x")
        y = te.compute((n, m), lambda i, j: x[i, j] * 2.0, name="y")
        return Task(name, (y,), (x, y))

    broken, working = scale(3, 5, "broken"), scale(2, 8, "working")
    real_run = scheduler.Runner.run

    def run(self, task, data, config, target, best_seconds=float("inf"), timeout=None):
        if task.workload_key == broken.workload_key:
            return MeasureResult(MeasureStatus.WRONG_ANSWER, error_text="injected")
        return real_run(self, task, data, config, target, best_seconds=best_seconds,
                        timeout=timeout)

    monkeypatch.setattr(scheduler.Runner, "run", run)
    db = Database(tmp_path / "x.db")
    sizes = [SearchSpace(t).size for t in (broken, working)]
    reports = tune_tasks([(broken, 1.0), (working, 1.0)], "native", trials=10_000, db=db,
                         search="random", batch_size=4, options=FAST)
    assert [r.trials for r in reports] == sizes        # every config once, then it stops
    assert reports[0].best_seconds == float("inf")


def test_resume_reuses_stored_feature_vectors_instead_of_lowering_again(tmp_path):
    """Records with a vector of the current layout seed the featurizer; a vector of another
    layout is ignored and the config is featurized from its lowering."""
    from kiln.autotune.features import FEATURE_VERSION, N_FEATURES
    from kiln.autotune.tuner import TaskTuner
    db = Database(tmp_path / "t.db")
    task, target = _task(), canonical_target("native")
    space = SearchSpace(task)
    stored, foreign = space.default_config(), dict(space.default_config(), **{"s0/unroll": 0})
    sentinel = np.full(N_FEATURES, 7.0, np.float32)
    db.commit_record(Record(task.workload_key, target, stored, (1e-3,), "OK"), sentinel,
                     FEATURE_VERSION)
    db.commit_record(Record(task.workload_key, target, foreign, (2e-3,), "OK"), sentinel,
                     "v0-older-layout")
    tuner = TaskTuner(task, "native", db, search="xgb", transfer=False)
    cache = tuner.featurize.cache
    np.testing.assert_array_equal(cache[config_key(stored)], sentinel)
    assert not np.array_equal(cache[config_key(foreign)], sentinel)
    np.testing.assert_array_equal(cache[config_key(foreign)],
                                  Featurizer(space)(foreign))


@pytest.mark.slow
def test_shared_featurizer_proposes_exactly_what_the_local_one_does(tmp_path):
    """Half of the new candidates are lowered in the measurement worker: the vectors, and so
    the model's proposals, are the same as when the parent lowers them all."""
    import random

    from kiln.autotune.measure import Runner, TaskData
    from kiln.autotune.search import SearchConfig
    from kiln.autotune.tuner import SharedFeaturizer, TaskTuner
    task = Task.from_op("matmul", (32, 16, 48))
    space = SearchSpace(task)
    rng = random.Random(0)
    history = [space.sample(rng) for _ in range(12)]
    costs = [1e-3 * (1 + i % 5) for i in range(len(history))]
    proposals, answered = {}, []
    for share in (True, False):
        with Runner(FAST) as runner:
            tuner = TaskTuner(task, "native", Database(tmp_path / f"{share}.db"), "xgb",
                              runner, SearchConfig(seed=1), transfer=False,
                              share_features=share)
            assert isinstance(tuner.search.featurize, SharedFeaturizer) == share
            tuner._data = TaskData.make(tuner.task)
            features = runner.features
            runner.features = lambda *args: answered.append(features(*args)) or answered[-1]
            tuner.search.update(history, costs)
            proposals[share] = [config_key(c) for c in tuner.search.propose(set(), 8)]
    assert answered and all(a is not None for a in answered)    # the worker did its share
    assert len(proposals[True]) == 8 and proposals[True] == proposals[False]


def test_records_carry_the_thread_count_and_apply_best_picks_per_count(tmp_path):
    """Tuning at 1 thread stores threads=1; tuning at 2 stores threads=2; a compile for
    2 threads takes the best 2-thread record even when a 1-thread record is faster."""
    db = Database(tmp_path / "t.db")
    task, target = _task(), canonical_target("native")
    one = dataclasses.replace(FAST, threads=1)
    # (no confirmation: this is about which records a compile takes)
    tune_task(task, "native", trials=3, db=db, search="random", batch_size=3, options=one,
              confirm=None)
    assert {r.threads for r in db.records(task.workload_key, target)} == {1}
    tune_task(task, "native", trials=2, db=db, search="random", batch_size=2,
              options=dataclasses.replace(FAST, threads=2), confirm=None)
    assert {r.threads for r in db.records(task.workload_key, target)} == {1, 2}
    slow_at_two = {"s0/unroll": 0, "s0/parallel": 0}
    db.commit_record(Record(task.workload_key, target, slow_at_two, (1e-12,), "OK", threads=1))
    assert db.best(task.workload_key, target)[0].config == slow_at_two
    sch, _, _ = apply_best(task, "native", db, threads=1)
    assert not any(step.primitive == "unroll" for step in sch.steps)   # the 1-thread record
    best_two = db.best(task.workload_key, target, threads=2)[0]
    assert best_two.threads == 2 and best_two.config != slow_at_two
    sch2, args2, source = apply_best(task, "native", db, threads=2)
    assert source == "database"
    expected, _ = SearchSpace(dataclasses.replace(task, target=target, _key=[])).apply(
        best_two.config)
    assert [s.primitive for s in sch2.steps] == [s.primitive for s in expected.steps]


def test_measurement_rejects_a_thread_count_below_one():
    from kiln.autotune.measure import Runner
    from kiln.te.errors import KilnError
    with pytest.raises(KilnError, match="threads=0"):
        Runner(dataclasses.replace(FAST, threads=0)).start()


def test_tuning_at_another_thread_count_measures_afresh_and_resumes_per_count(tmp_path):
    """The trial budget, the seen set and the resume are per thread count: 3 trials at 1
    thread do not count for 2 threads, and a rerun at either count measures nothing."""
    db = Database(tmp_path / "t.db")
    task, target = _task(), canonical_target("native")
    one, two = (dataclasses.replace(FAST, threads=n) for n in (1, 2))
    assert tune_task(task, "native", trials=3, db=db, search="random", batch_size=3,
                     options=one).measured == 3
    result = tune_task(task, "native", trials=3, db=db, search="random", batch_size=3,
                       options=two)
    assert result.measured == 3 and result.total_trials == 3
    at_two = db.records(task.workload_key, target, threads=2)
    assert len(at_two) == 3 and {r.threads for r in at_two} == {2}
    assert len(db.records(task.workload_key, target)) == 6
    for options in (one, two):
        assert tune_task(task, "native", trials=3, db=db, search="random", batch_size=3,
                         options=options).measured == 0
    # a record of unknown count (an older log) counts for every thread count
    db.commit_record(Record(task.workload_key, target, {"legacy": 1}, (1.0,), "OK"))
    assert len(db.records(task.workload_key, target, threads=1)) == 4


def test_best_so_far_prefers_records_measured_at_the_thread_count(tmp_path):
    """An untagged record (an older log, maybe measured at another count) resumes the seen set
    but does not outrank what was measured at this count as the best so far."""
    db = Database(tmp_path / "t.db")
    task, target = _task(), canonical_target("native")
    one = dataclasses.replace(FAST, threads=1)
    tune_task(task, "native", trials=2, db=db, search="random", batch_size=2, options=one)
    tagged = min(r.mean_cost for r in db.records(task.workload_key, target, threads=1)
                 if r.status == "OK")
    space = SearchSpace(dataclasses.replace(task, target=target, _key=[]))
    measured = {config_key(r.config) for r in db.records(task.workload_key, target)}
    picker = random.Random(9)
    legacy = next(c for c in iter(lambda: space.sample(picker), None)
                  if config_key(c) not in measured)
    db.commit_record(Record(task.workload_key, target, legacy, (1e-12,), "OK"))
    result = tune_task(task, "native", trials=3, db=db, search="random", batch_size=2,
                       options=one)
    assert result.measured == 0 and result.total_trials == 3
    assert result.best_seconds == pytest.approx(tagged)


def test_default_schedules_are_made_for_the_thread_count_asked_for(monkeypatch):
    """The GEMV default splits columns across threads only when it will run on several:
    apply_best(threads=N) gives N's default whatever KILN_NUM_THREADS says."""
    task = Task.from_op("dense", (1, 1280, 1000))

    def ir(threads):
        sch, args, source = apply_best(task, "native", None, threads=threads)
        assert source.startswith("default")
        return str(lower(sch, args, name="gemv"))

    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    two_under_one = ir(2)
    one = ir(None)
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    assert ir(None) == two_under_one
    assert ir(1) == one
    if (os.cpu_count() or 1) >= 2:
        assert two_under_one != one


def test_candidates_get_a_timeout_scaled_to_the_slowest_working_one(tmp_path, monkeypatch):
    """Until a candidate of the task works, the options' timeout; then 8x the slowest that
    worked (at least 5 s, at most the options' timeout): a candidate whose build runs away
    costs seconds, not the full timeout."""
    from kiln.autotune import scheduler
    from kiln.autotune.measure import TIMEOUT_FLOOR, candidate_timeout
    assert candidate_timeout(30.0, 0.0) == 30.0
    assert candidate_timeout(30.0, 0.1) == TIMEOUT_FLOOR
    assert candidate_timeout(30.0, 1.5) == pytest.approx(12.0)
    assert candidate_timeout(30.0, 10.0) == 30.0
    given = []
    real_run = scheduler.Runner.run

    def run(self, task, data, config, target, best_seconds=float("inf"), timeout=None):
        given.append(timeout)
        return real_run(self, task, data, config, target, best_seconds=best_seconds,
                        timeout=timeout)

    monkeypatch.setattr(scheduler.Runner, "run", run)
    tune_tasks([(_task(), 1.0)], "native", trials=3, db=Database(tmp_path / "t.db"),
               search="random", batch_size=3, options=FAST, confirm=None)
    assert given[0] == FAST.timeout and len(given) == 3
    assert all(TIMEOUT_FLOOR <= t < FAST.timeout for t in given[1:]), given
