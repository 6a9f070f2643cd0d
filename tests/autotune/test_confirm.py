"""Confirmation: the default and the leading records timed again side by side; the winner,
stored as a Choice, outranks the plain minimum of the records until a faster record comes."""
import dataclasses
import json
import pickle
import random
import sqlite3

import pytest
from kiln.autotune.compare import compare_payload
from kiln.autotune.confirm import (ConfirmOptions, climb_mutations, confirm_reserve, confirm_task,
                                   confirm_tasks, leading_records)
from kiln.autotune.database import Choice, Database, Record, config_key
from kiln.autotune.dispatch import (
                                    CONFIRMED_DEFAULT_SOURCE,
                                    DEFAULT_SOURCE,
                                    apply_best,
                                    canonical_target,
                                    select_record,
                                    )
from kiln.autotune.measure import MeasureOptions, MeasureResult, MeasureStatus, Runner, TaskData
from kiln.autotune.scheduler import tune_tasks
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen.target import Target

TARGET = canonical_target("native")      # the database spelling
TGT = Target.from_string(TARGET)        # what the functions take
FAST = MeasureOptions(timeout=30.0, repeat=2, min_repeat_seconds=0.0, threads=1)


def _task():
    return Task.from_op("matmul", (16, 8, 24)).retargeted(TARGET)


def _space(task):
    return SearchSpace(task, 1)


def _other_configs(space, n):
    """n distinct valid configs that are not the default."""
    default = config_key(space.default_config())
    out, rng = {}, random.Random(0)
    for _ in range(1000):
        config = space.sample(rng)
        if config_key(config) != default and space.misfit(config) is None:
            out[config_key(config)] = config
        if len(out) == n:
            break
    assert len(out) == n, "the test task's space is too small"
    return list(out.values())


def _record(task, config, seconds, threads=1):
    return Record(task.workload_key, TARGET, config, (seconds,), "OK", threads=threads)


class FakeRunner:
    """Answers compare() with preset per-round costs by config key (the decision logic
    without timing noise)."""

    threads = 1

    def __init__(self, costs: dict, fallback=None):
        self.costs = costs
        self.fallback = fallback        # the costs of a config not in `costs`
        self.calls = []

    def compare(self, task, data, configs, target, rounds=7, rotate_bytes=None):
        self.calls.append([config_key(c) for c in configs])
        out = []
        for config in configs:
            value = self.costs.get(config_key(config), self.fallback)
            if callable(value):
                value = value(config)
            out.append(MeasureResult(MeasureStatus.OK, tuple(value)) if isinstance(value, list)
                       else MeasureResult(value, error_text="broken"))
        return out


def test_choice_round_trip_and_currency(tmp_path):
    db = Database(tmp_path / "c.db")
    task = _task()
    choice = Choice(task.workload_key, TARGET, 1, {"a": 1}, False, 1e-4, 2e-4, 5e-5,
                    ({"config": {"a": 1}, "seconds": 1e-4},))
    db.commit_choice(choice)
    got = db.choice(task.workload_key, TARGET, 1)
    assert got == dataclasses.replace(choice, candidates=got.candidates)
    assert got.candidates[0]["seconds"] == 1e-4 and got.speedup == pytest.approx(2.0)
    assert db.choice(task.workload_key, TARGET, 2) is None          # another thread count
    assert got.is_current(5e-5) and got.is_current(6e-5) and not got.is_current(4e-5)
    newer = dataclasses.replace(choice, is_default=True, timestamp=choice.timestamp + 1)
    db.commit_choice(newer)
    assert db.choice(task.workload_key, TARGET, 1).is_default        # the newest counts


def test_choices_of_a_base_log_are_read_and_an_old_base_without_them_opens(tmp_path):
    task = _task()
    base = Database(tmp_path / "base.db")
    base.commit_choice(Choice(task.workload_key, TARGET, 1, {"b": 2}, True, 1.0, 1.0, 1.0))
    base.close()
    layered = Database(tmp_path / "user.db", base=tmp_path / "base.db")
    assert layered.choice(task.workload_key, TARGET, 1).config == {"b": 2}
    layered.close()
    old = tmp_path / "old.db"               # a base log from before choices
    Database(old).close()
    layered = Database(tmp_path / "user2.db", base=old)
    assert layered.choice(task.workload_key, TARGET, 1) is None
    assert layered.summary() == []
    # only the user's log has choices: read through
    layered.commit_choice(Choice(task.workload_key, TARGET, 1, {"c": 3}, True, 1.0, 1.0, 1.0))
    assert layered.choice(task.workload_key, TARGET, 1).config == {"c": 3}


