"""The tuning loop: propose a batch, measure it, commit each record at once, refit, repeat.

It resumes from the database (measured configs are `seen` and train the model first), so a
killed run continues where it stopped; stored records that no longer fit the space are left
out. `apply_best`/`build_best` (autotune/dispatch.py, re-exported here) turn the log into a
schedule and always say where the schedule came from.
"""
from __future__ import annotations

import hashlib
import logging
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable

from ..codegen.runtime_config import resolve_threads
from ..codegen.target import Target
from ..schedule.lower import lower
from ..te.errors import KilnError
from .claims import Claims
from .confirm import CONFIRM, ConfirmOptions, confirm_reserve, confirm_task
from .cost_model import CostModelPool, XGBCostModel
from .database import Choice, Database, Record, config_key
from .dispatch import (SIMILAR_CPU_SOURCE, apply_best, build_best,  # noqa: F401 - re-exported
                       canonical_target, upgrade_legacy_records)  # noqa: F401
from .features import FEATURE_VERSION
from .measure import MeasureOptions, MeasureResult, MeasureStatus, Runner, TaskData
from . import spread
from .search import Featurizer, SearchConfig, _random_unseen, make_search
from .space.rules import SearchSpace
from .task import Task
from .timing import TrialTimer
from .transfer import load_prior
from .progress import Progress  # noqa: F401 - kiln.autotune.tuner.Progress, as before
from .measure import candidate_timeout  # noqa: F401 - used below and by callers

log = logging.getLogger(__name__)

SEARCHES = ("xgb", "random", "grid")


