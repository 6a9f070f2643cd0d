"""Time per tuning trial and its parts, and measured candidates per minute on this machine.

Tunes GEMM 512^3 and a conv2d (model-guided search) from empty temporary databases and prints
seconds per trial by part: propose (search, with feature extraction and model scoring inside),
the worker's setup / lower / compile (LLVM) / check / run, IPC, database commit and model update
(refit inside); then candidates per minute, the share of time spent outside building and
timing kernels, and the parent process's own CPU seconds per trial (insensitive to other load
on the machine, unlike the wall-clock parts). The last line is one JSON object with the figures.

    python benchmarks/tune_throughput.py [--trials 48] [--tasks gemm_512 conv_32x28x28]
        [--share on|off]     the measurement worker lowers half of the search's candidates
        [--profile DIR]      cProfile the parent's CPU time: DIR/<task>.prof and its top lines
"""
from __future__ import annotations

import argparse
import cProfile
import logging
import os
import pstats
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, kiln_threads, print_table  # noqa: E402

from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.measure import MeasureOptions  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.autotune.timing import PARTS, SUB_PARTS  # noqa: E402
from kiln.autotune.tuner import tune_task  # noqa: E402

TASKS = {"gemm_512": ("matmul", (512, 512, 512)),
         "conv_32x28x28": ("conv2d", (1, 32, 28, 28, 32, 3, 3, 1, 1)),
         "conv_64x56x56": ("conv2d", (1, 64, 56, 56, 64, 3, 3, 1, 1))}   # not in the default run
DEFAULT_TASKS = ["gemm_512", "conv_32x28x28"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--search", default="xgb", choices=("xgb", "random"))
    parser.add_argument("--tasks", nargs="+", default=DEFAULT_TASKS, choices=list(TASKS))
    parser.add_argument("--share", default="on", choices=("on", "off"),
                        help="featurize half of the search's candidates in the idle worker")
    parser.add_argument("--profile", metavar="DIR",
                        help="profile the parent process of each task's run into DIR")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    # the tuning settings of tune_search_efficiency.py: 3 timed repeats of >= 20 ms each
    options = MeasureOptions(timeout=30, repeat=3, min_repeat_seconds=0.02)
    timings = {}
    with tempfile.TemporaryDirectory() as tmp, kiln_threads(2):
        for name in args.tasks:
            op, shape = TASKS[name]
            db = Database(os.path.join(tmp, f"{name}.db"))
            # CPU time, not wall time: the wait for the worker costs nothing, and other
            # processes on the machine do not inflate the figures
            profile = cProfile.Profile(time.process_time) if args.profile else None
            if profile:
                profile.enable()
            cpu = time.process_time()
            result = tune_task(Task.from_op(op, shape), "native", trials=args.trials, db=db,
                               search=args.search, batch_size=args.batch, options=options,
                               transfer=False, share_features=args.share == "on")
            cpu = time.process_time() - cpu
            if profile:
                profile.disable()
                _report_profile(profile, args.profile, name)
            timings[name] = dict(result.timing, parent_cpu=cpu)
            print(f"{name}: {result.measured} trials, best {result.best_gflops:.1f} GFLOPS",
                  flush=True)

    parts = list(PARTS) + [f"  ({p})" for p in SUB_PARTS]
    rows = []
    for part in parts:
        key = part.strip(" ()")
        rows.append([part] + [timings[n]["per_trial"][key] for n in args.tasks])
    rows.append(["total s/trial"] + [timings[n]["wall_seconds"] / max(1, timings[n]["trials"])
                                     for n in args.tasks])
    rows.append(["candidates/min"] + [timings[n]["candidates_per_minute"] for n in args.tasks])
    rows.append(["overhead share"] + [timings[n]["overhead_share"] for n in args.tasks])
    rows.append(["parent CPU s/trial"] + [timings[n]["parent_cpu"] / max(1, timings[n]["trials"])
                                          for n in args.tasks])
    print("seconds per trial by part (sub-parts in parentheses are inside propose and "
          "model_update)")
    print_table(["part"] + args.tasks, rows)
    figures: dict = {"trials": args.trials, "search": args.search, "share": args.share}
    for name in args.tasks:
        t = timings[name]
        figures[f"{name}_candidates_per_minute"] = round(t["candidates_per_minute"], 1)
        figures[f"{name}_seconds_per_trial"] = round(t["wall_seconds"] / max(1, t["trials"]), 3)
        figures[f"{name}_overhead_share"] = round(t["overhead_share"], 3)
        figures[f"{name}_parent_cpu_per_trial_s"] = round(t["parent_cpu"] / max(1, t["trials"]), 4)
        for part in PARTS + SUB_PARTS:
            figures[f"{name}_{part}_s"] = round(t["per_trial"][part], 4)
    emit_json(figures)


def _report_profile(profile: cProfile.Profile, folder: str, name: str) -> None:
    """Save the parent's CPU profile and print where its own time went."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{name}.prof")
    profile.dump_stats(path)
    print(f"--- {name}: parent CPU profile (saved to {path}), top by cumulative time")
    pstats.Stats(profile).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
