"""Keep a task's tuned choice only where the whole model runs faster with it.

Why: a confirmation (autotune/confirm.py) times each kernel alone, in a worker, its data hot
in cache. Inside the model the kernel meets its neighbours' data and a colder cache. On a
quiet znver3 (benchmarks/RESULTS.md, 2026-11-26 11:40 UTC) ten minutes of tuning a RegNet-like model
confirmed 10 choices that each beat their default alone, and the model ran 7% slower with
them than with its defaults.

So after tuning, each task whose schedule is not its default (a confirmed choice, or a best
record compiles take without one), heaviest task first, is tried against its default inside
the compiled model: the model compiled with the choice and
the model compiled with the default (kernels come from the kernel cache but the one that
differs) are timed in interleaved rounds, and the default comes back as the task's choice
unless the choice makes the model faster. Reverting commits a new confirmation that names
the default (with the kernel-alone rows of the one it replaces, which stay the zero-shot
model's labels); keeping it changes nothing.

Every comparison times fresh instances (fresh_instance: new buffers, a new copy of the
weights) of both sides. An instance's speed depends a little on where its memory landed, and
the checks used to carry the model with the choices from one check to the next, replacing it
only when a choice was reverted: an instance that read slow was swapped out and one that read
fast stayed, so the instance left at the end was a lucky one, and the whole-model verdict,
timed on it, read 3-9% faster than an independent A/B of the same kernels (RESULTS.md).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import statistics
import time
from dataclasses import dataclass
from typing import Callable

from ...autotune.database import Choice, Database, config_key
from ...autotune.dispatch import Selection, select_record
from ...autotune.space.rules import SearchSpace
from ...codegen.target import Target
from ..runtime.executor import CompiledModel

log = logging.getLogger(__name__)

ROUNDS = 9              # interleaved rounds of the two models
SAMPLES = 3             # timed samples of each model per round (their median counts)
SAMPLE_SECONDS = 0.01   # a sample runs the model this long at least
MARGIN = 0.0            # the choice stays if the model with it takes < (1 - MARGIN) x
SHARE = 0.15            # of a time budget, kept for this check (tune_model)
VERDICT_ROUNDS = 15     # paired rounds of the whole verdict (every choice against none) ...
VERDICT_PAIRS = 3       # ... split over this many pairs of fresh instances
SECONDS_PER_TASK = 3.0  # a check of one task on two cores (a compile and the rounds), before
                        # one has been timed


@dataclass(frozen=True)
class ModelCheck:
    """One task's choice tried inside the model."""
    task: str               # the task's name
    task_key: str
    ratio: float            # model time with the choice over with the default (paired median)
    kept: bool              # the choice stays (else the default is the task's choice again)


def fresh_instance(model):
    """A new CompiledModel over the same plan and kernels, with buffers and a copy of the
    weights of its own (placed anew, aligned); anything else comes back as it is."""
    if not isinstance(model, CompiledModel):
        return model
    constants = {spec.name: model.buffers[spec.name].copy() for spec in model.plan.buffers
                 if spec.kind == "constant"}
    out = CompiledModel(model.plan, model.kernels, constants)
    out.set_num_threads(model.plan.meta.get("threads", 1))
    return out


def paired_ratio(run_a: Callable[[], object], run_b: Callable[[], object],
                 rounds: int = ROUNDS, clock: Callable[[], float] = time.perf_counter) -> float:
    """Median over `rounds` of (a's time / b's time) (paired_ratios)."""
    return statistics.median(paired_ratios(run_a, run_b, rounds, clock))


