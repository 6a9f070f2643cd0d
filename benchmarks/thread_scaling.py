"""Where the time goes at 2 threads (issue 33 item 3, first step): per model and per kernel.

    python benchmarks/thread_scaling.py [--models mobilenetv2_like,resnet18_like,bert_like,
        hf_gpt2,hf_llama] [--rounds 5] [--calls 20]
    python benchmarks/thread_scaling.py --ab --zoo [--onnx DIR] --no-kernels
    python benchmarks/thread_scaling.py --ab --ab-refinements --onnx DIR --no-kernels

--ab also compiles each model for 2 threads without the per-kernel thread decision
(autotune/space/thread_plan.py `disabled()`: every parallel loop a config asks for kept, as
before it) and times it in the same alternating rounds ("2T old"), so the decision's gain is
measured against the same machine load. With --ab-refinements "2T old" keeps the decision but
not its later refinements (`thread_plan.unrefined()`: gather and chain terms, row offers,
balanced depth). --zoo adds tests/models_zoo.py's architectures,
--onnx DIR every DIR/*.onnx (inputs as benchmarks/architectures.py makes them). Fork/joins
per run are counted by Kiln's pool (codegen.runtime.fork_count) while the model runs. Each
kernel row also carries `est_us`, the thread decision's 1-thread estimate of it (how the
estimate's rates were fitted: the module's docstring), and the median error of that estimate
over the kernels timed.

Each model is compiled twice (db=None, default schedules): for threads=1 and for threads=2.
Reported, in one process:
- whole-model latency at 1 and 2 threads (median of --rounds alternating rounds, each a
  median of runs) and onnxruntime's at intra_op_num_threads 1 and 2, as ratios;
- per kernel call of the plan: its time at 1 and at 2 threads, timed in isolation on the
  model's own buffers by a native call sequence that repeats the one call --calls times (no
  Python between calls), alternating 1T and 2T over the rounds; its speedup; how many
  PARALLEL loops it holds, the fork/joins one call makes and the iterations the parallel
  loop splits (from the kernel's loop IR when it carries one; else from the `__par`
  functions of its LLVM IR, iterations unknown);
- the fork/joins per model run and an estimate of a fork/join's cost: over the parallel
  kernels below 30 us at 1 thread, the median of (t2 - t1/2) / forks (what 2 threads cost
  beyond a perfect split);
- a summary per model: kernels slower at 2 threads, their share of the 1-thread time, the
  time they lose. Prints a table and, last, one JSON object of the figures.

Both compiled models live in one process and share Kiln's pool; each side sets its kernels'
thread count before it is timed. The machine's load (os.getloadavg) is printed first and last:
on a shared 2-core machine a second thread competes with whatever else runs.
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import statistics
import sys
import time

import numpy as np

# an empty kernel cache unless --warm-cache: kernels built in this process keep their loop IR,
# which gives each parallel loop's trip count and the fork/joins of loops nested in serial
# ones (a kernel loaded from the cache only has LLVM IR: its `__par` functions are counted)
_TMP_CACHE = None
if __name__ == "__main__" and "--warm-cache" not in sys.argv:
    import tempfile
    _TMP_CACHE = tempfile.mkdtemp(prefix="kiln_thread_scaling_")
    os.environ["KILN_CACHE_DIR"] = _TMP_CACHE

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import emit_json, ort_session, print_table, sized_bundled_model  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
SEQ = 64                                  # the HF fixtures' sequence length here
MODELS = ("mobilenetv2_like", "resnet18_like", "bert_like", "hf_gpt2", "hf_llama")


ONNX_DIR = None                           # --onnx: models by file stem


def load_model(name: str):
    """(ModelProto, input_shapes or None)."""
    import onnx
    if name.startswith("zoo:"):
        sys.path.insert(1, ROOT)
        from tests.models_zoo import ARCHITECTURES
        return ARCHITECTURES[name[4:]](), None
    if name.startswith("onnx:"):
        return onnx.load(os.path.join(ONNX_DIR, name[5:] + ".onnx")), None
    sized = sized_bundled_model(name)
    if sized is not None:
        return sized, None
    proto = onnx.load_from_string(gzip.open(os.path.join(FIXTURES, name + ".onnx.gz")).read())
    return proto, {v.name: [1, SEQ] for v in proto.graph.input}


def feeds_for(proto, shapes) -> dict:
    if shapes is None:
        from architectures import example_feeds
        return example_feeds(proto, SEQ)
    rng = np.random.default_rng(0)
    out = {}
    for v in proto.graph.input:
        t = v.type.tensor_type
        shape = shapes[v.name] if shapes else [d.dim_value or 1 for d in t.shape.dim]
        if t.elem_type == 1:
            out[v.name] = rng.standard_normal(shape).astype(np.float32)
        elif "mask" in v.name:
            out[v.name] = np.ones(shape, np.int64)
        else:
            out[v.name] = rng.integers(0, 100, shape).astype(np.int64)
    return out


# ---------------------------------------------------------------- parallel structure
def _const(e):
    v = getattr(e, "value", None)
    return v if isinstance(v, (int, np.integer)) else None


def parallel_info(kernel) -> dict:
    """{"loops": PARALLEL loops in the kernel, "forks": fork/joins per call (a parallel loop
    inside serial loops forks once per enclosing iteration), "iters": the parallel loops'
    trip counts (None when not constant), "source": "loop IR" or "llvm"}."""
    from kiln.schedule.ir import For, ForKind
    func = getattr(kernel, "func", None)
    if func is not None and not callable(func):
        loops, forks, iters = 0, 0, []

        def visit(stmt, mult):
            nonlocal loops, forks
            if stmt is None:
                return
            if isinstance(stmt, For):
                ext = _const(stmt.extent)
                if stmt.kind == ForKind.PARALLEL:
                    loops += 1
                    forks += mult
                    iters.append(ext)
                    return
                visit(stmt.body, mult * (ext if ext is not None else 1))
                return
            for name in ("body", "then_case", "else_case"):
                if hasattr(stmt, name):
                    visit(getattr(stmt, name), mult)
            for s in getattr(stmt, "stmts", ()) or ():
                visit(s, mult)

        visit(func.body, 1)
        return {"loops": loops, "forks": forks, "iters": iters, "source": "loop IR"}
    try:
        text = kernel.llvm_ir()
    except Exception:                                   # noqa: BLE001 - no IR kept
        return {"loops": None, "forks": None, "iters": [], "source": "none"}
    n = len(set(re.findall(r"define[^@]*@\"?([\w.$]*__par\d+)", text)))
    return {"loops": n, "forks": n, "iters": [], "source": "llvm"}


# ---------------------------------------------------------------- timing
def median_of(fn, repeat: int, with_min: bool = False):
    """Median seconds of one call of fn over `repeat` calls (and the fastest, with_min)."""
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return (statistics.median(times), min(times)) if with_min else statistics.median(times)


def step_sequences(compiled, calls: int):
    """One CallSequence per plan step repeating that call `calls` times."""
    from kiln.codegen.sequence import CallSequence
    seqs = []
    for step, (_, args) in zip(compiled.plan.steps, compiled._steps):
        address = compiled._kernel(step).address
        ptrs = [a.ctypes.data for a in args]
        seqs.append(CallSequence([(address, ptrs)] * calls, name=f"t_{step.group}"))
    return seqs


def kernel_estimates(proto, shapes) -> dict:
    """{kernel name: the thread decision's 1-thread estimate of its default schedule, us}."""
    from kiln.autotune.space.rules import SearchSpace
    from kiln.autotune.space.thread_plan import kernel_estimate_us
    from kiln.codegen.target import Target
    from kiln.graph.compile.model import model_tasks
    target = Target.native()
    out = {}
    for mt in model_tasks(proto, target, shapes):
        try:
            space = SearchSpace(mt.task.retargeted(target), 1, target)
            sch, _ = space.apply(space.default_config())
            out[mt.name] = kernel_estimate_us(sch, target)
        except Exception:                             # noqa: BLE001 - an estimate is optional
            pass
    return out


def forks_per_run(model, feeds) -> int:
    from kiln.codegen.runtime import fork_count
    model.run(feeds)
    before = fork_count()
    model.run(feeds)
    return fork_count() - before


def measure_model(name: str, rounds: int, calls: int, ort_ok: bool, ab: bool = False,
                  kernels_too: bool = True, refinements: bool = False) -> dict:
    from kiln.autotune.space.thread_plan import disabled, unrefined
    from kiln.graph.compile.model import compile_model
    proto, shapes = load_model(name)
    t0 = time.perf_counter()
    m = {n: compile_model(proto, db=None, threads=n, input_shapes=shapes, cache_model=False)
         for n in (1, 2)}
    if ab:
        with (unrefined() if refinements else disabled()):
            m["2old"] = compile_model(proto, db=None, threads=2, input_shapes=shapes,
                                      cache_model=False)
    compile_s = time.perf_counter() - t0
    feeds = feeds_for(proto, shapes)
    kin = {n: {k: v for k, v in feeds.items() if k in m[n].input_names} for n in m}
    for n in m:
        m[n].set_num_threads(2 if n == "2old" else n)
    fork_runs = {n: forks_per_run(m[n], kin[n]) for n in m}
    sess = {}
    if ort_ok:
        try:
            sess = {n: ort_session(proto, n) for n in (1, 2)}
        except Exception as exc:                      # noqa: BLE001 - report, go on
            print(f"{name}: onnxruntime failed: {exc}", file=sys.stderr)

    def use(n):
        m[n].set_num_threads(n)

    # whole model: alternating rounds
    whole = {"k1": [], "k2": [], "o1": [], "o2": [], "k2old": []}
    best = {k: float("inf") for k in whole}
    reps = 10
    sides = [(1, 1), (2, 2)] + ([("2old", 2)] if ab else [])
    for _ in range(rounds):
        for n, threads in sides:
            runs = [(f"k{n}", lambda: m[n].run(kin[n]))]
            if sess and n != "2old":
                runs.append((f"o{n}", lambda: sess[threads].run(None, feeds)))
            for key, fn in runs:
                t, lo = median_of(fn, reps, with_min=True)
                whole[key].append(t)
                best[key] = min(best[key], lo)
    med = {k: statistics.median(v) if v else None for k, v in whole.items()}
    estimates = kernel_estimates(proto, shapes)
    if not kernels_too:
        return _summary(name, compile_s, m, med, best, fork_runs, [], True, [])

    # per kernel: both plans must have the same steps to pair them
    steps1, steps2 = m[1].plan.steps, m[2].plan.steps
    paired = len(steps1) == len(steps2) and all(
        a.group == b.group for a, b in zip(steps1, steps2))
    if not paired:       # pair by group name where both have it
        idx2 = {s.group: i for i, s in enumerate(steps2)}
        pairs = [(i, idx2[s.group]) for i, s in enumerate(steps1) if s.group in idx2]
    else:
        pairs = [(i, i) for i in range(len(steps1))]
    seq = {n: step_sequences(m[n], calls) for n in (1, 2)}
    per = {n: [[] for _ in pairs] for n in (1, 2)}
    for _ in range(rounds):
        for n in (1, 2):
            use(n)
            for k, (i1, i2) in enumerate(pairs):
                s = seq[n][i1 if n == 1 else i2]
                per[n][k].append(median_of(s, 3) / calls)
    kernels = []
    for k, (i1, i2) in enumerate(pairs):
        step = steps2[i2]
        info = parallel_info(m[2]._kernel(step))
        t1, t2 = statistics.median(per[1][k]), statistics.median(per[2][k])
        est = estimates.get(steps1[i1].kernel)
        kernels.append({"group": step.group, "kernel": step.kernel, "ops": "+".join(step.ops),
                        "t1_us": t1 * 1e6, "t2_us": t2 * 1e6, "speedup": t1 / t2,
                        "est_us": est,
                        "par_loops": info["loops"], "forks": info["forks"],
                        "par_iters": info["iters"], "par_source": info["source"],
                        "same_kernel": steps1[i1].kernel == step.kernel})
    return _summary(name, compile_s, m, med, best, fork_runs, kernels, paired, pairs)


def _summary(name, compile_s, m, med, best, fork_runs, kernels, paired, pairs) -> dict:
    steps2 = m[2].plan.steps
    sum1 = sum(k["t1_us"] for k in kernels)
    sum2 = sum(k["t2_us"] for k in kernels)
    losers = [k for k in kernels if k["speedup"] < 1.0]
    forks = sum(k["forks"] or 0 for k in kernels)
    small = [(k["t2_us"] - k["t1_us"] / 2) / k["forks"] for k in kernels
             if k["forks"] and k["t1_us"] < 30]
    errs = [abs(np.log(k["est_us"] / k["t1_us"])) for k in kernels
            if k.get("est_us") and k["t1_us"] > 0.5]
    return {
        "model": name, "compile_s": round(compile_s, 1), "steps": len(steps2),
        "kiln_2t_old_ms": med["k2old"] * 1e3 if med["k2old"] else None,
        "kiln_new_vs_old_2t": med["k2"] / med["k2old"] if med["k2old"] else None,
        "forks_measured": {str(n): v for n, v in fork_runs.items()},
        "estimate_median_error": float(np.exp(np.median(errs))) if errs else None,
        "paired_steps": len(pairs), "same_plan": paired,
        "kiln_1t_ms": med["k1"] * 1e3, "kiln_2t_ms": med["k2"] * 1e3,
        "kiln_speedup": med["k1"] / med["k2"],
        "ort_1t_ms": med["o1"] * 1e3 if med["o1"] else None,
        "ort_2t_ms": med["o2"] * 1e3 if med["o2"] else None,
        "ort_speedup": med["o1"] / med["o2"] if med["o1"] else None,
        "kiln_vs_ort_1t": med["k1"] / med["o1"] if med["o1"] else None,
        "kiln_vs_ort_2t": med["k2"] / med["o2"] if med["o2"] else None,
        "min_ms": {k: v * 1e3 for k, v in best.items() if v != float("inf")},
        "kiln_speedup_min": best["k1"] / best["k2"],
        "kiln_new_vs_old_2t_min": (best["k2"] / best["k2old"]
                                   if best["k2old"] != float("inf") else None),
        "kernel_sum_1t_us": sum1, "kernel_sum_2t_us": sum2,
        "parallel_kernels": sum(1 for k in kernels if k["par_loops"]),
        "serial_kernels": sum(1 for k in kernels if k["par_loops"] == 0),
        "forks_per_run": forks,
        "fork_cost_us_est": statistics.median(small) if small else None,
        "fork_cost_samples": len(small),
        "losers": len(losers),
        "losers_share_1t": sum(k["t1_us"] for k in losers) / sum1 if sum1 else 0.0,
        "losers_lost_us": sum(k["t2_us"] - k["t1_us"] for k in losers),
        "gainers_saved_us": sum(k["t1_us"] - k["t2_us"] for k in kernels
                                if k["speedup"] >= 1.0),
        "kernels": kernels,
    }


def bucket_rows(results) -> list[list]:
    """Speedup by the kernel's 1-thread time, over every model: where splitting pays."""
    edges = [0, 10, 30, 100, 300, 1e9]
    rows = []
    allk = [k for r in results for k in r["kernels"] if k["par_loops"]]
    for lo, hi in zip(edges, edges[1:]):
        ks = [k for k in allk if lo <= k["t1_us"] < hi]
        if not ks:
            continue
        label = f"{lo:g}-{hi:g} us" if hi < 1e9 else f">= {lo:g} us"
        rows.append([label, len(ks), sum(1 for k in ks if k["speedup"] < 1),
                     statistics.median(k["speedup"] for k in ks),
                     sum(k["t2_us"] - k["t1_us"] for k in ks if k["speedup"] < 1)])
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20,
                        help="repeats of one kernel call per native timing sequence")
    parser.add_argument("--top", type=int, default=8, help="kernel rows shown per model")
    parser.add_argument("--no-ort", action="store_true")
    parser.add_argument("--warm-cache", action="store_true",
                        help="use the kernel cache (faster; parallel trip counts unknown)")
    parser.add_argument("--ab", action="store_true",
                        help="also time 2 threads without the per-kernel thread decision")
    parser.add_argument("--ab-refinements", action="store_true",
                        help="with --ab: 2T old keeps the decision, not its refinements")
    parser.add_argument("--zoo", action="store_true", help="add tests/models_zoo.py's models")
    parser.add_argument("--onnx", default=None, metavar="DIR", help="add DIR/*.onnx")
    parser.add_argument("--no-kernels", action="store_true",
                        help="whole models only (no per-kernel timing)")
    args = parser.parse_args()
    global ONNX_DIR
    names = args.models.split(",") if args.models else []
    if args.zoo:
        sys.path.insert(1, ROOT)
        from tests.models_zoo import ARCHITECTURES
        names += [f"zoo:{n}" for n in ARCHITECTURES]
    if args.onnx:
        ONNX_DIR = args.onnx
        names += [f"onnx:{f[:-5]}" for f in sorted(os.listdir(args.onnx))
                  if f.endswith(".onnx")]
    try:
        import onnxruntime  # noqa: F401
        ort_ok = not args.no_ort
    except ImportError:
        ort_ok = False
    load0 = os.getloadavg()
    print(f"load average at start: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} "
          f"({os.cpu_count()} CPUs)")
    results = []
    for name in names:
        try:
            r = measure_model(name, args.rounds, args.calls, ort_ok, args.ab,
                              not args.no_kernels, args.ab_refinements)
        except Exception as exc:                      # noqa: BLE001 - report, go on
            print(f"\n{name}: failed: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        results.append(r)
        print(f"\n{name}: {r['steps']} kernel calls, fork/joins per run (counted) "
              f"{r['forks_measured']}; compiled in {r['compile_s']} s; 2T/1T "
              f"{r['kiln_2t_ms'] / r['kiln_1t_ms']:.3f}"
              + (f", 2T new/old {r['kiln_new_vs_old_2t']:.3f}" if args.ab else ""),
              flush=True)
        if args.no_kernels:
            continue
        rows = sorted(r["kernels"], key=lambda k: k["t2_us"] - k["t1_us"], reverse=True)
        print_table(["kernel call (worst 2T loss first)", "ops", "1T us", "2T us", "1T/2T",
                     "est us", "par", "forks", "iters"],
                    [[k["group"][:34], k["ops"][:30], k["t1_us"], k["t2_us"], k["speedup"],
                      k["est_us"] if k["est_us"] is not None else "-",
                      k["par_loops"], k["forks"],
                      ",".join(str(i) for i in k["par_iters"][:3])] for k in rows[:args.top]])
    print("\nper model, medians of alternating rounds (2T/1T: time at 2 threads over 1; "
          "new/old: 2T with the thread decision over 2T without)")
    print_table(["model", "kiln 1T ms", "kiln 2T ms", "kiln 2T/1T", "ort 2T/1T", "kiln/ort 1T",
                 "kiln/ort 2T", "2T new/old", "forks 2T new", "forks 2T old"],
                [[r["model"], r["kiln_1t_ms"], r["kiln_2t_ms"], 1 / r["kiln_speedup"],
                  1 / r["ort_speedup"] if r["ort_speedup"] else "-",
                  r["kiln_vs_ort_1t"] if r["kiln_vs_ort_1t"] else "-",
                  r["kiln_vs_ort_2t"] if r["kiln_vs_ort_2t"] else "-",
                  r["kiln_new_vs_old_2t"] if r["kiln_new_vs_old_2t"] else "-",
                  r["forks_measured"].get("2"), r["forks_measured"].get("2old", "-")]
                 for r in results])
    if args.no_kernels:
        results_json(args, load0, results)
        return
    print("\nper model (kernel sums are of calls timed alone)")
    print_table(["model", "kiln 1T ms", "kiln 2T ms", "kiln 1T/2T", "ort 1T/2T", "kiln/ort 2T",
                 "sum 1T ms", "sum 2T ms", "forks/run", "fork us", "losers",
                 "losers' 1T share", "lost ms"],
                [[r["model"], r["kiln_1t_ms"], r["kiln_2t_ms"], r["kiln_speedup"],
                  r["ort_speedup"] if r["ort_speedup"] else "-",
                  r["kiln_vs_ort_2t"] if r["kiln_vs_ort_2t"] else "-",
                  r["kernel_sum_1t_us"] / 1e3, r["kernel_sum_2t_us"] / 1e3, r["forks_per_run"],
                  r["fork_cost_us_est"] if r["fork_cost_us_est"] is not None else "-",
                  f"{r['losers']}/{r['steps']}", r["losers_share_1t"],
                  r["losers_lost_us"] / 1e3] for r in results])
    print("\nfastest single runs (less exposed to other processes' time slices)")
    print_table(["model", "kiln 1T ms", "kiln 2T ms", "kiln 1T/2T", "ort 1T ms", "ort 2T ms",
                 "ort 1T/2T"],
                [[r["model"], r["min_ms"]["k1"], r["min_ms"]["k2"], r["kiln_speedup_min"],
                  r["min_ms"].get("o1", "-"), r["min_ms"].get("o2", "-"),
                  r["min_ms"]["o1"] / r["min_ms"]["o2"] if "o2" in r["min_ms"] else "-"]
                 for r in results])
    print("\nparallel kernels by 1-thread time, all models")
    print_table(["1T time", "kernels", "slower at 2T", "median 1T/2T", "us lost"],
                bucket_rows(results))
    results_json(args, load0, results)


def results_json(args, load0, results) -> None:
    load1 = os.getloadavg()
    print(f"load average at end: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    geo = {}
    for key in ("kiln_vs_ort_1t", "kiln_vs_ort_2t", "kiln_new_vs_old_2t"):
        vals = [r[key] for r in results if r.get(key)]
        if vals:
            geo[key] = float(np.exp(np.mean(np.log(vals))))
    if geo:
        print("geomeans: " + ", ".join(f"{k} {v:.3f}" for k, v in geo.items()))

    def rnd(v):
        return round(v, 4) if isinstance(v, float) else v
    emit_json({"bench": "thread_scaling", "cpu_count": os.cpu_count(),
               "load_start": [round(x, 2) for x in load0],
               "load_end": [round(x, 2) for x in load1],
               "rounds": args.rounds, "calls": args.calls, "geomeans": geo,
               "buckets": [[rnd(v) for v in row] for row in bucket_rows(results)],
               "models": [{k: ([{kk: rnd(vv) for kk, vv in x.items()} for x in v]
                               if k == "kernels" else rnd(v)) for k, v in r.items()}
                          for r in results]})


if __name__ == "__main__":
    try:
        main()
    finally:
        if _TMP_CACHE:
            import shutil
            shutil.rmtree(_TMP_CACHE, ignore_errors=True)
