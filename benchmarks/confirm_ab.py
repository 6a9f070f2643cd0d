"""What the confirmation changes in a tuned model: defaults, the fastest records, confirmed picks.

    python benchmarks/confirm_ab.py --db TUNED.db [--image-size 96] [--rounds 7] [--repeat 30]

TUNED.db is a tuning log of the RegNet-X-like model (tests/models_zoo.py) at 1 thread, e.g. the
one `benchmarks/tune_budget.py --db PATH` leaves. It is copied; on the copy every task's
default and 3 fastest records are timed again side by side (autotune/confirm.py) and the
choices stored. Then three compiles of the model are timed in interleaved rounds, by the
calling thread's CPU time at 1 thread, with onnxruntime in the same rounds: the default
schedules (db=None), the fastest record of each task (the log as it was), and the confirmed
choices (the copy). Prints a table and a JSON line last.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.models_zoo
from common import (emit_json, kiln_threads, median_seconds, ort_session,  # noqa: E402
                    print_table)

import kiln  # noqa: E402
from kiln.autotune.confirm import confirm_tasks  # noqa: E402
from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.dispatch import canonical_target  # noqa: E402
from kiln.codegen.target import Target  # noqa: E402
from kiln.autotune.measure import MeasureOptions, Runner  # noqa: E402
from kiln.graph.compile.model import model_tasks  # noqa: E402
from tests.models_zoo import regnetx_like  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="a tuning log of the model (kept as is)")
    parser.add_argument("--image-size", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args(argv)
    if not Path(args.db).is_file():
        parser.error(f"--db {args.db}: no such file")
    logging.basicConfig(level=logging.WARNING)
    model = regnetx_like(image_size=args.image_size)
    x = np.random.default_rng(0).standard_normal((1, 3, args.image_size, args.image_size)) \
        .astype(np.float32)
    target = canonical_target("native")
    with tempfile.TemporaryDirectory(prefix="kiln-confirm-ab-") as tmp, kiln_threads(1):
        copy = Path(tmp) / "confirmed.db"
        shutil.copy(args.db, copy)
        confirmed_db = Database(copy)
        tasks = sorted(model_tasks(model, target), key=lambda mt: -mt.weight)
        start = time.perf_counter()
        with Runner(MeasureOptions(threads=1)) as runner:
            choices = confirm_tasks([(mt.task.retargeted(target), None) for mt in tasks],
                                    Target.from_string(target), confirmed_db, runner)
        confirm_s = time.perf_counter() - start
        variants = {"defaults": kiln.compile(model, db=None, threads=1),
                    "fastest records": kiln.compile(model, db=Database(args.db), threads=1),
                    "confirmed": kiln.compile(model, db=confirmed_db, threads=1)}
        session = ort_session(model, 1)
        runs = {name: (lambda c=c: c.run([x])) for name, c in variants.items()}
        runs["onnxruntime"] = lambda: session.run(None, {"input": x})
        times: dict[str, list[float]] = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, fn in runs.items():
                times[name].append(median_seconds(fn, args.repeat,
                                                  clock=time.thread_time))
    ort = times["onnxruntime"]
    rows, figures = [], {}
    for name in variants:
        ratio = statistics.median(a / b for a, b in zip(times[name], ort))
        tuned = sum(s.source != "default" for s in variants[name].plan.steps)
        rows.append([name, statistics.median(times[name]) * 1e3, ratio,
                     f"{tuned}/{len(variants[name].plan.steps)}"])
        figures[name] = {"ms": round(statistics.median(times[name]) * 1e3, 4),
                         "ratio_to_ort": round(ratio, 3), "tuned_kernels": tuned}
    print_table(["schedules", "ms (CPU, median)", "/ onnxruntime", "tuned kernels"], rows)
    kept = sum(not c.is_default for c in choices.values())
    print(f"confirmation: {len(choices)} tasks in {confirm_s:.1f} s, {kept} keep a tuned record, "
          f"{len(choices) - kept} the default; onnxruntime {statistics.median(ort) * 1e3:.3f} ms")
    emit_json({"bench": "confirm_ab", "model": "regnetx_like", "image_size": args.image_size,
               "threads": 1, "clock": "thread_time", "confirm_s": round(confirm_s, 1),
               "confirmed_tasks": len(choices), "kept_records": kept,
               "ort_ms": round(statistics.median(ort) * 1e3, 4), **figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
