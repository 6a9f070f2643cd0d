"""End-to-end model latency, batch 1: Kiln vs the numpy reference executor vs onnxruntime.

    python benchmarks/models.py [--models default_cnn,mlp] [--threads 1,2] [--db tuning_logs/kiln.db]
                                [--tune TRIALS] [--layout nchwc|nchw]

Kiln uses the best schedules in the database (or the defaults), compiled once per thread count
(records measured at that count are preferred; compile_s is the first). With --tune, each model is
first tuned (kiln.tune, 2 threads) until the database holds TRIALS records of its tasks;
records already there count, and the wall time and trials measured are reported. Prints a
table and, as the last line, one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.models_zoo
from common import (emit_json, median_seconds, numpy_threads, ort_session,  # noqa: E402
                    print_table)

from kiln.graph.compile.model import compile_model  # noqa: E402
from kiln.graph.onnx.load import load_onnx  # noqa: E402
from kiln.graph.passes.fold_constants import fold_constants  # noqa: E402
from kiln.graph.passes.simplify import simplify  # noqa: E402
from kiln.graph.reference import run_reference  # noqa: E402
from tests.task_catalog import BENCHMARK_MODELS  # noqa: E402

# the bundled benchmark models, as the committed tuning log knows them
MODELS = BENCHMARK_MODELS


def _inputs(graph) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(v.shape).astype(v.dtype) if v.dtype.startswith("float")
            else rng.integers(0, 100, v.shape).astype(v.dtype) for v in graph.inputs]


def tune_model_timed(model, db, trials: int, layout: str = "nchwc") -> dict:
    """Tune at 2 threads; the wall time and the records of the model's tasks afterwards."""
    from kiln.graph.compile.model import tune_model
    old = os.environ.get("KILN_NUM_THREADS")
    os.environ["KILN_NUM_THREADS"] = "2"
    start = time.perf_counter()
    try:
        reports = tune_model(model, trials=trials, db=db, layout=layout)
    finally:
        if old is None:
            os.environ.pop("KILN_NUM_THREADS", None)
        else:
            os.environ["KILN_NUM_THREADS"] = old
    return {"tune_minutes": (time.perf_counter() - start) / 60,
            "trials_in_db": sum(r.trials for r in reports), "tasks": len(reports)}


def bench_model(name: str, threads: list[int], db, repeat: int, tune: int = 0,
                layout: str = "nchwc") -> list[dict]:
    model = MODELS[name]()
    tuning = tune_model_timed(model, db, tune, layout) if tune else {}
    # numpy runs the model's own graph, as kiln/bench.py does: Kiln's rewritten graph (even
    # in the nchw layout) holds packed weights that the numpy executor would unpack per call
    graph = fold_constants(simplify(load_onnx(model)))
    inputs = _inputs(graph)
    feeds = {v.name: a for v, a in zip(graph.inputs, inputs)}
    rows, compile_s = [], None
    for n in threads:
        start = time.perf_counter()
        compiled = compile_model(model, db=db, layout=layout, threads=n)
        compile_s = compile_s or time.perf_counter() - start
        ours = compiled.run(inputs)
        t_kiln = median_seconds(lambda: compiled.run(inputs), repeat)
        with numpy_threads(n):
            t_numpy = median_seconds(lambda: run_reference(graph, inputs), max(3, repeat // 4))
        session = ort_session(model, n)
        theirs = session.run(None, feeds)
        t_ort = median_seconds(lambda: session.run(None, feeds), repeat)
        err = max(float(np.max(np.abs(a - b))) for a, b in zip(ours, theirs))
        overhead = compiled.profile(inputs, repeat=5)[-1]["ms"]
        rows.append({"model": name, "threads": n, "kiln_ms": t_kiln * 1e3,
                     "numpy_ms": t_numpy * 1e3, "ort_ms": t_ort * 1e3,
                     "numpy_over_kiln": t_numpy / t_kiln, "ort_over_kiln": t_ort / t_kiln,
                     "max_abs_err_vs_ort": err, "python_overhead_ms": overhead,
                     "kernels": len(compiled.plan.steps),
                     "from_db": sum(s.source == "database" for s in compiled.plan.steps),
                     "compile_s": compile_s, **tuning})
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS),
                        help=f"comma-separated subset of: {', '.join(MODELS)}")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--db", default=None, help="tuning database (default: none)")
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--tune", type=int, default=0, metavar="TRIALS",
                        help="tune each model first until --db holds TRIALS of its records")
    parser.add_argument("--layout", default="nchwc", choices=("nchwc", "nchw"),
                        help="Kiln's conv activation layout (kiln.compile's layout=)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(MODELS)}")
    threads = [int(t) for t in args.threads.split(",")]
    db = None
    if args.db:
        from kiln.autotune.database import Database
        db = Database(args.db)
    if args.tune and db is None:
        parser.error("--tune needs --db (the database the tuning records go to)")
    results = []
    for name in names:
        results += bench_model(name, threads, db, args.repeat, args.tune, args.layout)
    headers = ["model", "thr", "kiln ms", "numpy ms", "ort ms", "numpy/kiln", "ort/kiln",
               "err vs ort", "py ovh ms", "kernels", "from db", "compile s"]
    print_table(headers, [[r["model"], r["threads"], r["kiln_ms"], r["numpy_ms"], r["ort_ms"],
                           r["numpy_over_kiln"], r["ort_over_kiln"],
                           f"{r['max_abs_err_vs_ort']:.1e}", r["python_overhead_ms"],
                           r["kernels"], r["from_db"], r["compile_s"]] for r in results])
    emit_json({"bench": "models", "results": [{k: (float(f"{v:.4g}") if isinstance(v, float) else v)
                                               for k, v in r.items()} for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
