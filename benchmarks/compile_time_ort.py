"""Kiln's compile time as a ratio to onnxruntime's session creation on the same ONNX files, in
the same run (issue 33: cold geomean <= 10x, none above 30x; warm <= 2x).

    python benchmarks/compile_time.py --ort [--models all] [--cold-runs 1] [--warm-runs 3]
    python benchmarks/compile_time_ort.py [same options]

Models: the bundled ones (benchmarks/models.py's set, saved as ONNX files as a user would pass
them) and the exported fixtures tests/fixtures/*.onnx.gz (a torch ResNet-18; Hugging Face
transformers with symbolic batch and sequence, run at 1x16); with --onnx DIR, the DIR/*.onnx
files instead (public architectures as exported; `--models` a subset of their stems). Every
figure is measured in a fresh interpreter, from after `import kiln` (or `import onnxruntime`) to the FIRST CORRECT
RESULT: Kiln's compile plus its first run (a compile deferred to the first run, as a
DynamicModel's, counts), onnxruntime's InferenceSession plus its first run; every Kiln output
is checked against onnxruntime's. Cold: an empty private KILN_CACHE_DIR (kernel and model
cache); warm: the same directory filled by the cold compile (the model cache hits). Ratios are
per model and their geomean; medians of the runs. The slowest kernels (CPU s in their worker)
of each cold compile are named. With KILN_TIERED=1 in the environment (tiered compilation,
graph/compile/tiers.py) the cold first result is on tier 1; each cold run then also waits
for the optimised tier (seconds to it) and times both tiers' runs in alternating rounds
(tier 1 over tier 2; each sample about 2 ms of runs, common.calls_per_sample). Prints a
table and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (CALLER_TIERED, calls_per_sample, emit_json, interleaved_medians,  # noqa: E402
                    print_table)

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"
FIXTURE_NAMES = ("resnet18_torch", "hf_bert", "hf_gpt2", "hf_llama", "hf_t5_encoder",
                 "hf_distilbert")
SYMBOLIC = {"batch": 1, "seq": 16}     # the fixtures' symbolic dims (test_hf_export's shape)
VOCAB = 128


def _bundled():
    from tests.task_catalog import BENCHMARK_MODELS
    return BENCHMARK_MODELS


def all_names() -> list[str]:
    return [*_bundled(), *FIXTURE_NAMES]


def write_model(name: str, folder: str) -> str:
    """The model `name` as an ONNX file in `folder`."""
    import onnx
    path = f"{folder}/{name}.onnx"
    if name in FIXTURE_NAMES:
        with gzip.open(FIXTURES / f"{name}.onnx.gz", "rb") as src, open(path, "wb") as dst:
            shutil.copyfileobj(src, dst)
    else:
        onnx.save(_bundled()[name](), path)
    return path


def write_inputs(path: str, out: str) -> None:
    """Deterministic inputs for the ONNX file `path` (symbolic dims: SYMBOLIC; integer
    inputs: token ids below VOCAB, a mask of ones)."""
    import onnx
    from onnx import helper
    model = onnx.load(path, load_external_data=False)
    init = {t.name for t in model.graph.initializer}
    rng = np.random.default_rng(0)
    feeds = {}
    for v in model.graph.input:
        if v.name in init:
            continue
        t = v.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else SYMBOLIC.get(d.dim_param, 1)
                 for d in t.shape.dim]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(t.elem_type))
        if dtype.kind == "f":
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
        elif "mask" in v.name:
            feeds[v.name] = np.ones(shape, dtype)
        else:
            feeds[v.name] = rng.integers(0, VOCAB, shape).astype(dtype)
    np.savez(out, **feeds)


# ------------------------------------------------------------------ one measurement per process
def child_ort(path: str, inputs: str, out: str, threads: int) -> dict:
    import onnxruntime as ort
    with np.load(inputs) as f:
        feeds = {k: f[k] for k in f.files}
    start, cpu = time.perf_counter(), time.process_time()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])
    session = time.perf_counter() - start
    outputs = sess.run(None, feeds)
    first = time.perf_counter() - start
    own_cpu = time.process_time() - cpu       # every thread of this process
    np.savez(out, *outputs)
    return {"session_s": session, "first_result_s": first, "cpu_s": own_cpu}


def child_kiln(path: str, inputs: str, out: str, jobs: int) -> dict:
    import kiln
    with np.load(inputs) as f:
        feeds = {k: f[k] for k in f.files}
    start, cpu = time.perf_counter(), time.process_time()
    model = kiln.compile(path, jobs=jobs)
    compile_s = time.perf_counter() - start
    outputs = model.run(feeds)
    first = time.perf_counter() - start
    own_cpu = time.process_time() - cpu
    np.savez(out, *outputs)
    compiled = model.specializations[0] if hasattr(model, "specializations") else model
    first_stats = compiled.plan.meta.get("compile", {})     # tier 1's, for a tiered compile
    tier = _tier_figures(compiled, feeds, start)
    import resource
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    stats = getattr(compiled, "plan", None)
    stats = stats.meta.get("compile", {}) if stats is not None else {}
    return {"compile_s": compile_s, "first_result_s": first,
            "cpu_s": own_cpu + children.ru_utime + children.ru_stime,
            "cached": bool(stats.get("cached")), "kernels": len(getattr(compiled, "kernels", ())),
            "kernel_cpu_s": stats.get("kernel_cpu_s", {}),
            "first_kernel_cpu_s": first_stats.get("kernel_cpu_s", {}),
            "tiers": _tiers(compiled), **tier}


def _tier_figures(compiled, feeds: dict, start: float) -> dict:
    """A tiered compile's (graph/compile/tiers.py): its first tier ("generic" or "fast"),
    seconds until the optimised kernels are in, and the two tiers' run times side by side (alternating rounds, after the swap);
    {} for a model that is not tiered or came from the model cache."""
    tier = getattr(compiled, "tier", None)
    if tier not in ("generic", "fast"):
        return {}
    first = compiled._current          # the first tier's model, timed against tier 2
    optimized = compiled.optimized()
    ready = time.perf_counter() - start
    number = calls_per_sample(lambda: first.run(feeds))
    fast_s, opt_s, _ = interleaved_medians(lambda: first.run(feeds),
                                           lambda: optimized.run(feeds), rounds=5, repeat=5,
                                           number=number)
    return {"first_tier": tier, "optimized_ready_s": ready, "tier1_run_s": fast_s,
            "tier2_run_s": opt_s}


def _tiers(compiled) -> dict:
    """How many kernels are on each tier (tiered compiles; {} otherwise)."""
    tiers = getattr(compiled, "kernel_tiers", None)
    if tiers is None:
        return {}
    out: dict[str, int] = {}
    for t in tiers().values():
        out[t] = out.get(t, 0) + 1
    return out


def _spawn(kind: str, path: str, inputs: str, out: str, env: dict, arg: int) -> dict:
    cmd = [sys.executable, __file__, "--child", kind, path, inputs, out, str(arg)]
    # Kiln as the caller runs it: KILN_TIERED as given, else kiln.compile's default
    tiered = {"KILN_TIERED": CALLER_TIERED or "default"}
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, **tiered, **env})
    if proc.returncode != 0:
        raise SystemExit(f"{kind} on {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _close(a_path: str, b_path: str) -> bool:
    with np.load(a_path) as a, np.load(b_path) as b:
        return len(a.files) == len(b.files) and all(
            np.allclose(a[k], b[k], rtol=1e-3, atol=1e-3) for k in a.files)


def _geomean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def onnx_names(onnx_dir: str) -> list[str]:
    """The stems of DIR/*.onnx (--onnx DIR: exported models, used in place, never written)."""
    if not os.path.isdir(onnx_dir):
        raise SystemExit(f"--onnx {onnx_dir!r} is not a directory")
    names = sorted(f[:-5] for f in os.listdir(onnx_dir) if f.endswith(".onnx"))
    if not names:
        raise SystemExit(f"--onnx {onnx_dir!r} holds no .onnx file")
    return names


def ort_bench(names, jobs: int, cold_runs: int, warm_runs: int, ort_runs: int,
              threads: int | None = None, onnx_dir: str | None = None) -> int:
    known = onnx_names(onnx_dir) if onnx_dir else all_names()
    names = known if names in (None, "all") else [n for n in names.split(",") if n]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown model(s) {unknown}; choose from {', '.join(known)}")
    threads = threads or int(os.environ.get("KILN_NUM_THREADS") or os.cpu_count() or 1)
    # the generic kernel library (codegen/generic) is per machine, like onnxruntime's own
    # kernels: built (or found) once here, before any timed compile, and its time reported
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "kiln", "warmup"], check=True, capture_output=True)
    library_s = time.perf_counter() - start
    loads, results = [os.getloadavg()[0]], []
    with tempfile.TemporaryDirectory(prefix="kiln-ort-bench-") as tmp:
        for name in names:
            path = f"{onnx_dir}/{name}.onnx" if onnx_dir else write_model(name, tmp)
            inputs = f"{tmp}/{name}_in.npz"
            write_inputs(path, inputs)
            want = f"{tmp}/{name}_ort.npz"
            cache = f"{tmp}/cache-{name}"
            ort, cold, warm = [], [], []
            # interleaved so each side sees the same load: ort, cold, warm, ort, ...
            for k in range(max(ort_runs, cold_runs, warm_runs)):
                if k < ort_runs:
                    ort.append(_spawn("ort", path, inputs, want, {}, threads))
                if k < cold_runs:
                    shutil.rmtree(cache, ignore_errors=True)
                    cold.append(_spawn("kiln", path, inputs, f"{tmp}/{name}_cold.npz",
                                       {"KILN_CACHE_DIR": cache}, jobs))
                    assert _close(want, f"{tmp}/{name}_cold.npz"), f"{name}: cold != onnxruntime"
                if k < warm_runs:
                    warm.append(_spawn("kiln", path, inputs, f"{tmp}/{name}_warm.npz",
                                       {"KILN_CACHE_DIR": cache}, jobs))
                    assert _close(want, f"{tmp}/{name}_warm.npz"), f"{name}: warm != onnxruntime"
            loads.append(os.getloadavg()[0])
            med = lambda rows, key: statistics.median(r[key] for r in rows)  # noqa: E731
            ort_first, ort_session = med(ort, "first_result_s"), med(ort, "session_s")
            last = cold[-1]
            row = {"model": name, "kernels": last["kernels"],
                   "ort_session_s": ort_session, "ort_first_s": ort_first,
                   "ort_cpu_s": med(ort, "cpu_s"),
                   "cold_compile_s": med(cold, "compile_s"), "cold_first_s": med(cold,
                                                                                 "first_result_s"),
                   "cold_cpu_s": med(cold, "cpu_s"),
                   "warm_compile_s": med(warm, "compile_s"),
                   "warm_first_s": med(warm, "first_result_s"),
                   "warm_cpu_s": med(warm, "cpu_s"),
                   "warm_hit": all(r["cached"] for r in warm),
                   "tiers": last["tiers"],
                   "slowest_kernels": sorted(last["kernel_cpu_s"].items(),
                                             key=lambda kv: -kv[1])[:3]}
            if "optimized_ready_s" in last:     # the kernels of the first result: tier 1's
                row["slowest_tier1_kernels"] = sorted(last["first_kernel_cpu_s"].items(),
                                                      key=lambda kv: -kv[1])[:3]
            if "optimized_ready_s" in last:     # a tiered compile (KILN_TIERED)
                row["first_tier"] = last["first_tier"]
                row["optimized_ready_s"] = med(cold, "optimized_ready_s")
                row["tier1_over_tier2_run"] = med(
                    [{"x": r["tier1_run_s"] / r["tier2_run_s"]} for r in cold], "x")
                row["tier2_run_ms"] = med(cold, "tier2_run_s") * 1e3
            row["cold_x"] = row["cold_first_s"] / ort_first
            row["warm_x"] = row["warm_first_s"] / ort_first
            # CPU seconds (Kiln's with its compile workers'): steadier than wall on a loaded
            # machine, where a 2-process compile waits for the CPU more than one process
            row["cold_cpu_x"] = row["cold_cpu_s"] / row["ort_cpu_s"]
            row["warm_cpu_x"] = row["warm_cpu_s"] / row["ort_cpu_s"]
            results.append(row)
            print(f"  {name}: ort {ort_first:.3f} s, cold {row['cold_first_s']:.2f} s "
                  f"({row['cold_x']:.1f}x), warm {row['warm_first_s']:.3f} s "
                  f"({row['warm_x']:.2f}x)", file=sys.stderr, flush=True)
    print_table(["model", "kernels", "ort session s", "ort first s", "cold compile s",
                 "cold first s", "warm first s", "cold x", "warm x", "ort cpu s",
                 "cold cpu s", "cold cpu x", "warm cpu s", "warm cpu x"],
                [[r["model"], r["kernels"], r["ort_session_s"], r["ort_first_s"],
                  r["cold_compile_s"], r["cold_first_s"], r["warm_first_s"],
                  r["cold_x"], r["warm_x"], r["ort_cpu_s"], r["cold_cpu_s"], r["cold_cpu_x"],
                  r["warm_cpu_s"], r["warm_cpu_x"]]
                 for r in results])
    cold_g, warm_g = _geomean(r["cold_x"] for r in results), _geomean(r["warm_x"] for r in
                                                                      results)
    worst = max(results, key=lambda r: r["cold_x"])
    worst_warm = max(results, key=lambda r: r["warm_x"])
    print(f"\ncold: geomean {cold_g:.2f}x onnxruntime (target <= 10), worst {worst['cold_x']:.1f}x "
          f"({worst['model']}; target <= 30); warm: geomean {warm_g:.2f}x, worst "
          f"{worst_warm['warm_x']:.2f}x ({worst_warm['model']}; target <= 2); cold CPU time: "
          f"geomean {_geomean(r['cold_cpu_x'] for r in results):.2f}x onnxruntime's, warm "
          f"{_geomean(r['warm_cpu_x'] for r in results):.2f}x")
    tiered = [r for r in results if "optimized_ready_s" in r]
    if tiered:
        print("\ntiered compile (KILN_TIERED): first result on the first tier (generic "
              "kernels, else tier 1), the optimised tier swapped in later")
        print_table(["model", "first tier", "optimised ready s", "x onnxruntime",
                     "tier-2 run ms", "first / tier-2 run time"],
                    [[r["model"], r["first_tier"], r["optimized_ready_s"],
                      r["optimized_ready_s"] / r["ort_first_s"], r["tier2_run_ms"],
                      r["tier1_over_tier2_run"]] for r in tiered])
        print(f"the first tier runs {_geomean(r['tier1_over_tier2_run'] for r in tiered):.2f}x "
              "tier 2's time (geomean)")
    for r in results:
        tiers = f"; tiers {r['tiers']}" if r["tiers"] else ""
        first = ("; tier 1's: " + ", ".join(f"{k} {v:.2f}" for k, v in
                                            r["slowest_tier1_kernels"])
                 if r.get("slowest_tier1_kernels") else "")
        print(f"  {r['model']}: slowest kernels (cpu s) "
              + ", ".join(f"{k} {v:.2f}" for k, v in r["slowest_kernels"]) + first + tiers)
    print(f"(KILN_TIERED={CALLER_TIERED or 'unset: kiln.compile default'}; generic kernel "
          f"library: `kiln warmup` took {library_s:.2f} s before the runs, "
          "outside every timed compile; a cold compile empties the model and kernel caches)")
    print(f"(times from after the import to the first correct result, in fresh processes, "
          f"onnxruntime at {threads} threads, Kiln jobs={jobs}; load average "
          f"{min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} cores)")
    emit_json({"bench": "compile_time_ort", "source": onnx_dir or "bundled",
               "generic_library_s": library_s,
               "jobs": jobs, "threads": threads,
               "load_average": [min(loads), max(loads)],
               "cold_geomean_x": cold_g, "cold_worst_x": worst["cold_x"],
               "warm_geomean_x": warm_g, "warm_worst_x": worst_warm["warm_x"],
               "cold_cpu_geomean_x": _geomean(r["cold_cpu_x"] for r in results),
               "warm_cpu_geomean_x": _geomean(r["warm_cpu_x"] for r in results),
               "tiered": CALLER_TIERED or "default",
               "tier1_over_tier2_run_geomean": _geomean(r["tier1_over_tier2_run"]
                                                        for r in tiered),
               "results": json.loads(json.dumps(results, default=float),
                                     parse_float=lambda x: round(float(x), 4))})
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="all",
                        help="all, or some of the bundled models and the fixtures "
                        f"{', '.join(FIXTURE_NAMES)} (with --onnx: of the DIR's stems)")
    parser.add_argument("--onnx", metavar="DIR", help="the DIR/*.onnx files (exports) instead")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--cold-runs", type=int, default=1)
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--ort-runs", type=int, default=3)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        kind, path, inputs, out, arg = args.child
        fn = child_ort if kind == "ort" else child_kiln
        print(json.dumps(fn(path, inputs, out, int(arg))))
        return 0
    return ort_bench(args.models, args.jobs, args.cold_runs, args.warm_runs, args.ort_runs,
                     onnx_dir=args.onnx)


if __name__ == "__main__":
    sys.exit(main())
