"""Confirm a task's tuned schedule before compiles take it: the default and the leading
records timed again side by side (autotune/compare.py), the winner kept as a `Choice`.

Why: on a quiet machine, ten minutes of tuning left a RegNet-like model no faster than its
defaults (benchmarks/RESULTS.md, 2026-11-26 02:45 UTC), although every task's best record had beaten
its default by 1.39x (geomean) in the log. Each record is one measurement taken at its own
moment; the minimum over dozens of them picks a lucky one, and the default, measured first,
read high. Timed again in interleaved rounds, a leader keeps its place only if it beats the
default in the paired median by MARGIN; otherwise the default stays.

With `mutations`, mutations of the task's incumbent (its current choice, else the default)
are timed in the same rounds, and with a deadline the confirmation climbs: pass after pass,
heaviest task first, each task's incumbent against new mutations of itself, until the time is
up or no task improves. On a shared machine this paired, rotated timing is what a kernel's
in-model speed follows (2026-11-26 05:45 UTC: 17 of 21 tasks against 6 of 21 for the tuner's one-off
hot timings); one pass of 8 mutations made a RegNet-like model 13% faster in-model where the
log's records had not (benchmarks/RESULTS.md, 2026-11-26 08:40 UTC). Each compared config's loop
features and paired time over the default's are kept with the choice: the zero-shot model
learns from those (autotune/zero_shot.py).
"""
from __future__ import annotations

import logging
import math
import statistics
import time
from dataclasses import dataclass

from ..codegen.target import Target
from .database import Choice, Database, Record, config_key
from .features import FEATURE_VERSION
from .measure import MeasureStatus, Runner, TaskData
from .search import Featurizer
from .space.rules import SearchSpace
from .task import Task

log = logging.getLogger(__name__)

LEADERS = 3         # records re-timed with the default
ROUNDS = 7          # interleaved rounds
MARGIN = 0.02       # a record must beat the default by 2% (paired median) to be chosen
# confirming a task builds its default and its leaders: about this many seconds on two
# cores; a time budget keeps tasks x this for confirmations, up to SHARE of it
SECONDS_PER_TASK = 2.5
SHARE = 0.15
CLIMB_SHARE = 0.5   # of a time budget, kept for climbing when mutations are compared
PATIENCE = 2        # a task leaves the climb after this many passes without a new winner


@dataclass(frozen=True)
class ConfirmOptions:
    leaders: int = LEADERS
    rounds: int = ROUNDS
    margin: float = MARGIN
    mutations: int = 0      # mutations of the incumbent compared too (0: the leaders only)
    share: float = CLIMB_SHARE     # of a time budget kept for the climb (with mutations)


CONFIRM = ConfirmOptions()      # the default: tuning runs end with a confirmation


def confirm_reserve(time_budget: float, n_tasks: int, options: ConfirmOptions = CONFIRM
                    ) -> float:
    """Seconds of a time budget kept for confirming the tuned tasks at the end (climbing:
    `options.share` of it)."""
    if options.mutations:
        return options.share * time_budget
    return min(SHARE * time_budget, SECONDS_PER_TASK * n_tasks)


def expected_seconds(options: ConfirmOptions) -> float:
    """About how long confirming one task takes before any has been timed."""
    return SECONDS_PER_TASK * (1 + options.leaders + options.mutations) / (1 + LEADERS)


def leading_records(task: Task, target: str, db: Database, space: SearchSpace,
                    k: int) -> list[Record]:
    """The k fastest OK records of `task` measured at the space's thread count (or of
    unknown count) whose configs fit the space and are not the default, fastest first."""
    default_key = config_key(space.default_config())
    out, seen = [], {default_key}
    for record in db.best(task.workload_key, target, k=8 * k + 8, threads=space.threads):
        if record.threads not in (None, space.threads):
            break       # (ranked after every record of this count and of unknown count)
        key = config_key(record.config)
        if key in seen or space.misfit(record.config) is not None:
            continue
        seen.add(key)
        out.append(record)
        if len(out) == k:
            break
    return out


def incumbent_config(task: Task, target: str, db: Database, space: SearchSpace
                     ) -> dict | None:
    """The config of the task's newest confirmation at the space's thread count when it is
    not the default and still fits the space (the base the next climbing pass mutates)."""
    choice = db.choice(task.workload_key, target, space.threads)
    if choice is None or choice.is_default or space.misfit(choice.config) is not None:
        return None
    return choice.config


def climb_mutations(space: SearchSpace, base: dict, n: int, climb_pass: int) -> list[dict]:
    """The mutations of `base` a climbing pass compares (new ones each pass and base)."""
    return space.mutations(base, n, f"{space.task.workload_key}/{config_key(base)}/{climb_pass}")


