"""Kiln's thread pool vs libgomp running the same compiled models, on a quiet machine, with
one busy process competing for a core, and with a pause before every run.

    python benchmarks/parallel_runtime.py [--models default_cnn,mobilenetv2_like]
        [--db tuning_logs/kiln.db] [--seconds 8] [--pause 0.02]

Each (model, runtime, condition) runs in a fresh process (two thread pools in one process
would compete for the cores): the model is compiled from --db for 2 threads with
KILN_PARALLEL_RUNTIME set, warmed up, then run back to back for --seconds; the table gives
the median and 90th percentile of single-run latency and their ratio to the same model at 1
thread (no pool involved) measured in the same condition. "busy" starts a spinning Python
process for the whole measurement, as another job on a shared 2-core machine would.
"paused" sleeps --pause seconds before each timed run (a server between requests): the pool's
workers have gone to sleep and the idle vCPU has halted, so each run starts from cold threads
(where a worker woken on the caller's CPU once made 2 threads slower than 1; 2026-11-26 17:30 UTC).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, print_table  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODELS = {
    "default_cnn": "models.default_cnn()",
    "mobilenetv2_like": "models.mobilenetv2_like(image_size=224)",
    "bert_like_encoder": "models.bert_like_encoder(seq=128, hidden=256, layers=2)",
    "resnet18_like": "models.resnet18_like(image_size=224)",
    "mlp": "models.mlp()",
}


def child(model: str, threads: int, db: str | None, seconds: float, pause: float) -> None:
    """Compile, warm up, time single runs (each after `pause` seconds idle); one JSON line."""
    import numpy as np
    from kiln.graph import models  # noqa: F401 - used by eval of MODELS
    from kiln.graph.compile.model import compile_model
    graph = eval(MODELS[model])                      # noqa: S307 - our own table
    compiled = compile_model(graph, db=db, threads=threads)
    inputs = compiled._example_inputs()
    for _ in range(5):
        compiled.run(inputs)
    times = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times) < 20:
        if pause:
            time.sleep(pause)
        start = time.perf_counter()
        compiled.run(inputs)
        times.append(time.perf_counter() - start)
    ms = np.array(times) * 1e3
    print(json.dumps({"median_ms": float(np.median(ms)), "p90_ms": float(np.percentile(ms, 90)),
                      "runs": len(ms)}))


def measure(model: str, threads: int, runtime: str, db: str | None, seconds: float,
            pause: float = 0.0) -> dict:
    env = dict(os.environ, KILN_PARALLEL_RUNTIME=runtime, KILN_NUM_THREADS=str(threads))
    cmd = [sys.executable, os.path.abspath(__file__), "--child", model, "--threads",
           str(threads), "--seconds", str(seconds), "--pause", str(pause)] + (
               ["--db", db] if db else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"{model} ({runtime}, {threads} threads) failed:\n"
                           f"{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="default_cnn,mobilenetv2_like,bert_like_encoder")
    parser.add_argument("--db", default=os.path.join(ROOT, "tuning_logs", "kiln.db"))
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--child")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pause", type=float, default=0.02,
                        help="seconds idle before each run in the 'paused' condition")
    parser.add_argument("--conditions", default="quiet,busy,paused")
    args = parser.parse_args()
    db = args.db if args.db and os.path.exists(args.db) else None
    if args.child:
        child(args.child, args.threads, db, args.seconds, args.pause)
        return
    rows, results = [], []
    for condition in args.conditions.split(","):
        pause = args.pause if condition == "paused" else 0.0
        hog = None
        if condition == "busy":
            hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        try:
            for model in args.models.split(","):
                one = measure(model, 1, "kiln", db, args.seconds, pause)
                for runtime in ("kiln", "gomp"):
                    r = measure(model, 2, runtime, db, args.seconds, pause)
                    speedup = one["median_ms"] / r["median_ms"]
                    rows.append([model, condition, runtime, one["median_ms"], r["median_ms"],
                                 r["p90_ms"], speedup])
                    results.append({"model": model, "condition": condition, "runtime": runtime,
                                    "one_thread_ms": round(one["median_ms"], 4),
                                    "median_ms": round(r["median_ms"], 4),
                                    "p90_ms": round(r["p90_ms"], 4),
                                    "speedup_vs_1_thread": round(speedup, 3)})
        finally:
            if hog is not None:
                hog.kill()
                hog.wait()
    print_table(["model", "machine", "2-thread pool", "1t ms", "2t median ms", "2t p90 ms",
                 "1t/2t"], rows)
    emit_json({"bench": "parallel_runtime", "cpu_count": os.cpu_count(), "results": results})


if __name__ == "__main__":
    main()
