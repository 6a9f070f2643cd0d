"""Kiln's default schedules against onnxruntime on small public-architecture-shaped models.

    python benchmarks/architectures.py [--models regnetx_like,vit_tiny_like] [--rounds 5]
                                       [--repeat 15] [--threads 1] [--profile 8]
    python benchmarks/architectures.py --onnx /tmp/kiln_tv [--models resnet18,googlenet] [--cpu]

The models (tests/models_zoo.py, random weights, batch 1) are RegNet-X-like (grouped 3x3
convs), ReXNet-like (depthwise + squeeze-excite + SiLU), MobileNetV3-like (HardSwish,
squeeze-excite), ViT-Tiny-like (patch conv, batched MatMul attention + Softmax, LayerNorm,
GELU) and DenseNet-like (concat-heavy). Each is compiled with no database (`db=None`: default
schedules only) and timed against onnxruntime at `--threads` (intra_op_num_threads), in
`--rounds` interleaved rounds (Kiln, onnxruntime, Kiln, ...) of a `--repeat`-run median each;
the figures are the medians over rounds, the ratio kiln/ort is taken per round (so both sides
of a ratio saw the same machine load) and its median reported; "best rounds" is the fastest
round of Kiln over the fastest of onnxruntime (the least disturbed, on a shared machine).
With --cpu (1 thread), runs are timed by the calling thread's CPU time (time.thread_time:
both runtimes run a 1-thread model on the calling thread), which leaves out the time slices
other processes take on a loaded machine (a model of 50-120 ms is preempted in nearly every
wall-clock run there); memory stalls still count.
max_err is the largest absolute difference from onnxruntime's output (rel err: over the
output's largest magnitude). compile_s is near zero when the compiled model comes from the
persistent cache (KILN_CACHE_DIR). With --profile N, the N slowest kernels of each model are
printed (CompiledModel.profile). Prints a table and, last, one JSON object.

With --onnx DIR, the models are the DIR/*.onnx files instead (real exports:
benchmarks/export_torchvision.py writes torchvision's architectures there,
benchmarks/export_transformers.py Hugging Face ones), named by file stem; every graph input
gets an example (`example_feeds`: token ids, all-ones masks, dynamic dims --dynamic-size);
a model that fails to compile or run is reported in the table and the JSON, not fatal.

`--threads 1,2` measures every model at each count in one run (compiled once per count, the
counts of one model measured back to back, so they see the same machine load), prints a
table per count and one of each model's time at the last count over the first for Kiln and
onnxruntime; the JSON then has the single-count figures per count under "by_threads" and
the time ratios under "scaling".
"""
from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests.models_zoo
from common import (emit_json, kiln_threads, median_seconds, ort_session,  # noqa: E402
                    print_table)

import kiln  # noqa: E402
from tests.models_zoo import ARCHITECTURES  # noqa: E402


def load(name: str, onnx_dir: str | None):
    if onnx_dir is None:
        return ARCHITECTURES[name]()
    import onnx
    return onnx.load(os.path.join(onnx_dir, name + ".onnx"))


