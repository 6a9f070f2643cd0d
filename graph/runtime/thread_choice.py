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
time every step of native runs (StepClock: the model's call sequence with a clock read
around each call) in alternating rounds with every candidate at N threads and every
candidate at 1. A kernel's time is that of its calls and the few serial steps after each
(which read what the other threads wrote); it keeps N threads where the lower quartile over
rounds of that time at N over the one at 1 is below 1 - MARGIN, or where it is too long for
a fork not to pay (SERIAL_MAX_US per call); otherwise it runs on one. Rounds stop after
MAX_ROUNDS or once BUDGET_SECONDS are spent (at least MIN_ROUNDS).

Between forks far apart the pool's worker goes to sleep, and a fork that must wake it costs
the caller 10-25 us (the main loss of efficientvit_m0 at 2 threads). So the model also wakes
the worker ahead of time: a PREWAKE call (codegen/runtime.py) goes into the model's native
call sequence LEAD_US of serial work before each kept fork that no other fork precedes
closely (`prewake_steps`), and the rounds at N threads are measured with those calls in place.

A kernel's choice changes its neighbours' times (serialising one leaves the worker asleep
for the next fork), so the per-kernel choice is then checked on whole runs of the model
(`validate`) against every forking kernel at N threads (as before this module) and every one
at 1 but the long ones (SERIAL_MAX_US); a configuration other than all at N is kept only
where whole runs are MARGIN faster with it.

The choice is stored in the plan (`meta["thread_choice"]`), so a model from the model cache
or from an export runs exactly as measured and pays nothing at load; measuring again on every
load would make the same model run differently from one process to the next on a noisy
machine and cost the warm compile time it is meant to save. `choose(model, threads)` re-runs
the measurement on demand (a model moved to a quieter or a different machine).
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from ...codegen.runtime import fork_count, prewake_address
from ...codegen.sequence import CallSequence

log = logging.getLogger(__name__)

# N threads must beat one by this fraction of the 1-thread time to keep the kernel's forks:
# a split that saves less is within the noise of a shared machine and costs the other core.
MARGIN = 0.05
MIN_ROUNDS, MAX_ROUNDS = 7, 11
DOWNSTREAM_STEPS = 3           # steps after a fork charged to it (`windows`)
# Whole-run check (`validate`): runs per round, rounds at least and at most (within the
# budget). More rounds than the per-kernel ones: two configurations within a few percent of
# each other are the common case, and identical ones measured 6% apart in 15-run medians.
VALIDATE_RUNS = 3
VALIDATE_MIN_ROUNDS, VALIDATE_MAX_ROUNDS = 5, 25
BUDGET_SECONDS = 0.5
# Rounds are spread out by this pause (longer than the idle worker's spin, ~150 us here, so
# each round starts with it asleep, as a model called now and then does), which also spreads
# them over more of other processes' scheduling. Short: a small model's choice costs mostly
# pauses (2 ms made a 0.5 s compile of a 3-forking-kernel model 0.2 s longer).
PAUSE_SECONDS = 0.0005
# A kernel taking more than this per call at one thread keeps N threads whatever it
# measured: a fork costs at most ~25 us (a sleeping worker, measured), so such a kernel pays
# on a free core, and one measured slower at N was sharing the second core with another
# process at that moment, which a choice stored in the model cache must not keep.
SERIAL_MAX_US = 150.0
# A worker asleep when a fork is posted cost 10-25 us per fork (rocketlake VM, 2026-11-29);
# woken 10-40 us ahead (codegen/runtime.py PREWAKE) it was spinning when the fork came.
# The wake call goes this much serial work (1-thread step times) ahead of a fork.
LEAD_US = 20.0
CLOCK_MONOTONIC = 1           # <time.h>, the same on Linux x86-64 and aarch64


