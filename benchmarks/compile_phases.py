"""Where a cold model compile's CPU goes, by phase; with --fast-tier, what a fast first tier
(LLVM O1 passes, -O0 machine code: FastISel and fast register allocation) would save in
compile CPU and cost in run time against the default O3 build.

    python benchmarks/compile_phases.py [--models hf_llama,default_cnn,resnet18_like]
    python benchmarks/compile_phases.py --fast-tier [--models resnet18_like,hf_llama]
    python benchmarks/compile_phases.py --tiered [--models ...]   # tier 1 of KILN_TIERED

Models as in compile_time_ort.py (bundled and tests/fixtures). Each compile runs in this
process with jobs=1 and an empty private KILN_CACHE_DIR (phases) or the cache off
(--fast-tier), to the first result. Phases are CPU seconds (time.process_time) of wrapped
llvmlite and Kiln functions: LLVM passes (parse + verify + pipeline), machine code
(emit_object), LLVM IR emission, llvmlite IR to text, lowering, graph passes, task
extraction, loading objects. --fast-tier runs both builds at 1 thread in alternating rounds
(common.interleaved_medians). Prints a table and, last, one JSON object.
"""
from __future__ import annotations

import argparse
import collections
import importlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, interleaved_medians, print_table  # noqa: E402
from compile_time_ort import all_names, write_inputs, write_model  # noqa: E402

import llvmlite.binding as llvm  # noqa: E402
import llvmlite.ir as llvm_ir  # noqa: E402

import kiln  # noqa: E402
from kiln.codegen.target import Target  # noqa: E402

jit = importlib.import_module("kiln.codegen.jit")
build_mod = importlib.import_module("kiln.codegen.build")
cache_mod = importlib.import_module("kiln.codegen.cache")
graph_compile = importlib.import_module("kiln.graph.compile.model")
tiers = importlib.import_module("kiln.graph.compile.tiers")


def _feeds(path: str, tmp: str) -> dict:
    write_inputs(path, f"{tmp}/in.npz")
    with np.load(f"{tmp}/in.npz") as f:
        return {k: f[k] for k in f.files}


def _first_result(path: str, feeds: dict, **options):
    model = kiln.compile(path, jobs=1, **options)
    model.run(feeds)
    return model


class _Timer:
    """Wraps functions (module attribute or method) to add their CPU time to a counter."""

    def __init__(self):
        self.seconds = collections.Counter()
        self._undo = []

    def wrap(self, owner, name: str, label: str) -> None:
        real = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds[label] += time.process_time() - start
        setattr(owner, name, timed)
        self._undo.append((owner, name, real))

    def restore(self) -> None:
        for owner, name, real in reversed(self._undo):
            setattr(owner, name, real)


def phases(name: str, tmp: str, tiered: bool = False) -> dict:
    """tiered: the fast tier's phases (graph/compile/tiers.py), the optimised build held
    back until the first result is in (it would otherwise count: CPU time is the
    process's), then let go and waited for outside the figures."""
    path = write_model(name, tmp)
    feeds = _feeds(path, tmp)
    os.environ["KILN_CACHE_DIR"] = tempfile.mkdtemp(dir=tmp)
    timer = _Timer()
    timer.wrap(jit, "optimize", "LLVM passes")
    timer.wrap(llvm.TargetMachine, "emit_object", "machine code")
    timer.wrap(tiers if tiered else build_mod, "emit_module", "emit LLVM IR")
    timer.wrap(llvm_ir.Module, "__repr__", "IR to text")
    timer.wrap(tiers if tiered else graph_compile, "lower", "lower")
    timer.wrap(graph_compile, "prepare_graph", "graph passes")
    timer.wrap(graph_compile, "extract_tasks", "extract tasks")
    timer.wrap(cache_mod, "load_objects", "load objects")
    timer.wrap(graph_compile, "_assemble", "assemble (weights)")
    gate = threading.Event()
    real_build = graph_compile._build_kernels
    if tiered:
        def held(*args, **kwargs):
            gate.wait()
            return real_build(*args, **kwargs)
        graph_compile._build_kernels = held
    start = time.process_time()
    try:
        model = _first_result(path, feeds, tiered=tiered)
    finally:
        total = time.process_time() - start
        timer.restore()
        gate.set()
        graph_compile._build_kernels = real_build
    model.optimized()
    row = {"model": name, "cpu_s": total, **timer.seconds}
    row["other"] = total - sum(timer.seconds.values())
    return row