def test_opening_a_log_to_read_it_writes_nothing(tmp_path):
    """The choices table is made by the first confirmation, not on open: a log's file
    identity keys cached models, so a reader must leave it unchanged."""
    db = Database(tmp_path / "r.db")
    assert db.choice("k", TARGET, 1) is None and db.summary() == []
    db.close()
    conn = sqlite3.connect(tmp_path / "r.db")
    names = {n for (n,) in conn.execute("SELECT name FROM sqlite_master")}
    conn.close()
    assert "choices" not in names and "records" in names
    # (tests/graph/test_model_cache.py: a compile that reads a log keeps its cache key)


def test_a_confirmed_choice_outranks_the_minimum_until_a_faster_record_comes(tmp_path):
    db = Database(tmp_path / "c.db")
    task = _task()
    space = _space(task)
    lucky, steady = _other_configs(space, 2)
    db.commit_record(_record(task, space.default_config(), 3e-6))
    db.commit_record(_record(task, lucky, 1e-6))        # the minimum: a lucky measurement
    db.commit_record(_record(task, steady, 2e-6))
    assert select_record(task, TGT, db, 1).record.config == lucky
    # the confirmation found the default fastest: compiles take it, and say so
    db.commit_choice(Choice(task.workload_key, TARGET, 1, space.default_config(), True,
                            3e-6, 3e-6, 1e-6))
    selection = select_record(task, TGT, db, 1)
    assert selection.record is None and selection.choice is not None
    _, _, source = apply_best(task, TARGET, db, threads=1)
    assert source == CONFIRMED_DEFAULT_SOURCE
    # a later confirmation picked `steady`
    db.commit_choice(Choice(task.workload_key, TARGET, 1, steady, False, 2e-6, 3e-6, 1e-6,
                            timestamp=2e9))
    selection = select_record(task, TGT, db, 1)
    assert selection.record.config == steady and selection.source(TARGET) == "database"
    # at another thread count the confirmation says nothing
    assert select_record(task, TGT, db, 2).choice is None
    # a record faster than any confirmed makes the choice stale: the minimum again
    faster = _other_configs(space, 3)[2]
    db.commit_record(_record(task, faster, 0.5e-6))
    selection = select_record(task, TGT, db, 1)
    assert selection.choice is None and selection.record.config == faster


def test_a_choice_that_no_longer_fits_the_space_is_ignored(tmp_path):
    db = Database(tmp_path / "c.db")
    task = _task()
    space = _space(task)
    db.commit_record(_record(task, space.default_config(), 1e-6))
    db.commit_choice(Choice(task.workload_key, TARGET, 1, {"no/such_knob": 3}, False,
                            1e-6, 1e-6, 1e-6))
    selection = select_record(task, TGT, db, 1)
    assert selection.choice is None
    assert apply_best(task, TARGET, db, threads=1)[2] == "database"


def test_confirm_keeps_the_default_unless_a_leader_beats_it_by_the_margin(tmp_path):
    db = Database(tmp_path / "c.db")
    task = _task()
    space = _space(task)
    default = space.default_config()
    a, b, c, d = _other_configs(space, 4)
    for config, seconds in ((default, 9e-6), (a, 1e-6), (b, 2e-6), (c, 3e-6), (d, 4e-6)):
        db.commit_record(_record(task, config, seconds))
    assert [r.config for r in leading_records(task, TARGET, db, space, 3)] == [a, b, c]
    data = TaskData.make(task)
    # in the side-by-side rounds, `a` is 1% faster (inside the margin), `b` 10% slower
    runner = FakeRunner({config_key(default): [10.0, 20.0, 10.0],
                         config_key(a): [9.9, 19.8, 9.9], config_key(b): [11.0, 22.0, 11.0],
                         config_key(c): MeasureStatus.WRONG_ANSWER})
    choice = confirm_task(task, TGT, db, runner, ConfirmOptions(leaders=3), data)
    assert runner.calls[0][0] == config_key(default)
    assert choice.is_default and choice.config == default
    assert choice.best_record_seconds == pytest.approx(1e-6)
    assert [row["status"] for row in choice.candidates] == ["OK", "OK", "OK", "WRONG_ANSWER"]
    assert db.choice(task.workload_key, TARGET, 1) == choice
    # now `b` wins every round by 20%: it is chosen, with its paired speedup
    runner = FakeRunner({config_key(default): [10.0, 20.0, 10.0],
                         config_key(a): [11.0, 21.0, 11.0], config_key(b): [8.0, 16.0, 8.0],
                         config_key(c): [10.0, 20.0, 10.0]})
    choice = confirm_task(task, TGT, db, runner, ConfirmOptions(leaders=3), data)
    assert not choice.is_default and choice.config == b
    assert choice.speedup == pytest.approx(1.25)
    assert select_record(task, TGT, db, 1).record.config == b


