"""Latency against tuning time for a CNN Kiln has never seen, with onnxruntime's as a line.

    python benchmarks/tune_budget.py [--time 10m] [--points 5] [--image-size 96] [--threads 1]
                                     [--cpu]

The model is RegNet-X-shaped (graph/models.py's _Builder, random weights): a stride-2 stem,
then stages of X blocks (1x1 conv, 3x3 grouped conv of group width 8, 1x1 conv, residual),
global pool and a classifier: grouped convs are one of the cases where Kiln's default
schedules lose to onnxruntime. It is tuned into a fresh temporary database with a time
budget (`kiln.tune(time_budget=)`), in `--points` equal slices; after each slice the model is
compiled with the records so far (the compile is not counted as tuning time) and Kiln and
onnxruntime are timed back to back at `--threads`. Point 0 is Kiln's default schedules.
Writes benchmarks/tune_budget.png (latency against tuning minutes, onnxruntime as a line),
prints a table, and a JSON line last.
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.models_zoo
from common import (emit_json, interleaved_medians, kiln_threads, ort_session,  # noqa: E402
                    print_table)

import kiln  # noqa: E402
from kiln.autotune.confirm import CONFIRM, ConfirmOptions  # noqa: E402
from kiln.autotune.database import Database  # noqa: E402
from kiln.cli import parse_duration  # noqa: E402
from tests.models_zoo import regnetx_like  # noqa: E402

HERE = Path(__file__).resolve().parent



def measure(model, db, threads: int, x: np.ndarray, session, rounds: int, repeat: int,
            clock=time.perf_counter) -> dict:
    """Compile with `db`'s records and time Kiln and onnxruntime on the same input, in
    interleaved rounds (the ratio is the median of the per-round ratios)."""
    start = time.perf_counter()
    compiled = kiln.compile(model, db=db, threads=threads)
    compile_s = time.perf_counter() - start
    ours = compiled.run([x])[0]
    theirs = session.run(None, {"input": x})[0]
    t_kiln, t_ort, ratio = interleaved_medians(lambda: compiled.run([x]),
                                               lambda: session.run(None, {"input": x}),
                                               rounds, repeat, clock)
    steps = compiled.plan.steps
    return {"kiln_ms": t_kiln * 1e3, "ort_ms": t_ort * 1e3, "ratio": ratio,
            "max_abs_err": float(np.max(np.abs(ours - theirs))), "compile_s": compile_s,
            "tuned_kernels": sum(s.source != "default" for s in steps), "kernels": len(steps)}


def plot(points: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    minutes = [p["tuning_s"] / 60 for p in points]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(minutes, [p["kiln_ms"] for p in points], "o-", label="Kiln (tuned so far)")
    ort = statistics.median(p["ort_ms"] for p in points)
    ax.axhline(ort, color="tab:red", linestyle="--", label=f"onnxruntime ({ort:.2f} ms)")
    ax.set_xlabel("tuning time (minutes)")
    ax.set_ylabel("latency (ms, median)")
    ax.set_ylim(bottom=0)
    ax.set_title(title, fontsize=9)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time", type=parse_duration, default=600.0,
                        help="total tuning time, e.g. 90s, 10m (default 10m)")
    parser.add_argument("--points", type=int, default=5, help="tuning slices (default 5)")
    parser.add_argument("--mutations", type=int, default=CONFIRM.mutations,
                        help="mutations per task and pass of the closing climb (0: confirm the "
                             f"leaders only; default {CONFIRM.mutations})")
    parser.add_argument("--share", type=float, default=CONFIRM.share,
                        help="share of each slice kept for the climb (with --mutations; "
                             f"default {CONFIRM.share})")
    parser.add_argument("--no-model-check", dest="model_check", action="store_false",
                        help="keep the confirmed choices without trying them inside the "
                             "model (graph/compile/model_check.py; on by default, as in kiln tune)")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5,
                        help="interleaved Kiln/onnxruntime timing rounds (default 5)")
    parser.add_argument("--repeat", type=int, default=20, help="runs per round (default 20)")
    parser.add_argument("--cpu", action="store_true",
                        help="time runs by the calling thread's CPU time (1 thread only): on a "
                             "shared machine it leaves out time slices other processes take")
    parser.add_argument("--db", help="keep the tuning log in this new file (default: a "
                        "temporary one)")
    parser.add_argument("--png", default=str(HERE / "tune_budget.png"))
    args = parser.parse_args(argv)
    if args.cpu and args.threads != 1:
        parser.error("--cpu measures the calling thread: use it with --threads 1")
    clock = time.thread_time if args.cpu else time.perf_counter
    if not 0.0 <= args.share <= 1.0 or args.mutations < 0:
        parser.error("--share is a fraction in [0, 1] and --mutations a count >= 0")
    confirm = ConfirmOptions(mutations=args.mutations, share=args.share)
    logging.basicConfig(level=logging.WARNING)
    model = regnetx_like(image_size=args.image_size)
    x = np.random.default_rng(0).standard_normal((1, 3, args.image_size, args.image_size)) \
        .astype(np.float32)
    session = ort_session(model, args.threads)
    points = []
    with tempfile.TemporaryDirectory(prefix="kiln-tune-budget-") as tmp, \
            kiln_threads(args.threads):
        path = Path(args.db) if args.db else Path(tmp) / "tune.db"
        if path.exists():
            parser.error(f"--db {path} exists: the model must start unseen (a new file)")
        db = Database(path)     # unseen: no record of any other model
        tuned, trials = 0.0, 0
        points.append({"tuning_s": 0.0, "trials": 0,
                       **measure(model, None, args.threads, x, session, args.rounds,
                                   args.repeat, clock)})
        for _ in range(args.points):
            start = time.perf_counter()
            reports = kiln.tune(model, db=db, time_budget=args.time / args.points,
                                confirm=confirm, model_check=args.model_check)
            tuned += time.perf_counter() - start
            trials = sum(r.trials for r in reports)
            points.append({"tuning_s": tuned, "trials": trials,
                           **measure(model, db, args.threads, x, session, args.rounds,
                                   args.repeat, clock)})
            print(f"after {tuned:.0f} s of tuning ({trials} trials): Kiln "
                  f"{points[-1]['kiln_ms']:.3f} ms, onnxruntime {points[-1]['ort_ms']:.3f} ms",
                  flush=True)
        db.close()
    rows = [[f"{p['tuning_s']:.0f}", p["trials"], p["kiln_ms"], p["ort_ms"], p["ratio"],
             f"{p['tuned_kernels']}/{p['kernels']}", f"{p['compile_s']:.1f}",
             f"{p['max_abs_err']:.1e}"] for p in points]
    print_table(["tuning s", "trials", "kiln ms", "ort ms", "kiln/ort", "tuned kernels",
                 "compile s", "max err"], rows)
    title = (f"regnetx_like {args.image_size}x{args.image_size}, {args.threads} thread(s), "
             f"unseen (fresh database)")
    plot(points, Path(args.png), title)
    print(f"wrote {args.png}")
    best = min(points, key=lambda p: p["ratio"])
    below = next((p["tuning_s"] for p in points if p["ratio"] < 1.0), None)
    emit_json({"bench": "tune_budget", "model": "regnetx_like", "image_size": args.image_size,
               "threads": args.threads, "time_budget_s": args.time,
               "mutations": args.mutations, "climb_share": args.share,
               "model_check": args.model_check,
               "clock": "thread_time" if args.cpu else "perf_counter",
               "default_ratio": round(points[0]["ratio"], 3),
               "final_ratio": round(points[-1]["ratio"], 3),
               "best_ratio": round(best["ratio"], 3), "trials": trials,
               "tuning_s_to_below_ort": None if below is None else round(below, 1),
               "points": [{k: (round(v, 4) if isinstance(v, float) else v)
                           for k, v in p.items()} for p in points]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
