"""How a short time budget is spent: where a task's measured spread says there is something
to gain, in the neighbourhood of its default, until its candidates stop improving.

Why: a 3-minute tune of an unseen MNASNet measured 88 candidates and left the model no faster
(issue 33). The task scheduler's round-robin warm-up gave every task a batch of 8 in model
order, so a few minutes went to whichever tasks came first, whatever their share of the
model's time; the search's first batches were random configs far from the default, and the
default schedules are within about 11% of the best of the configs around them
(benchmarks/RESULTS.md, 2026-11-26 08:40 UTC): what a few minutes can find is near the default.

So, with the tasks' in-model latencies known (the default-compiled model profiled once):
- no warm-up: a task never measured competes with an expected gain of PRIOR_GAIN of its
  latency per batch, so the heaviest tasks start first and light ones wait;
- a measured task's gain per batch is its latency x the larger of its recent improvement and
  its spread (the standard deviation of log(default time / candidate time) over its working
  candidates) over the candidates measured so far: a task whose candidates all cluster at or
  below the default has little left, one whose candidates differ a lot has more;
- a task whose last PATIENCE batches improved its best by less than MIN_STEP is stalled: its
  gain drops to a tie-breaking floor;
- each batch is the default (first), mutations of the task's best so far and EXPLORE
  samples of the whole space (none by default); a task's first batch may hold WARM more
  whole-space samples (ranked by the shared cost model once it has learnt from other tasks;
  none by default), a short broad look before later batches mutate whichever won;
  the search's own proposals only when those run out (its
  simulated annealing lowers hundreds of configs per batch: 1.3-1.7 s per measured candidate
  at batches of 4, four times the candidate's LLVM build). Once a task has RANK_AFTER working
  candidates, RANK_POOL times as many are drawn and the cost model keeps those it ranks best
  (a lowering for the features costs ~15 ms, a build a fraction of a second or more);
- what is kept of the budget after the loop is what the tasks tuned so far need: their
  confirmations and in-model checks (reserve_seconds), not a fixed share.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from .database import config_key

if TYPE_CHECKING:
    from .tuner import TaskTuner

PRIOR_GAIN = 0.05   # expected share of an unmeasured task's latency one batch saves
PATIENCE = 2        # batches without a MIN_STEP improvement before a task is stalled
MIN_STEP = 0.01     # relative improvement of a task's best that counts as progress
SPREAD_CAP = 0.5    # a spread above this is failures and outliers, not promise
FLOOR = 1e-3        # a stalled task's gain, x latency / trials (ties go to the heaviest)
BATCH = 4           # candidates per batch (a trial costs seconds: smaller steps, finer choice)
EXPLORE = 0         # of a batch, samples of the whole space (the rest: local); 1 was
                    # measured (RESULTS.md 2026-11-29, issue 33 item 4) and not kept
WARM = 0            # of a task's first batch, samples of the whole space on top of EXPLORE
                    # (a short broad warm-up, as main's round-robin one that found GPT-2's
                    # 1.10x); 2 was measured (RESULTS.md 2026-11-29, issue 33 item 4,
                    # second attempt: 1.073/1.031 against 1.130/1.043) and not kept
RANK_POOL = 3       # mutations drawn per one measured, the cost model keeping its best ...
RANK_AFTER = 8      # ... once the task has this many working candidates
CONFIRM_BUILD_SECONDS = 2.0     # a build, before any trial has been timed
CONFIRM_TIMING_SECONDS = 0.5    # a confirmation's interleaved rounds


def spread(default_seconds: float, costs: Sequence[float]) -> float:
    """Standard deviation of log(default / cost) over the finite costs (0 with fewer than two,
    or without a working default), capped at SPREAD_CAP."""
    if not math.isfinite(default_seconds) or default_seconds <= 0:
        return 0.0
    logs = [math.log(default_seconds / c) for c in costs if math.isfinite(c) and c > 0]
    if len(logs) < 2:
        return 0.0
    mean = sum(logs) / len(logs)
    return min(SPREAD_CAP, math.sqrt(sum((v - mean) ** 2 for v in logs) / (len(logs) - 1)))


def stalled(history: Sequence[float], patience: int = PATIENCE,
            min_step: float = MIN_STEP) -> bool:
    """Whether the best time (one entry after each batch, the first before any) improved by
    less than `min_step` (relative) over each of the last `patience` batches."""
    if len(history) <= patience:
        return False
    recent = history[-patience - 1:]
    return all(not (math.isfinite(b) and (not math.isfinite(a) or (a - b) / a >= min_step))
               for a, b in zip(recent, recent[1:]))


def recent_improvement(history: Sequence[float], window: int = PATIENCE) -> float:
    """Relative improvement of the best over the last `window` batches (0 if none)."""
    if len(history) < 2:
        return 0.0
    older, best = history[max(0, len(history) - 1 - window)], history[-1]
    if not math.isfinite(best):
        return 0.0
    if not math.isfinite(older):
        return PRIOR_GAIN
    return max(0.0, (older - best) / older)


def spread_gain(latency: float, default_seconds: float, costs: Sequence[float],
                history: Sequence[float], trials: int) -> float:
    """Expected model seconds the task's next batch saves (see the module docstring):
    `latency` its seconds in the model, `costs` its candidates' times so far (inf: failed),
    `history` its best after each batch, `trials` its measured candidates."""
    if trials == 0:
        return latency * PRIOR_GAIN
    floor = latency * FLOOR / trials
    if stalled(history) or not math.isfinite(default_seconds):
        return floor
    promise = spread(default_seconds, costs) / (1 + sum(map(math.isfinite, costs)))
    return max(floor, latency * max(recent_improvement(history), promise))


def tuner_gain(tuner: TaskTuner, latency: float, history: Sequence[float]) -> float:
    """spread_gain for a TaskTuner's state."""
    return spread_gain(latency, tuner.default_seconds, tuner.costs, history, tuner.n_records)


