"""Confirm a task's tuned schedule before compiles take it: the default and the leading
records timed again side by side (autotune/compare.py), the winner kept as a `Choice`.

Why: on a quiet machine, ten minutes of tuning left a RegNet-like model no faster than its
defaults (benchmarks/RESULTS.md, session 11), although every task's best record had beaten
its default by 1.39x (geomean) in the log. Each record is one measurement taken at its own
moment; the minimum over dozens of them picks a lucky one, and the default, measured first,
read high. Timed again in interleaved rounds, a leader keeps its place only if it beats the
default in the paired median by MARGIN; otherwise the default stays.
"""
from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

from .database import Choice, Database, Record, config_key
from .dispatch import canonical_target
from .measure import MeasureStatus, Runner, TaskData
from .space import SearchSpace
from .task import Task

log = logging.getLogger(__name__)

LEADERS = 3         # records re-timed with the default
ROUNDS = 7          # interleaved rounds
MARGIN = 0.02       # a record must beat the default by 2% (paired median) to be chosen
# confirming a task builds its default and its leaders: about this many seconds on two
# cores; a time budget keeps tasks x this for confirmations, up to SHARE of it
SECONDS_PER_TASK = 2.5
SHARE = 0.15


@dataclass(frozen=True)
class ConfirmOptions:
    leaders: int = LEADERS
    rounds: int = ROUNDS
    margin: float = MARGIN


CONFIRM = ConfirmOptions()      # the default: tuning runs end with a confirmation


def confirm_reserve(time_budget: float, n_tasks: int) -> float:
    """Seconds of a time budget kept for confirming the tuned tasks at the end."""
    return min(SHARE * time_budget, SECONDS_PER_TASK * n_tasks)


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


def confirm_task(task: Task, target: str, db: Database, runner: Runner,
                 options: ConfirmOptions = CONFIRM,
                 data: TaskData | None = None) -> Choice | None:
    """Time the default and the leading records of `task` side by side at the runner's
    thread count, commit the winner to `db` as a Choice and return it; None when the task
    has no record other than the default (nothing to confirm) or the default itself fails."""
    target = canonical_target(target)
    if task.target != target:
        task = task.retargeted(target)
    space = SearchSpace(task, runner.threads)
    leaders = leading_records(task, target, db, space, options.leaders)
    if not leaders:
        return None
    best = db.best(task.workload_key, target, 1, threads=runner.threads)
    configs = [space.default_config()] + [r.config for r in leaders]
    results = runner.compare(task, data or TaskData.make(task), configs, target,
                             rounds=options.rounds)
    default = results[0]
    if default.status is not MeasureStatus.OK:
        log.warning("%s: the default schedule failed its confirmation (%s); the records "
                    "stay as they are", task.name, default.status.value)
        return None
    rows = [{"config": configs[0], "status": "OK", "seconds": statistics.median(default.costs),
             "ratio": 1.0}]
    for config, result in zip(configs[1:], results[1:]):
        row = {"config": config, "status": result.status.value, "seconds": None,
               "ratio": None}
        if result.status is MeasureStatus.OK:
            row["seconds"] = statistics.median(result.costs)
            row["ratio"] = statistics.median(c / d for c, d in zip(result.costs,
                                                                    default.costs))
        rows.append(row)
    winner = min((r for r in rows[1:] if r["ratio"] is not None), key=lambda r: r["ratio"],
                 default=None)
    if winner is None or winner["ratio"] > 1.0 - options.margin:
        winner = rows[0]
    choice = Choice(task.workload_key, target, runner.threads, winner["config"],
                    is_default=winner is rows[0], seconds=winner["seconds"],
                    default_seconds=rows[0]["seconds"],
                    best_record_seconds=best[0].mean_cost, candidates=tuple(rows))
    db.commit_choice(choice)
    log.info("%s: confirmed %s (%.2fx the default's speed, %d leaders re-timed)", task.name,
             "the default" if choice.is_default else "a tuned record", choice.speedup,
             len(leaders))
    return choice


def confirm_tasks(tasks: list[tuple[Task, TaskData | None]], target: str, db: Database,
                  runner: Runner, deadline: float | None = None,
                  options: ConfirmOptions = CONFIRM,
                  expected_seconds: float = SECONDS_PER_TASK) -> dict[str, Choice]:
    """confirm_task over the (task, its data or None) pairs in order (put the heaviest
    first), by workload key. With `deadline` (a time.perf_counter() value), a confirmation
    starts only if it should end by then: it is expected to take `expected_seconds` until
    one has been timed, then as long as the slowest so far."""
    out = {}
    longest = 0.0
    for done, (task, data) in enumerate(tasks):
        if deadline is not None and time.perf_counter() + (longest or expected_seconds) > deadline:
            log.info("confirmation stopped at the deadline: %d of %d tasks done", done,
                     len(tasks))
            break
        start = time.perf_counter()
        choice = confirm_task(task, target, db, runner, options, data)
        if choice is not None:
            longest = max(longest, time.perf_counter() - start)
            out[task.workload_key] = choice
    return out
