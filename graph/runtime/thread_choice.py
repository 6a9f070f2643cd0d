"""Measured per-kernel thread choice: the kernels of a model that run no faster on N threads.

Why: whether a parallel loop pays for its fork is decided per schedule from a cost estimate
(autotune/space/thread_plan.py), for the kernel alone. In a model the estimate misses both
ways: efficientvit_m0's nine forking kernels (7-40 us, 4-25 iterations) took 165 us at 1
thread and 160 us at 2 timed alone, and in the model, where the pool's worker has gone to
sleep between those forks, the 2-thread model ran slower than the 1-thread one
(benchmarks/RESULTS.md, issue 33 item 3). Every kernel module has its own thread-count
global (codegen/kernel.py; the pool runs a loop serially, with no fork, at one thread), so a
model built for N threads can run any kernel on one thread at no cost. onnxruntime decides
per op from a cost estimate; here the decision is measured on the model itself.

How: after a model is assembled for N > 1 threads, run it one step at a time in plan order on
its example inputs (so each kernel sees its real data and the pool as a real run leaves it),
count each step's forks at N threads (kernels that do not fork are not candidates), then
time the candidates' steps in alternating rounds with every candidate at N threads and every
candidate at 1. A kernel keeps N threads only where the median over rounds of its time per
run at N beats its time at 1 by MARGIN; otherwise it runs on one. Rounds stop after
MAX_ROUNDS or once BUDGET_SECONDS are spent (at least MIN_ROUNDS).

The choice is stored in the plan (`meta["thread_choice"]`), so a model from the model cache
or from an export runs exactly as measured and pays nothing at load; measuring again on every
load would make the same model run differently from one process to the next on a noisy
machine and cost the warm compile time it is meant to save. `choose(model, threads)` re-runs
the measurement on demand (a model moved to a quieter or a different machine).
"""
from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Mapping

from ...codegen.runtime import fork_count

log = logging.getLogger(__name__)

# N threads must beat one by this fraction of the 1-thread time to keep the kernel's forks:
# a split that saves less is within the noise of a shared machine and costs the other core.
MARGIN = 0.05
MIN_ROUNDS, MAX_ROUNDS = 3, 9
BUDGET_SECONDS = 0.5


@dataclass(frozen=True)
class KernelTiming:
    """One forking kernel: its calls per run, forks per run at N threads, and the median
    over rounds of its time per run (all its calls) at N threads and at one."""

    kernel: str
    calls: int
    forks: int
    at_n_us: float
    at_1_us: float

    def pays(self, margin: float = MARGIN) -> bool:
        return self.at_n_us < self.at_1_us * (1.0 - margin)


def forking_kernels(model, threads: int, inputs) -> dict[str, int]:
    """Fork/joins per run of each kernel of `model` that hands work to the pool at
    `threads` (a kernel whose loops run serially at these shapes has none and is left out;
    with the libgomp or serial backend nothing is counted and nothing is a candidate)."""
    model.set_num_threads(threads, choice=False)
    forks: dict[str, int] = {}
    for step, n in zip(model.plan.steps, model.step_times(inputs, clock=fork_count)):
        if n > 0:
            forks[step.kernel] = forks.get(step.kernel, 0) + int(n)
    return forks


def measure(model, threads: int, kernels: Mapping[str, int], inputs,
            clock: Callable[[], float] = time.perf_counter,
            budget: float = BUDGET_SECONDS) -> list[KernelTiming]:
    """Times per run of `kernels` (name -> forks per run) at `threads` and at one, from
    step-by-step runs of `model` in alternating rounds (see the module docstring)."""
    names = model.plan.steps
    calls = {k: sum(1 for s in names if s.kernel == k) for k in kernels}
    samples = {n: {k: [] for k in kernels} for n in (threads, 1)}

    def one_run(n: int) -> None:
        for k in kernels:
            model.kernels[k].set_num_threads(n)
        per = dict.fromkeys(kernels, 0.0)
        for step, dt in zip(names, model.step_times(inputs, clock=clock)):
            if step.kernel in per:
                per[step.kernel] += dt
        for k, t in per.items():
            samples[n][k].append(t)

    start = time.perf_counter()
    for n in (threads, 1):                  # warm: first runs at each count are not kept
        one_run(n)
        for k in kernels:
            samples[n][k].clear()
    for r in range(MAX_ROUNDS):
        for n in ((threads, 1) if r % 2 == 0 else (1, threads)):
            one_run(n)
        if r + 1 >= MIN_ROUNDS and time.perf_counter() - start > budget:
            break
    return [KernelTiming(k, calls[k], forks, statistics.median(samples[threads][k]) * 1e6,
                         statistics.median(samples[1][k]) * 1e6)
            for k, forks in kernels.items()]


def choose(model, threads: int, inputs=None, measure_fn: Callable = measure,
           margin: float = MARGIN):
    """Measure `model` (a CompiledModel built for `threads`), store the choice in its plan
    and apply it: returns (the model, its KernelTimings). At one thread there is nothing to
    choose and the plan is left as it is. `measure_fn(model, threads, forks, inputs)` is
    replaceable (tests inject timings)."""
    if threads <= 1:
        model.set_num_threads(threads)
        return model, []
    begin = time.perf_counter()
    inputs = model._example_inputs() if inputs is None else inputs
    forks = forking_kernels(model, threads, inputs)
    timings = measure_fn(model, threads, forks, inputs) if forks else []
    serial = sorted(t.kernel for t in timings if not t.pays(margin))
    seconds = time.perf_counter() - begin
    meta = {**model.plan.meta, "thread_choice": {
        "threads": threads, "serial": serial, "seconds": round(seconds, 4),
        "kernels": {t.kernel: {"calls": t.calls, "forks": t.forks,
                               "at_n_us": round(t.at_n_us, 2), "at_1_us": round(t.at_1_us, 2)}
                    for t in timings}}}
    model.plan = dataclasses.replace(model.plan, meta=meta)
    model.set_num_threads(threads)
    log.info("thread choice for %s at %d threads: %d of %d forking kernels on one thread "
             "(%.3f s)", model.plan.name, threads, len(serial), len(timings), seconds)
    return model, timings


def describe(model) -> str:
    """The stored choice as lines for a summary or a benchmark log."""
    doc = model.plan.meta.get("thread_choice")
    if not doc:
        return "thread choice: none (built for one thread, or no kernel forks)"
    lines = [f"thread choice at {doc['threads']} threads ({doc['seconds']:.3f} s): "
             f"{len(doc['serial'])} of {len(doc['kernels'])} forking kernels on one thread"]
    for name, k in sorted(doc["kernels"].items(), key=lambda kv: -kv[1]["at_1_us"]):
        where = "1" if name in doc["serial"] else str(doc["threads"])
        lines.append(f"  {name:<44} calls {k['calls']:>3} forks {k['forks']:>3} "
                     f"{k['at_1_us']:>9.1f} us at 1, {k['at_n_us']:>9.1f} at "
                     f"{doc['threads']} -> {where}")
    return "\n".join(lines)