def paired_ratios(run_a: Callable[[], object], run_b: Callable[[], object],
                  rounds: int = ROUNDS, clock: Callable[[], float] = time.perf_counter,
                  first_round: int = 0) -> list[float]:
    """(a's time / b's time) of each of `rounds` rounds, a and b timed back to back in each
    round (which goes first alternates: a in even rounds, counted from `first_round`), each
    as the median of SAMPLES samples of enough runs to last SAMPLE_SECONDS: both sides of a
    ratio see the same machine load."""
    run_a(), run_b()                                   # warm-up: page faults, caches
    start = clock()
    run_a()
    runs = max(1, math.ceil(SAMPLE_SECONDS / max(clock() - start, 1e-7)))

    def sample(fn) -> float:
        times = []
        for _ in range(SAMPLES):
            start = clock()
            for _ in range(runs):
                fn()
            times.append((clock() - start) / runs)
        return statistics.median(times)

    ratios = []
    for r in range(first_round, first_round + rounds):
        if r % 2 == 0:
            a = sample(run_a)
            b = sample(run_b)
        else:
            b = sample(run_b)
            a = sample(run_a)
        ratios.append(a / b)
    return ratios


def model_clock(threads: int) -> Callable[[], float]:
    """At one thread the model runs on the calling thread: its CPU time leaves out other
    processes' slices on a shared machine (as the measurement workers' kernel_clock does)."""
    return time.thread_time if threads == 1 else time.perf_counter


def _standing_choice(task_key: str, target: str, threads: int, selection: Selection,
                     db: Database) -> Choice:
    """The selection as a confirmation: its own, or (a task whose best record compiles
    take without one, e.g. tuning ran out of time before confirming it) one naming that
    record, with no rows and the record's time as both the winner's and the default's."""
    if selection.choice is not None:
        return selection.choice
    seconds = selection.record.mean_cost
    best = db.best(task_key, target, 1, threads=threads)
    return Choice(task_key, target, threads, selection.record.config, False, seconds, seconds,
                  min(seconds, best[0].mean_cost) if best else seconds)


def _default_choice(choice: Choice, default_config: dict) -> Choice:
    """A new confirmation naming the default in place of `choice` (its kernel-alone rows kept)."""
    return dataclasses.replace(choice, config=default_config, is_default=True,
                               seconds=choice.default_seconds, timestamp=time.time())


def check_choices_in_model(compile_now: Callable[[], object], tasks, target: Target,
                           db: Database, threads: int, deadline: float | None = None,
                           rounds: int = ROUNDS,
                           compile_default: Callable[[], object] | None = None,
                           cost=None) -> list[ModelCheck]:
    """Try each task's non-default schedule (a confirmed choice or a best record) against
    its default inside the model (see the module docstring), heaviest task first; `tasks`:
    the model's ModelTasks,
    `compile_now()`: the model compiled with `db` as it stands, at `threads`. With
    `deadline` (a time.perf_counter() value), a check starts only if it should end by then
    (it takes as long as the slowest so far). With `compile_default()` (the model on default
    schedules only), the checks end with the whole verdict (`whole_model_verdict`): time is
    kept for it, and every choice still standing goes back to its default unless the model
    with them all beats the defaults. `cost` (check_cost.CheckCost, measured before tuning)
    says how long a check and the verdict take until one check has been timed (else
    SECONDS_PER_TASK each). Returns what each check found."""
    order = sorted(tasks, key=lambda mt: -mt.weight * mt.task.flops)
    pending = []
    for mt in order:
        task = mt.task.retargeted(target)
        space = SearchSpace(task, threads, target)
        selection = select_record(task, target, db, threads, space=space)
        # (a best record that is the default schedule itself has nothing to check)
        if selection.record is not None and \
                config_key(selection.record.config) != config_key(space.default_config()):
            pending.append((mt, space, _standing_choice(task.workload_key, str(target), threads,
                                                        selection, db)))
    if not pending:
        return []
    clock = model_clock(threads)
    current = compile_now()
    inputs = current._example_inputs()
    results, longest = [], 0.0
    stop = deadline
    if deadline is not None and compile_default is not None:
        stop = deadline - (cost.verdict_seconds() if cost is not None else
                           VERDICT_ROUNDS / rounds * SECONDS_PER_TASK)
    for mt, space, choice in pending:
        expected = longest or (cost.check_seconds(rounds) if cost is not None else
                               SECONDS_PER_TASK)
        if stop is not None and time.perf_counter() + expected > stop:
            log.info("in-model check stopped at the deadline (%d of %d tasks checked)",
                     len(results), len(pending))
            break
        start = time.perf_counter()
        db.commit_choice(_default_choice(choice, space.default_config()))
        try:
            reverted = compile_now()
            # (a fresh instance of the model with the choice each time: see the docstring)
            candidate = fresh_instance(current)
            ratio = paired_ratio(lambda: candidate.run(inputs), lambda: reverted.run(inputs),
                                 rounds, clock)
        except BaseException:       # (Ctrl-C too) the choice stands as it was
            db.commit_choice(dataclasses.replace(choice, timestamp=time.time()))
            raise
        kept = ratio < 1.0 - MARGIN
        if kept:
            db.commit_choice(dataclasses.replace(choice, timestamp=time.time()))
        else:
            current = reverted
        results.append(ModelCheck(mt.name, mt.task.workload_key, ratio, kept))
        log.info("%s: the model runs %.3fx as long with its choice as with its default: %s",
                 mt.name, ratio, "kept" if kept else "back to the default")
        longest = max(longest, time.perf_counter() - start)
    if compile_default is not None:
        results = whole_model_verdict(compile_now, compile_default, pending, results, db,
                                      threads, clock)
    return results


