"""Side-by-side timing of a few configs of one task (runs in the measurement worker).

A tuning trial times one candidate alone, in its own moment: back-to-back calls on the same
hot inputs, against whatever else the machine was doing then. Comparing two such trials
compares two moments as much as two schedules, and the minimum over many trials favours a
lucky one. Here every config is built and checked first, then timed in interleaved rounds
(each round visits every kernel, in a rotated order), so a slow moment slows all of them
alike; and each call reads a different copy of the arguments, from a set larger than the
L2 cache, as a kernel inside a model does (the model's other kernels ran in between).

At one thread the kernels run on the worker's own thread, and they are timed by its CPU
time: on a shared machine, wall-clock batches of a few milliseconds are cut by other
processes' time slices. Under a load of 4 on 2 cores, MobileNetV2's wall-clock
confirmations did not repeat (claimed 1.32x over the defaults, 0.99x when timed again;
single tasks from 0.45x to 4.2x; benchmarks/RESULTS.md, 2026-11-26 08:40 UTC).
"""
from __future__ import annotations

import math
import traceback

import numpy as np

from .. import codegen
from ..codegen.target import Target
from ..schedule.lower import lower
from ..te.errors import KilnError, ScheduleError
from .measure import (MeasureResult, MeasureStatus, compare_outputs, held_entry, kernel_clock,
                      poisoned)

# bytes of argument copies the calls cycle through: past a 0.5-2 MB L2, inside L3
ROTATE_BYTES = 8 << 20
MAX_COPIES = 64
BATCH_SECONDS = 0.004       # one kernel's share of a round


def compare_payload(payload: dict, held: dict | None = None) -> list[MeasureResult]:
    """Build, check and time `payload["configs"]` of the payload's task side by side; one
    MeasureResult per config, in order (the OK ones carry one cost per round)."""
    entry = held_entry(payload, held)
    task, options = entry.task, payload["options"]
    if entry.space is None:
        from .space.rules import SearchSpace
        entry.space = SearchSpace(task, options.threads)
    results: list[MeasureResult | None] = []
    kernels = {}
    for index, config in enumerate(payload["configs"]):
        result, kernel = _build_checked(entry, config, payload["target"], options)
        results.append(result)
        if kernel is not None:
            kernels[index] = kernel
    if kernels:
        costs = _interleaved(kernels, entry, payload.get("rounds", 7),
                             payload.get("rotate_bytes", ROTATE_BYTES), options.threads)
        for index, series in costs.items():
            results[index] = MeasureResult(MeasureStatus.OK, tuple(series))
    return results


def _build_checked(entry, config: dict, target: Target, options):
    """(None, kernel) for a config that builds and answers right, else (its failure, None)."""
    task = entry.task
    try:
        sch, args = entry.space.apply(config)
    except ScheduleError as exc:
        return MeasureResult(MeasureStatus.INVALID_CONFIG, error_text=str(exc)), None
    try:
        kernel = codegen.build(lower(sch, args, name=task.name), target=target,
                               cache_kernel=False, num_threads=options.threads)
    except Exception:  # noqa: BLE001 - every lowering/codegen failure is a COMPILE_ERROR
        return MeasureResult(MeasureStatus.COMPILE_ERROR, error_text=traceback.format_exc()), None
    arrays = _arguments(entry)
    try:
        kernel(*arrays)
    except Exception:  # noqa: BLE001 - the kernel raised
        return MeasureResult(MeasureStatus.RUNTIME_ERROR, error_text=traceback.format_exc()), None
    wrong = compare_outputs(task, arrays, entry.expected, options)
    if wrong:
        return MeasureResult(MeasureStatus.WRONG_ANSWER, error_text=wrong), None
    return None, kernel


def _arguments(entry) -> list[np.ndarray]:
    return [a.copy() if a is not None else poisoned(t)
            for a, t in zip(entry.inputs, entry.task.args)]


def _interleaved(kernels: dict, entry, rounds: int, rotate_bytes: int,
                 threads: int) -> dict[int, list]:
    """Per kernel index, its mean call time in each of `rounds` interleaved rounds (at
    `threads`, the measurement's thread count)."""
    clock = kernel_clock(threads)
    first = _arguments(entry)
    size = max(1, sum(a.nbytes for a in first))
    copies = [first] + [_arguments(entry)
                        for _ in range(min(MAX_COPIES, math.ceil(rotate_bytes / size)) - 1)]
    calls = {}
    for index, kernel in kernels.items():
        for args in copies[:2]:
            kernel(*args)                           # warm-up: page faults, thread pool
        start = clock()
        kernel(*first)
        once = max(clock() - start, 1e-7)
        calls[index] = max(2, round(BATCH_SECONDS / once))
    order = list(kernels)
    costs: dict[int, list] = {index: [] for index in order}
    position = 0        # the copies are visited in turn across kernels and rounds alike
    for r in range(rounds):
        for index in order[r % len(order):] + order[:r % len(order)]:
            kernel, n = kernels[index], calls[index]
            start = clock()
            for i in range(position, position + n):
                kernel(*copies[i % len(copies)])
            costs[index].append((clock() - start) / n)
            position += n
    return costs


def run_compare(payload: dict, held: dict | None = None) -> list[MeasureResult] | MeasureResult:
    """The worker's entry: the results, or one RUNTIME_ERROR when something else failed."""
    try:
        return compare_payload(payload, held)
    except KilnError:
        return MeasureResult(MeasureStatus.RUNTIME_ERROR, error_text=traceback.format_exc())