def confirm_task(task: Task, target: Target, db: Database, runner: Runner,
                 options: ConfirmOptions = CONFIRM,
                 data: TaskData | None = None, climb_pass: int = 0) -> Choice | None:
    """Time the default, the task's incumbent (its current choice), its leading records
    (first pass only) and `options.mutations` mutations of the incumbent (else of the
    default) side by side at the runner's thread count, commit the winner to `db` as a
    Choice (with every compared config's features and paired ratio) and return it; None
    when there is nothing to compare with the default, or the default itself fails."""
    if task.target != str(target):
        task = task.retargeted(target)
    space = SearchSpace(task, runner.threads, target)
    compile_for, target = target, str(target)       # the database spelling, below
    default = space.default_config()
    incumbent = incumbent_config(task, target, db, space)
    groups = [("default", [default]), ("choice", [incumbent] if incumbent else [])]
    if climb_pass == 0:
        groups.append(("record", [r.config for r in
                                  leading_records(task, target, db, space, options.leaders)]))
    if options.mutations:
        groups.append(("mutation", climb_mutations(space, incumbent or default,
                                                   options.mutations, climb_pass)))
    configs, sources, seen = [], [], set()
    for source, group in groups:
        for config in group:
            if config_key(config) not in seen:
                seen.add(config_key(config))
                configs.append(config)
                sources.append(source)
    if len(configs) < 2:
        return None
    results = runner.compare(task, data or TaskData.make(task), configs, compile_for,
                             rounds=options.rounds)
    base_result = results[0]
    if base_result.status is not MeasureStatus.OK:
        log.warning("%s: the default schedule failed its confirmation (%s); the records "
                    "stay as they are", task.name, base_result.status.value)
        return None
    features, lowered = Featurizer(space).matrix(configs)
    rows = []
    for i, (config, result) in enumerate(zip(configs, results)):
        row = {"config": config, "source": sources[i], "status": result.status.value,
               "seconds": None, "ratio": None,
               "features": [round(float(v), 6) for v in features[i]] if lowered[i] else None,
               "feature_version": FEATURE_VERSION}
        if result.status is MeasureStatus.OK:
            row["seconds"] = statistics.median(result.costs)
            row["ratio"] = statistics.median(c / d for c, d in zip(result.costs,
                                                                    base_result.costs))
        rows.append(row)
    rows[0]["ratio"] = 1.0
    winner = min((r for r in rows[1:] if r["ratio"] is not None), key=lambda r: r["ratio"],
                 default=None)
    if winner is None or winner["ratio"] > 1.0 - options.margin:
        winner = rows[0]
    best = db.best(task.workload_key, target, 1, threads=runner.threads)
    choice = Choice(task.workload_key, target, runner.threads, winner["config"],
                    is_default=winner is rows[0], seconds=winner["seconds"],
                    default_seconds=rows[0]["seconds"],
                    best_record_seconds=best[0].mean_cost if best else math.inf,
                    candidates=tuple(rows))
    db.commit_choice(choice)
    log.info("%s: confirmed %s (%.2fx the default's speed; %d configs compared, pass %d)",
             task.name, "the default" if choice.is_default else f"a {winner['source']}",
             choice.speedup, len(configs), climb_pass)
    return choice


def confirm_tasks(tasks: list[tuple[Task, TaskData | None]], target: Target, db: Database,
                  runner: Runner, deadline: float | None = None,
                  options: ConfirmOptions = CONFIRM,
                  expected: float | None = None) -> dict[str, Choice]:
    """confirm_task over the (task, its data or None) pairs in order (put the heaviest
    first), by workload key. With `deadline` (a time.perf_counter() value), a confirmation
    starts only if it should end by then: it is expected to take `expected` seconds
    (default: expected_seconds(options)) until one has been timed, then as long as the
    slowest so far. With mutations and a deadline, passes repeat (the climb) until the
    deadline or until every task has gone PATIENCE passes without a new winner."""
    out: dict[str, Choice] = {}
    longest = 0.0
    expected = expected_seconds(options) if expected is None else expected
    climbing = deadline is not None and options.mutations > 0
    idle = {task.workload_key: 0 for task, _ in tasks}
    climb_pass = 0
    while True:
        for task, data in tasks:
            if idle[task.workload_key] >= PATIENCE:
                continue
            if deadline is not None and time.perf_counter() + (longest or expected) > deadline:
                log.info("confirmation stopped at the deadline in pass %d", climb_pass)
                return out
            start = time.perf_counter()
            before = out.get(task.workload_key)
            choice = confirm_task(task, target, db, runner, options, data, climb_pass)
            if choice is None:
                idle[task.workload_key] = PATIENCE       # nothing to compare: done
                continue
            longest = max(longest, time.perf_counter() - start)
            out[task.workload_key] = choice
            moved = (before is None and not choice.is_default) or (
                before is not None and config_key(before.config) != config_key(choice.config))
            idle[task.workload_key] = 0 if moved else idle[task.workload_key] + 1
        climb_pass += 1
        if not climbing or all(n >= PATIENCE for n in idle.values()):
            return out