def test_confirm_does_nothing_without_leaders_or_with_a_broken_default(tmp_path):
    db = Database(tmp_path / "c.db")
    task = _task()
    space = _space(task)
    default = space.default_config()
    runner = FakeRunner({config_key(default): MeasureStatus.RUNTIME_ERROR})
    assert confirm_task(task, TGT, db, runner) is None           # no records at all
    db.commit_record(_record(task, default, 1e-6))
    assert confirm_task(task, TGT, db, runner) is None           # only the default
    other = _other_configs(space, 1)[0]
    db.commit_record(_record(task, other, 1e-6))
    runner.costs[config_key(other)] = [1.0]
    assert confirm_task(task, TGT, db, runner, data=TaskData.make(task)) is None
    assert db.choice(task.workload_key, TARGET, 1) is None
    # a record measured at another thread count is no leader at this one
    db2 = Database(tmp_path / "d.db")
    db2.commit_record(_record(task, other, 1e-6, threads=2))
    assert leading_records(task, TARGET, db2, space, 3) == []


def test_mutations_are_compared_and_every_config_keeps_its_features_and_ratio(tmp_path):
    """With mutations, a task with no leader is confirmed too: the default and the
    mutations (the same ones for the same task) are timed side by side, and each compared
    config's features, source and paired ratio are stored with the choice (the zero-shot
    model's labels). A mutation that wins by the margin is the choice."""
    from kiln.autotune.features import FEATURE_VERSION, N_FEATURES
    db = Database(tmp_path / "c.db")
    task = _task()
    space = _space(task)
    default = space.default_config()
    mutants = climb_mutations(space, default, 4, 0)
    assert len(mutants) == 4 and default not in mutants
    assert mutants == climb_mutations(_space(task), default, 4, 0)
    assert mutants != climb_mutations(space, default, 4, 1)
    runner = FakeRunner({config_key(default): [10.0, 20.0, 10.0],
                         config_key(mutants[2]): [5.0, 10.0, 5.0],
                         config_key(mutants[3]): MeasureStatus.WRONG_ANSWER},
                        fallback=[12.0, 24.0, 12.0])
    assert confirm_task(task, TGT, db, runner, ConfirmOptions(mutations=0),
                        TaskData.make(task)) is None        # nothing to compare with
    choice = confirm_task(task, TGT, db, runner, ConfirmOptions(mutations=4),
                          TaskData.make(task))
    assert runner.calls[-1] == [config_key(c) for c in [default, *mutants]]
    assert not choice.is_default and choice.config == mutants[2]
    assert choice.speedup == pytest.approx(2.0)
    assert choice.best_record_seconds == float("inf")
    rows = db.choice(task.workload_key, TARGET, 1).candidates
    assert [r["source"] for r in rows] == ["default"] + ["mutation"] * 4
    assert [r["ratio"] for r in rows] == pytest.approx([1.0, 1.2, 1.2, 0.5, None])
    assert all(len(r["features"]) == N_FEATURES and r["feature_version"] == FEATURE_VERSION
               for r in rows)
    assert rows[0]["features"] != rows[1]["features"]
    assert db.latest_choices([TARGET]) == [db.choice(task.workload_key, TARGET, 1)]
    # the task has no record: the confirmed mutation is what compiles take, until a record
    assert select_record(task, TGT, db, 1).record.config == mutants[2]
    db.commit_record(_record(task, mutants[0], 1e-6))
    assert select_record(task, TGT, db, 1).record.config == mutants[0]


