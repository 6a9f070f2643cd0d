"""Measurement: build and time candidates in a worker process, classify every failure.

The parent computes the task's inputs and reference outputs once; each candidate goes to a
long-lived worker (spawned, recreated after a crash or a timeout) as an explicit payload: the
config JSON, the target, the timeout and the timing settings, plus the pickled task and its
data the first time this worker sees them (the worker keeps the last few tasks it was sent,
with their search space, under a token the parent names in every payload). The worker
rebuilds the schedule itself, checks the answer, and times the kernel one candidate at a time.
"""
from __future__ import annotations

import enum
import itertools
import logging
import math
import os
import pickle
import signal
import statistics
import subprocess
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from typing import Callable

import numpy as np

from .. import codegen
from ..codegen.runtime_config import resolve_threads
from ..codegen.target import Target
from ..schedule.lower import lower
from ..te import dtype as dt
from ..te.errors import InternalError, KilnError, ScheduleError
from ..te.reference import evaluate
from ..te.workload import topo_ops
from .features import extract_features
from .space.rules import SearchSpace
from .task import Task

log = logging.getLogger(__name__)


class MeasureStatus(enum.Enum):
    OK = "OK"
    INVALID_CONFIG = "INVALID_CONFIG"      # the schedule primitives refused the config
    COMPILE_ERROR = "COMPILE_ERROR"        # lowering or codegen failed
    RUNTIME_ERROR = "RUNTIME_ERROR"        # the kernel raised, or the worker died (segfault)
    TIMEOUT = "TIMEOUT"                    # build + check + timing exceeded the timeout
    WRONG_ANSWER = "WRONG_ANSWER"          # ran, but the output differs from the reference


@dataclass(frozen=True)
class MeasureOptions:
    """How candidates are checked and timed (explicit: nothing comes from the environment)."""

    timeout: float = 30.0          # seconds per candidate: build, check and timing together
    repeat: int = 5                # timed repeats; a repeat costs its median batch's mean call time
    min_repeat_seconds: float = 0.01   # each repeat runs the kernel enough times to last this
    flush_cache: bool = False      # overwrite a large buffer before each repeat
    rtol: float = 1e-3
    atol: float = 1e-3
    early_stop: float = 3.0        # one timed run only when it is this many times the best
    threads: int | None = None     # threads a kernel runs with; None: KILN_NUM_THREADS / cores


@dataclass(frozen=True)
class MeasureResult:
    status: MeasureStatus
    costs: tuple[float, ...] = ()
    error_text: str = ""
    build_seconds: float = 0.0
    # seconds the worker spent per phase: setup (unpickle the task, build the space, apply the
    # config), lower, compile (LLVM), check (first run + comparison), run (the timed repeats)
    phases: dict = field(default_factory=dict)

    @property
    def mean_cost(self) -> float:
        if self.status is not MeasureStatus.OK or not self.costs:
            return math.inf
        return sum(self.costs) / len(self.costs)


@dataclass
class TaskData:
    """Inputs and reference outputs of a task, computed once in the parent."""

    inputs: list            # one array per task.args entry; None for outputs
    expected: list          # one array per task output

    @staticmethod
    def make(task: Task, seed: int = 0) -> "TaskData":
        rng = np.random.default_rng(seed)
        # signed data first; a DAG that is only defined for part of it (sqrt of a variance,
        # log of a sum) gets positive data, so every output point can be checked
        for low in (-1.0, 0.5):
            inputs = {t: _random_array(rng, t.shape, t.dtype, low) for t in task.args
                      if t not in task.outputs}
            expected = evaluate(list(task.outputs), inputs)
            if all(np.isfinite(e).all() for e in expected if dt.is_float(str(e.dtype))):
                break
        return TaskData([inputs.get(t) for t in task.args], list(expected))


def _random_array(rng, shape, dtype: str, low: float = -1.0) -> np.ndarray:
    if dt.is_float(dtype):
        return rng.uniform(low, low + 2.0 if low < 0 else 1.5, shape).astype(dtype)
    if dtype == "bool":
        return rng.integers(0, 2, shape).astype(bool)
    return rng.integers(0, 8, shape).astype(dtype)


# ----------------------------------------------------------------------------- worker side

def _fault(kind: str | None) -> None:
    """Test-only hook: make this candidate crash, hang or raise like a broken kernel would."""
    if kind == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif kind == "hang":
        time.sleep(3600)
    elif kind == "raise":
        raise RuntimeError("injected runtime failure")
    elif kind == "wrong":
        raise FloatingPointError("injected failure")


