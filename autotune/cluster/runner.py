"""The tuner side of tuning on a Dask cluster: keep every matching worker busy, commit each
record as it arrives, survive the loss of any worker.

The tuner is the single writer of the SQLite log. It proposes candidates (TaskTuner's search,
claimed in the log so no other run measures them: autotune/claims.py) and submits each as its
own Dask task with `pure=False` (a re-measurement must never be deduplicated), restricted to
the workers whose fingerprint matches the target (fingerprint.py) and asking for one unit of
the worker's measuring resource. Results stream back through `as_completed`; a record is
committed the moment its result arrives, and a new candidate is submitted as soon as fewer
than DEPTH per worker are in flight: no batch waits for its slowest member. The cost model
is refitted when all of a proposal's candidates are back.

Failures: a worker that dies has its candidates rerouted by the scheduler to the others; a
candidate that takes down workers repeatedly comes back as KilledWorker and is recorded as
broken (RUNTIME_ERROR) on its second such verdict (the scheduler also blames the candidates
that were only queued on a dying worker, which the second try clears), never retried
forever; the verdict comes after `distributed.scheduler.allowed-failures` worker deaths (3
by default). A candidate whose measuring subprocess crashes
or hangs is recorded by the worker as usual. If no matching worker is left for
`wait_for_workers` seconds, the run stops with an error and keeps every record. A tuner
killed with -9 leaves committed records and claims its rerun takes over, as locally.

Why the build happens on the worker: the candidate's lowering and LLVM compile take most of
a trial on small kernels (benchmarks/RESULTS.md, "tune_cluster"); done on the tuner, the one
tuner process would be the ceiling of the whole cluster, and the compiled code is JIT-loaded
in the measuring process anyway. The worker holds the task and its data (scattered once to
every worker, not sent per candidate) and builds there.
"""
from __future__ import annotations

import logging
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

from ...te.errors import KilnError
from ..confirm import ConfirmOptions, confirm_reserve, confirm_tasks
from ..measure import MeasureOptions, MeasureResult, MeasureStatus
from ..allocation import expected_gain
from ..measure import candidate_timeout
from ..progress import Progress
from . import require_distributed
from .fingerprint import Fingerprint
from .worker import RESOURCE, compare_configs, fingerprint_of, measure_candidate

if TYPE_CHECKING:
    from ..tuner import TaskTuner

log = logging.getLogger(__name__)

DEPTH = 2               # candidates in flight per matching worker, at least
POLL = 0.02             # seconds between looks at the stream when nothing is ready
REFRESH = 2.0           # seconds between looks at the workers and at other runs' records
KILLED_TRIES = 2        # a candidate the scheduler gives up on (KilledWorker) is sent this
                        # many times in all before it is recorded as broken


@dataclass
class ClusterOptions:
    """How to tune on a cluster. `address`: the Dask scheduler (or pass `client`)."""

    address: str | None = None
    client: object | None = None
    depth: int = DEPTH
    wait_for_workers: float = 60.0      # seconds to wait for a matching worker to appear
    # test hook: config -> a fault for measure.run_payload ("crash", "hang", ...) or
    # "kill-worker" (the candidate takes its Dask worker down)
    test_fault: Callable[[dict], str | None] | None = None


@dataclass
class ClusterOutcome:
    choices: dict = field(default_factory=dict)
    interrupted: bool = False
    trials: int = 0                 # records committed by this run
    wall: float = 0.0               # seconds from the first submission to the last record
    cpu: float = 0.0                # the tuner process's CPU seconds meanwhile
    workers: dict = field(default_factory=dict)     # worker name -> records it measured


def as_options(cluster) -> ClusterOptions:
    if isinstance(cluster, ClusterOptions):
        return cluster
    if isinstance(cluster, str):
        return ClusterOptions(address=cluster)
    if hasattr(cluster, "submit") and hasattr(cluster, "scheduler_info"):
        return ClusterOptions(client=cluster)
    if hasattr(cluster, "scheduler_address"):           # a LocalCluster or similar
        return ClusterOptions(address=cluster.scheduler_address)
    raise KilnError(f"cluster={cluster!r}: give a Dask scheduler address (tcp://host:port), "
                    "a distributed.Client or a ClusterOptions")


