"""The measured per-kernel thread choice and the workers' early wake (issue 33 item 3): A/B.

    python benchmarks/thread_choice.py --onnx /work/exports --models efficientvit_m0,bert
        [--rounds 9] [--repeat 15] [--diagnose]

Each model (DIR/<name>.onnx, inputs as benchmarks/architectures.py makes them) is compiled
with db=None for 1 thread and for 2 threads; the 2-thread compile measures its thread choice
(graph/runtime/thread_choice.py). In the same process, in alternating rounds (the order
rotates each round), three configurations are timed, each a median of --repeat runs after
a short settle:
- "1T": the 1-thread model;
- "2T old": the 2-thread model with every kernel at 2 threads and no early wake
  (CompiledModel.set_num_threads(2, choice=False)): what main runs, on the same kernels and
  buffers;
- "2T new": the same model with the thread choice and the early wake.
Reported per model: medians over rounds and the per-round ratios (2T/1T old and new, new/old),
fork/joins per run (old, new), the kernels put on one thread, the steps woken ahead, and the
choice's measuring time (added to a cold 2-thread compile; a warm one loads it). With
--diagnose, each forking kernel of the 2-thread model is also timed alone at 1 and 2
threads after 0, 50 and 300 us of busy serial work, and after 300 us with the workers woken
10 us ahead: what a sleeping worker costs a fork. Prints tables and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from architectures import example_feeds, load
from common import emit_json, median_seconds, print_table
from kiln.codegen.runtime import fork_count, prewake_address
from kiln.graph.runtime import thread_choice

import kiln


def forks_per_run(run) -> int:
    run()
    before = fork_count()
    run()
    return fork_count() - before


def busy(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def diagnose(name: str, m2, calls: int = 30) -> list[list]:
    """Each forking kernel alone on the model's buffers, by the gap before its call."""
    import ctypes
    wake = ctypes.CFUNCTYPE(None)(prewake_address())
    doc = m2.plan.meta.get("thread_choice", {}).get("kernels", {})
    m2.run(m2._example_inputs())
    rows, seen = [], set()
    for step, (fn, args) in zip(m2.plan.steps, m2._steps):
        if step.kernel not in doc or step.kernel in seen:
            continue
        seen.add(step.kernel)
        kernel, before = m2.kernels[step.kernel], m2.kernels[step.kernel].num_threads
        row = [name, step.kernel[:36]]
        for gap, early in ((0, False), (50, False), (300, False), (300, True)):
            for n in (1, 2):
                kernel.set_num_threads(n)
                times = []
                for _ in range(calls):
                    busy(gap - 10 if early else gap)
                    if early:
                        wake()
                        busy(10)
                    start = time.perf_counter()
                    fn(*args)
                    times.append(time.perf_counter() - start)
                row.append(statistics.median(times) * 1e6)
        kernel.set_num_threads(before)
        rows.append(row)
    return rows


def measure(name: str, onnx_dir: str, rounds: int, repeat: int) -> dict:
    model = load(name, onnx_dir)
    feeds = example_feeds(model, 32)
    x = list(feeds.values())
    shapes = {n: a.shape for n, a in feeds.items()}
    m1 = kiln.compile(model, db=None, threads=1, input_shapes=shapes)
    m2 = kiln.compile(model, db=None, threads=2, input_shapes=shapes)
    configs = {"1T": (m1, 1, True), "2T old": (m2, 2, False), "2T new": (m2, 2, True)}
    outs = {}
    for key, (m, n, choice) in configs.items():
        m.set_num_threads(n, choice=choice)
        outs[key] = m.run(x)
    same = all(np.array_equal(a, b) for a, b in zip(outs["2T old"], outs["2T new"]))
    forks = {}
    for key in ("2T old", "2T new"):
        m, n, choice = configs[key]
        m.set_num_threads(n, choice=choice)
        forks[key] = forks_per_run(lambda m=m: m.run(x))
    times = {k: [] for k in configs}
    order = list(configs)
    for r in range(rounds):
        for key in order[r % 3:] + order[:r % 3]:
            m, n, choice = configs[key]
            m.set_num_threads(n, choice=choice)
            times[key].append(median_seconds(lambda m=m: m.run(x), repeat, settle=0.02) * 1e3)
    ratio = lambda a, b: statistics.median(x / y for x, y in zip(times[a], times[b]))
    doc = m2.plan.meta.get("thread_choice", {})
    m2.set_num_threads(2)
    return {"model": name, "ms": {k: statistics.median(v) for k, v in times.items()},
            "min_ms": {k: min(v) for k, v in times.items()},
            "old_2t_1t": ratio("2T old", "1T"), "new_2t_1t": ratio("2T new", "1T"),
            "new_old": ratio("2T new", "2T old"), "forks_old": forks["2T old"],
            "forks_new": forks["2T new"], "same_outputs": same,
            "forking_kernels": len(doc.get("kernels", {})), "serial": len(doc.get("serial", [])),
            "prewake": len(doc.get("prewake", [])), "choice_s": doc.get("seconds", 0.0),
            "steps": len(m2.plan.steps)}, m2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--onnx", required=True, metavar="DIR")
    parser.add_argument("--models", required=True, help="comma-separated file stems")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--diagnose", action="store_true")
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    results, diag = [], []
    for name in args.models.split(","):
        out, m2 = measure(name, args.onnx, args.rounds, args.repeat)
        results.append(out)
        print(thread_choice.describe(m2))
        if args.diagnose:
            diag += diagnose(name, m2)
    print_table(["model", "1T ms", "2T old ms", "2T new ms", "old 2T/1T", "new 2T/1T",
                 "new/old", "forks old", "forks new", "serial/forking", "prewake",
                 "choice s", "same out"],
                [[r["model"], r["ms"]["1T"], r["ms"]["2T old"], r["ms"]["2T new"],
                  r["old_2t_1t"], r["new_2t_1t"], r["new_old"], r["forks_old"],
                  r["forks_new"], f"{r['serial']}/{r['forking_kernels']}", r["prewake"],
                  r["choice_s"], r["same_outputs"]] for r in results])
    if diag:
        print("forking kernels alone (us): 1T/2T after a gap of busy serial work; "
              "'300+wake': 300 us with the workers woken 10 us ahead")
        print_table(["model", "kernel", "0 1T", "0 2T", "50 1T", "50 2T", "300 1T", "300 2T",
                     "300+wake 1T", "300+wake 2T"], diag)
    geo = lambda key: math.exp(statistics.fmean(math.log(r[key]) for r in results))
    summary = {"geomean_old_2t_1t": geo("old_2t_1t"), "geomean_new_2t_1t": geo("new_2t_1t"),
               "geomean_new_old": geo("new_old"),
               "worst_old_2t_1t": max(r["old_2t_1t"] for r in results),
               "worst_new_2t_1t": max(r["new_2t_1t"] for r in results)}
    print(" ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    print(f"load average at end: {os.getloadavg()}")
    emit_json({"bench": "thread_choice", "rounds": args.rounds, "repeat": args.repeat,
               "models": results, "summary": summary,
               "diagnose": diag, "load_end": os.getloadavg()})


if __name__ == "__main__":
    main()