SHARE_MIN = 8       # fewer new configs than this are lowered here (a round trip costs more)
class SharedFeaturizer(Featurizer):
    """A Featurizer that hands half of each batch of new configs to the measurement worker,
    which sits idle while the search proposes, and lowers the other half here meanwhile.

    Applying and lowering candidates, not the model, is most of the parent's time per trial
    (the search scores ~20 new configs per measured one); on two cores this halves it. The
    worker applies, lowers and extracts exactly as `Featurizer` does, so the vectors are the
    same; when it cannot answer, the rest is computed here. `seconds` is the wall time.
    """

    def __init__(self, space: SearchSpace,
                 remote: Callable[[list[dict], Callable[[], None]], list | None]):
        super().__init__(space)
        self.remote = remote        # (configs, meanwhile) -> their vectors, or None

    def matrix(self, configs: list[dict]):
        self.prefetch(configs)
        return super().matrix(configs)

    def prefetch(self, configs: list[dict]) -> None:
        """Fill the cache for `configs`, sharing the work with the worker when worth it."""
        misses: dict[str, dict] = {}
        for config in configs:
            key = config_key(config)
            if key not in self.cache:
                misses.setdefault(key, config)
        if len(misses) < SHARE_MIN:
            return
        items = list(misses.items())
        theirs, mine = items[:len(items) // 2], items[len(items) // 2:]

        def meanwhile() -> None:
            for _, config in mine:
                self(config)

        start, before = time.perf_counter(), self.seconds
        vectors = self.remote([config for _, config in theirs], meanwhile)
        if vectors is not None:
            for (key, _), vector in zip(theirs, vectors):
                self.cache[key] = vector
        self.seconds = before + (time.perf_counter() - start)


@dataclass(frozen=True)
class TuneResult:
    task_key: str
    target: str
    best_config: dict | None
    best_seconds: float
    best_gflops: float
    measured: int               # trials measured by this call
    total_trials: int           # records of this task+target in the database afterwards
    interrupted: bool = False
    # where the time went: seconds per trial by part, candidates per minute (TrialTimer)
    timing: dict = field(default_factory=dict, compare=False)
    choice: Choice | None = None    # the confirmation made at the end (autotune/confirm.py)


class TaskTuner:
    """Tuning state of one task on one target at one thread count (the runner's): search,
    seen set, best; resumable.

    A model-guided search trains its cost model in `pool` (pass one to share it between the
    tasks of a run); without one, a pool of its own is made and, with `transfer`, primed with
    the stored features of the other tasks tuned on this target. Every record is committed
    with its feature vector (`store_features`) so later runs can learn from it. With
    `share_features`, the measurement worker lowers half of the search's new candidates
    while the search proposes (SharedFeaturizer).
    """

    def __init__(self, task: Task, target: str | Target, db: Database, search: str = "xgb",
                 runner: Runner | None = None, search_config: SearchConfig | None = None,
                 data_seed: int = 0, pool: CostModelPool | None = None, transfer: bool = True,
                 store_features: bool = True, share_features: bool = True):
        if search not in SEARCHES:
            raise KilnError(f"unknown search {search!r}; choose one of: {', '.join(SEARCHES)}")
        self.target = target = Target.from_string(target)   # exported: parsed once, here
        self.db_target = str(target)        # the database spelling of the target
        self.task = task.retargeted(target)
        self.db = db
        # the state is that of one thread count: a config measured at 1 thread is not yet
        # measured at 2 (records of unknown count, from older logs, count for every one)
        self.threads = runner.threads if runner is not None else resolve_threads(None)
        self.space = SearchSpace(self.task, self.threads, target)   # its default is for that count
        search_config = search_config or SearchConfig()
        if search == "xgb" and pool is None:
            pool = CostModelPool(XGBCostModel(seed=search_config.seed))
            if transfer:
                load_prior(pool, db, self.db_target, exclude_task=self.task.workload_key)
        self.pool = pool if search == "xgb" else None
        self.featurize = None           # the search scores through it; records store its vectors
        if search == "xgb" or store_features:
            self.featurize = (SharedFeaturizer(self.space, self._remote_features)
                              if share_features else Featurizer(self.space))
        self.search = make_search(search, self.space, search_config, pool=self.pool,
                                  featurizer=self.featurize)
        self.store_features = store_features
        self.runner = runner
        self.data_seed = data_seed
        self._data: TaskData | None = None
        self.slowest_ok = 0.0        # round-trip seconds of the slowest working candidate
        self.db.commit_task(self.task.workload_key, self.task.description, self.task.shapes,
                            self.task.flops)
        upgrade_legacy_records(db, self.space)
        past = db.records(self.task.workload_key, self.db_target, threads=self.threads)
        misfits = [r for r in past if self.space.misfit(r.config) is not None]
        if misfits:
            log.warning("%s: %d stored record(s) do not fit today's search space; tuning "
                        "goes on without them (`kiln logs --prune` removes them)",
                        self.task.name, len(misfits))
            past = [r for r in past if r not in misfits]
        self.seen = {config_key(r.config) for r in past}
        self.n_records = len(past)
        # records up to this id are accounted for; later ones by another run are picked up
        # by refresh() (ours are listed in _mine)
        self._last_id = max((r.record_id or 0 for r in past), default=0)
        self._mine: set[int] = set()
        self.claims = Claims(db)
        # the best so far is one measured at this count when there is one (as Database.best
        # ranks them): an untagged record may have run at another count
        ok = [r for r in past if r.status == "OK"]
        self.best: Record | None = min([r for r in ok if r.threads == self.threads] or ok,
                                       key=lambda r: r.mean_cost, default=None)
        # for the short-budget allocation (autotune/spread.py): every candidate's time (inf:
        # failed), the default's, and whether batches are local (mutations of the best)
        self.local = False
        self._explore_rng = random.Random(f"{self.task.workload_key}/explore")
        self._kernels: dict[str, str] = {}     # loop IR digest -> config key, this run
        self._duplicates: set[str] = set()     # config keys skipped as the same kernel
        self.skipped = 0                        # how many (a batch of them is no exhaustion)
        self.costs = [r.mean_cost for r in past]
        self._default_key = config_key(self.space.default_config())
        self.default_seconds = min((r.mean_cost for r in ok
                                    if config_key(r.config) == self._default_key),
                                   default=math.inf)
        if past:
            self._reuse_stored_features()
            self.search.update([r.config for r in past], [r.mean_cost for r in past])
        self.timer = TrialTimer()
        self._fingerprint: dict | None = None

    def _remote_features(self, configs: list[dict], meanwhile: Callable[[], None]):
        """Featurize `configs` in the measurement worker while `meanwhile` runs here."""
        if self.runner is None or self._data is None:     # nothing to measure with yet
            meanwhile()
            return None
        return self.runner.features(self.task, self._data, configs, meanwhile)

    def _reuse_stored_features(self) -> None:
        """Seed the featurizer with the vectors stored for this task's records (same feature
        layout), so resuming a long log does not apply and lower every measured config again
        (10-20 ms each) before the first new trial. The stored vector describes the schedule
        that was measured, which is what the model should learn from."""
        if self.featurize is None:
            return
        stored = self.db.feature_vectors(self.task.workload_key, self.db_target, FEATURE_VERSION)
        for key, vector in stored.items():
            self.featurize.cache.setdefault(key, vector)

    @property
    def data(self) -> TaskData | None:
        """The inputs and reference outputs candidates are checked against (None until the
        first trial makes them)."""
        return self._data

    @property
    def best_is_tuned(self) -> bool:
        """Whether the best record so far is a schedule other than the default."""
        return self.best is not None and config_key(self.best.config) != self._default_key

    @property
    def best_seconds(self) -> float:
        return self.best.mean_cost if self.best else math.inf

    @property
    def best_gflops(self) -> float:
        return self.task.flops / self.best_seconds / 1e9 if self.best else 0.0

    def _propose(self, n: int) -> list[dict]:
        batch = []
        default = self.space.default_config()      # made for self.threads
        if config_key(default) not in self.seen:
            batch.append(default)   # the fallback schedule is always measured first
        taken = self.seen | {config_key(c) for c in batch}
        if self.local:      # the neighbourhood of the best so far (autotune/spread.py)
            base = self.best.config if self.best is not None else default
            first = self.n_records == 0         # a task's first batch also looks broadly
            explore = min(spread.EXPLORE + (spread.WARM if first else 0),
                          max(0, n - len(batch) - 1))
            want = n - len(batch) - explore
            batch += self._ranked(spread.local_batch(
                self.space, base, taken, want * spread.RANK_POOL,
                f"{config_key(base)}/{self.n_records}"), want)
            taken |= {config_key(c) for c in batch}
            # and a sample of the whole space (no lowering but for the ranking; the first
            # batch's by the shared model as soon as it has learnt, from other tasks' rows)
            batch += self._ranked(_random_unseen(self.space, self._explore_rng, taken,
                                                 explore * spread.RANK_POOL), explore,
                                  shared=first)
            if len(batch) == n:
                return batch    # (the search's proposal lowers hundreds of configs)
            taken |= {config_key(c) for c in batch}
        batch += self.search.propose(taken, n - len(batch))
        return batch[:n]

    def _same_kernel_as_measured(self, config: dict) -> bool:
        """Whether `config` lowers to the loop IR of a config measured in this run (a knob
        that changes nothing for this task: 8 of 104 mutations around ConvNeXt-atto's
        heaviest convs' defaults); such a config is marked seen, its claim released, and
        not built. Otherwise its IR is remembered. (Short budgets only: `local`.)"""
        key = config_key(config)
        try:
            sch, args = self.space.apply(config)
            text = str(lower(sch, args, name=self.task.name))
        except KilnError:
            return False        # the worker classifies it
        digest = hashlib.sha256(text.encode()).hexdigest()
        if digest not in self._kernels:
            self._kernels[digest] = key
            return False
        self._duplicates.add(key)
        self.seen.add(key)
        self.claims.release(self.task.workload_key, self.db_target, self.threads, key)
        log.debug("%s: a candidate builds the same kernel as one measured; skipped",
                  self.task.name)
        return True

    def _ranked(self, configs: list[dict], k: int, shared: bool = False) -> list[dict]:
        """The `k` of `configs` the cost model ranks best once it has learnt from
        spread.RANK_AFTER working candidates of this task (before: the first k): a build
        costs seconds, a score microseconds. `shared`: as soon as it has learnt at all
        (from other tasks' rows: a task's first, broad batch)."""
        score = getattr(self.search, "_score", None)
        trained = self.pool is not None and self.pool.is_trained
        if len(configs) <= k or score is None or not trained or \
                (not shared and sum(map(math.isfinite, self.costs)) < spread.RANK_AFTER):
            return configs[:k]
        scores = score(configs)
        order = sorted(range(len(configs)), key=lambda i: -scores[i])
        return [configs[i] for i in sorted(order[:k]) if math.isfinite(scores[i])]

    def refresh(self) -> int:
        """Take in the records another run on this log added since we last looked: they
        count toward the budget, are never proposed again and teach the search; returns
        how many."""
        new = [r for r in self.db.records(self.task.workload_key, self.db_target,
                                          threads=self.threads)
               if (r.record_id or 0) > self._last_id and r.record_id not in self._mine]
        fresh = [r for r in new if config_key(r.config) not in self.seen
                 and self.space.misfit(r.config) is None]
        self._last_id = max([self._last_id] + [r.record_id for r in new])
        for r in fresh:
            self.seen.add(config_key(r.config))
            if r.status == "OK" and r.mean_cost < self.best_seconds:
                self.best = r
        self.n_records += len(fresh)
        self.costs += [r.mean_cost for r in fresh]
        if fresh:
            self.search.update([r.config for r in fresh], [r.mean_cost for r in fresh])
        return len(fresh)

    def propose_claimed(self, n: int) -> list[dict]:
        """Up to `n` new configs, each claimed in the log (autotune/claims.py) so no other
        run measures it too; a config another run holds is marked seen and replaced."""
        out: list[dict] = []
        for _ in range(3):
            batch = self._propose(n - len(out))
            if not batch:
                break
            keys = [config_key(c) for c in batch]
            granted = set(self.claims.take(self.task.workload_key, self.db_target, self.threads,
                                           keys))
            self.seen.update(keys)          # ours are in flight, theirs are another run's
            out += [c for c, k in zip(batch, keys) if k in granted]
            if len(out) >= n:
                break
        return out

    def unclaim(self, config: dict) -> None:
        """Give back a claimed config that was not measured (it may be proposed again)."""
        key = config_key(config)
        self.claims.release(self.task.workload_key, self.db_target, self.threads, key)
        self.seen.discard(key)

    def commit_result(self, config: dict, vector, result: MeasureResult, took: float,
                      worker: str = "local", provenance: dict | None = None) -> Record:
        """Record one measured candidate at once (and release its claim); updates the
        best, the seen set and the timer. Returns the record."""
        self.timer.add_measurement(took, result.phases,
                                   timed_out=result.status is MeasureStatus.TIMEOUT)
        if result.status is MeasureStatus.OK:
            self.slowest_ok = max(self.slowest_ok, took)
        record = Record(self.task.workload_key, self.db_target, config, result.costs,
                        result.status.value, result.error_text, threads=self.threads,
                        worker=worker, provenance=provenance)
        with self.timer.part("db_commit"):     # (the claim goes with the record's commit)
            self.claims.release(self.task.workload_key, self.db_target, self.threads,
                                config_key(config), commit=False)
            self._mine.add(self.db.commit_record(record, vector, FEATURE_VERSION))
        self.seen.add(config_key(config))
        self.n_records += 1
        self.costs.append(record.mean_cost)
        if result.status is MeasureStatus.OK and config_key(config) == self._default_key:
            self.default_seconds = record.mean_cost
        if result.status is MeasureStatus.OK and record.mean_cost < self.best_seconds:
            self.best = record
        if result.status is not MeasureStatus.OK:
            log.info("%s: candidate %s: %s", self.task.name, result.status.value,
                     result.error_text.strip().splitlines()[-1:] or "")
        return record

    def _counters(self) -> dict[str, float]:
        counters = dict(self.search.counters())
        counters["features"] = self.featurize.seconds if self.featurize is not None else 0.0
        return counters

    def step(self, n: int, callback: Callable[[Progress], None] | None = None,
             progress_base: tuple[int, int, float] | None = None,
             deadline: float | None = None) -> int:
        """Measure up to `n` new configs (one batch), committing each; returns how many.
        With `deadline` (a time.perf_counter() value), no trial starts after it: the batch
        stops after the trial in flight."""
        start, before = time.perf_counter(), self._counters()
        costs: list[float] = []
        try:
            self._step(n, costs, callback, progress_base, deadline)
        finally:
            self.timer.add_counters(before, self._counters())
            self.timer.trials += len(costs)
            self.timer.wall += time.perf_counter() - start
        return len(costs)

    def _step(self, n: int, costs: list[float], callback, progress_base,
              deadline: float | None = None) -> None:
        if self.runner is None:
            self.runner = Runner(MeasureOptions(threads=self.threads))
        if self._data is None:
            self._data = TaskData.make(self.task, self.data_seed)
        timer = self.timer
        with timer.part("ipc"):         # worker start-up, before the search may use it
            self.runner.start()
        with timer.part("propose"):
            self.refresh()
            batch = self.propose_claimed(n)
            if self.store_features and isinstance(self.featurize, SharedFeaturizer):
                self.featurize.prefetch(batch)      # random search: nothing cached yet
            features = [self.featurize(c) if self.store_features else None for c in batch]
        skipped = 0
        for config, vector in zip(batch, features):
            if deadline is not None and time.perf_counter() >= deadline:
                break
            if self.local and self._same_kernel_as_measured(config):
                skipped += 1        # its loop IR is one measured already: no build, no record
                self.skipped += 1
                continue
            sent = time.perf_counter()
            result = self.runner.run(self.task, self._data, config, self.target,
                                     best_seconds=self.best_seconds,
                                     timeout=candidate_timeout(self.runner.options.timeout,
                                                               self.slowest_ok))
            took = time.perf_counter() - sent
            record = self.commit_result(config, vector, result, took, worker="local",
                                        provenance=self.local_provenance(sent, took))
            costs.append(record.mean_cost)
            if callback is not None and progress_base is not None:
                done, total, begun = progress_base
                done += len(costs)
                callback(Progress(self.task.name, done, total, self.best_gflops,
                                  result.status.value, time.perf_counter() - begun,
                                  self.best_seconds))
        measured = [c for c in batch[:len(costs) + skipped]
                    if config_key(c) not in self._duplicates]
        for config in batch[len(costs) + skipped:]:     # a deadline stopped the batch early
            self.unclaim(config)
        with timer.part("model_update"):
            self.search.update(measured, costs)

    def local_provenance(self, sent: float, took: float) -> dict:
        """The provenance of a record measured by this machine's own Runner."""
        if self._fingerprint is None:
            from .cluster.fingerprint import Fingerprint
            self._fingerprint = Fingerprint.local("local", self.threads).to_json()
        end = time.time() - (time.perf_counter() - sent - took)
        return {"fingerprint": self._fingerprint, "start": end - took, "end": end}


def tune_task(task: Task, target: str | Target, trials: int, db: Database, search: str = "xgb",
              batch_size: int = 8, callback: Callable[[Progress], None] | None = None,
              seed: int = 0, options: MeasureOptions | None = None,
              search_config: SearchConfig | None = None, transfer: bool = True,
              share_features: bool = True, time_budget: float | None = None,
              confirm: ConfirmOptions | None = CONFIRM, cluster=None) -> TuneResult:
    """Tune `task` until the database holds `trials` records of it on `target` at the
    measurement's thread count (`options.threads`, else KILN_NUM_THREADS, else every core).

    Records already in `db` count toward `trials` (a rerun after a crash measures only the
    rest; records of unknown thread count, from older logs, count for every count). Ctrl-C stops cleanly: everything measured so far is committed and returned. With
    `transfer`, the cost model starts from the stored features of other tasks on `target`;
    with `share_features`, the idle measurement worker lowers half of the new candidates.
    `time_budget`: stop after that many seconds as well (the trial in flight finishes).
    `confirm`: at the end, time the default and the leading records again side by side and
    store the winner, which compiles then take (autotune/confirm.py; None: don't); a time
    budget keeps a share of itself for that (confirm.confirm_reserve).
    `cluster`: measure on the `kiln worker`s of a Dask scheduler (its address, a
    distributed Client or a ClusterOptions; autotune/cluster/runner.py) instead of here.
    """
    if time_budget is not None and not time_budget > 0:
        raise KilnError(f"time_budget={time_budget!r}: give a number of seconds > 0")
    target = Target.from_string(target)     # a public entry point: parsed once, here
    search_config = search_config or SearchConfig(batch_size=batch_size, seed=seed)
    runner = Runner(options or MeasureOptions())
    tuner = TaskTuner(task, target, db, search, runner, search_config, transfer=transfer,
                      share_features=share_features and cluster is None)
    if cluster is not None:
        from .cluster.runner import tune_on_cluster
        initial = tuner.n_records
        outcome = tune_on_cluster([tuner], [1.0], trials, db, cluster, runner.options,
                                  batch_size, callback, time_budget, confirm)
        return TuneResult(tuner.task.workload_key, tuner.db_target,
                          tuner.best.config if tuner.best else None, tuner.best_seconds,
                          tuner.best_gflops, tuner.n_records - initial, tuner.n_records,
                          outcome.interrupted, tuner.timer.summary(),
                          outcome.choices.get(tuner.task.workload_key))
    initial, interrupted, start = tuner.n_records, False, time.perf_counter()
    end = deadline = None if time_budget is None else start + time_budget
    if end is not None and confirm is not None:
        deadline = end - confirm_reserve(time_budget, 1, confirm)
    choice = None
    try:
        while tuner.n_records < trials and (deadline is None or time.perf_counter() < deadline):
            n = min(batch_size, trials - tuner.n_records)
            measured = tuner.n_records - initial
            got = tuner.step(n, callback, (measured, trials - initial, start), deadline)
            if got == 0 and deadline is not None and time.perf_counter() >= deadline:
                break
            if got == 0:
                log.info("%s: the search space is exhausted", task.name)
                break
        if confirm is not None and (end is None or time.perf_counter() < end):
            choice = confirm_task(tuner.task, tuner.target, db, runner, confirm, tuner.data)
    except KeyboardInterrupt:
        interrupted = True
        log.warning("%s: tuning interrupted; %d new records are kept", task.name,
                    tuner.n_records - initial)
    finally:
        runner.close()
        tuner.claims.release_all()
    timing = tuner.timer.summary()
    log.info("%s: %d trials, %.1f candidates/min, %.0f%% overhead", task.name,
             timing["trials"], timing["candidates_per_minute"], 100 * timing["overhead_share"])
    return TuneResult(tuner.task.workload_key, tuner.db_target,
                      tuner.best.config if tuner.best else None, tuner.best_seconds,
                      tuner.best_gflops, tuner.n_records - initial, tuner.n_records,
                      interrupted, timing, choice)
