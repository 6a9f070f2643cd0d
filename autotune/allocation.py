"""How a tuning budget is shared between tasks: the next batch goes to the task expected to
save the most latency per trial (the local task scheduler and the cluster runner use it)."""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .tuner import TaskTuner


def expected_gain(tuner: TaskTuner, weight: float, history: list[float], window: int) -> float:
    """Expected latency saved per trial if `tuner` gets the next batch.

    NOTE: the floor was a constant 5%: a resumed run (every history starts at the stored best,
    no warm-up) then gave nearly every batch to the task of largest weight x latency - one of
    MobileNetV2's 32 tasks got 600 of 1000 trials, its 112x112 depthwise convs 8 each, and 64
    more trials for three of those made the model 1.065x faster at 1 thread."""
    best = tuner.best_seconds
    if not math.isfinite(best):
        return math.inf          # no working schedule yet: most urgent
    older = history[-window] if len(history) >= window else history[0]
    improvement = max(0.0, (older - best) / older) if math.isfinite(older) else 1.0
    return weight * best * max(improvement, 1.0 / max(1, tuner.n_records))
