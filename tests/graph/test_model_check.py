"""Tuned choices tried against their defaults inside the compiled model
(graph/compile/model_check.py)."""
from __future__ import annotations

import math
import random
import time
from types import SimpleNamespace

import numpy as np
import pytest

from kiln.autotune.database import Choice, Database, Record
from kiln.autotune.dispatch import canonical_target
from kiln.autotune.space.rules import SearchSpace
from kiln.codegen.target import Target
from kiln.graph.compile import model_check
from kiln.graph import models
from kiln.graph.compile.model import compile_model, model_tasks

TARGET = canonical_target("native")      # the database spelling
TGT = Target.from_string(TARGET)        # what the functions take


def _spin(seconds: float):
    """Work for `seconds` of this thread's CPU time (the clock the test times by, so a
    loaded machine's time slices do not count)."""
    def run():
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass
    return run


def test_paired_ratio_reads_the_ratio_of_two_workloads():
    ratio = model_check.paired_ratio(_spin(0.002), _spin(0.001), 3, time.thread_time)
    assert 1.6 < ratio < 2.5, ratio
    assert 0.8 < model_check.paired_ratio(_spin(0.001), _spin(0.001), 3, time.thread_time) < 1.25


def _model_with_choices(tmp_path, n: int):
    """A small MLP and a database whose n heaviest tasks have a confirmed non-default choice
    (a sampled config) with kernel-alone rows."""
    model = models.mlp(sizes=(48, 32, 16, 10))
    tasks = sorted(model_tasks(model, TARGET), key=lambda mt: -mt.weight * mt.task.flops)
    db = Database(tmp_path / "kiln.db")
    chosen = {}
    for mt in tasks[:n]:
        space = SearchSpace(mt.task.retargeted(TARGET), 1)
        default = space.default_config()
        config = next(c for c in (space.sample(random.Random(s)) for s in range(50))
                      if c != default)
        rows = ({"config": default, "source": "default", "ratio": 1.0},
                {"config": config, "source": "record", "ratio": 0.9})
        db.commit_choice(Choice(mt.task.workload_key, TARGET, 1, config, False, 0.9e-5, 1e-5,
                                math.inf, rows))
        chosen[mt.task.workload_key] = (config, default)
    return model, tasks, db, chosen


@pytest.mark.parametrize("ratio,kept", [(0.9, True), (1.05, False)])
def test_a_choice_stays_only_if_the_model_runs_faster_with_it(tmp_path, monkeypatch, ratio,
                                                              kept):
    model, tasks, db, chosen = _model_with_choices(tmp_path, 2)
    compiles = []

    def compile_now():
        compiles.append(1)
        return compile_model(model, TARGET, db, threads=1, cache_model=False)

    seen = []

    def fake_ratio(run_a, run_b, rounds, clock):
        a, b = run_a(), run_b()             # the model as it stands, then the reverted one
        np.testing.assert_allclose(a[0], b[0], rtol=1e-4, atol=1e-4)
        seen.append(rounds)
        return ratio

    monkeypatch.setattr(model_check, "paired_ratio", fake_ratio)
    found = model_check.check_choices_in_model(compile_now, tasks, TGT, db, threads=1)
    assert [c.task_key for c in found] == list(chosen)          # heaviest first
    assert all(c.kept is kept and c.ratio == ratio for c in found)
    assert len(compiles) == 1 + len(chosen)
    for key, (config, default) in chosen.items():
        choice = db.choice(key, TARGET, 1)
        assert choice.is_default is not kept
        assert choice.config == (config if kept else default)
        assert len(choice.candidates) == 2          # the kernel-alone labels stay
    # the next compile takes what the check left
    sources = {s.source for s in compile_model(model, TARGET, db, threads=1,
                                               cache_model=False).plan.steps}
    assert ("database" in sources) is kept


