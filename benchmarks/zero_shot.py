"""Zero-shot schedules, leave one model out: defaults vs the cost model's picks vs tuned records.

    python benchmarks/zero_shot.py [--models default_cnn,mlp,regnetx_like] [--threads 1]
                                   [--repeat 15] [--rounds 3] [--cpu] [--db tuning_logs/kiln.db]
                                   [--neighbors 8] [--donors 4] [--budget 64]

For each model M (a bundled benchmark model, graph/task_catalog.BENCHMARK_MODELS, or one of
tests/models_zoo.py): a copy of the database without the records and confirmations of M's
tasks (their workload keys; another model's identical task goes too) is the held-out
database; the zero-shot model is trained on it (on this CPU's vector ISA, cached under
KILN_CACHE_DIR like any compile's), so nothing measured on M informs its picks. M is then
compiled three ways at --threads: `default` (db=None), `zero-shot` (the held-out database:
every task without records, so each is ranked) and `tuned` (the full database, zero-shot
off: M's own records, the default where a task has none). They are timed in --rounds
interleaved rounds, onnxruntime right before each variant (a median of --repeat runs each);
the ratio to onnxruntime is taken per round and its median reported. --cpu times by the
calling thread's CPU time (1 thread), which leaves out what other processes take on a
shared machine. Every compiled model's outputs are checked against onnxruntime's. Prints a
table and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import shutil
import sqlite3
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.models_zoo
from common import emit_json, median_seconds, ort_session, print_table  # noqa: E402
from models import _inputs  # noqa: E402

from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune import zero_shot as Z  # noqa: E402
from kiln.autotune.dispatch import canonical_target  # noqa: E402
from kiln.graph.compile.model import compile_model, model_tasks, prepare_graph  # noqa: E402
from tests import models_zoo  # noqa: E402
from tests.task_catalog import BENCHMARK_MODELS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ZOO = ("regnetx_like", "rexnet_like", "mobilenetv3_like", "vit_tiny_like", "densenet_like")


def held_out_db(source: Path, keys: set[str], folder: Path) -> Path:
    """A copy of `source` without the records (and their feature rows) and the
    confirmations of tasks `keys`."""
    path = folder / "held_out.db"
    for suffix in ("", "-wal", "-shm"):
        Path(str(path) + suffix).unlink(missing_ok=True)
    shutil.copy(source, path)
    conn = sqlite3.connect(path)
    marks = ",".join("?" * len(keys))
    conn.execute(f"DELETE FROM features WHERE record_id IN (SELECT id FROM records WHERE "
                 f"task_key IN ({marks}))", sorted(keys))
    conn.execute(f"DELETE FROM records WHERE task_key IN ({marks})", sorted(keys))
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'choices'").fetchone():
        conn.execute(f"DELETE FROM choices WHERE task_key IN ({marks})", sorted(keys))
    conn.commit()
    conn.close()
    return path


def build_model(name: str):
    if name in BENCHMARK_MODELS:
        return BENCHMARK_MODELS[name]()
    return getattr(models_zoo, name)()


def run_model(name: str, db_path: Path, threads: int, repeat: int, folder: Path,
              rounds: int = 3, clock=time.perf_counter, rtol: float = 1e-3) -> dict:
    model = build_model(name)
    target = canonical_target("native")
    tasks = model_tasks(model, target)
    keys = {mt.task.workload_key for mt in tasks}
    full = Database(db_path)
    own = {k for k in keys if full.best(k, target, 1)}
    held = held_out_db(db_path, keys, folder)
    graph, _ = prepare_graph(model, layout="nchw")
    inputs = _inputs(graph)
    feeds = {v.name: a for v, a in zip(graph.inputs, inputs)}
    session = ort_session(model, threads)
    expected = session.run(None, feeds)
    row = {"model": name, "tasks": len(keys), "tasks_with_records": len(own)}
    variants = {"default": dict(db=None), "zero_shot": dict(db=Database(held), zero_shot=True),
                "tuned": dict(db=full, zero_shot=False)}
    compiled = {}
    for variant, kwargs in variants.items():
        start = time.perf_counter()
        compiled[variant] = compile_model(model, threads=threads, **kwargs)
        row[f"{variant}_compile_s"] = time.perf_counter() - start
        ours = compiled[variant].run(inputs)
        err = max(float(np.max(np.abs(a - b) / (1 + np.abs(b)))) for a, b in zip(ours, expected))
        if err > rtol:
            raise AssertionError(f"{name} ({variant}): outputs differ from onnxruntime's "
                                 f"(max relative error {err:.2e})")
    row["zero_shot_picks"] = sum(s.source == "zero-shot"
                                 for s in compiled["zero_shot"].plan.steps)
    row["kernel_calls"] = len(compiled["zero_shot"].plan.steps)
    # interleaved rounds, ort right before each variant: ratios taken under the same load
    t_ort, ratios, times = [], {v: [] for v in variants}, {v: [] for v in variants}
    for _ in range(rounds):
        for variant in variants:
            ort_s = median_seconds(lambda: session.run(None, feeds), repeat, clock=clock)
            t = median_seconds(lambda: compiled[variant].run(inputs), repeat, clock=clock)
            t_ort.append(ort_s)
            times[variant].append(t)
            ratios[variant].append(t / ort_s)
    for variant in variants:
        row[f"{variant}_ms"] = float(np.median(times[variant])) * 1e3
        row[f"{variant}_vs_ort"] = float(np.median(ratios[variant]))
    row["ort_ms"] = float(np.median(t_ort)) * 1e3
    row["zero_shot_over_default"] = row["zero_shot_vs_ort"] / row["default_vs_ort"]
    return row


def geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(BENCHMARK_MODELS))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--db", default=str(ROOT / "tuning_logs" / "kiln.db"))
    parser.add_argument("--neighbors", type=int, default=Z.N_NEIGHBORS,
                        help="mutations of the default ranked per task")
    parser.add_argument("--donors", type=int, default=Z.N_DONORS,
                        help="most similar tasks' best configs ranked per task")
    parser.add_argument("--budget", type=int, default=Z.RANK_BUDGET,
                        help="configs a compile ranks, the most FLOPs first (-1: every task)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds")
    parser.add_argument("--rtol", type=float, default=1e-3,
                        help="largest relative error of any output against onnxruntime's")
    parser.add_argument("--cpu", action="store_true",
                        help="time by the calling thread's CPU time (1 thread only)")
    args = parser.parse_args(argv)
    if args.cpu and args.threads != 1:
        parser.error("--cpu times the calling thread: use it with --threads 1")
    Z.N_NEIGHBORS, Z.N_DONORS, Z.RANK_BUDGET = args.neighbors, args.donors, args.budget
    # (forked workers inherit them)
    clock = time.thread_time if args.cpu else time.perf_counter
    logging.basicConfig(level=logging.WARNING)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in BENCHMARK_MODELS and m not in ZOO]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from "
                     f"{', '.join([*BENCHMARK_MODELS, *ZOO])}")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows.append(run_model(name, Path(args.db), args.threads, args.repeat, Path(tmp),
                                  args.rounds, clock, args.rtol))
            print(f"# {name}: " + json.dumps(rows[-1], sort_keys=True), file=sys.stderr,
                  flush=True)
    cols = ["model", "tasks", "tasks_with_records", "zero_shot_picks", "ort_ms",
            "default_vs_ort", "zero_shot_vs_ort", "tuned_vs_ort", "zero_shot_over_default",
            "zero_shot_compile_s", "default_compile_s"]
    print_table(cols, [[r[c] for c in cols] for r in rows])
    summary = {
        "threads": args.threads, "neighbors": args.neighbors, "donors": args.donors,
        "budget": args.budget, "rounds": args.rounds,
        "clock": "thread CPU" if args.cpu else "wall",
        "geomean_default_vs_ort": geomean(r["default_vs_ort"] for r in rows),
        "geomean_zero_shot_vs_ort": geomean(r["zero_shot_vs_ort"] for r in rows),
        "geomean_tuned_vs_ort": geomean(r["tuned_vs_ort"] for r in rows),
        "geomean_zero_shot_over_default": geomean(r["zero_shot_over_default"] for r in rows),
    }
    print("geomean over models: " + ", ".join(f"{k} {v:.3f}" for k, v in summary.items()
                                               if k.startswith("geomean")))
    emit_json({**summary, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
