"""What tuning reports after each trial: one value that progress bars, progress lines off a
terminal and callers' callbacks read (the local tuner, the task scheduler and the cluster
runner all emit it)."""
from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Progress:
    """What a progress bar needs after each trial."""

    task_name: str
    trials_done: int
    trials_total: int
    best_gflops: float
    last_status: str
    elapsed: float
    best_seconds: float = math.inf      # the task's best latency so far
    workers: str = ""                   # on a cluster: "busy/matching" workers

    @property
    def eta_seconds(self) -> float:
        done = max(1, self.trials_done)
        return self.elapsed / done * max(0, self.trials_total - self.trials_done)