@pytest.mark.parametrize("ratio,kept", [(0.9, True), (1.05, False)])
def test_a_best_record_without_a_confirmation_is_checked_too(tmp_path, monkeypatch, ratio,
                                                             kept):
    """A task whose best record compiles take with no confirmation (tuning ran out of time
    before it): kept, it becomes a confirmation naming the record; else one naming the
    default."""
    model = models.mlp(sizes=(48, 32, 16, 10))
    tasks = sorted(model_tasks(model, TARGET), key=lambda mt: -mt.weight * mt.task.flops)
    db = Database(tmp_path / "kiln.db")
    mt = tasks[0]
    space = SearchSpace(mt.task.retargeted(TARGET), 1)
    config = next(c for c in (space.sample(random.Random(s)) for s in range(50))
                  if c != space.default_config())
    db.commit_record(Record(mt.task.workload_key, TARGET, config, (2e-6, 3e-6), "OK",
                            threads=1))
    monkeypatch.setattr(model_check, "paired_ratio", lambda *a: ratio)
    found = model_check.check_choices_in_model(
        lambda: compile_model(model, TARGET, db, threads=1, cache_model=False), tasks, TGT,
        db, 1)
    assert [(c.task_key, c.kept) for c in found] == [(mt.task.workload_key, kept)]
    choice = db.choice(mt.task.workload_key, TARGET, 1)
    assert choice.is_default is not kept
    assert choice.config == (config if kept else space.default_config())
    sources = [s.source for s in compile_model(model, TARGET, db, threads=1,
                                               cache_model=False).plan.steps]
    assert sources.count("database") == (1 if kept else 0)


def test_no_choices_or_no_time_checks_nothing(tmp_path, monkeypatch):
    model, tasks, db, chosen = _model_with_choices(tmp_path, 1)
    monkeypatch.setattr(model_check, "paired_ratio", lambda *a, **k: pytest.fail("timed"))
    compile_now = lambda: compile_model(model, TARGET, db, threads=1,  # noqa: E731
                                        cache_model=False)
    assert model_check.check_choices_in_model(compile_now, tasks, TGT, db, 1,
                                              deadline=time.perf_counter()) == []
    assert not db.choice(next(iter(chosen)), TARGET, 1).is_default
    empty = Database(tmp_path / "empty.db")
    assert model_check.check_choices_in_model(
        lambda: pytest.fail("compiled"), tasks, TGT, empty, 1) == []


def test_a_real_check_reverts_a_choice_that_slows_the_model(tmp_path):
    """A choice that runs the heaviest task's kernel unvectorised and untiled (every tile 1,
    scalar lanes where the space allows) against the default, timed for real."""
    model = models.mlp(sizes=(256, 512, 256, 10))
    tasks = sorted(model_tasks(model, TARGET), key=lambda mt: -mt.weight * mt.task.flops)
    db = Database(tmp_path / "kiln.db")
    mt = tasks[0]
    space = SearchSpace(mt.task.retargeted(TARGET), 1)
    default = space.default_config()
    slow = dict(default)
    for knob in space.knobs:
        if any(part in knob.name for part in ("/tile/", "/vectorize", "/unroll", "/local")):
            least = min(knob.choices, key=lambda c: c[-1] if isinstance(c, (list, tuple)) else c)
            slow[knob.name] = list(least) if isinstance(least, tuple) else least
    assert slow != default and space.misfit(slow) is None
    db.commit_choice(Choice(mt.task.workload_key, TARGET, 1, slow, False, 1e-5, 2e-5, math.inf))
    found = model_check.check_choices_in_model(
        lambda: compile_model(model, TARGET, db, threads=1, cache_model=False), tasks, TGT,
        db, 1, rounds=5)
    assert len(found) == 1 and found[0].ratio > 1.2 and not found[0].kept
    assert db.choice(mt.task.workload_key, TARGET, 1).is_default


