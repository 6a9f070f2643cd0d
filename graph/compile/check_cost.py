"""What the in-model checks after a short tune cost, measured before tuning starts: what the
task scheduler keeps of a time budget for them (autotune/spread.reserve_seconds).

Why: a fixed 3 s per tuned task (a guess for two cores) left 60-70 s of GPT-2's 5-minute
budget unspent on a quiet machine, and on a loaded one (checks of 4.6-7 s, and a first
compile that builds every tuned kernel, which the guess left out) the deadline stopped the
checks after 6 of 16 tasks (benchmarks/RESULTS.md). A check is a compile of the model with
every kernel but one already in the kernel cache, then paired rounds of runs
(model_check.paired_ratio), so both parts can be measured once, up front: one warm compile
(its wall time) and a short run of its result (the time per run on the checks' clock, and how
much a shared machine stretches it in wall time).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

from . import model_check as check

WARMUP_RUNS = 3     # paired_ratio's warm-up of each side and its calibration run


@dataclass(frozen=True)
class CheckCost:
    """A warm compile's wall seconds, one model run's seconds on the checks' clock, and the
    wall seconds per second of that clock (>= 1: how much a shared machine stretches it)."""
    compile_seconds: float
    run_seconds: float
    stretch: float = 1.0

    def timing_seconds(self, rounds: int) -> float:
        """Wall seconds of paired_ratio over `rounds`: each round times both sides
        SAMPLES times, each sample at least SAMPLE_SECONDS (whole runs)."""
        run = max(self.run_seconds, 1e-7)
        sample = math.ceil(check.SAMPLE_SECONDS / run) * run
        return self.stretch * (2 * WARMUP_RUNS * run + 2 * rounds * check.SAMPLES * sample)

    def check_seconds(self, rounds: int = check.ROUNDS) -> float:
        """One task's check: the model compiled with its default, then the paired rounds."""
        return self.compile_seconds + self.timing_seconds(rounds)

    def verdict_seconds(self) -> float:
        """The whole-model verdict: the tuned model and the default one compiled afresh, then
        model_check.VERDICT_ROUNDS paired rounds (over fresh instances)."""
        return 2 * self.compile_seconds + self.timing_seconds(check.VERDICT_ROUNDS)


def measure_check_cost(compile_now: Callable[[], object], threads: int,
                       probe_seconds: float = 0.1) -> CheckCost:
    """Time one compile of the model whose kernels are already in the kernel cache (as every
    check's is), then run the result for about `probe_seconds`: its time per run on the
    clock the checks use (model_check.model_clock), and the wall time over that clock."""
    start = time.perf_counter()
    model = compile_now()
    compile_seconds = time.perf_counter() - start
    inputs = model._example_inputs()
    model.run(inputs)
    clock = check.model_clock(threads)
    runs, wall, used = 0, time.perf_counter(), clock()
    while runs < WARMUP_RUNS or time.perf_counter() - wall < probe_seconds:
        model.run(inputs)
        runs += 1
    wall, used = time.perf_counter() - wall, clock() - used
    stretch = min(4.0, max(1.0, wall / used)) if used > 0 else 1.0
    return CheckCost(compile_seconds, used / runs, stretch)
