"""The task scheduler: shares a trial budget across the tasks of a model.

After a round-robin warm-up (one batch per task) each next batch goes to the task with the
largest expected gain: its weight (share of model latency: occurrences x best latency) times
its recent relative improvement, or, when that is smaller, 1 / (the task's trials so far): the
gain of a task that stopped improving shrinks as it is measured more, so the budget spreads in
proportion to latency share instead of going to one task. This is the gradient-style
allocation of Ansor's task scheduler (its backward window and its 1/trials forward term) in a
simple form.

With the model-guided search all tasks share one cost model (`CostModelPool`): each task is a
group of its rows, so ranking pairs stay inside a task while every task's measurements shape
the model that proposes the next batch of any task; `transfer` also primes it with the stored
features of earlier runs' tasks on the same target.

With a time budget (`time_budget` seconds) the same allocation spends wall time instead of a
trial count: a task's gain is scaled by weight x best latency, so the tasks where the model's
latency is get the trials. No batch starts after the deadline and a batch stops after the
trial in flight when the deadline passes, so a run ends within the budget plus about one
trial (and one search proposal), counted from when the measurement worker is up (starting
it takes a second, more on a loaded machine); every trial is committed as it is measured,
and a rerun resumes from the database.

When the trials are spent, each tuned task's default and leading records are timed again side
by side and the winner is stored as the task's confirmed choice (autotune/confirm.py), heaviest
task first; with a time budget, part of it is kept for that (confirm.confirm_reserve).
"""
from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field
from typing import Callable

from ..te.errors import KilnError
from .confirm import CONFIRM, ConfirmOptions, confirm_reserve, confirm_tasks
from .cost_model import CostModelPool, XGBCostModel
from .database import Choice, Database
from .measure import MeasureOptions, Runner
from .search import SearchConfig
from .task import Task
from .timing import merge_summaries
from .allocation import expected_gain
from . import spread
from .transfer import load_prior
from ..codegen.target import Target
from .tuner import Progress, TaskTuner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TaskReport:
    task_key: str
    name: str
    weight: float
    trials: int
    best_seconds: float
    timing: dict = field(default_factory=dict, compare=False)   # this task's TrialTimer
    choice: Choice | None = None        # the confirmation made at the end of this run
    # where the task's tuned schedule was tried inside the model after tuning: what that
    # found (a graph.model_check.ModelCheck: the model's time ratio, kept or not)
    in_model: object | None = None