def test_the_climb_mutates_its_incumbent_until_no_task_improves(tmp_path):
    """With mutations and a deadline, passes repeat: each compares the default, the
    incumbent (the last winner) and new mutations of it; the winner's time never rises;
    leaders come in the first pass only; the climb ends when every task has gone PATIENCE
    passes without a new winner, or at the deadline."""
    import time
    import zlib
    from kiln.autotune.confirm import PATIENCE
    db = Database(tmp_path / "c.db")
    task = _task()
    space = _space(task)
    default = space.default_config()
    leader = _other_configs(space, 1)[0]
    db.commit_record(_record(task, leader, 1e-6))

    def cost(config):       # a fixed made-up landscape: the default is slow
        if config_key(config) == config_key(default):
            return [10.0] * 3
        return [5.0 + zlib.crc32(config_key(config).encode()) % 1000 / 100.0] * 3

    runner = FakeRunner({}, fallback=cost)
    options = ConfirmOptions(leaders=1, mutations=3)
    choices = confirm_tasks([(task, TaskData.make(task))], TGT, db, runner,
                            deadline=time.perf_counter() + 600, options=options)
    calls = runner.calls
    assert len(calls) >= PATIENCE + 1
    assert config_key(leader) in calls[0] and all(config_key(leader) not in c
                                                  for c in calls[1:] if c[1] != config_key(leader))
    assert all(c[0] == config_key(default) for c in calls)
    history = [row for row in db._db.query("SELECT config, seconds FROM choices ORDER BY id")]
    assert len(history) == len(calls)
    seconds = [h["seconds"] for h in history]
    assert seconds == sorted(seconds, reverse=True)                 # never worse
    for before, call in zip(history, calls[1:]):
        assert call[1] == config_key(json.loads(before["config"]))  # the incumbent goes on
    assert seconds[-PATIENCE:] == [seconds[-1]] * PATIENCE          # stopped after no gain
    assert choices[task.workload_key].seconds == seconds[-1]
    # no deadline: one pass; a deadline already passed: none
    runner.calls = []
    confirm_tasks([(task, None)], TGT, db, runner, options=options)
    assert len(runner.calls) == 1
    assert confirm_tasks([(task, None)], TGT, db, runner, deadline=time.perf_counter(),
                         options=options) == {}


def test_side_by_side_timing_builds_checks_and_times_every_config():
    task = _task()
    space = _space(task)
    default = space.default_config()
    other = _other_configs(space, 1)[0]
    bad = dict(default, **{"no/such_knob": 1})
    data = TaskData.make(task)
    payload = {"task": pickle.dumps(task), "inputs": data.inputs,
               "expected": data.expected, "configs": [default, bad, other],
               "target": TARGET, "options": FAST, "rounds": 3, "rotate_bytes": 1 << 16}
    results = compare_payload(payload)
    assert [r.status for r in results] == [MeasureStatus.OK, MeasureStatus.INVALID_CONFIG,
                                           MeasureStatus.OK]
    assert all(len(r.costs) == 3 and min(r.costs) > 0 for r in (results[0], results[2]))


@pytest.mark.slow
def test_tuning_ends_with_a_confirmation_that_compiles_follow(tmp_path):
    db = Database(tmp_path / "t.db")
    task = Task.from_op("matmul", (16, 8, 24))
    with Runner(FAST) as runner:
        assert runner.compare(task.retargeted(TARGET), TaskData.make(task),
                              [_space(task.retargeted(TARGET)).default_config()], TARGET,
                              rounds=2)[0].status is MeasureStatus.OK
    reports = tune_tasks([(task, 1.0)], "native", trials=6, db=db, search="random",
                         batch_size=3, options=FAST)
    choice = reports[0].choice
    assert choice is not None and choice.threads == 1
    assert db.choice(reports[0].task_key, TARGET, 1) == choice
    selection = select_record(task, TGT, db, 1)
    assert selection.choice == choice
    assert (selection.record is None) == choice.is_default
    assert apply_best(task, TARGET, db, threads=1)[2] in ("database", CONFIRMED_DEFAULT_SOURCE)
    # without confirmation nothing is stored and the minimum decides
    db2 = Database(tmp_path / "u.db")
    reports = tune_tasks([(task, 1.0)], "native", trials=3, db=db2, search="random",
                         batch_size=3, options=FAST, confirm=None)
    assert reports[0].choice is None and db2.choice(reports[0].task_key, TARGET, 1) is None
    assert apply_best(task, TARGET, db2, threads=1)[2] in ("database", DEFAULT_SOURCE)


def test_the_reserve_for_confirmations_is_a_bounded_share_of_the_budget():
    assert confirm_reserve(600.0, 25) == pytest.approx(62.5)
    assert confirm_reserve(60.0, 25) == pytest.approx(9.0)
    assert confirm_reserve(600.0, 0) == 0.0