def _killed_worker(future) -> bool:
    if future.status != "error":
        return False
    try:
        return type(future.exception()).__name__ == "KilledWorker"
    except Exception:  # noqa: BLE001
        return False


class WorkerPool:
    """The cluster's workers as the tuner sees them: which match the target (by their
    advertised fingerprints), which were rejected and why."""

    def __init__(self, client, target: str, threads: int):
        self.client, self.target, self.threads = client, target, threads
        self.matching: dict[str, Fingerprint] = {}      # address -> fingerprint
        self.rejected: dict[str, str] = {}              # address -> why
        self.names: dict[str, str] = {}                 # worker name -> address

    def refresh(self) -> None:
        info = self.client.scheduler_info(n_workers=-1)["workers"] \
            if _takes_n_workers(self.client) else self.client.scheduler_info()["workers"]
        alive = set(info)
        for gone in set(self.matching) - alive:
            log.warning("worker %s (%s) left the cluster; its candidates go to the others",
                        self.matching[gone].name, gone)
            del self.matching[gone]
        for gone in set(self.rejected) - alive:
            del self.rejected[gone]
        new = [a for a in alive if a not in self.matching and a not in self.rejected]
        if not new:
            return
        answers = self.client.run(fingerprint_of, workers=new, on_error="return")
        for address in new:
            answer = answers.get(address)
            if isinstance(answer, BaseException) or answer is None:
                self.rejected[address] = ("not a `kiln worker` (no Kiln plugin)"
                                          if answer is None else f"did not answer: {answer}")
                continue
            fingerprint = Fingerprint.from_json(answer)
            why = fingerprint.mismatch(self.target, self.threads)
            if why is None:
                self.matching[address] = fingerprint
                self.names[fingerprint.name] = address
                log.info("worker %s (%s) measures for %s", fingerprint.name, address,
                         self.target)
            else:
                self.rejected[address] = why
                log.warning("worker %s (%s) gets no candidate: %s", fingerprint.name,
                            address, why)

    def wait(self, seconds: float) -> None:
        """Return once a matching worker is there; KilnError after `seconds` without."""
        end = time.monotonic() + seconds
        while True:
            self.refresh()
            if self.matching:
                return
            if time.monotonic() >= end:
                why = "; ".join(f"{a}: {w}" for a, w in sorted(self.rejected.items()))
                raise KilnError(
                    f"no worker of the cluster can measure for {self.target} at "
                    f"{self.threads} thread(s) (waited {seconds:.0f} s)"
                    + (f"; workers there: {why}" if why else "; the cluster has no workers:"
                       " start some with `kiln worker SCHEDULER_ADDRESS`"))
            time.sleep(0.25)


def _takes_n_workers(client) -> bool:
    import inspect
    return "n_workers" in inspect.signature(client.scheduler_info).parameters


@dataclass
class _Pending:
    tuner: int
    config: dict
    vector: object
    batch: int
    submitted: float
    tries: int = 1


@dataclass
class _Batch:
    """One proposal of a task: the search is refitted on it when all of it is back."""
    tuner: int
    configs: list = field(default_factory=list)
    costs: list = field(default_factory=list)
    waiting: int = 0


class ClusterRunner:
    """Stands in for measure.Runner where a whole-runner call is needed (the confirmation):
    `compare` runs on one matching worker."""

    def __init__(self, client, pool: WorkerPool, options: MeasureOptions, shared):
        self.client, self.pool, self.options, self._shared = client, pool, options, shared

    @property
    def threads(self) -> int:
        return self.pool.threads

    def start(self) -> None:
        pass

    def close(self) -> None:
        pass

    def compare(self, task, data, configs, target, rounds=7, rotate_bytes=None):
        shared = self._shared(task, data)
        future = self.client.submit(compare_configs, shared, configs, target, self.options,
                                    rounds, rotate_bytes, pure=False,
                                    resources={RESOURCE: 1}, workers=list(self.pool.matching),
                                    allow_other_workers=False)
        try:
            return future.result(timeout=self.options.timeout * (len(configs) + 1) + 60)
        except Exception as exc:  # noqa: BLE001 - a lost confirmation fails its configs
            return [MeasureResult(MeasureStatus.RUNTIME_ERROR,
                                  error_text=f"confirmation on the cluster failed: {exc}")
                    ] * len(configs)