def test_tune_model_keeps_a_share_of_its_budget_for_the_check(tmp_path, monkeypatch):
    """tune_model hands the task scheduler (1 - SHARE) of a time budget, then checks inside
    the model by the deadline of the whole budget, and the reports say what it found."""
    from kiln.autotune.scheduler import TaskReport
    from kiln.graph.compile import model as C
    model = models.mlp(sizes=(48, 32, 16, 10))
    tasks = model_tasks(model, TARGET)
    seen = {}

    latencies = {}

    def fake_tune_tasks(pairs, target, trials, db, callback=None, **options):
        seen["budget"] = options["time_budget"]
        seen["check_seconds"] = options.get("check_seconds")
        seen["verdict_seconds"] = options.get("verdict_seconds")
        latencies.update(options["latencies"] or {})
        return [TaskReport(t.workload_key, t.name, w, 0, math.inf) for t, w in pairs]

    def fake_check(compile_now, tasks, target, db, threads, deadline=None,
                   compile_default=None, cost=None):
        seen["deadline"], seen["threads"], seen["cost"] = deadline, threads, cost
        seen["latencies"] = latencies
        return [model_check.ModelCheck(tasks[0].name, tasks[0].task.workload_key, 1.1, False)]

    monkeypatch.setattr(C, "tune_tasks", fake_tune_tasks)
    monkeypatch.setattr(model_check, "check_choices_in_model", fake_check)
    start = time.perf_counter()
    reports = C.tune_model(model, trials=None, db=Database(tmp_path / "k.db"), time_budget=100)
    # (the profile of the default-compiled model that gives the tasks' latencies comes
    # out of the budget)
    # (the profile of the default-compiled model that gives the tasks' latencies comes out
    # of the budget; the task scheduler keeps check_seconds per tuned task for the check)
    spent = time.perf_counter() - start
    assert 100 - spent <= seen["budget"] <= 100
    # (what a check and the verdict take was measured, not guessed: a warm compile of this
    # small model and its runs take well under the 3 s guessed for a model's check)
    cost = seen["cost"]
    assert 0 < cost.compile_seconds < model_check.SECONDS_PER_TASK and cost.run_seconds > 0
    assert seen["check_seconds"] == cost.check_seconds()
    assert seen["verdict_seconds"] == cost.verdict_seconds() > cost.check_seconds()
    assert start + 100 <= seen["deadline"] <= time.perf_counter() + 100
    assert set(seen["latencies"]) == {t.task.workload_key for t in tasks}
    assert all(v > 0 for v in seen["latencies"].values())
    checked = [r for r in reports if r.in_model is not None]
    assert [r.task_key for r in checked] == [tasks[0].task.workload_key]
    assert checked[0].in_model.ratio == 1.1 and checked[0].choice is None
    seen.clear()
    start = time.perf_counter()
    C.tune_model(model, trials=None, db=Database(tmp_path / "k.db"), time_budget=100,
                 model_check=False)
    assert set(seen) == {"budget", "check_seconds", "verdict_seconds"}
    assert seen["check_seconds"] == 0.0 and seen["verdict_seconds"] is None
    assert 100 - (time.perf_counter() - start) <= seen["budget"] <= 100
    # without the profile (latencies given as None: the scheduler's own allocation) the
    # check keeps its fixed share
    seen.clear()
    C.tune_model(model, trials=None, db=Database(tmp_path / "k.db"), time_budget=100,
                 latencies=None)
    assert seen["budget"] == pytest.approx(100 * (1 - model_check.SHARE))


def test_a_check_that_fails_leaves_the_choice_standing(tmp_path, monkeypatch):
    model, tasks, db, chosen = _model_with_choices(tmp_path, 1)
    compiles = []

    def compile_now():
        compiles.append(1)
        if len(compiles) > 1:
            raise KeyboardInterrupt
        return compile_model(model, TARGET, db, threads=1, cache_model=False)

    with pytest.raises(KeyboardInterrupt):
        model_check.check_choices_in_model(compile_now, tasks, TGT, db, 1)
    key, (config, _) = next(iter(chosen.items()))
    choice = db.choice(key, TARGET, 1)
    assert not choice.is_default and choice.config == config


class _FakeModel:
    """A compiled model whose run advances a fake clock by `seconds` (the verdict is timed
    by the clock it is given) and returns its outputs."""

    def __init__(self, clock, seconds: float):
        self.clock, self.seconds = clock, seconds

    def run(self, inputs):
        self.clock.now += self.seconds
        return [np.zeros(1)]

    def _example_inputs(self):
        return []


@pytest.mark.parametrize("tuned_seconds,kept", [(0.9e-3, True), (1.02e-3, False)])
def test_the_verdict_keeps_the_choices_only_if_the_whole_model_beats_its_defaults(
        tmp_path, tuned_seconds, kept):
    """After the task-by-task checks, every choice still standing (kept, or not reached
    before the deadline) goes back to its default unless the model with them all runs
    faster than the model on defaults."""
    model, tasks, db, chosen = _model_with_choices(tmp_path, 2)
    clock = type("Clock", (), {"now": 0.0, "__call__": lambda self: self.now})()
    first, second = list(chosen)
    pending = []
    for mt in tasks:
        if mt.task.workload_key in chosen:
            space = SearchSpace(mt.task.retargeted(TARGET), 1)
            pending.append((mt, space, db.choice(mt.task.workload_key, TARGET, 1)))
    checked = [model_check.ModelCheck("a", first, 0.97, True)]     # second: not reached
    out = model_check.whole_model_verdict(lambda: _FakeModel(clock, tuned_seconds),
                                          lambda: _FakeModel(clock, 1e-3), pending, checked,
                                          db, 1, clock)
    assert {c.task_key: c.kept for c in out} == {first: kept, second: kept}
    for key, (config, default) in chosen.items():
        assert db.choice(key, TARGET, 1).config == (config if kept else default)