def _fast_optimize(real):
    def optimize(module, target, pipeline="o3", timing=None):
        return real(module, target, "o1", timing)
    return optimize


def _fast_machine(self, *, for_object: bool = False):
    return llvm.Target.from_triple(self.triple).create_target_machine(
        cpu=self.cpu, features=self.features, opt=0, reloc="pic" if for_object else "default",
        codemodel="default" if for_object else "jitdefault", jit=False)


def fast_tier(name: str, tmp: str) -> dict:
    path = write_model(name, tmp)
    feeds = _feeds(path, tmp)
    os.environ["KILN_CACHE_DIR"] = "off"
    real_opt, real_tm = jit.optimize, Target.create_target_machine
    start = time.process_time()
    default = _first_result(path, feeds, db=None, threads=1)
    default_cpu = time.process_time() - start
    jit.optimize, Target.create_target_machine = _fast_optimize(real_opt), _fast_machine
    jit.machine.cache_clear()   # the per-process machines (jit.machine) of the O3 build
    try:
        start = time.process_time()
        fast = _first_result(path, feeds, db=None, threads=1)
        fast_cpu = time.process_time() - start
    finally:
        jit.optimize, Target.create_target_machine = real_opt, real_tm
        jit.machine.cache_clear()
    for a, b in zip(default.run(feeds), fast.run(feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    t_default, t_fast, ratio = interleaved_medians(lambda: default.run(feeds),
                                                   lambda: fast.run(feeds), rounds=5, repeat=10)
    return {"model": name, "compile_cpu_s": default_cpu, "fast_compile_cpu_s": fast_cpu,
            "compile_x": fast_cpu / default_cpu, "run_ms": t_default * 1e3,
            "fast_run_ms": t_fast * 1e3, "run_x": 1 / ratio}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="hf_llama,default_cnn,resnet18_like",
                        help=f"some of {all_names()}")
    parser.add_argument("--fast-tier", action="store_true")
    parser.add_argument("--tiered", action="store_true",
                        help="phases of the fast tier of a tiered compile (KILN_TIERED)")
    args = parser.parse_args(argv)
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in all_names()]
    if unknown:
        parser.error(f"unknown model(s) {unknown}; choose from {all_names()}")
    os.environ.setdefault("KILN_NUM_THREADS", "1")
    with tempfile.TemporaryDirectory(prefix="kiln-phases-") as tmp:
        rows = [fast_tier(n, tmp) if args.fast_tier else phases(n, tmp, args.tiered)
                for n in names]
    if args.fast_tier:
        print_table(["model", "compile cpu s", "fast tier cpu s", "x", "run ms",
                     "fast tier run ms", "x"],
                    [[r["model"], r["compile_cpu_s"], r["fast_compile_cpu_s"], r["compile_x"],
                      r["run_ms"], r["fast_run_ms"], r["run_x"]] for r in rows])
    else:
        labels = sorted({k for r in rows for k in r} - {"model", "cpu_s"})
        print_table(["model", "cpu s", *labels],
                    [[r["model"], r["cpu_s"], *[r.get(k, 0.0) for k in labels]] for r in rows])
    print(f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; CPU seconds "
          "of this process, jobs=1)")
    emit_json({"bench": "compile_fast_tier" if args.fast_tier else "compile_phases",
               "tiered": args.tiered,
               "load_average": os.getloadavg()[0],
               "results": [{k: (round(v, 4) if isinstance(v, float) else v)
                            for k, v in r.items()} for r in rows]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
