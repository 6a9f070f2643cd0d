"""Where a tuning run's time goes, per trial: search, model, worker phases, database.

The tuner should be limited by measurement, not by Python. `TrialTimer` keeps cheap
perf_counter totals of the exclusive parts of each trial (they add up to the wall time of the
tuning steps) plus informative sub-parts (feature extraction, model scoring and refitting,
which happen inside `propose` and `model_update`), and turns them into a summary dict with
seconds per trial and measured candidates per minute.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

# exclusive parts: together (plus "other") they are the wall time of the tuning steps;
# worker_timeout is the whole round trip of a candidate that hit the timeout (it was being
# built or timed, so it is measurement, not overhead)
PARTS = ("propose", "worker_setup", "worker_lower", "worker_compile", "worker_check",
         "worker_run", "worker_timeout", "ipc", "db_commit", "model_update", "other")
# sub-parts, contained in propose / model_update
SUB_PARTS = ("features", "score", "fit")
# overhead: everything but lowering, compiling, checking and timing the candidate
OVERHEAD_PARTS = ("propose", "model_update", "db_commit", "worker_setup", "ipc", "other")


class TrialTimer:
    """Accumulates seconds by part over the trials of one task (or several, via merge)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = dict.fromkeys(PARTS + SUB_PARTS, 0.0)
        self.trials = 0
        self.wall = 0.0

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - start)

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + max(0.0, seconds)

    def add_measurement(self, wall: float, phases: dict, timed_out: bool = False) -> None:
        """One candidate's round trip: the worker's own phases, the rest is IPC (pickling,
        pipes, worker start-up or restart after a crash). A candidate that timed out reports
        no phases: its round trip is `worker_timeout`, not IPC."""
        if timed_out:
            self.add("worker_timeout", wall)
            return
        inside = 0.0
        for phase, seconds in phases.items():
            self.add(f"worker_{phase}", seconds)
            inside += seconds
        self.add("ipc", wall - inside)

    def add_counters(self, before: dict, after: dict) -> None:
        for name in SUB_PARTS:
            self.add(name, after.get(name, 0.0) - before.get(name, 0.0))

    def merge(self, other: "TrialTimer") -> None:
        for name, seconds in other.seconds.items():
            self.add(name, seconds)
        self.trials += other.trials
        self.wall += other.wall

    def summary(self) -> dict:
        """Totals and seconds per trial by part, candidates per minute, overhead share."""
        accounted = sum(self.seconds[p] for p in PARTS if p != "other")
        seconds = dict(self.seconds, other=max(0.0, self.wall - accounted))
        n = max(1, self.trials)
        overhead = sum(seconds[p] for p in OVERHEAD_PARTS)
        return {"trials": self.trials, "wall_seconds": self.wall,
                "candidates_per_minute": 60.0 * self.trials / self.wall if self.wall else 0.0,
                "overhead_share": overhead / self.wall if self.wall else 0.0,
                "seconds": seconds,
                "per_trial": {name: value / n for name, value in seconds.items()}}


def merge_summaries(timers: list[TrialTimer]) -> dict:
    """One summary over several tasks' timers (the task scheduler's run)."""
    total = TrialTimer()
    for timer in timers:
        total.merge(timer)
    return total.summary()
