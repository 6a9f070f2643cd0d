"""How much the XGBoost cost model helps: best-so-far curves of model-guided vs random search.

Each (task, strategy, seed) tunes from an empty temporary database. Prints, per task and
strategy, the mean best GFLOPS after the budget and the mean number of trials needed to reach
90% of the best throughput any run found; saves the curves as a PNG next to this file.

    python benchmarks/tune_search_efficiency.py [--trials 40] [--seeds 2]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, kiln_threads, print_table  # noqa: E402

from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.measure import MeasureOptions  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.autotune.tuner import canonical_target, tune_task  # noqa: E402

TASKS = {"gemm_256": ("matmul", (256, 256, 256)),
         "conv_32x28x28": ("conv2d", (1, 32, 28, 28, 32, 3, 3, 1, 1))}
STRATEGIES = ("xgb", "random")


def best_so_far_gflops(task: Task, db: Database, target: str) -> np.ndarray:
    """GFLOPS of the best record after each trial (0 until the first correct one)."""
    best, curve = np.inf, []
    for record in db.records(task.workload_key, target):
        best = min(best, record.mean_cost)
        curve.append(task.flops / best / 1e9 if np.isfinite(best) else 0.0)
    return np.array(curve)


def trials_to_reach(curve: np.ndarray, level: float) -> int:
    hits = np.nonzero(curve >= level)[0]
    return int(hits[0]) + 1 if len(hits) else len(curve) + 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=40)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--png", default=os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "tune_search_efficiency.png"))
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    target = canonical_target("native")
    options = MeasureOptions(timeout=30, repeat=3, min_repeat_seconds=0.02)
    curves: dict[tuple[str, str], list[np.ndarray]] = {}
    with tempfile.TemporaryDirectory() as tmp, kiln_threads(2):
        for task_name, (op, shape) in TASKS.items():
            task = Task.from_op(op, shape)
            for strategy in STRATEGIES:
                for seed in range(args.seeds):
                    db = Database(os.path.join(tmp, f"{task_name}_{strategy}_{seed}.db"))
                    tune_task(task, "native", trials=args.trials, db=db, search=strategy,
                              batch_size=args.batch, seed=seed, options=options)
                    curve = best_so_far_gflops(task, db, target)
                    curves.setdefault((task_name, strategy), []).append(curve)
                    print(f"{task_name:>14} {strategy:>6} seed {seed}: best "
                          f"{curve[-1]:7.1f} GFLOPS", flush=True)

    rows, figures = [], {"trials": args.trials, "seeds": args.seeds}
    for task_name in TASKS:
        top = max(c[-1] for s in STRATEGIES for c in curves[(task_name, s)])
        for strategy in STRATEGIES:
            runs = curves[(task_name, strategy)]
            final = float(np.mean([c[-1] for c in runs]))
            reach = float(np.mean([trials_to_reach(c, 0.9 * top) for c in runs]))
            rows.append([task_name, strategy, final, reach])
            figures[f"{task_name}_{strategy}_best_gflops"] = round(final, 2)
            figures[f"{task_name}_{strategy}_trials_to_90pct"] = round(reach, 1)
    print_table(["task", "search", "best GFLOPS (mean)", "trials to 90% of best"], rows)
    _plot(curves, args.png)
    figures["png"] = os.path.relpath(args.png)
    emit_json(figures)


def _plot(curves, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(TASKS), figsize=(5 * len(TASKS), 3.6))
    for ax, task_name in zip(np.atleast_1d(axes), TASKS):
        for strategy, color in zip(STRATEGIES, ("tab:red", "tab:gray")):
            for i, curve in enumerate(curves[(task_name, strategy)]):
                ax.plot(np.arange(1, len(curve) + 1), curve, color=color, alpha=0.8,
                        label=strategy if i == 0 else None)
        ax.set_title(task_name)
        ax.set_xlabel("trials")
        ax.set_ylabel("best GFLOPS so far")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