def example_feeds(model, dynamic_size: int) -> dict:
    """An input per graph input: a dynamic dim is 1 first (the batch), `dynamic_size`
    elsewhere (sequence length, audio samples); integer inputs are token ids in [0, 100),
    masks (a name with "mask") all ones, float inputs standard normal."""
    import onnx
    rng = np.random.default_rng(0)
    initializers = {t.name for t in model.graph.initializer}
    feeds = {}
    for inp in model.graph.input:
        if inp.name in initializers:
            continue
        tensor = inp.type.tensor_type
        shape = [d.dim_value or (1 if k == 0 else dynamic_size)
                 for k, d in enumerate(tensor.shape.dim)]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
        if "mask" in inp.name.lower():
            feeds[inp.name] = np.ones(shape, dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[inp.name] = rng.integers(0, 100, shape).astype(dtype)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def measure(name: str, threads: int, rounds: int, repeat: int, profile: int,
            onnx_dir: str | None = None, clock=time.perf_counter,
            dynamic_size: int = 32) -> dict:
    model = load(name, onnx_dir)
    feeds = example_feeds(model, dynamic_size)
    x = list(feeds.values())
    session = ort_session(model, threads)
    start = time.perf_counter()
    # a model with dynamic dims is compiled for the example's shapes
    compiled = kiln.compile(model, db=None, threads=threads,
                            input_shapes={n: a.shape for n, a in feeds.items()})
    ours = compiled.run(x)[0]
    compile_s = time.perf_counter() - start
    theirs = session.run(None, feeds)[0]
    err = float(np.max(np.abs(ours - theirs)))
    scale = float(np.max(np.abs(theirs))) or 1.0
    kiln_ms, ort_ms, ratios = [], [], []
    for r in range(rounds):
        settle = None if r == 0 else 0.05
        extra = {"clock": clock} if settle is None else {"settle": settle, "clock": clock}
        tk = median_seconds(lambda: compiled.run(x), repeat, **extra)
        to = median_seconds(lambda: session.run(None, feeds), repeat, **extra)
        kiln_ms.append(tk * 1e3)
        ort_ms.append(to * 1e3)
        ratios.append(tk / to)
    out = {"model": name, "kiln_ms": statistics.median(kiln_ms),
           "ort_ms": statistics.median(ort_ms), "ratio": statistics.median(ratios),
           "best_ratio": min(kiln_ms) / min(ort_ms),
           "max_abs_err": err, "rel_err": err / scale, "compile_s": compile_s,
           "kernels": len(compiled.plan.steps)}
    if profile:
        rows = sorted(compiled.profile(x, repeat=repeat), key=lambda r: -r["ms"])[:profile]
        print(f"-- {name}: slowest kernels (of {out['kernels']}, "
              f"kiln {out['kiln_ms']:.3f} ms, ort {out['ort_ms']:.3f} ms)")
        print_table(["group", "kernel", "ms", "share"],
                    [[r["name"][:48], r["kernel"][:40], r["ms"], r["share"]] for r in rows])
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=None,
                        help="comma-separated names (default: all of tests/models_zoo.py, "
                             "or every .onnx file of --onnx)")
    parser.add_argument("--onnx", default=None, metavar="DIR",
                        help="benchmark the DIR/*.onnx files instead of the built-in models")
    parser.add_argument("--threads", default="1",
                        help="thread count, or comma-separated counts (e.g. 1,2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--dynamic-size", type=int, default=32,
                        help="the size of an input's dynamic dims past the first (1)")
    parser.add_argument("--profile", type=int, default=0,
                        help="print the N slowest kernels of each model")
    parser.add_argument("--cpu", action="store_true",
                        help="time with the calling thread's CPU time instead of wall time "
                             "(1 thread only: both runtimes then run on the calling thread; "
                             "a shared machine's time slices taken by others drop out)")
    args = parser.parse_args(argv)
    try:
        counts = [int(t) for t in args.threads.split(",") if t]
    except ValueError:
        parser.error(f"--threads {args.threads!r}: expected counts like 1 or 1,2")
    if not counts or min(counts) < 1:
        parser.error(f"--threads {args.threads!r}: expected counts of at least 1")
    if args.cpu and counts != [1]:
        parser.error("--cpu measures the calling thread: use it with --threads 1")
    logging.basicConfig(level=logging.WARNING)
    if args.onnx is not None:
        if not os.path.isdir(args.onnx):
            parser.error(f"--onnx {args.onnx!r} is not a directory")
        known = sorted(f[:-5] for f in os.listdir(args.onnx) if f.endswith(".onnx"))
    else:
        known = list(ARCHITECTURES)
    names = known if args.models is None else [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        parser.error(f"unknown model(s) {unknown}; known: {known}")
    results = {t: [] for t in counts}
    failures = {t: {} for t in counts}
    for name in names:
        for t in counts:
            try:
                with kiln_threads(t):
                    results[t].append(measure(name, t, args.rounds, args.repeat,
                                              args.profile, args.onnx,
                                              time.thread_time if args.cpu
                                              else time.perf_counter, args.dynamic_size))
            except Exception as exc:  # a failure is a result here: report it, go on
                failures[t][name] = f"{type(exc).__name__}: {exc}"[:300]
                print(f"-- {name} ({t}T): FAILED {failures[t][name]}", flush=True)
    summaries = {t: summarize(results[t], failures[t], t, args) for t in counts}
    if len(counts) == 1:
        emit_json(summaries[counts[0]])
        return 0 if results[counts[0]] else 1
    first, last = counts[0], counts[-1]
    scaling = scaling_table(results[first], results[last], first, last)
    emit_json({"bench": "architectures", "source": args.onnx or "models_zoo",
               "threads": counts, "by_threads": {str(t): summaries[t] for t in counts},
               "scaling": scaling})
    return 0 if all(results.values()) else 1


def summarize(results: list[dict], failures: dict, threads: int, args) -> dict:
    """Print one thread count's table; return its JSON figures."""
    if not results:
        return {"bench": "architectures", "threads": threads, "failures": failures}
    print(f"default schedules (db=None) vs onnxruntime, {threads} thread(s), median of "
          f"{args.rounds} interleaved rounds of {args.repeat} runs"
          + (" (CPU time of the calling thread)" if args.cpu else "")
          + "; shared machine: compare ratios, not absolute ms")
    print_table(["model", "kiln ms", "ort ms", "kiln/ort", "best rounds", "max err", "rel err",
                 "compile s", "kernels"],
                [[r["model"], r["kiln_ms"], r["ort_ms"], r["ratio"], r["best_ratio"],
                  f"{r['max_abs_err']:.1e}", f"{r['rel_err']:.1e}",
                  f"{r['compile_s']:.1f}", r["kernels"]] for r in results])
    geo = float(np.exp(np.mean(np.log([r["ratio"] for r in results]))))
    worst = max(results, key=lambda r: r["ratio"])
    print(f"geomean kiln/ort {geo:.3f}; worst {worst['model']} {worst['ratio']:.3f}")
    for name, why in failures.items():
        print(f"failed: {name}: {why}")
    return {"bench": "architectures", "source": args.onnx or "models_zoo",
            "threads": threads, "rounds": args.rounds,
            "clock": "thread_time" if args.cpu else "perf_counter",
            "repeat": args.repeat, "geomean_ratio": round(geo, 3),
            "worst_ratio": round(worst["ratio"], 3),
            "models": {r["model"]: {k: (float(f"{v:.4g}") if isinstance(v, float) else v)
                                    for k, v in r.items() if k != "model"}
                       for r in results},
            "failures": failures}


def scaling_table(low: list[dict], high: list[dict], first: int, last: int) -> dict:
    """Each model's time at `last` threads over its time at `first`, Kiln and onnxruntime."""
    at_low = {r["model"]: r for r in low}
    rows, out = [], {}
    for r in high:
        if r["model"] not in at_low:
            continue
        base = at_low[r["model"]]
        kiln_x, ort_x = r["kiln_ms"] / base["kiln_ms"], r["ort_ms"] / base["ort_ms"]
        rows.append([r["model"], kiln_x, ort_x, base["ratio"], r["ratio"]])
        out[r["model"]] = {"kiln": round(kiln_x, 3), "ort": round(ort_x, 3)}
    if rows:
        print(f"time at {last} threads over time at {first} (below 1: the threads pay)")
        print_table(["model", f"kiln {last}T/{first}T", f"ort {last}T/{first}T",
                     f"kiln/ort {first}T", f"kiln/ort {last}T"], rows)
        geo = lambda k: float(np.exp(np.mean(np.log([row[k] for row in rows]))))  # noqa: E731
        print(f"geomean kiln {geo(1):.3f}, ort {geo(2):.3f}; kiln slower at {last}T than at "
              f"{first}T: {sum(row[1] > 1.0 for row in rows)} of {len(rows)}")
    return out


if __name__ == "__main__":
    sys.exit(main())