class _Loop:
    """One cluster tuning run over `tuners` (see the module docstring)."""

    def __init__(self, tuners: list[TaskTuner], weights: list[float], trials: float, client,
                 copts: ClusterOptions, options: MeasureOptions, batch_size: int, callback):
        from distributed import as_completed
        self.tuners, self.weights, self.trials = tuners, weights, trials
        self.client, self.copts, self.options = client, copts, options
        self.batch_size, self.callback = batch_size, callback
        self.threads = tuners[0].threads
        self.target = tuners[0].target
        self.pool = WorkerPool(client, self.target, self.threads)
        # results are fetched as they complete: a worker that dies after a candidate
        # finished must not take the result with it
        self.stream = as_completed(loop=client.loop, with_results=True, raise_errors=False)
        self.inflight: dict[str, _Pending] = {}         # future key -> candidate
        self.futures: dict[str, object] = {}
        self.batches: dict[int, _Batch] = {}
        self.histories = [[t.best_seconds] for t in tuners]
        self.pending = [i for i, t in enumerate(tuners) if t.n_records == 0]   # warm-up
        self.exhausted: set[int] = set()
        self.shared_futures: dict[int, object] = {}
        self.outcome = ClusterOutcome()
        self.last_status = ""
        self._batch_ids = 0

    # ------------------------------------------------------------------ submitting

    def shared(self, task, data):
        """The future of (task, data) on every worker: scattered once, not per candidate."""
        key = id(task)
        inline = {"token": f"{task.workload_key}/{key}", "task": task, "data": data}
        if key not in self.shared_futures:
            try:
                [future] = self.client.scatter([inline], workers=list(self.pool.matching)
                                               or None, broadcast=True, hash=False)
                self.shared_futures[key] = future
            except Exception as exc:  # noqa: BLE001 - a worker died before or during it
                log.info("scattering %s failed (%s); sending it with the candidate",
                         task.name, exc)
                return inline       # (the worker keeps it by its token all the same)
        return self.shared_futures[key]

    def submit(self, index: int, config: dict, vector, batch: int, tries: int = 1) -> None:
        tuner = self.tuners[index]
        fault = self.copts.test_fault(config) if self.copts.test_fault else None
        future = self.client.submit(
            measure_candidate, self.shared(tuner.task, tuner.data), config, tuner.target,
            self.options, tuner.best_seconds,
            candidate_timeout(self.options.timeout, tuner.slowest_ok), fault,
            key=f"kiln-measure-{tuner.task.name}-{uuid.uuid4().hex}", pure=False,
            resources={RESOURCE: 1}, workers=list(self.pool.matching),
            allow_other_workers=False)
        self.inflight[future.key] = _Pending(index, config, vector, batch, time.time(), tries)
        self.futures[future.key] = future
        self.stream.add(future)

    def pick(self) -> int | None:
        if self.pending:
            return self.pending.pop(0)
        active = [i for i in range(len(self.tuners)) if i not in self.exhausted]
        if not active:
            return None
        return max(active, key=lambda i: expected_gain(self.tuners[i], self.weights[i],
                                               self.histories[i], window=3))

    def spent(self) -> int:
        return sum(t.n_records for t in self.tuners)

    def fill(self) -> None:
        """Submit candidates while fewer than one per matching worker plus a batch are in
        flight. A proposal costs the search about the same for 1 config as for 8 (it
        scores a whole population), so it waits until a batch's worth of room is free,
        unless a worker would go idle."""
        workers = len(self.pool.matching)
        capacity = max(workers * self.copts.depth, workers + self.batch_size)
        while len(self.inflight) < capacity:
            room = self.trials - self.spent() - len(self.inflight)
            if room <= 0:
                return
            free = capacity - len(self.inflight)
            if free < min(self.batch_size, room) and len(self.inflight) >= workers:
                return
            index = self.pick()
            if index is None:
                return
            tuner = self.tuners[index]
            if tuner.data is None:
                from ..measure import TaskData
                tuner._data = TaskData.make(tuner.task, tuner.data_seed)
            n = int(min(self.batch_size, capacity - len(self.inflight), room))
            with tuner.timer.part("propose"):
                configs = tuner.propose_claimed(n)
                vectors = [tuner.featurize(c) if tuner.store_features else None
                           for c in configs]
            if not configs:
                log.info("%s: the search space is exhausted", tuner.task.name)
                self.exhausted.add(index)
                continue
            self._batch_ids += 1
            self.batches[self._batch_ids] = _Batch(index, waiting=len(configs))
            for config, vector in zip(configs, vectors):
                self.submit(index, config, vector, self._batch_ids)

    # ------------------------------------------------------------------ receiving

    def receive(self, future, out) -> None:
        pending = self.inflight.pop(future.key)
        self.futures.pop(future.key, None)
        tuner = self.tuners[pending.tuner]
        worker, provenance = None, None
        if isinstance(out, dict) and "result" in out:
            result, worker = out["result"], out["worker"]
            provenance = {"fingerprint": out["fingerprint"], "start": out["start"],
                          "end": out["end"]}
            took = out["end"] - out["start"]
        elif future.status in ("cancelled", "finished", "lost") and pending.tries < 3:
            # (its scattered data, or its result, was lost with the workers that held it):
            # send it again
            self.shared_futures.pop(id(tuner.task), None)
            self.submit(pending.tuner, pending.config, pending.vector, pending.batch,
                        pending.tries + 1)
            return
        elif _killed_worker(future) and pending.tries < KILLED_TRIES:
            # the scheduler blames every candidate that was waiting on the workers that
            # died, not only the one running: each gets a second opinion before it is
            # recorded as broken
            log.warning("%s: a candidate was on workers that died; sending it once more",
                        tuner.task.name)
            self.submit(pending.tuner, pending.config, pending.vector, pending.batch,
                        pending.tries + 1)
            return
        else:
            result, took = self._failure(future), 0.0
            worker = "cluster"
        record = tuner.commit_result(pending.config, pending.vector, result, took,
                                     worker=worker, provenance=provenance)
        tuner.timer.trials += 1
        self.outcome.trials += 1
        self.outcome.workers[worker] = self.outcome.workers.get(worker, 0) + 1
        self.last_status = result.status.value
        batch = self.batches[pending.batch]
        batch.configs.append(pending.config)
        batch.costs.append(record.mean_cost)
        batch.waiting -= 1
        if batch.waiting == 0:
            with tuner.timer.part("model_update"):
                tuner.search.update(batch.configs, batch.costs)
            self.histories[batch.tuner].append(tuner.best_seconds)
            del self.batches[pending.batch]
        if self.callback is not None:
            self.callback(Progress(tuner.task.name, self.spent() - self.start_spent,
                                   self.total(), tuner.best_gflops, result.status.value,
                                   time.perf_counter() - self.begun, tuner.best_seconds,
                                   self.busy()))

    @staticmethod
    def _failure(future) -> MeasureResult:
        """A candidate that came back as an error: KilledWorker (it took workers down) or
        an exception of the measuring task itself. Recorded as broken, not retried."""
        try:
            exc = future.exception()
        except Exception as err:  # noqa: BLE001 - e.g. cancelled
            exc = err
        name = type(exc).__name__
        if name == "KilledWorker":
            text = (f"the candidate took down every worker that ran it ({exc}); recorded as "
                    "broken and not retried")
        else:
            text = f"the measuring task failed on the cluster: {name}: {exc}"
        return MeasureResult(MeasureStatus.RUNTIME_ERROR, error_text=text)

    def busy(self) -> str:
        running = min(len(self.inflight), len(self.pool.matching))
        return f"{running}/{len(self.pool.matching)}"

    def total(self) -> int:
        if math.isfinite(self.trials):
            return int(self.trials) - self.start_spent
        return self.spent() - self.start_spent + len(self.inflight)

    # ------------------------------------------------------------------ the run

    def run(self, deadline: float | None) -> None:
        self.pool.wait(self.copts.wait_for_workers)
        self.start_spent = self.spent()
        self.begun = time.perf_counter()
        cpu0 = time.process_time()
        last_refresh, last_renew, orphaned = time.monotonic(), time.monotonic(), None
        try:
            while True:
                now = time.monotonic()
                if now - last_refresh > REFRESH:
                    last_refresh = now
                    self.pool.refresh()
                    for tuner in self.tuners:
                        tuner.refresh()         # records another run added count too
                    if now - last_renew > 60:
                        last_renew = now
                        for tuner in self.tuners:
                            tuner.claims.renew()
                if not self.pool.matching:
                    orphaned = orphaned or now
                    if now - orphaned > self.copts.wait_for_workers:
                        raise KilnError(
                            f"every worker that could measure for {self.target} left the "
                            f"cluster and none came back within {self.copts.wait_for_workers:.0f}"
                            f" s; {self.outcome.trials} records are kept, rerun to resume")
                else:
                    orphaned = None
                    if deadline is None or time.perf_counter() < deadline:
                        self.fill()
                if not self.inflight:
                    break
                if self.stream.has_ready():
                    for future, out in self.stream.next_batch(block=False):
                        self.receive(future, out)
                else:
                    time.sleep(POLL)
        finally:
            self.outcome.wall = time.perf_counter() - self.begun
            self.outcome.cpu = time.process_time() - cpu0
            for tuner in self.tuners:
                tuner.timer.wall += self.outcome.wall / len(self.tuners)

    def cancel(self) -> None:
        """Stop what is in flight (Ctrl-C or an error): nothing more will be recorded."""
        for future in self.futures.values():
            future.cancel()
        for pending in self.inflight.values():
            self.tuners[pending.tuner].unclaim(pending.config)
        self.inflight.clear()
        self.futures.clear()


