"""Tune an fp32 GEMM with the XGBoost-guided autotuner, then compare with numpy matmul.

Tunes N trials into the committed database under tuning_logs/ (records already there count
toward N, so a rerun resumes), rebuilds the best schedule from the database, and times it at
1 and 2 threads against numpy limited to the same threads. `--from-db` skips tuning.

    python benchmarks/tune_gemm.py [--size 1024] [--trials 64] [--from-db | --default]
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, kiln_threads, median_seconds, numpy_threads, print_table  # noqa

from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.measure import MeasureOptions  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.autotune.tuner import apply_best, build_best, canonical_target, tune_task  # noqa

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DB = os.path.join(ROOT, "tuning_logs", "kiln.db")


def _progress(p) -> None:
    print(f"\r  trial {p.trials_done}/{p.trials_total}  best {p.best_gflops:7.1f} GFLOPS  "
          f"last {p.last_status:<14} ETA {p.eta_seconds:5.0f} s", end="", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--trials", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--db", default=DEFAULT_DB)
    parser.add_argument("--search", default="xgb", choices=("xgb", "random", "grid"))
    parser.add_argument("--from-db", action="store_true", help="rebuild the best, no tuning")
    parser.add_argument("--default", action="store_true",
                        help="time the search space's untuned default schedule instead")
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    n = args.size
    task = Task.from_op("matmul", (n, n, n))
    target = canonical_target("native")
    db = Database(args.db)
    tune_seconds, measured = 0.0, 0
    if not args.from_db and not args.default:
        start = time.perf_counter()
        with kiln_threads(2):
            result = tune_task(task, "native", trials=args.trials, db=db, search=args.search,
                               batch_size=args.batch, callback=_progress,
                               options=MeasureOptions(timeout=60, repeat=3,
                                                      min_repeat_seconds=0.05))
        tune_seconds, measured = time.perf_counter() - start, result.measured
        print()
    source_db = None if args.default else db
    _, _, source = apply_best(task, "native", source_db)
    best = db.best(task.workload_key, target)
    print(f"GEMM {n}^3 on {target}: schedule from the {source}")
    if best and not args.default:
        print(f"  best config: {best[0].config}")

    rng = np.random.default_rng(0)
    a = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    b = rng.uniform(-1, 1, (n, n)).astype(np.float32)
    c = np.zeros((n, n), np.float32)
    flops = 2.0 * n ** 3
    rows, figures = [], {"size": n, "trials_in_db": len(db.records(task.workload_key, target)),
                         "measured_now": measured, "tune_seconds": round(tune_seconds, 1),
                         "source": source}
    for threads in (1, 2):
        with kiln_threads(threads):
            kernel = build_best(task, "native", source_db)
        kernel(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
        kiln_s = median_seconds(lambda: kernel(a, b, c), repeat=args.repeat)
        with numpy_threads(threads):
            numpy_s = median_seconds(lambda: a @ b, repeat=args.repeat)
        kiln_gf, numpy_gf = flops / kiln_s / 1e9, flops / numpy_s / 1e9
        rows.append([threads, kiln_gf, numpy_gf, kiln_gf / numpy_gf])
        figures[f"kiln_gflops_{threads}t"] = round(kiln_gf, 2)
        figures[f"numpy_gflops_{threads}t"] = round(numpy_gf, 2)
        figures[f"ratio_{threads}t"] = round(kiln_gf / numpy_gf, 3)
    print_table(["threads", "kiln GFLOPS", "numpy GFLOPS", "kiln/numpy"], rows)
    emit_json(figures)


if __name__ == "__main__":
    main()