def test_the_verdict_leaves_reverted_choices_alone(tmp_path):
    model, tasks, db, chosen = _model_with_choices(tmp_path, 1)
    key = next(iter(chosen))
    checked = [model_check.ModelCheck("a", key, 1.05, False)]
    mt = next(mt for mt in tasks if mt.task.workload_key == key)
    pending = [(mt, SearchSpace(mt.task.retargeted(TARGET), 1), db.choice(key, TARGET, 1))]
    out = model_check.whole_model_verdict(lambda: pytest.fail("compiled"),
                                          lambda: pytest.fail("compiled"), pending,
                                          checked, db, 1, time.thread_time)
    assert out == checked


def test_task_latencies_sum_each_tasks_kernels_in_the_profile():
    from kiln.graph.compile.task_latency import task_latencies
    tasks = [SimpleNamespace(name="conv", task=SimpleNamespace(workload_key="k1")),
             SimpleNamespace(name="add", task=SimpleNamespace(workload_key="k2"))]
    rows = [{"kernel": "conv", "ms": 2.0}, {"kernel": "add", "ms": 0.5},
            {"kernel": "conv", "ms": 1.0}, {"kernel": "", "ms": 0.3}]
    compiled = SimpleNamespace(profile=lambda repeat: rows)
    assert task_latencies(compiled, tasks) == pytest.approx({"k1": 3e-3, "k2": 0.5e-3})


def test_a_fresh_instance_runs_the_same_kernels_on_memory_of_its_own():
    model = models.mlp(sizes=(48, 32, 16, 10))
    compiled = compile_model(model, TARGET, None, threads=1, cache_model=False)
    fresh = model_check.fresh_instance(compiled)
    inputs = compiled._example_inputs()
    for a, b in zip(compiled.run(inputs), fresh.run(inputs)):
        np.testing.assert_array_equal(a, b)
    assert fresh.plan is compiled.plan and fresh.kernels == compiled.kernels
    constants = [s.name for s in compiled.plan.buffers if s.kind == "constant"]
    assert constants
    for name in constants:
        old, new = compiled.buffers[name], fresh.buffers[name]
        assert new.ctypes.data != old.ctypes.data and new.ctypes.data % 64 == 0
        np.testing.assert_array_equal(old, new)
    assert fresh.arena.ctypes.data != compiled.arena.ctypes.data
    assert model_check.fresh_instance(None) is None         # not a CompiledModel: as it is


def test_every_check_and_the_verdict_time_fresh_instances(tmp_path, monkeypatch):
    """No instance of the model with the choices is carried from one comparison to the next
    (one that read fast would stay and flatter the verdict): each check times a fresh
    instance, the verdict a fresh compile and VERDICT_PAIRS pairs of instances."""
    model, tasks, db, chosen = _model_with_choices(tmp_path, 2)
    made, compiles = [], []
    real = model_check.fresh_instance

    def spy(compiled):
        out = real(compiled)
        made.append(out)
        return out

    def compile_now():
        compiles.append("now")
        return compile_model(model, TARGET, db, threads=1, cache_model=False)

    def compile_default():
        compiles.append("default")
        return compile_model(model, TARGET, None, threads=1, cache_model=False)

    monkeypatch.setattr(model_check, "fresh_instance", spy)
    # (every check keeps its choice, whatever the timing: the verdict then runs)
    monkeypatch.setattr(model_check, "paired_ratio",
                        lambda a, b, rounds, clock: (a(), b(), 0.9)[2])
    found = model_check.check_choices_in_model(compile_now, tasks, TGT, db, 1, rounds=3,
                                               compile_default=compile_default)
    assert len(found) == 2
    # two checks (one fresh instance each), then the verdict's extra pairs of instances
    assert len(made) == 2 + 2 * (model_check.VERDICT_PAIRS - 1)
    assert len({id(m) for m in made}) == len(made)
    # the first model and one per check, then the verdict compiles both sides afresh
    assert compiles == ["now", "now", "now", "now", "default"]


def test_the_verdict_ratio_is_the_median_over_every_rounds_ratio():
    clock = type("Clock", (), {"now": 0.0, "__call__": lambda self: self.now})()
    ratio = model_check.verdict_ratio(_FakeModel(clock, 0.8e-3), _FakeModel(clock, 1e-3),
                                      clock, rounds=7, pairs=3)
    assert ratio == pytest.approx(0.8)