def connect(copts: ClusterOptions):
    """(client, whether we made it) for the options."""
    distributed = require_distributed()
    if copts.client is not None:
        return copts.client, False
    try:
        return distributed.Client(copts.address, timeout=30, set_as_default=False), True
    except OSError as exc:
        raise KilnError(f"cannot reach the Dask scheduler at {copts.address!r}: {exc}; is "
                        "`dask scheduler` running there?") from None


def tune_on_cluster(tuners: list[TaskTuner], weights: list[float], trials: float, db,
                    cluster, options: MeasureOptions, batch_size: int = 8, callback=None,
                    time_budget: float | None = None,
                    confirm: ConfirmOptions | None = None) -> ClusterOutcome:
    """Tune `tuners` (their records in `db` count, as locally) on the cluster until `trials`
    records or `time_budget` seconds; confirm on a worker at the end. Ctrl-C keeps every
    committed record (outcome.interrupted)."""
    copts = as_options(cluster)
    client, owned = connect(copts)
    loop = _Loop(tuners, weights, trials if trials is not None else math.inf, client, copts,
                 options, batch_size, callback)
    start = time.perf_counter()
    end = deadline = None if time_budget is None else start + time_budget
    if end is not None and confirm is not None:
        deadline = end - confirm_reserve(time_budget, len(tuners), confirm)
    try:
        try:
            loop.run(deadline)
        except KeyboardInterrupt:
            loop.outcome.interrupted = True
            log.warning("cluster tuning interrupted; %d new records are kept",
                        loop.outcome.trials)
        except BaseException:
            loop.cancel()
            raise
        if confirm is not None and not loop.outcome.interrupted:
            runner = ClusterRunner(client, loop.pool, options, loop.shared)
            order = sorted(range(len(tuners)), reverse=True,
                           key=lambda i: weights[i] * (tuners[i].best_seconds
                                                       if math.isfinite(tuners[i].best_seconds)
                                                       else 0.0))
            loop.outcome.choices = confirm_tasks(
                [(tuners[i].task, tuners[i].data) for i in order], tuners[0].target, db,
                runner, deadline=end, options=confirm)
    except KeyboardInterrupt:
        loop.outcome.interrupted = True
    finally:
        loop.cancel()
        for tuner in tuners:
            tuner.claims.release_all()
        for future in loop.shared_futures.values():
            future.release()
        if owned:
            client.close()
    log.info("cluster: %d trials in %.1f s (%.1f/min), tuner CPU %.0f%%; by worker: %s",
             loop.outcome.trials, loop.outcome.wall,
             60 * loop.outcome.trials / max(loop.outcome.wall, 1e-9),
             100 * loop.outcome.cpu / max(loop.outcome.wall, 1e-9), loop.outcome.workers)
    return loop.outcome