@dataclass(frozen=True)
class KernelTiming:
    """One forking kernel: its calls per run, forks per run at N threads, the lower quartile
    over rounds of its time per run (all its calls, each with the steps after it: `windows`)
    at N threads and at one, and their ratio. Why not the median: another process on the
    second core, or one preempting the caller, only adds time, and the choice, kept in the
    model cache, should describe the machine rather than its load during one compile
    (medians over back-to-back rounds of a small model, all inside one burst of another
    process's work, put phi's and gpt2's 150 us matmuls at 0.95-0.99 in one compile, 0.6
    in others); why not the fastest round: a lucky round made 15 us convs that lose in a
    typical run look 7-11% faster at 2 threads."""

    kernel: str
    calls: int
    forks: int
    at_n_us: float
    at_1_us: float
    ratio: float

    def pays(self, margin: float = MARGIN) -> bool:
        """N threads are worth keeping: measured faster by `margin`, or the kernel is too
        long for a fork not to pay (SERIAL_MAX_US)."""
        return self.ratio < 1.0 - margin or self.at_1_us > SERIAL_MAX_US * self.calls


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


class StepClock:
    """The model's steps as one native call sequence (codegen/sequence.py) with a
    clock_gettime call before and after each step, and a PREWAKE call (outside the timed
    span) before each step of `prewake`: `clock(inputs)` runs the model once and returns each
    step's seconds (0 for a step not in `timed`, when that is given). Why not time the steps
    from Python: 1-3 us of interpreter between calls changes what a fork meets (the worker's
    spin, the caller's cache), and small kernels measured so lost their gain from a second
    thread (bert's six 15 us matmul calls: 2-thread over 1-thread time 1.047 timed from
    Python, 0.873 timed here; 2026-11-29)."""

    def __init__(self, model, prewake=(), timed=None):
        libc = ctypes.CDLL(None)
        stamp = ctypes.cast(libc.clock_gettime, ctypes.c_void_p).value
        steps = model.plan.steps
        self._model = model
        self._ts = np.zeros((2 * len(steps), 2), np.int64)         # struct timespec each
        base, size = self._ts.ctypes.data, self._ts.strides[0]
        calls = []
        for k, (step, (_, args)) in enumerate(zip(steps, model._steps)):
            if k in prewake:
                calls.append((prewake_address(), []))
            clocked = timed is None or k in timed    # (fewer calls: a cheaper sequence)
            if clocked:
                calls.append((stamp, [CLOCK_MONOTONIC, base + 2 * k * size]))
            calls.append((model.kernels[step.kernel].address, [a.ctypes.data for a in args]))
            if clocked:
                calls.append((stamp, [CLOCK_MONOTONIC, base + (2 * k + 1) * size]))
        self._sequence = CallSequence(calls, name=f"{model.plan.name}_timed")

    def __call__(self, inputs) -> list[float]:
        self._model._bind(inputs)
        self._sequence()
        ns = self._ts[:, 0] * 1_000_000_000 + self._ts[:, 1]
        return ((ns[1::2] - ns[0::2]) * 1e-9).tolist()


def step_us(model, inputs, runs: int = 3) -> list[float]:
    """Each step's fastest time in microseconds over `runs` step-by-step runs from Python,
    with the model's kernels at their current thread counts (for where to wake the workers:
    the serial steps' times, which a microsecond of interpreter per step hardly changes)."""
    runs_us = [model.step_times(inputs) for _ in range(runs)]
    return [min(ts) * 1e6 for ts in zip(*runs_us)]


def prewake_steps(times_us, forking, lead_us: float = LEAD_US) -> list[int]:
    """Where a model wakes the pool's workers: for each forking step, the step that starts
    `lead_us` of serial work before it (by `times_us`; the first step when there is less),
    or none when another fork comes sooner before it (the worker still spins from that one)
    or nothing runs before it (a wake right before the fork's own is only a second system
    call). `forking[k]`: step k forks."""
    out = []
    for i, forks in enumerate(forking):
        if not forks:
            continue
        j, ahead = i, 0.0
        while j > 0 and ahead < lead_us and not forking[j - 1]:
            j -= 1
            ahead += times_us[j]
        if j < i and (j == 0 or ahead >= lead_us) and j not in out:
            out.append(j)
    return out


def windows(steps, kernels) -> list[tuple[str, int, int]]:
    """(kernel, first, end) per step of a forking kernel: the step and the serial steps after
    it, up to DOWNSTREAM_STEPS of them and not past the next forking step. Why the steps
    after: they read what the fork's other threads wrote, from another core's cache
    (efficientvit_m0: the three steps after each of its forks took 1-8 us longer when the
    fork ran on two threads, together as much as the forks saved)."""
    at = [k for k, s in enumerate(steps) if s.kernel in kernels]
    out = []
    for j, k in enumerate(at):
        end = min(k + 1 + DOWNSTREAM_STEPS, at[j + 1] if j + 1 < len(at) else len(steps))
        out.append((steps[k].kernel, k, end))
    return out


