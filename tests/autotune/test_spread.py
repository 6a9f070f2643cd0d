"""A short budget spent by measured spread (autotune/spread.py): the gain estimate, when a
task has stalled, local batches around the best, and the task scheduler's use of them."""
from __future__ import annotations

import math
import random
from types import SimpleNamespace

import numpy as np
import pytest

from kiln.autotune import spread
from kiln.autotune.database import Database, config_key
from kiln.autotune.scheduler import tune_tasks
from kiln.autotune.task import Task
from kiln.autotune.tuner import TaskTuner

INF = math.inf


def test_spread_is_the_deviation_of_log_speedups_over_working_candidates():
    assert spread.spread(1.0, [1.0, 1.0, 1.0]) == 0.0
    assert spread.spread(1.0, [0.5]) == 0.0                  # one candidate: no spread yet
    assert spread.spread(INF, [0.5, 2.0]) == 0.0              # no working default
    wide = spread.spread(1.0, [0.8, 1.0, 1.25, INF])          # failures are left out
    assert wide == pytest.approx(math.log(1.25), rel=1e-9)
    assert spread.spread(1.0, [1e-3, 1e3]) == spread.SPREAD_CAP
    assert spread.spread(1.0, [0.9, 1.1]) < spread.spread(1.0, [0.7, 1.4])


@pytest.mark.parametrize("history,expected", [
    ([INF], False),                         # nothing measured yet
    ([INF, 1.0], False),                    # first batch: found a working schedule
    ([INF, 1.0, 0.999, 0.998], True),       # two batches under MIN_STEP
    ([INF, 1.0, 0.999, 0.95], False),       # the last one moved 5%
    ([1.0, 0.9, 0.9, 0.9], True),
    ([INF, INF, INF], True),                # nothing ever worked
])
def test_a_task_stalls_after_patience_batches_without_progress(history, expected):
    assert spread.stalled(history) is expected


def test_unmeasured_heavy_tasks_come_first_and_light_ones_wait():
    heavy = spread.spread_gain(5e-3, INF, [], [INF], 0)
    light = spread.spread_gain(1e-4, INF, [], [INF], 0)
    assert heavy == pytest.approx(5e-3 * spread.PRIOR_GAIN) and heavy > light
    # a measured task with a wide spread outbids an unmeasured one of the same latency
    promising = spread.spread_gain(5e-3, 1.0, [1.0, 0.5, 1.6, 0.8], [INF, 0.5], 4)
    assert promising > heavy
    # one whose candidates all sit at the default has little left; a stalled one less still
    flat = spread.spread_gain(5e-3, 1.0, [1.0, 1.0, 1.01, 1.0], [1.0, 1.0], 4)
    assert flat < heavy
    done = spread.spread_gain(5e-3, 1.0, [1.0, 0.5, 1.6, 0.8] * 3, [INF, 0.5, 0.5, 0.5], 12)
    assert done == pytest.approx(5e-3 * spread.FLOOR / 12) and done < flat


def test_the_gain_follows_latency_and_recent_improvement():
    costs = [1.0, 0.8, 0.9, 0.95]
    assert spread.spread_gain(2e-3, 1.0, costs, [INF, 1.0, 0.8], 4) > \
        spread.spread_gain(1e-3, 1.0, costs, [INF, 1.0, 0.8], 4)
    # a 20% improvement in the last batches counts in full
    assert spread.spread_gain(1e-3, 1.0, costs, [1.0, 1.0, 0.8], 4) == pytest.approx(0.2e-3)


def _matmul_tuner(tmp_path) -> TaskTuner:
    task = Task.from_op("matmul", [37, 64, 48])
    return TaskTuner(task, "native", Database(tmp_path / "t.db"), search="xgb",
                     share_features=False)