def tune_tasks(tasks_with_weights: list[tuple[Task, float]], target: str | Target,
               trials: int | None,
               db: Database, search: str = "xgb", batch_size: int = 8, seed: int = 0,
               options: MeasureOptions | None = None,
               callback: Callable[[Progress], None] | None = None,
               share_model: bool = True, transfer: bool = True,
               time_budget: float | None = None,
               confirm: ConfirmOptions | None = CONFIRM, cluster=None,
               latencies: dict[str, float] | None = None,
               check_seconds: float = 0.0,
               verdict_seconds: float | None = None) -> list[TaskReport]:
    """Tune the tasks until the database holds `trials` records of them in total at the
    measurement's thread count (records already there count, so a rerun resumes, as in
    tune_task), or until `time_budget` seconds have passed, whichever comes first (None: no
    such limit; one of the two is required); one report per task.

    `share_model`: one cost model trained on every task's rows (model-guided search only);
    `transfer`: start it from the stored features of earlier tasks on `target`; `confirm`:
    time each task's default and leading records again side by side at the end and store
    the winner (autotune/confirm.py; None: don't); `cluster`: measure on the `kiln
    worker`s of a Dask scheduler (autotune/cluster/runner.py) instead of here.
    `latencies` (workload key -> the task's seconds in the model, all occurrences): spend
    the budget by measured spread instead (autotune/spread.py): no warm-up, heaviest first,
    batches of at most spread.BATCH around each task's best, stalled tasks left; what it
    keeps of a time budget for confirming is then what the tasks tuned so far need
    (spread.reserve_seconds), plus `check_seconds` per tuned task and `verdict_seconds` (None:
    one check's) for the caller's in-model check after this returns (tune_model), instead of
    a fixed share."""
    if trials is None and time_budget is None:
        raise KilnError("tune_tasks needs a trial budget (trials=) or a time budget "
                        "(time_budget= seconds), or both")
    if time_budget is not None and not time_budget > 0:
        raise KilnError(f"time_budget={time_budget!r}: give a number of seconds > 0")
    if trials is None:
        trials = math.inf
    target = Target.from_string(target)     # a public entry point: parsed once, here
    pool = None
    if search == "xgb" and share_model:
        pool = CostModelPool(XGBCostModel(seed=seed))
        if transfer:
            # tasks of this run that have records get their live rows when their tuner starts
            load_prior(pool, db, str(target))
    runner = Runner(options or MeasureOptions())
    tuners = [TaskTuner(task, target, db, search, runner,
                        SearchConfig(batch_size=batch_size, seed=seed), pool=pool,
                        transfer=transfer, share_features=cluster is None)
              for task, _ in tasks_with_weights]
    weights = [float(w) for _, w in tasks_with_weights]
    if cluster is not None:
        from .cluster.runner import tune_on_cluster
        outcome = tune_on_cluster(tuners, weights, trials, db, cluster, runner.options,
                                  batch_size, callback, time_budget, confirm)
        return [TaskReport(t.task.workload_key, t.task.name, w, t.n_records, t.best_seconds,
                           t.timer.summary(), outcome.choices.get(t.task.workload_key))
                for t, w in zip(tuners, weights)]
    histories: list[list[float]] = [[t.best_seconds] for t in tuners]
    spent = sum(t.n_records for t in tuners)
    pending = [i for i, t in enumerate(tuners) if t.n_records == 0]  # round-robin warm-up
    if latencies is not None:
        pending, batch_size = [], min(batch_size, spread.BATCH)
        for t in tuners:
            t.local = True
    exhausted: set[int] = set()
    choices: dict[str, Choice] = {}
    end = None
    try:
        if time_budget is not None:
            runner.start()      # the budget is tuning time: it starts once the worker is up
        start = time.perf_counter()
        end = None if time_budget is None else start + time_budget
        deadline = end
        if end is not None and confirm is not None:
            deadline = end - confirm_reserve(time_budget, len(tuners), confirm)
        if end is not None and latencies is not None:
            deadline = end - spread.reserve_seconds(tuners, confirm, check_seconds,
                                                    verdict_seconds)
        while spent < trials and (deadline is None or time.perf_counter() < deadline):
            if pending:
                index = pending.pop(0)
            else:
                # an exhausted task is never picked again, even one with no working
                # schedule (its gain would be infinite and the loop would spin on it)
                active = [i for i in range(len(tuners)) if i not in exhausted]
                if not active:
                    break
                if latencies is not None:
                    gains = {i: spread.tuner_gain(tuners[i], latencies.get(
                        tuners[i].task.workload_key, 0.0), histories[i]) for i in active}
                else:
                    gains = {i: expected_gain(tuners[i], weights[i], histories[i], window=3)
                             for i in active}
                index = max(active, key=lambda i: gains[i])
            n = int(min(batch_size, trials - spent))
            # the progress bar's total: the trial budget, or with a time budget alone the
            # trials after this batch
            total = trials if math.isfinite(trials) else spent + n
            skipped = tuners[index].skipped
            got = tuners[index].step(n, callback, (spent, total, start) if callback else None,
                                     deadline=deadline)
            spent += got
            histories[index].append(tuners[index].best_seconds)
            if end is not None and latencies is not None:       # what the tuned tasks need
                deadline = end - spread.reserve_seconds(tuners, confirm, check_seconds,
                                                        verdict_seconds)
            if got == 0 and tuners[index].skipped == skipped and \
                    not (deadline is not None and time.perf_counter() >= deadline):
                log.info("%s: space exhausted", tuners[index].task.name)
                exhausted.add(index)
                if len(exhausted) == len(tuners):
                    break
        if confirm is not None:
            heaviness = ((lambda i: latencies.get(tuners[i].task.workload_key, 0.0))
                         if latencies is not None else
                         (lambda i: weights[i] * _finite(tuners[i].best_seconds)))
            order = sorted(range(len(tuners)), reverse=True, key=heaviness)
            if latencies is not None:
                # a short budget confirms only tasks whose best so far is not their default
                # (a confirmation builds the default and 3 leaders: seconds each)
                order = [i for i in order if tuners[i].best_is_tuned]
            confirm_end = end
            if end is not None and latencies is not None:      # the in-model check's time
                confirm_end = end - spread.reserve_seconds(tuners, None, check_seconds,
                                                           verdict_seconds)
            choices = confirm_tasks([(tuners[i].task, tuners[i].data) for i in order],
                                    target, db, runner,
                                    deadline=confirm_end, options=confirm)
    except KeyboardInterrupt:
        log.warning("task scheduler interrupted after %d trials; records are kept", spent)
    finally:
        runner.close()
        for t in tuners:
            t.claims.release_all()
    timing = merge_summaries([t.timer for t in tuners])
    log.info("task scheduler: %d trials, %.1f candidates/min, %.0f%% overhead",
             timing["trials"], timing["candidates_per_minute"], 100 * timing["overhead_share"])
    return [TaskReport(t.task.workload_key, t.task.name, w, t.n_records, t.best_seconds,
                       t.timer.summary(), choices.get(t.task.workload_key))
            for t, w in zip(tuners, weights)]


def _finite(seconds: float) -> float:
    return seconds if math.isfinite(seconds) else 0.0