def lower_quartile(xs) -> float:
    return sorted(xs)[len(xs) // 4]


def measure(model, threads: int, kernels: Mapping[str, int], inputs,
            clock: Callable[[], float] | None = None,
            budget: float = BUDGET_SECONDS, prewake=()) -> list[KernelTiming]:
    """Times per run of `kernels` (name -> forks per run), each call with the steps after it
    (`windows`), at `threads` and at one, from timed native runs of `model` (StepClock, the
    workers woken before the `prewake` steps) in alternating rounds (see the module
    docstring); with `clock`, from Python step-by-step runs timed by it instead."""
    steps = model.plan.steps
    calls = {k: sum(1 for s in steps if s.kernel == k) for k in kernels}
    spans = windows(steps, kernels)
    samples = {n: {k: [] for k in kernels} for n in (threads, 1)}
    timed = None if clock is not None else StepClock(
        model, frozenset(prewake), {k for _, first, end in spans for k in range(first, end)})

    def one_run(n: int) -> None:
        for k in kernels:
            model.kernels[k].set_num_threads(n)
        times = timed(inputs) if timed is not None else model.step_times(inputs, clock=clock)
        per = dict.fromkeys(kernels, 0.0)
        for k, first, end in spans:
            per[k] += sum(times[first:end])
        for k, t in per.items():
            samples[n][k].append(t)

    start = time.perf_counter()
    for n in (threads, 1):                  # warm: first runs at each count are not kept
        one_run(n)
        for k in kernels:
            samples[n][k].clear()
    for r in range(MAX_ROUNDS):
        time.sleep(PAUSE_SECONDS)
        for n in ((threads, 1) if r % 2 == 0 else (1, threads)):
            one_run(n)
        if r + 1 >= MIN_ROUNDS and time.perf_counter() - start > budget:
            break
    out = []
    for k, forks in kernels.items():
        at_n = lower_quartile(samples[threads][k]) * 1e6
        at_1 = lower_quartile(samples[1][k]) * 1e6
        out.append(KernelTiming(k, calls[k], forks, at_n, at_1,
                                at_n / at_1 if at_1 > 0 else 1.0))
    return out


def _apply(model, threads: int, serial, wake, extra: dict | None = None) -> None:
    """Store a choice (`serial` kernels, `wake` steps) in the model's plan and apply it."""
    doc = {"threads": threads, "serial": sorted(serial), "prewake": sorted(wake),
           **(extra or {})}
    model.plan = dataclasses.replace(model.plan, meta={**model.plan.meta, "thread_choice": doc})
    model.set_num_threads(threads)


def validate(model, threads: int, configs: Mapping[str, tuple], inputs,
             budget: float = BUDGET_SECONDS) -> dict[str, float]:
    """Whole runs of the model's native call sequence under each config (name -> (serial
    kernels, prewake steps)) in alternating rounds: the lower quartile over rounds of each
    round's median of VALIDATE_RUNS runs, in microseconds. Why: a kernel's choice changes
    its neighbours' times (a fork the worker finds asleep after a serialised kernel ran
    gpt2's 50 us matmuls 1.3-1.6x slower at 2 threads), which the per-kernel rounds of
    `measure` do not see."""
    samples = {name: [] for name in configs}
    model._bind(inputs)
    start = time.perf_counter()
    for r in range(VALIDATE_MAX_ROUNDS):
        names = list(configs)
        if r >= VALIDATE_MIN_ROUNDS and time.perf_counter() - start > budget:
            break
        for name in names[r % len(names):] + names[:r % len(names)]:
            _apply(model, threads, *configs[name])
            model._bind(inputs)
            time.sleep(PAUSE_SECONDS)
            runs = []
            for _ in range(VALIDATE_RUNS):
                begin = time.perf_counter()
                model._sequence()
                runs.append(time.perf_counter() - begin)
            samples[name].append(sorted(runs)[len(runs) // 2])
    return {name: lower_quartile(v) * 1e6 for name, v in samples.items()}


def choose(model, threads: int, inputs=None, measure_fn: Callable = measure,
           margin: float = MARGIN, validate_fn: Callable = validate):
    """Measure `model` (a CompiledModel built for `threads`), store the choice in its plan
    and apply it: returns (the model, its KernelTimings). At one thread there is nothing to
    choose and the plan is left as it is. The per-kernel choice (`measure`) is then checked
    on whole runs (`validate`) against every forking kernel at N threads (as before this
    module) and every one at 1 but those over SERIAL_MAX_US per call ("small-1"): the
    fastest of the other two replaces "all-n" only where it is faster by `margin` of the
    model's time (a near tie is noise, and "all-n" is what the schedules were made for).
    `measure_fn(model, threads, forks, inputs, prewake=)` and `validate_fn(model, threads,
    configs, inputs)` are replaceable (tests inject timings)."""
    if threads <= 1 or model._sequence is None:
        model.set_num_threads(threads)
        return model, []
    begin = time.perf_counter()
    inputs = model._example_inputs() if inputs is None else inputs
    forks = forking_kernels(model, threads, inputs)
    timings, serial, wake, picked, runs = [], set(), [], "none", {}
    if forks:
        model.set_num_threads(1, choice=False)
        times = step_us(model, inputs)
        steps = model.plan.steps
        every = prewake_steps(times, [s.kernel in forks for s in steps])
        timings = measure_fn(model, threads, forks, inputs, prewake=every)
        serial = {t.kernel for t in timings if not t.pays(margin)}
        wake = prewake_steps(times, [s.kernel in forks and s.kernel not in serial
                                     for s in steps])
        small = {t.kernel for t in timings if t.at_1_us <= SERIAL_MAX_US * t.calls}
        configs = {"per-kernel": (serial, wake), "all-n": (set(), []), "small-1": (small, [])}
        if serial:
            runs = validate_fn(model, threads, configs, inputs)
            best = min(runs, key=runs.get)
            picked = best if runs[best] < runs["all-n"] * (1.0 - margin) else "all-n"
        else:
            # every forking kernel pays at N on its own: the whole-run check, most of the
            # choice's time (0.45 of 0.7 s on a 10 ms CNN), would only weigh the early wake
            # (0-2%, RESULTS.md) and "small-1" against kernels measured faster at N
            picked = "all-n"
        serial, wake = configs[picked]
    seconds = time.perf_counter() - begin
    _apply(model, threads, serial, wake, {
        "picked": picked, "runs_us": {k: round(v, 1) for k, v in runs.items()},
        "seconds": round(seconds, 4),
        "kernels": {t.kernel: {"calls": t.calls, "forks": t.forks,
                               "at_n_us": round(t.at_n_us, 2), "at_1_us": round(t.at_1_us, 2),
                               "ratio": round(t.ratio, 4)}
                    for t in timings}})
    log.info("thread choice for %s at %d threads: %s, %d of %d forking kernels on one thread "
             "(%.3f s)", model.plan.name, threads, picked, len(serial), len(timings), seconds)
    return model, timings


def describe(model) -> str:
    """The stored choice as lines for a summary or a benchmark log."""
    doc = model.plan.meta.get("thread_choice")
    if not doc:
        return "thread choice: none (built for one thread, or no kernel forks)"
    runs = ", ".join(f"{k} {v:.1f} us" for k, v in doc.get("runs_us", {}).items())
    lines = [(f"thread choice at {doc['threads']} threads ({doc['seconds']:.3f} s): "
             f"{doc.get('picked')} ({runs}): {len(doc['serial'])} of {len(doc['kernels'])} "
             f"forking kernels on one thread, workers woken ahead of "
             f"{len(doc.get('prewake', ()))} steps")]
    for name, k in sorted(doc["kernels"].items(), key=lambda kv: -kv[1]["at_1_us"]):
        where = "1" if name in doc["serial"] else str(doc["threads"])
        lines.append(f"  {name:<44} calls {k['calls']:>3} forks {k['forks']:>3} "
                     f"{k['at_1_us']:>9.1f} us at 1, {k['at_n_us']:>9.1f} at "
                     f"{doc['threads']} (ratio {k['ratio']:.3f}) -> {where}")
    return "\n".join(lines)