def whole_model_verdict(compile_now: Callable[[], object],
                        compile_default: Callable[[], object], pending, results,
                        db: Database, threads: int, clock) -> list[ModelCheck]:
    """The model with every choice still standing (`compile_now()`, compiled afresh, as an
    independent A/B would) against the model on its default schedules, in VERDICT_ROUNDS
    paired rounds over VERDICT_PAIRS pairs of fresh instances (the median of every round's
    ratio: no one instance's placement decides); unless it is faster, each standing
    choice goes back to its default (a task-by-task check decides at the noise level, and
    a budget may end before every choice is checked: this one keeps the sum honest).
    `pending`: (ModelTask, space, choice) of the tasks with a non-default schedule;
    returns `results` with the reverted ones marked not kept (and unchecked ones added)."""
    checked = {r.task_key: r for r in results}
    standing = [(mt, space, choice) for mt, space, choice in pending
                if mt.task.workload_key not in checked or checked[mt.task.workload_key].kept]
    if not standing:
        return results
    ratio = verdict_ratio(compile_now(), compile_default(), clock)
    kept = ratio < 1.0 - MARGIN
    log.info("the model with its %d tuned choices runs %.3fx as long as on its defaults: %s",
             len(standing), ratio, "kept" if kept else "all back to the defaults")
    out = {r.task_key: r for r in results}
    for mt, space, choice in standing:
        key = mt.task.workload_key
        if not kept:
            db.commit_choice(_default_choice(choice, space.default_config()))
        if key in out:
            out[key] = dataclasses.replace(out[key], kept=kept)
        else:
            out[key] = ModelCheck(mt.name, key, ratio, kept)
    return list(out.values())


def verdict_ratio(tuned, default, clock, rounds: int = VERDICT_ROUNDS,
                  pairs: int = VERDICT_PAIRS) -> float:
    """Median over `rounds` paired rounds of tuned time / default time, the rounds split
    over `pairs` pairs of instances: the two given, then fresh_instance of each."""
    inputs = tuned._example_inputs()
    ratios = []
    for i in range(pairs):
        a, b = (tuned, default) if i == 0 else (fresh_instance(tuned), fresh_instance(default))
        share = rounds // pairs + (i < rounds % pairs)
        ratios += paired_ratios(lambda a=a: a.run(inputs), lambda b=b: b.run(inputs), share,
                                clock, first_round=len(ratios))
    return statistics.median(ratios)