# A repeat is timed in this many consecutive batches and costs its median batch's mean call
# time. On a shared machine the scheduler takes the core away for milliseconds at a time: a
# repeat's plain mean then swung 2x between repeats of the same kernel (load 5 on 2 cores,
# 54-107 us), while a batch that ran undisturbed measures the kernel itself.
SUB_BATCHES = 8


def kernel_clock(threads: int):
    """The clock kernels are timed by in the worker: the calling thread's CPU time when they
    run on it alone (`threads`, the measurement's thread count, is 1), which leaves out
    other processes' time slices on a shared machine (autotune/compare.py has the figures);
    else the wall clock."""
    return time.thread_time if threads == 1 else time.perf_counter


def _time_kernel(kernel, arrays, options: MeasureOptions,
                 best_seconds: float = math.inf) -> tuple[float, ...]:
    clock = kernel_clock(options.threads)
    kernel(*arrays)                                   # warm-up (page faults, thread pool)
    start = clock()
    kernel(*arrays)
    once = max(clock() - start, 1e-7)
    if once > options.early_stop * best_seconds:
        return (once,)     # clearly slower than the best so far: don't spend repeats on it
    number = max(1, int(math.ceil(options.min_repeat_seconds / once)))
    batches = min(number, SUB_BATCHES)
    per_batch = -(-number // batches)
    flush = np.empty(32 << 20, dtype=np.uint8) if options.flush_cache else None
    costs = []
    for _ in range(options.repeat):
        if flush is not None:
            flush[:] = 1
        means = []
        for _ in range(batches):
            start = clock()
            for _ in range(per_batch):
                kernel(*arrays)
            means.append((clock() - start) / per_batch)
        costs.append(statistics.median(means))
    return tuple(costs)


@dataclass
class _HeldTask:
    """A task the worker was sent, with its data and (once built) its search space."""

    task: Task
    inputs: list
    expected: list
    space: SearchSpace | None = None


def held_entry(payload: dict, held: dict[int, _HeldTask] | None) -> _HeldTask:
    """The payload's task: unpickled when the payload carries it (and then kept in `held`
    under the payload's token), else the one kept earlier under that token."""
    token = payload.get("token")
    if "task" in payload:
        task: Task = pickle.loads(payload["task"])
        entry = _HeldTask(task, payload["inputs"], payload["expected"])
        if held is not None and token is not None:
            held[token] = entry
    elif held is not None and token in held:
        entry = held[token]
    else:
        raise InternalError(f"measurement payload names task token {token!r}, which this "
                            "worker does not hold; this is a bug in Kiln's Runner")
    if held is not None and "held" in payload:      # the parent's list is the truth
        for stale in set(held) - set(payload["held"]):
            del held[stale]
    return entry


def run_payload(payload: dict, held: dict[int, _HeldTask] | None = None) -> MeasureResult:
    """Build, check and time one candidate from an explicit payload (runs in the worker).

    `held` is the worker's store of tasks sent earlier (see Runner); without it the payload
    must carry the pickled task and its data.
    """
    clock = _PhaseClock()
    entry = held_entry(payload, held)
    task = entry.task
    options: MeasureOptions = payload["options"]
    _fault(payload.get("test_fault"))
    try:
        if entry.space is None:
            entry.space = SearchSpace(task, options.threads)
        sch, args = entry.space.apply(payload["config"])
    except ScheduleError as exc:
        return clock.result(MeasureStatus.INVALID_CONFIG, error_text=str(exc))
    clock.lap("setup")
    try:
        func = lower(sch, args, name=task.name)
        clock.lap("lower")
        kernel = codegen.build(func, target=payload["target"], cache_kernel=False,
                               num_threads=options.threads)
        clock.lap("compile")
    except Exception:  # noqa: BLE001 - every lowering/codegen failure is a COMPILE_ERROR record
        return clock.result(MeasureStatus.COMPILE_ERROR, error_text=traceback.format_exc())
    arrays = [a.copy() if a is not None else poisoned(t) for a, t in
              zip(entry.inputs, task.args)]
    try:
        kernel(*arrays)
    except Exception:  # noqa: BLE001 - the kernel raised: record the traceback
        return clock.result(MeasureStatus.RUNTIME_ERROR, error_text=traceback.format_exc())
    wrong = compare_outputs(task, arrays, entry.expected, options)
    clock.lap("check")
    if wrong:
        return clock.result(MeasureStatus.WRONG_ANSWER, error_text=wrong)
    try:
        costs = _time_kernel(kernel, arrays, options, payload.get("best_seconds", math.inf))
    except KilnError:
        return clock.result(MeasureStatus.RUNTIME_ERROR, error_text=traceback.format_exc())
    clock.lap("run")
    return clock.result(MeasureStatus.OK, costs=costs)


def features_payload(payload: dict, held: dict[int, _HeldTask] | None = None) -> list:
    """Feature vectors of the payload's configs (None for a config that cannot be lowered),
    computed the way the parent's Featurizer does: apply, lower, extract. The worker runs
    this while the parent proposes, when it would otherwise sit idle."""
    entry = held_entry(payload, held)
    out: list[np.ndarray | None] = []
    for config in payload["configs"]:
        try:
            if entry.space is None:     # the count the candidates run at: it decides
                entry.space = SearchSpace(entry.task, payload.get("threads"))   # their forks
            sch, args = entry.space.apply(config)
            out.append(extract_features(lower(sch, args, name=entry.task.name)))
        except KilnError:
            out.append(None)
    return out


class _PhaseClock:
    """perf_counter laps of the worker's phases, attached to the result it returns."""

    def __init__(self):
        self.last = time.perf_counter()
        self.phases: dict[str, float] = {}

    def lap(self, phase: str) -> None:
        now = time.perf_counter()
        self.phases[phase] = self.phases.get(phase, 0.0) + now - self.last
        self.last = now

    def result(self, status: MeasureStatus, costs: tuple = (), error_text: str = ""):
        build = self.phases.get("lower", 0.0) + self.phases.get("compile", 0.0)
        return MeasureResult(status, tuple(costs), error_text, build, dict(self.phases))


def poisoned(tensor) -> np.ndarray:
    if dt.is_float(tensor.dtype):
        return np.full(tensor.shape, np.nan, dtype=tensor.dtype)
    return np.full(tensor.shape, 123, dtype=tensor.dtype)


# An integer output computed through float math (a requantization: scale, round, saturate)
# may land one step off at a near-tie, where the kernel fuses a multiply-add that the numpy
# reference rounds twice (graph/passes/int8/add.py). At most this share of its points
# (at least one) may differ, by one; any larger or more frequent difference is a wrong answer.
# Integer outputs of integer-only DAGs (the dot-product accumulators) must match exactly.
ROUNDING_TIE_SHARE = 1e-3


def compare_outputs(task: Task, arrays, expected, options: MeasureOptions) -> str:
    through_float = None
    for position, want in zip(task.output_positions, expected):
        got = arrays[position]
        if np.issubdtype(want.dtype, np.floating):
            if np.allclose(got, want, rtol=options.rtol, atol=options.atol, equal_nan=False):
                continue
            bad = np.argwhere(~np.isclose(got, want, rtol=options.rtol, atol=options.atol))
        else:
            diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
            bad = np.argwhere(diff != 0)
            if not len(bad):
                continue
            if through_float is None:
                through_float = _has_float_stage(task)
            if through_float and diff.max() <= 1 \
                    and len(bad) <= max(1.0, ROUNDING_TIE_SHARE * want.size):
                continue
        first = tuple(int(i) for i in bad[0])
        return (f"output '{task.args[position].name}' differs from the reference at "
                f"{len(bad)} of {want.size} points; first at {first}: got {got[first]}, "
                f"expected {want[first]}")
    return ""


def _has_float_stage(task: Task) -> bool:
    """Whether any tensor of the task's DAG is a float one."""
    return any(dt.is_float(op.dtype) for op in topo_ops(list(task.outputs)))


# ----------------------------------------------------------------------------- parent side

HELD_TASKS = 4      # tasks (with their data) a worker keeps between candidates


@dataclass
class Runner:
    """Runs candidates one at a time in a spawned worker; kills and respawns it on a hang or
    a crash, so a broken candidate costs one trial and never the run.

    The task and its data (megabytes for a large GEMM) cross the pipe once per worker, not
    once per candidate: the Runner remembers which (task, data) objects the current worker
    holds, under a token, and the worker drops those the Runner no longer lists.
    """

    options: MeasureOptions = field(default_factory=MeasureOptions)
    start_timeout: float = 120.0
    _process: subprocess.Popen | None = None
    _conn: Connection | None = None     # results from the worker
    _send: Connection | None = None     # payloads to the worker
    # token -> (task, data) the current worker holds, least recently used first
    _held: OrderedDict = field(default_factory=OrderedDict)
    _tokens: itertools.count = field(default_factory=itertools.count)

    def __post_init__(self):
        # the options' thread count, defaulted once here (they are the measurement's API):
        # the worker and every record then carry the int
        if self.options.threads is None:
            self.options = replace(self.options, threads=resolve_threads(None))

    @property
    def threads(self) -> int:
        """The thread count candidates run with (stored with every record)."""
        return self.options.threads

    def _start(self) -> None:
        if self.options.threads is not None and self.options.threads < 1:
            raise KilnError(f"MeasureOptions(threads={self.options.threads}): the thread count "
                            "must be >= 1 (None: KILN_NUM_THREADS, else every core)")
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        code = ("import sys; from kiln.autotune.worker import serve; "
                "serve(int(sys.argv[1]), int(sys.argv[2]))")
        process = subprocess.Popen([sys.executable, "-c", code, str(to_child_r),
                                    str(to_parent_w)], pass_fds=(to_child_r, to_parent_w),
                                   env={**os.environ, "KILN_NUM_THREADS": str(self.threads)})
        os.close(to_child_r)
        os.close(to_parent_w)
        self._process = process
        self._send = Connection(to_child_w, readable=False)
        self._conn = Connection(to_parent_r, writable=False)
        if not self._conn.poll(self.start_timeout):
            self._stop(kill=True)
            raise KilnError("the measurement worker did not start within "
                            f"{self.start_timeout:.0f} s; is the machine overloaded?")
        try:
            self._conn.recv()
        except EOFError:
            code = process.wait()
            self._stop(kill=True)
            raise KilnError(f"the measurement worker exited at start-up (exit code {code}); "
                            "run `python -c 'import kiln.autotune.measure'` to see why") from None

    def start(self) -> None:
        """Start the worker now if it is not running (otherwise the next call starts it)."""
        if not self._alive():
            if self._process is not None:
                self._stop(kill=True)
            self._start()

    def _alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def _stop(self, kill: bool) -> None:
        if self._process is None:
            return
        if kill:
            self._process.kill()
        else:
            try:
                self._send.send(None)
            except (BrokenPipeError, OSError):
                pass
        try:
            self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._send.close()
        self._conn.close()
        self._process = self._conn = self._send = None
        self._held.clear()          # a new worker holds nothing

    def _token(self, task: Task, data: TaskData) -> tuple[int, bool]:
        """The token of (task, data) in the current worker, and whether it must be sent."""
        for token, (held_task, held_data) in self._held.items():
            if held_task is task and held_data is data:
                self._held.move_to_end(token)
                return token, False
        token = next(self._tokens)
        self._held[token] = (task, data)
        if len(self._held) > HELD_TASKS:
            self._held.popitem(last=False)
        return token, True

    def close(self) -> None:
        self._stop(kill=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def run(self, task: Task, data: TaskData, config: dict, target: Target,
            test_fault: str | None = None, best_seconds: float = math.inf,
            timeout: float | None = None) -> MeasureResult:
        """Measure one config of `task`; every outcome is a MeasureResult (never raises for
        a bad candidate). `timeout`: seconds for this candidate instead of the options'."""
        timeout = self.options.timeout if timeout is None else timeout
        self.start()
        token, fresh = self._token(task, data)
        payload = {"workload_key": task.workload_key, "token": token,
                   "held": tuple(self._held), "config": config, "target": target,
                   "options": self.options, "test_fault": test_fault,
                   "best_seconds": best_seconds}
        if fresh:
            payload.update(task=pickle.dumps(task), inputs=data.inputs, expected=data.expected)
        try:
            self._send.send(payload)
            if self._conn.poll(timeout):
                return self._conn.recv()
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            return self._died()
        if not self._alive():
            return self._died()
        self._stop(kill=True)
        return MeasureResult(MeasureStatus.TIMEOUT, error_text=(
            f"candidate did not finish within {timeout:.1f} s; worker killed"))

    def compare(self, task: Task, data: TaskData, configs: list[dict], target: Target,
                rounds: int = 7, rotate_bytes: int | None = None) -> list[MeasureResult]:
        """Build, check and time `configs` side by side in interleaved rounds
        (autotune/compare.py); one MeasureResult per config, whose costs are its mean call
        time in each round. A worker that crashes or hangs fails them all (never raises)."""
        self.start()
        token, fresh = self._token(task, data)
        payload = {"kind": "compare", "token": token, "held": tuple(self._held),
                   "configs": configs, "target": target, "options": self.options,
                   "rounds": rounds}
        if rotate_bytes is not None:
            payload["rotate_bytes"] = rotate_bytes
        if fresh:
            payload.update(task=pickle.dumps(task), inputs=data.inputs, expected=data.expected)
        limit = self.options.timeout * (len(configs) + 1)
        try:
            self._send.send(payload)
            if self._conn.poll(limit):
                reply = self._conn.recv()
                if isinstance(reply, list) and len(reply) == len(configs):
                    return reply
                if not isinstance(reply, MeasureResult):
                    reply = MeasureResult(MeasureStatus.RUNTIME_ERROR,
                                          error_text=f"unexpected worker reply {reply!r:.200}")
                return [reply] * len(configs)
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            return [self._died()] * len(configs)
        if not self._alive():
            return [self._died()] * len(configs)
        self._stop(kill=True)
        return [MeasureResult(MeasureStatus.TIMEOUT, error_text=(
            f"the side-by-side timing of {len(configs)} configs did not finish within "
            f"{limit:.0f} s; worker killed"))] * len(configs)

    def features(self, task: Task, data: TaskData, configs: list[dict],
                 meanwhile: Callable[[], None]) -> list | None:
        """Feature vectors of `configs` computed in the worker while `meanwhile()` runs here;
        None (and `meanwhile` still run) when the worker cannot answer, so the caller
        computes them itself. Never raises for a worker failure."""
        sent = False
        try:
            self.start()
            token, fresh = self._token(task, data)
            payload = {"kind": "features", "token": token, "held": tuple(self._held),
                       "configs": configs, "threads": self.options.threads}
            if fresh:
                payload.update(task=pickle.dumps(task), inputs=data.inputs,
                               expected=data.expected)
            self._send.send(payload)
            sent = True
        except (KilnError, EOFError, BrokenPipeError, ConnectionResetError, OSError) as exc:
            log.debug("worker featurization not started: %s", exc)
            self._stop(kill=True)
        try:
            meanwhile()
        except BaseException:       # Ctrl-C included: do not wait for the worker's answer
            if sent:
                self._stop(kill=True)
            raise
        return self._features_reply(len(configs)) if sent else None

    def _features_reply(self, n: int) -> list | None:
        # a lowering takes milliseconds; the candidate timeout plus a second per config
        # only catches a worker that hangs, even on a loaded machine
        try:
            if self._conn.poll(self.options.timeout + 1.0 * n):
                reply = self._conn.recv()
                if isinstance(reply, list) and len(reply) == n:
                    return reply
                log.debug("worker featurization failed: %s",
                          getattr(reply, "error_text", reply))
                return None
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError):
            pass
        except BaseException:       # Ctrl-C: an answer left in the pipe would be misread
            self._stop(kill=True)
            raise
        self._stop(kill=True)       # dead or hung: the next candidate starts a fresh one
        return None

    def _died(self) -> MeasureResult:
        try:
            code = self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        self._stop(kill=True)
        how = (f"signal {signal.Signals(-code).name}" if code is not None and code < 0
               else f"exit code {code}")
        return MeasureResult(MeasureStatus.RUNTIME_ERROR,
                             error_text=f"the worker process died ({how}) running the candidate")


# a candidate may take this many times the slowest working one of its task so far (build,
# check and timing), and at least TIMEOUT_FLOOR seconds, before it is killed: a config whose
# unrolled tile makes LLVM run for half a minute cost 9% of a 10-minute budget in two trials
TIMEOUT_FACTOR = 8.0
TIMEOUT_FLOOR = 5.0


def candidate_timeout(limit: float, slowest_ok: float) -> float:
    """Seconds a candidate gets: `limit` (the measurement options') until one of the task
    has worked, then TIMEOUT_FACTOR x the slowest that worked, within [TIMEOUT_FLOOR, limit]."""
    if slowest_ok <= 0:
        return limit
    return min(limit, max(TIMEOUT_FLOOR, TIMEOUT_FACTOR * slowest_ok))
