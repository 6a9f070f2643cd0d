"""The CPU one kernel costs a cold compile, by phase and kernel class: what a compile worker
does per task (graph/compile/parallel_build._work: schedule, lowering, the loop-IR passes,
LLVM IR emission and its text, LLVM's passes and machine code, garbage collection), repeated
in this process on each distinct kernel of the models.

    PYTHONPATH=. python benchmarks/kernel_cpu.py [--models default_cnn,mobilenetv2_like,hf_llama]
        [--repeat 3] [--cache] [--profile 25] [--objects FILE [--compare-objects OTHER]]

Models as in compile_time_ort.py (bundled and tests/fixtures; run from the repository root).
The tasks and their selections are what `kiln.compile(path, jobs=1)` builds (captured from one
compile with the committed database); each kernel is then built `--repeat` times after one
warm-up build and its median CPU seconds (time.process_time) kept, in total and by phase
(wrapped functions; "other" is the rest). Kernel cache off, or with --cache through an empty
cache folder per build (a cold compile's misses: key and write). Kernel class: from the task's
name (conv, depthwise conv, matmul, softmax/norm, pool/reduce, elementwise).
--profile N prints cProfile's top N functions (own time) over the first repeat.
--objects FILE writes a sha256 of each kernel's object code; --compare-objects OTHER compares
with another run's (a change that must leave the machine code alone: exit status 1 if not).
Prints a table and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import gc
import hashlib
import importlib
import json
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402
from compile_time_ort import write_inputs, write_model  # noqa: E402

import numpy as np  # noqa: E402

import llvmlite.binding as llvm  # noqa: E402
import llvmlite.ir as llvm_ir  # noqa: E402

import kiln  # noqa: E402

graph_compile = importlib.import_module("kiln.graph.compile.model")
parallel_build = importlib.import_module("kiln.graph.compile.parallel_build")
emit_module_mod = importlib.import_module("kiln.codegen.emit_module")
jit = importlib.import_module("kiln.codegen.jit")
cache_mod = importlib.import_module("kiln.codegen.cache")

DEFAULT_MODELS = "default_cnn,mobilenetv2_like,hf_llama"


def kernel_class(mt) -> str:
    """A coarse class of the task from its name (the fused ops', for medians by class)."""
    text = mt.name.lower()
    if "conv" in text:
        return "depthwise conv" if "depthwise" in text else "conv"
    if "matmul" in text or "gemm" in text or "dense" in text:
        return "matmul"
    if "softmax" in text or "norm" in text:
        return "softmax/norm"
    if "pool" in text or "reduce" in text:
        return "pool/reduce"
    return "elementwise"


def capture_jobs(name: str, tmp: str) -> list[tuple]:
    """(task, target, selection, threads) of every kernel a jobs=1 compile of `name` builds."""
    path = write_model(name, tmp)
    write_inputs(path, f"{tmp}/in.npz")
    with np.load(f"{tmp}/in.npz") as f:
        feeds = {k: f[k] for k in f.files}
    jobs = []
    real = graph_compile._build_task

    def spy(mt, target, selection, build=None, threads=None):
        jobs.append((mt, target, selection, threads))
        return real(mt, target, selection, build, threads)
    graph_compile._build_task = spy
    try:
        kiln.compile(path, jobs=1).run(feeds)     # symbolic shapes compile at the run
    finally:
        graph_compile._build_task = real
    return jobs


class Phases:
    """Adds the CPU time of wrapped functions to per-label counters (outermost call only)."""

    def __init__(self):
        self.seconds = collections.Counter()
        self._undo = []
        self._depth = collections.Counter()

    def wrap(self, owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def timed(*args, **kwargs):
            self._depth[label] += 1
            start = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                self._depth[label] -= 1
                if not self._depth[label]:
                    self.seconds[label] += time.process_time() - start
        setattr(owner, name, timed)
        self._undo.append((owner, name, real))

    def restore(self) -> None:
        for owner, name, real in reversed(self._undo):
            setattr(owner, name, real)


def _wrap_all(ph: Phases) -> None:
    ph.wrap(graph_compile, "apply_selection", "schedule")
    ph.wrap(graph_compile, "lower", "lower")
    ph.wrap(emit_module_mod, "run_passes", "loop-IR passes")
    ph.wrap(parallel_build, "emit_module", "emit (+passes)")
    ph.wrap(llvm_ir.Module, "__repr__", "IR to text")
    ph.wrap(llvm, "parse_assembly", "parse IR")
    ph.wrap(llvm.ModuleRef, "verify", "verify")
    ph.wrap(jit, "optimize", "LLVM passes (+parse)")
    ph.wrap(llvm.ModuleRef, "__str__", "optimized IR text")
    ph.wrap(llvm.TargetMachine, "emit_object", "machine code")
    ph.wrap(cache_mod, "kernel_key", "cache key")
    ph.wrap(cache_mod, "read_object", "cache read")
    ph.wrap(cache_mod, "store_object", "cache write")


class _GcTime:
    """CPU seconds of Python's cyclic garbage collections (gc.callbacks)."""

    def __init__(self):
        self.seconds, self._start = 0.0, 0.0

    def __call__(self, phase, info):
        if phase == "start":
            self._start = time.process_time()
        else:
            self.seconds += time.process_time() - self._start


def build_one(job) -> tuple[float, dict, bytes]:
    """One worker build of `job` in this process, as a compile worker does it
    (parallel_build._work): (CPU s, phase CPU s, object code)."""
    mt, target, selection, threads = job
    ph, gc_time = Phases(), _GcTime()
    _wrap_all(ph)
    gc.callbacks.append(gc_time)
    start = time.process_time()
    try:
        _, obj, _, _, _, _ = parallel_build._work(
            (mt, target, selection, graph_compile._build_task, threads))
        gc.collect(0)   # what the build left (the next allocation would trigger it anyway)
    finally:
        gc.callbacks.remove(gc_time)
        ph.restore()
    total = time.process_time() - start
    phases = dict(ph.seconds)
    phases["emit LLVM IR"] = phases.pop("emit (+passes)", 0.0) - phases.get("loop-IR passes", 0)
    phases["LLVM passes"] = (phases.pop("LLVM passes (+parse)", 0.0) - phases.get("parse IR", 0)
                             - phases.get("verify", 0) - phases.get("optimized IR text", 0))
    phases["gc"] = gc_time.seconds
    phases["other"] = total - sum(phases.values())
    return total, phases, obj.object_code


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", type=int, default=0)
    parser.add_argument("--cache", action="store_true",
                        help="through the kernel cache, an empty folder for each build (a "
                             "cold compile's misses: key, store)")
    parser.add_argument("--objects", help="write {kernel: sha256 of its object code} here")
    parser.add_argument("--compare-objects", help="and compare with this file")
    args = parser.parse_args(argv)
    os.environ["KILN_CACHE_DIR"] = "off"
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [(name, job) for name in args.models.split(",")
                for job in capture_jobs(name, tmp)]
    rows, per_kernel, objects = [], {}, {}
    profiler = cProfile.Profile() if args.profile else None
    cache_root = tempfile.mkdtemp(prefix="kiln-kernel-cpu-") if args.cache else None
    for n, (name, job) in enumerate(jobs):
        build_one(job)      # warm-up (imports, caches of the first build)
        totals, phase_runs = [], []
        for r in range(args.repeat):
            if cache_root:
                os.environ["KILN_CACHE_DIR"] = f"{cache_root}/{n}-{r}"
            if profiler and r == 0:
                profiler.enable()
            total, phases, code = build_one(job)
            if profiler and r == 0:
                profiler.disable()
            totals.append(total)
            phase_runs.append(phases)
        os.environ["KILN_CACHE_DIR"] = "off"
        key = f"{name}|{job[0].name}|{job[3]}"
        objects[key] = hashlib.sha256(code).hexdigest()
        med = {p: statistics.median(run.get(p, 0.0) for run in phase_runs)
               for p in phase_runs[0]}
        per_kernel[key] = {"class": kernel_class(job[0]), "cpu_s": statistics.median(totals),
                           **med}
    labels = ("schedule", "lower", "loop-IR passes", "emit LLVM IR", "IR to text", "parse IR",
              "verify", "LLVM passes", "optimized IR text", "machine code", "cache key",
              "cache read", "cache write", "gc", "other")
    by_class = collections.defaultdict(list)
    for key, k in per_kernel.items():
        by_class[k["class"]].append(k)
    summary = {}
    for cls, ks in sorted(by_class.items()):
        row = {"class": cls, "kernels": len(ks),
               "cpu ms": 1e3 * statistics.median(k["cpu_s"] for k in ks)}
        for p in labels:
            row[p] = 1e3 * statistics.median(k.get(p, 0.0) for k in ks)
        rows.append(row)
        summary[cls] = row
    total = sum(k["cpu_s"] for k in per_kernel.values())
    rows.append({"class": "all (sum)", "kernels": len(per_kernel), "cpu ms": 1e3 * total,
                 **{p: 1e3 * sum(k.get(p, 0.0) for k in per_kernel.values()) for p in labels}})
    heads = ["class", "kernels", "cpu ms", *labels]
    print_table(heads, [[r[h] if isinstance(r[h], (str, int)) else round(r[h], 1)
                         for h in heads] for r in rows])
    if profiler:
        pstats.Stats(profiler).sort_stats("tottime").print_stats(args.profile)
    if cache_root:
        shutil.rmtree(cache_root, ignore_errors=True)
    status = 0
    result = {"models": args.models, "repeat": args.repeat, "cache": args.cache,
              "total_cpu_s": total, "by_class_ms": summary, "per_kernel": per_kernel}
    if args.objects:
        Path(args.objects).write_text(json.dumps(objects, indent=1, sort_keys=True))
    if args.compare_objects:
        before = json.loads(Path(args.compare_objects).read_text())
        differ = sorted(k for k in before.keys() & objects.keys() if before[k] != objects[k])
        for k in differ:
            print("DIFFERENT OBJECT", k)
        result["objects_different"] = len(differ)
        result["objects_compared"] = len(before.keys() & objects.keys())
        status = 1 if differ else 0
    emit_json(result)
    return status


if __name__ == "__main__":
    sys.exit(main())