def test_local_batches_start_at_the_default_and_stay_near_the_best(tmp_path, monkeypatch):
    monkeypatch.setattr(spread, "WARM", 0)      # (the first batch's broad look: below)
    tuner = _matmul_tuner(tmp_path)
    tuner.local = True
    default = tuner.space.default_config()
    batch = tuner._propose(4)
    assert batch[0] == default and len(batch) == 4
    assert len({config_key(c) for c in batch}) == 4
    # then mutations of the default and EXPLORE samples of the whole space (no search
    # proposal: it lowers hundreds)
    local = 4 - 1 - spread.EXPLORE
    assert batch[1:1 + local] == spread.local_batch(
        tuner.space, default, {config_key(default)}, local, f"{config_key(default)}/0")
    assert tuner.search.score_seconds == 0.0 and tuner.featurize.seconds == 0.0
    # the same salt gives the same mutations; seen ones are left out
    again = spread.local_batch(tuner.space, default, set(), 3, "s")
    assert again == spread.local_batch(tuner.space, default, set(), 3, "s")
    seen = {config_key(again[0])}
    assert config_key(again[0]) not in {config_key(c) for c in
                                        spread.local_batch(tuner.space, default, seen, 3, "s")}


def test_the_tuner_tracks_the_defaults_time_and_every_candidates(tmp_path):
    from kiln.autotune.measure import MeasureResult, MeasureStatus
    tuner = _matmul_tuner(tmp_path)
    default = tuner.space.default_config()
    other = next(c for c in spread.local_batch(tuner.space, default, set(), 1, "x"))
    tuner.commit_result(other, None, MeasureResult(MeasureStatus.OK, (2e-5,)), 0.1)
    assert tuner.default_seconds == INF and tuner.costs == [2e-5]
    tuner.commit_result(default, None, MeasureResult(MeasureStatus.OK, (3e-5,)), 0.1)
    assert tuner.default_seconds == pytest.approx(3e-5)
    assert tuner.costs == [2e-5, pytest.approx(3e-5)]
    # a resumed tuner reads both back from the log
    again = TaskTuner(tuner.task, "native", tuner.db, search="random", share_features=False)
    assert again.default_seconds == pytest.approx(3e-5) and sorted(again.costs) == \
        pytest.approx([2e-5, 3e-5])


def test_the_scheduler_spends_by_latency_without_a_warm_up(tmp_path, monkeypatch):
    """With latencies, the task scheduler tunes the heaviest task first, in batches of at
    most spread.BATCH, and a task of no measurable latency is never started while the budget
    has better uses (the trial budget ends before the floor of the heavy one would)."""
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    heavy, light = Task.from_op("matmul", [16, 24, 8]), Task.from_op("matmul", [5, 7, 3])
    db = Database(tmp_path / "t.db")
    order = []
    original = TaskTuner.step

    def step(self, n, *args, **kwargs):
        order.append((self.task.workload_key, n, self.local))
        return original(self, n, *args, **kwargs)

    monkeypatch.setattr(TaskTuner, "step", step)
    latencies = {heavy.workload_key: 1e-3, light.workload_key: 0.0}
    reports = tune_tasks([(light, 1.0), (heavy, 1.0)], "native", trials=6, db=db,
                         search="random", batch_size=8, confirm=None, latencies=latencies)
    assert order[0] == (heavy.workload_key, spread.BATCH, True)
    assert all(key == heavy.workload_key for key, _, _ in order)
    by_key = {r.task_key: r.trials for r in reports}
    assert by_key == {heavy.workload_key: 6, light.workload_key: 0}


def test_tuner_gain_reads_the_tuners_state():
    t = SimpleNamespace(default_seconds=1.0, costs=[1.0, 0.5, 2.0], n_records=3)
    assert spread.tuner_gain(t, 1e-3, [INF, 0.5]) == spread.spread_gain(
        1e-3, 1.0, [1.0, 0.5, 2.0], [INF, 0.5], 3)


