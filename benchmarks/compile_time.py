"""Model compile time: serial (jobs=1) vs parallel kernel compilation, with a phase breakdown;
with --cache, cold and warm compiles through the persistent kernel cache.

    python benchmarks/compile_time.py [--models resnet18_like,mlp] [--jobs 2] [--small]
                                      [--profile]
    python benchmarks/compile_time.py --cache [--models resnet50_like] [--warm-runs 5]
                                      [--cold-runs 1] [--jobs 2]
    python benchmarks/compile_time.py --ort [--models all|resnet18_like,hf_bert]
                                      [--cold-runs 1] [--warm-runs 3] [--ort-runs 3]
    python benchmarks/compile_time.py --onnx /work/exports [--models gpt2,regnety_004]
                                      [--cold-runs 1] [--warm-runs 2] [--ort-runs 2]

Every compile runs in a fresh interpreter, timed after `import kiln`. Without --cache the
kernel cache is off (KILN_CACHE_DIR=off) and the serial and parallel models must give
bit-identical outputs; --profile adds a cProfile breakdown of one serial compile per model:
search space + schedule, lowering, LLVM IR emission, LLVM (optimisation and machine code), and
the rest. --cache compiles the model (saved as an ONNX file, as a user would pass it) with
an empty KILN_CACHE_DIR (cold), then again with the filled one (warm: the model cache), and
once with only the kernel entries left (kernels: frontend, passes, scheduling and lowering
run, LLVM does not); every warm model must give the cold model's outputs bit for bit. Kernel
figures are per distinct kernel of the cold compile: wall and CPU seconds of its schedule,
lowering and codegen in its worker. --ort (compile_time_ort.py) sets each compile beside
onnxruntime's session creation on the same file, in the same run: the bundled models and the
exported fixtures of tests/fixtures, cold and warm, as ratios (issue 33's targets); --onnx
DIR does the same on every DIR/*.onnx (exported public architectures), one cold, two warm
and two onnxruntime runs each unless told.
Prints a table and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

from kiln.graph import models  # noqa: E402
from kiln.graph.compile.model import compile_model  # noqa: E402

FULL = {
    "default_cnn": lambda: models.default_cnn(),
    "resnet18_like": lambda: models.resnet18_like(image_size=224),
    "mobilenetv2_like": lambda: models.mobilenetv2_like(image_size=224),
    "bert_like_encoder": lambda: models.bert_like_encoder(seq=128, hidden=256, layers=2),
    "mlp": lambda: models.mlp(),
    "resnet50_like": lambda: models.resnet50_like(image_size=224),
}
SMALL = {  # the sizes tests/graph/test_compile.py uses
    "default_cnn": lambda: models.default_cnn(image_size=16, width=8),
    "resnet18_like": lambda: models.resnet18_like(image_size=32, base_width=8, num_classes=10),
    "mobilenetv2_like": lambda: models.mobilenetv2_like(image_size=32, width_mult=0.25,
                                                        num_classes=10, stages=3),
    "bert_like_encoder": lambda: models.bert_like_encoder(seq=8, hidden=32, heads=2, layers=2,
                                                          vocab=50),
    "mlp": lambda: models.mlp(sizes=(48, 32, 16, 10)),
    "resnet50_like": lambda: models.resnet50_like(image_size=32, base_width=8, num_classes=10),
}

# (label, function whose cumulative time is the phase); LLVM is the ctypes calls' own time
PHASES = (("space+schedule", "tuner.py", "apply_best"), ("lower", "lower.py", "lower"),
          ("emit LLVM IR", "emit_module.py", "emit_module"),
          ("IR to text", "module.py", "__repr__"))


def _one(name: str, jobs: int, small: bool, out_path: str, profile: bool) -> dict:
    """Compile `name` once in this process; save its outputs to `out_path`."""
    model = (SMALL if small else FULL)[name]()
    profiler = cProfile.Profile() if profile else None
    start, cpu = time.perf_counter(), time.process_time()
    if profiler:
        profiler.enable()
    compiled = compile_model(model, jobs=jobs)
    if profiler:
        profiler.disable()
    wall, own_cpu = time.perf_counter() - start, time.process_time() - cpu
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    outputs = compiled.run(compiled._example_inputs())
    np.savez(out_path, *outputs)
    stats = compiled.plan.meta["compile"]
    row = {"model": name, "jobs": jobs, "wall_s": wall,
           "cpu_s": own_cpu + children.ru_utime + children.ru_stime,
           "busiest_worker_cpu_s": stats["worker_cpu_s"][0],
           "kernels": len(compiled.kernels), "calls": len(compiled.plan.steps)}
    if profiler:
        row["phases"] = _phases(pstats.Stats(profiler), wall)
    return row


def _phases(stats: pstats.Stats, wall: float) -> dict:
    phases = {label: 0.0 for label, _, _ in PHASES}
    llvm = 0.0
    for (path, _, func), (_, _, tottime, cumtime, _) in stats.stats.items():
        for label, file, fn in PHASES:
            if path.endswith(file) and func == fn:
                phases[label] += cumtime
        if path.endswith("llvmlite/binding/ffi.py") and func == "__call__":
            llvm += tottime
    phases["LLVM (ctypes)"] = llvm
    phases["other"] = max(0.0, wall - sum(phases.values()))
    return {k: round(v, 2) for k, v in phases.items()}


def _spawn(name: str, jobs: int, small: bool, out_path: str, profile: bool) -> dict:
    cmd = [sys.executable, __file__, "--one", f"{name}:{jobs}", "--out", out_path]
    cmd += ["--small"] if small else []
    cmd += ["--profile"] if profile else []
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "KILN_CACHE_DIR": "off"})
    if proc.returncode != 0:
        raise SystemExit(f"compiling {name} with jobs={jobs} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _one_file(path: str, jobs: int, out_path: str) -> dict:
    """Compile the ONNX file `path` once (timed from after `import kiln`); save outputs."""
    import kiln
    start, cpu = time.perf_counter(), time.process_time()
    compiled = kiln.compile(path, db=None, jobs=jobs)
    wall, own_cpu = time.perf_counter() - start, time.process_time() - cpu
    outputs = compiled.run(compiled._example_inputs())
    np.savez(out_path, *outputs)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    stats = compiled.plan.meta["compile"]
    return {"wall_s": wall, "cpu_s": own_cpu + children.ru_utime + children.ru_stime,
            "cached": bool(stats.get("cached")), "kernels": len(compiled.kernels),
            "kernel_s": stats.get("kernel_s", {}), "kernel_cpu_s": stats.get("kernel_cpu_s", {})}


def _spawn_file(path: str, jobs: int, out_path: str, cache: str) -> dict:
    cmd = [sys.executable, __file__, "--one-file", f"{path}:{jobs}", "--out", out_path]
    proc = subprocess.run(cmd, capture_output=True, text=True,
                          env={**os.environ, "KILN_CACHE_DIR": cache})
    if proc.returncode != 0:
        raise SystemExit(f"compiling {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _percentiles(values) -> dict:
    v = sorted(values)
    if not v:
        return {}
    return {"median": statistics.median(v), "p90": v[min(len(v) - 1, int(0.9 * len(v)))],
            "max": v[-1]}


def _same(a_path: str, b_path: str) -> bool:
    with np.load(a_path) as a, np.load(b_path) as b:
        return all(np.array_equal(a[k], b[k]) for k in a.files)


def cache_bench(names, jobs: int, small: bool, cold_runs: int, warm_runs: int) -> int:
    """Cold, warm (model cache) and kernels-only compiles of each model in fresh processes."""
    results = []
    with tempfile.TemporaryDirectory(prefix="kiln-cache-bench-") as tmp:
        for name in names:
            import onnx
            path = f"{tmp}/{name}.onnx"
            onnx.save((SMALL if small else FULL)[name](), path)
            cache = f"{tmp}/cache-{name}"
            cold = []
            for k in range(cold_runs):
                shutil.rmtree(cache, ignore_errors=True)
                cold.append(_spawn_file(path, jobs, f"{tmp}/{name}_cold.npz", cache))
            warm = [_spawn_file(path, jobs, f"{tmp}/{name}_warm{k}.npz", cache)
                    for k in range(warm_runs)]
            same = all(_same(f"{tmp}/{name}_cold.npz", f"{tmp}/{name}_warm{k}.npz")
                       for k in range(warm_runs))
            shutil.rmtree(f"{cache}/models", ignore_errors=True)
            kernels_only = _spawn_file(path, jobs, f"{tmp}/{name}_kern.npz", cache)
            same = same and _same(f"{tmp}/{name}_cold.npz", f"{tmp}/{name}_kern.npz")
            last = cold[-1]
            results.append({
                "model": name, "kernels": last["kernels"], "jobs": jobs,
                "cold_s": statistics.median(r["wall_s"] for r in cold),
                "cold_cpu_s": statistics.median(r["cpu_s"] for r in cold),
                "warm_s": statistics.median(r["wall_s"] for r in warm),
                "warm_cpu_s": statistics.median(r["cpu_s"] for r in warm),
                "warm_runs": [round(r["wall_s"], 3) for r in warm],
                "warm_hit": all(r["cached"] for r in warm),
                "kernels_only_s": kernels_only["wall_s"],
                "kernels_only_cpu_s": kernels_only["cpu_s"],
                "kernel_wall_s": _percentiles(last["kernel_s"].values()),
                "kernel_cpu_s": _percentiles(last["kernel_cpu_s"].values()),
                "slowest_kernels": sorted(last["kernel_cpu_s"].items(),
                                          key=lambda kv: -kv[1])[:3],
                "identical_outputs": same})
    print_table(["model", "kernels", "cold s", "cold cpu s", "warm s (median)", "cpu s",
                 "kernels-only s", "cpu s", "identical"],
                [[r["model"], r["kernels"], r["cold_s"], r["cold_cpu_s"], r["warm_s"],
                  r["warm_cpu_s"],
                  r["kernels_only_s"], r["kernels_only_cpu_s"], r["identical_outputs"]]
                 for r in results])
    print()
    print_table(["model", "kernel wall median", "p90", "max", "kernel cpu median", "p90",
                 "max"],
                [[r["model"], *[r["kernel_wall_s"].get(k) for k in ("median", "p90", "max")],
                  *[r["kernel_cpu_s"].get(k) for k in ("median", "p90", "max")]]
                 for r in results])
    for r in results:
        print(f"  {r['model']}: slowest kernels (cpu s) {r['slowest_kernels']}; warm runs "
              f"{r['warm_runs']}")
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; times from "
          "after `import kiln` to the compiled model, in fresh processes; cold = empty "
          "KILN_CACHE_DIR)")
    emit_json({"bench": "compile_time_cache", "load_average": os.getloadavg()[0],
               "results": json.loads(json.dumps(results, default=float),
                                     parse_float=lambda x: round(float(x), 4))})
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(m for m in FULL if m != "resnet50_like"),
                        help=f"comma-separated subset of: {', '.join(FULL)}")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="worker processes of the parallel compile")
    parser.add_argument("--small", action="store_true", help="the test-suite model sizes")
    parser.add_argument("--profile", action="store_true", help="phase breakdown (serial)")
    parser.add_argument("--cache", action="store_true",
                        help="cold and warm compiles through the kernel cache")
    parser.add_argument("--ort", action="store_true",
                        help="cold and warm compiles as ratios to onnxruntime's session")
    parser.add_argument("--onnx", metavar="DIR",
                        help="as --ort, on the DIR/*.onnx files (--models: some of their stems)")
    parser.add_argument("--ort-runs", type=int, default=None, help="default 3 (--onnx: 2)")
    parser.add_argument("--cold-runs", type=int, default=1)
    parser.add_argument("--warm-runs", type=int, default=None, help="default 5 (--onnx: 2)")
    parser.add_argument("--one", help=argparse.SUPPRESS)   # internal: "model:jobs"
    parser.add_argument("--one-file", help=argparse.SUPPRESS)   # internal: "path:jobs"
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one_file:
        path, jobs = args.one_file.rsplit(":", 1)
        print(json.dumps(_one_file(path, int(jobs), args.out)))
        return 0
    if args.one:
        name, jobs = args.one.split(":")
        print(json.dumps(_one(name, int(jobs), args.small, args.out, args.profile)))
        return 0
    if args.ort or args.onnx:
        from compile_time_ort import ort_bench
        names = None if args.models == parser.get_default("models") else args.models
        short = 2 if args.onnx else None    # exports: 40 models, keep the run short
        return ort_bench(names, args.jobs, args.cold_runs,
                         args.warm_runs or short or 5, args.ort_runs or short or 3,
                         onnx_dir=args.onnx)
    args.warm_runs = 5 if args.warm_runs is None else args.warm_runs
    if args.cache and args.models == parser.get_default("models"):
        args.models = "resnet50_like"
    names = [m for m in args.models.split(",") if m]
    unknown = [m for m in names if m not in FULL]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {', '.join(FULL)}")
    if args.cache:
        return cache_bench(names, args.jobs, args.small, args.cold_runs, args.warm_runs)
    results = []
    with tempfile.TemporaryDirectory(prefix="kiln-compile-bench-") as tmp:
        for name in names:
            serial = _spawn(name, 1, args.small, f"{tmp}/{name}_1.npz", args.profile)
            par = _spawn(name, args.jobs, args.small, f"{tmp}/{name}_n.npz", False)
            with np.load(f"{tmp}/{name}_1.npz") as a, np.load(f"{tmp}/{name}_n.npz") as b:
                same = all(np.array_equal(a[k], b[k]) for k in a.files)
            results.append({"model": name, "kernels": serial["kernels"],
                            "serial_s": serial["wall_s"], "serial_cpu_s": serial["cpu_s"],
                            "parallel_s": par["wall_s"], "parallel_cpu_s": par["cpu_s"],
                            "jobs": args.jobs, "speedup": serial["wall_s"] / par["wall_s"],
                            # CPU-bound: on an idle machine the busiest worker sets the pace
                            "cpu_speedup": serial["busiest_worker_cpu_s"]
                            / par["busiest_worker_cpu_s"],
                            "identical_outputs": same, "phases": serial.get("phases")})
    print_table(["model", "kernels", "serial s", "cpu s", f"jobs={args.jobs} s", "cpu s",
                 "speedup", "busiest-worker speedup", "identical"],
                [[r["model"], r["kernels"], r["serial_s"], r["serial_cpu_s"], r["parallel_s"],
                  r["parallel_cpu_s"], r["speedup"], r["cpu_speedup"], r["identical_outputs"]]
                 for r in results])
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores: wall times "
          "include waiting for the CPU; busiest-worker speedup = serial build CPU / CPU of "
          "the busiest worker)")
    if args.profile:
        print("\nserial compile phases (s):")
        for r in results:
            print(f"  {r['model']:<18} " + ", ".join(f"{k} {v}" for k, v in r["phases"].items()))
    emit_json({"bench": "compile_time", "load_average": os.getloadavg()[0],
               "results": [{k: (round(v, 3) if isinstance(v, float) else v)
                            for k, v in r.items()} for r in results]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