def local_batch(space, base: dict, seen: set[str], n: int, salt: str) -> list[dict]:
    """Up to `n` mutations of `base` not in `seen` (config keys), the same for the same salt."""
    out = []
    for config in space.mutations(base, 3 * n, f"{space.task.workload_key}/{salt}"):
        if config_key(config) not in seen:
            out.append(config)
            if len(out) == n:
                break
    return out


# a trial's parts that a confirmation's build of a config repeats (not the search's propose,
# the cost model's update or the database commit: a confirmation does none of those)
BUILD_PARTS = ("worker_setup", "worker_lower", "worker_compile", "worker_check", "worker_run",
               "worker_timeout", "ipc")


def build_seconds(tuners) -> float:
    """Mean seconds the measurement worker took per trial so far (its round trip: setup,
    lowering, LLVM, the check, the timing, IPC), or CONFIRM_BUILD_SECONDS before any."""
    trials = sum(t.timer.trials for t in tuners)
    if not trials:
        return CONFIRM_BUILD_SECONDS
    return sum(t.timer.seconds.get(part, 0.0) for t in tuners for part in BUILD_PARTS) / trials


def reserve_seconds(tuners, confirm, check_seconds: float,
                    verdict_seconds: float | None = None) -> float:
    """Seconds a short budget keeps after its tuning loop: for each task whose best so far is
    not its default, a confirmation (`confirm`: ConfirmOptions or None; 1 + leaders builds at
    the worker's measured seconds per trial so far, build_seconds) and an in-model check:
    `check_seconds` and a build of its tuned kernel, which the checks' first compile makes
    (tuning candidates are not kept in the kernel cache); plus `verdict_seconds` for the
    whole-model verdict (None: one more check's worth). Both come measured from
    graph/compile/check_cost.py in tune_model."""
    tuned = sum(1 for t in tuners if t.best_is_tuned)
    if verdict_seconds is None:
        verdict_seconds = check_seconds
    per_build = build_seconds(tuners) if tuned else 0.0
    seconds = 0.0
    if check_seconds:
        seconds = (check_seconds + per_build) * tuned + verdict_seconds
    if confirm is not None and tuned:
        seconds += tuned * ((1 + confirm.leaders) * per_build + CONFIRM_TIMING_SECONDS)
    return seconds