def test_local_mutations_are_ranked_by_the_cost_model_once_it_has_learnt(tmp_path):
    import numpy as np
    tuner = _matmul_tuner(tmp_path)
    configs = spread.local_batch(tuner.space, tuner.space.default_config(), set(), 6, "r")
    scores = np.array([0.1, 0.9, -np.inf, 0.5, 0.8, 0.2])
    tuner.search._score = lambda cs: scores[[configs.index(c) for c in cs]]
    tuner.pool = SimpleNamespace(is_trained=True)
    tuner.costs = [1e-5] * (spread.RANK_AFTER - 1)
    assert tuner._ranked(configs, 2) == configs[:2]          # too few of its own yet
    tuner.costs.append(1e-5)
    assert tuner._ranked(configs, 3) == [configs[1], configs[3], configs[4]]   # in draw order
    tuner.pool = SimpleNamespace(is_trained=False)
    assert tuner._ranked(configs, 3) == configs[:3]


def test_a_candidate_with_the_loop_ir_of_a_measured_one_is_not_built(tmp_path):
    from kiln.schedule.lower import lower
    tuner = _matmul_tuner(tmp_path)
    default = tuner.space.default_config()
    others = spread.local_batch(tuner.space, default, set(), 12, "d")
    assert not tuner._same_kernel_as_measured(default)
    texts = {str(lower(*tuner.space.apply(default), name=tuner.task.name))}
    for config in others:
        sch, args = tuner.space.apply(config)
        text = str(lower(sch, args, name=tuner.task.name))
        assert tuner._same_kernel_as_measured(config) is (text in texts)
        texts.add(text)
    # the same IR again (here: the same config) is a duplicate, marked seen, never a record
    assert tuner._same_kernel_as_measured(dict(default))
    assert config_key(default) in tuner.seen and config_key(default) in tuner._duplicates
    assert tuner.db.records(tuner.task.workload_key, tuner.db_target) == []


def test_a_batch_of_duplicates_does_not_end_a_task(tmp_path, monkeypatch):
    """A batch whose candidates were all skipped as kernels already measured measured
    nothing, yet the task's space is not exhausted: the scheduler goes on with it."""
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    task = Task.from_op("matmul", [5, 7, 3])
    calls = []
    original = TaskTuner._same_kernel_as_measured

    def same(self, config):
        calls.append(1)
        # the first batch: the default, then 3 "duplicates"; the second (2 configs, the
        # rest of the budget): only "duplicates"
        if 2 <= len(calls) <= spread.BATCH + 2:
            self._duplicates.add(config_key(config))
            self.seen.add(config_key(config))
            return True
        return original(self, config)

    monkeypatch.setattr(TaskTuner, "_same_kernel_as_measured", same)
    reports = tune_tasks([(task, 1.0)], "native", trials=3, db=Database(tmp_path / "t.db"),
                         search="random", confirm=None, latencies={task.workload_key: 1e-3})
    assert reports[0].trials == 3


def test_best_is_tuned_says_whether_the_best_is_the_default(tmp_path):
    from kiln.autotune.measure import MeasureResult, MeasureStatus
    tuner = _matmul_tuner(tmp_path)
    default = tuner.space.default_config()
    assert not tuner.best_is_tuned                      # nothing measured
    tuner.commit_result(default, None, MeasureResult(MeasureStatus.OK, (3e-5,)), 0.1)
    assert not tuner.best_is_tuned
    other = spread.local_batch(tuner.space, default, set(), 1, "t")[0]
    tuner.commit_result(other, None, MeasureResult(MeasureStatus.OK, (2e-5,)), 0.1)
    assert tuner.best_is_tuned


