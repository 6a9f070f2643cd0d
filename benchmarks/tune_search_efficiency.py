"""How much the XGBoost cost model helps: best-so-far curves of model-guided vs random search.

Each (task, strategy, seed) tunes from an empty temporary database (so no transfer-learning
prior: the model starts from nothing). Prints, per task and strategy, the mean (and min..max
over seeds) best GFLOPS after the budget and the mean number of trials needed to reach 90% of
the best throughput any run found; saves the curves as a PNG next to this file. The default
(2 tasks x 2 searches x 3 seeds x 40 trials) takes about 10 minutes on an idle 2-core machine.

    python benchmarks/tune_search_efficiency.py [--trials 40] [--seeds 3]

With --transfer: does a cost model pretrained on conv task A help tune a similar conv task B?
Tunes A once (--source-trials, default 60), then B for --trials (24 is the study's setting) per
seed from an empty log ("cold") and from a copy of A's log ("prior": the stored feature
vectors of A's records train the model before B's first trial); reports best GFLOPS after 8,
16 and all trials, trials to 90% of the best any B run found, and the Kendall tau with which a
model trained only on A ranks all of B's measured candidates (an offline, noise-tolerant view).

    python benchmarks/tune_search_efficiency.py --transfer --trials 24 --seeds 3
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import shutil
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, kiln_threads, print_table  # noqa: E402

from kiln.autotune.cost_model import (CostModelPool, kendall_tau,  # noqa: E402
                                      normalize_throughput)
from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.features import FEATURE_VERSION  # noqa: E402
from kiln.autotune.measure import MeasureOptions  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.autotune.tuner import canonical_target, tune_task  # noqa: E402

TASKS = {"gemm_256": ("matmul", (256, 256, 256)),
         "conv_32x28x28": ("conv2d", (1, 32, 28, 28, 32, 3, 3, 1, 1))}
STRATEGIES = ("xgb", "random")
TRANSFER_SOURCE = ("conv2d", (1, 32, 28, 28, 32, 3, 3, 1, 1))
TRANSFER_TARGET = ("conv2d", (1, 64, 14, 14, 64, 3, 3, 1, 1))


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
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--png", default=os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "tune_search_efficiency.png"))
    parser.add_argument("--transfer", action="store_true",
                        help="the transfer-learning study instead (see the module docstring)")
    parser.add_argument("--source-trials", type=int, default=60)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    if args.transfer:
        transfer_study(args)
        return
    target = canonical_target("native")
    options = MeasureOptions(timeout=30, repeat=3, min_repeat_seconds=0.02)
    curves: dict[tuple[str, str], list[np.ndarray]] = {}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, kiln_threads(2):
        for task_name, (op, shape) in TASKS.items():
            task = Task.from_op(op, shape)
            for strategy in STRATEGIES:
                for seed in range(args.seeds):
                    db = Database(os.path.join(tmp, f"{task_name}_{strategy}_{seed}.db"))
                    tune_task(task, "native", trials=args.trials, db=db, search=strategy,
                              batch_size=args.batch, seed=seed, options=options,
                              transfer=False)
                    curve = best_so_far_gflops(task, db, target)
                    curves.setdefault((task_name, strategy), []).append(curve)
                    print(f"{task_name:>14} {strategy:>6} seed {seed}: best "
                          f"{curve[-1]:7.1f} GFLOPS", flush=True)

    rows, figures = [], {"trials": args.trials, "seeds": args.seeds,
                         "wall_seconds": round(time.perf_counter() - began, 1)}
    for task_name in TASKS:
        top = max(c[-1] for s in STRATEGIES for c in curves[(task_name, s)])
        for strategy in STRATEGIES:
            runs = curves[(task_name, strategy)]
            finals = [float(c[-1]) for c in runs]
            final = float(np.mean(finals))
            reach = float(np.mean([trials_to_reach(c, 0.9 * top) for c in runs]))
            rows.append([task_name, strategy, final, f"{min(finals):.1f}..{max(finals):.1f}",
                         reach])
            figures[f"{task_name}_{strategy}_best_gflops"] = round(final, 2)
            figures[f"{task_name}_{strategy}_best_gflops_per_seed"] = [round(f, 2)
                                                                     for f in finals]
            figures[f"{task_name}_{strategy}_trials_to_90pct"] = round(reach, 1)
    print_table(["task", "search", "best GFLOPS (mean)", "min..max", "trials to 90% of best"],
                rows)
    _plot(curves, args.png)
    figures["png"] = os.path.relpath(args.png)
    emit_json(figures)


def transfer_study(args) -> None:
    """Tune conv B cold and with a prior from conv A's log, per seed; see the docstring."""
    target = canonical_target("native")
    options = MeasureOptions(timeout=30, repeat=3, min_repeat_seconds=0.02)
    source, task = Task.from_op(*TRANSFER_SOURCE), Task.from_op(*TRANSFER_TARGET)
    curves: dict[str, list[np.ndarray]] = {"cold": [], "prior": []}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, kiln_threads(2):
        source_path = os.path.join(tmp, "source.db")
        source_db = Database(source_path)
        tune_task(source, "native", trials=args.source_trials, db=source_db, seed=100,
                  batch_size=args.batch, options=options, transfer=False)
        source_db.close()
        print(f"source {source.name}: {args.source_trials} trials", flush=True)
        measured: list[tuple[np.ndarray, np.ndarray]] = []
        for seed in range(args.seeds):
            for mode in ("cold", "prior"):
                path = os.path.join(tmp, f"{mode}_{seed}.db")
                if mode == "prior":
                    shutil.copy(source_path, path)
                db = Database(path)
                tune_task(task, "native", trials=args.trials, db=db, seed=seed,
                          batch_size=args.batch, options=options, transfer=mode == "prior")
                curves[mode].append(best_so_far_gflops(task, db, target))
                rows = db.feature_rows(target, FEATURE_VERSION)
                measured.append(rows[task.workload_key])
                print(f"{task.name} {mode:>5} seed {seed}: best {curves[mode][-1][-1]:7.1f} "
                      f"GFLOPS", flush=True)
        prior_rows = Database(source_path).feature_rows(target, FEATURE_VERSION)
    pool = CostModelPool()
    for key, (X, seconds) in prior_rows.items():
        pool.set_rows(key, X, normalize_throughput(seconds), prior=True)
    pool.fit()
    X_b = np.concatenate([X for X, _ in measured])
    y_b = normalize_throughput(np.concatenate([s for _, s in measured]))
    tau = kendall_tau(pool.predict(X_b), y_b)
    top = max(c[-1] for runs in curves.values() for c in runs)
    rows, figures = [], {"trials": args.trials, "seeds": args.seeds,
                         "source_trials": args.source_trials,
                         "prior_only_kendall_tau_on_b": round(tau, 3),
                         "wall_seconds": round(time.perf_counter() - began, 1)}
    for mode, runs in curves.items():
        after = {n: float(np.mean([c[min(n, len(c)) - 1] for c in runs]))
                 for n in (8, 16, args.trials)}
        reach = float(np.mean([trials_to_reach(c, 0.9 * top) for c in runs]))
        rows.append([mode, after[8], after[16], after[args.trials], reach])
        for n, value in after.items():
            figures[f"{mode}_best_gflops_after_{n}"] = round(value, 2)
        figures[f"{mode}_trials_to_90pct"] = round(reach, 1)
        figures[f"{mode}_best_gflops_per_seed"] = [round(float(c[-1]), 2) for c in runs]
    print(f"a model trained only on {source.name} ranks {len(y_b)} measured candidates of "
          f"{task.name} with Kendall tau {tau:.3f}")
    print_table(["model", "best after 8", "after 16", f"after {args.trials}",
                 "trials to 90% of best"], rows)
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
