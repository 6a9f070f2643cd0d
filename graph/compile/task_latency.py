"""Each task's share of a compiled model's time, measured: what a short tuning budget is
spent by (autotune/spread.py).

Why: the task scheduler ranked tasks by occurrences x their best measured time, which it
only learns by measuring each task first; with a budget of minutes and a trial of seconds,
most tasks are never measured. One profile of the model (its kernels timed in place, a
second or two after a compile whose kernels the in-model check reuses from the cache) gives
every task's seconds up front.
"""
from __future__ import annotations


def task_latencies(compiled, tasks, repeat: int = 5) -> dict[str, float]:
    """Workload key -> seconds a run of `compiled` spends in that task's kernels (summed over
    its occurrences), from `compiled.profile`; `tasks`: the model's ModelTasks."""
    key_of = {mt.name: mt.task.workload_key for mt in tasks}
    out = {key: 0.0 for key in key_of.values()}
    for row in compiled.profile(repeat=repeat):
        key = key_of.get(row["kernel"])
        if key is not None:
            out[key] += row["ms"] / 1e3
    return out