def test_the_reserve_is_what_the_tuned_tasks_confirmations_and_checks_need():
    from kiln.autotune.confirm import ConfirmOptions
    # 10 trials in 9 s, of which the worker's round trips took 5 s: 0.5 s per build (the
    # search's propose, the model update and commits are not what a confirmation repeats)
    parts = {"propose": 3.0, "model_update": 1.0, "worker_compile": 3.0, "worker_run": 1.0,
             "worker_lower": 0.5, "ipc": 0.5}
    timer = SimpleNamespace(trials=10, wall=9.0, seconds=parts)
    tuned = SimpleNamespace(best_is_tuned=True, timer=timer)
    plain = SimpleNamespace(best_is_tuned=False,
                            timer=SimpleNamespace(trials=0, wall=0.0, seconds={}))
    confirm = ConfirmOptions(leaders=3)
    assert spread.build_seconds([tuned, plain]) == pytest.approx(0.5)
    assert spread.build_seconds([plain]) == spread.CONFIRM_BUILD_SECONDS
    assert spread.reserve_seconds([plain], confirm, 3.0) == 3.0      # the verdict's check
    assert spread.reserve_seconds([plain], None, 0.0) == 0.0
    # each tuned task: its check (3 s) and its kernel's build for the checks (0.5 s), its
    # confirmation (4 builds and the timing); the verdict (3 s)
    two = spread.reserve_seconds([tuned, tuned, plain], confirm, 3.0)
    assert two == pytest.approx(2 * 3.5 + 3.0 + 2 * (4 * 0.5 + spread.CONFIRM_TIMING_SECONDS))
    assert spread.reserve_seconds([tuned], None, 3.0) == pytest.approx(6.5)
    # measured costs (graph/compile/check_cost.py): a check 1.2 s, the verdict 4 s
    assert spread.reserve_seconds([tuned, tuned, plain], None, 1.2, 4.0) == pytest.approx(7.4)


def test_explore_adds_samples_of_the_whole_space(tmp_path, monkeypatch):
    monkeypatch.setattr(spread, "EXPLORE", 1)
    monkeypatch.setattr(spread, "WARM", 0)
    tuner = _matmul_tuner(tmp_path)
    tuner.local = True
    default = tuner.space.default_config()
    batch = tuner._propose(4)
    mutations = spread.local_batch(tuner.space, default, {config_key(default)}, 2,
                                   f"{config_key(default)}/0")
    assert batch[:3] == [default] + mutations and len(batch) == 4
    assert config_key(batch[3]) not in {config_key(c) for c in batch[:3]}


def test_a_tasks_first_batch_also_samples_the_whole_space(tmp_path, monkeypatch):
    """The short broad warm-up (WARM, off by default): the default, then mutations, then
    WARM whole-space samples; a task with records gets mutations only."""
    monkeypatch.setattr(spread, "WARM", 2)
    tuner = _matmul_tuner(tmp_path)
    tuner.local = True
    default = tuner.space.default_config()
    batch = tuner._propose(4)
    local = 4 - 1 - spread.EXPLORE - spread.WARM
    assert batch[0] == default and len(batch) == 4 and len({config_key(c) for c in batch}) == 4
    assert batch[1:1 + local] == spread.local_batch(
        tuner.space, default, {config_key(default)}, local, f"{config_key(default)}/0")
    neighbours = {config_key(c) for c in tuner.space.mutations(
        default, 200, f"{tuner.space.task.workload_key}/any")}
    broad = batch[1 + local:]
    assert len(broad) == spread.WARM
    # whole-space samples, not (all) neighbours of the default
    assert any(config_key(c) not in neighbours for c in broad)
    tuner.n_records = 4          # as after that batch: mutations of the best only
    later = tuner._propose(4)
    assert later[0] == default    # (not measured here: still first)
    assert later[1:] == spread.local_batch(tuner.space, default, {config_key(default)}, 3,
                                           f"{config_key(default)}/4")


def test_the_first_batchs_samples_are_ranked_by_the_shared_model_once_it_learnt(tmp_path):
    """Before this task has RANK_AFTER candidates of its own, only the first batch's broad
    samples are ranked (by a model trained on other tasks' rows); mutations are not."""
    tuner = _matmul_tuner(tmp_path)
    configs = [tuner.space.sample(random.Random(i)) for i in range(6)]
    tuner.pool = SimpleNamespace(is_trained=True)
    order = [0.1, 0.9, 0.3, 0.8, 0.2, 0.5]
    tuner.search._score = lambda cs: np.array([order[configs.index(c)] for c in cs])
    assert tuner._ranked(configs, 2) == configs[:2]             # no rows of its own yet
    assert tuner._ranked(configs, 2, shared=True) == [configs[1], configs[3]]
    tuner.pool = SimpleNamespace(is_trained=False)
    assert tuner._ranked(configs, 2, shared=True) == configs[:2]   # nothing learnt yet
