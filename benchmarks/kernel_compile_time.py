"""Compile time of single kernels by phase, and the kernels' speed, for LLVM pipeline variants.

    KILN_NUM_THREADS=1 python benchmarks/kernel_compile_time.py [--repeat 5] [--rounds 9]
                                                                [--pipelines lean,o3]

Kernels: the default schedules of matmul 1024^3, conv2d_nchwc 64->64 3x3 @56, softmax
4096x1024 and depthwise_conv2d_nchwc 64 3x3 @56, plus the tuned matmul 1024^3 from
tuning_logs/kiln.db (read from a copy). Phases: schedule (search space apply), lower, emit
(loop IR -> llvmlite module), LLVM (parse + verify + passes), machine code (MCJIT), in CPU time. Every
figure is a median over --repeat compiles in this one process; kernel times are medians of
--rounds round-robin runs of every pipeline's kernel, so the ratios are like for like.
Prints a table and, as the last line, one JSON object.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import emit_json, print_table  # noqa: E402

from kiln.autotune.database import Database  # noqa: E402
from kiln.autotune.space.rules import SearchSpace  # noqa: E402
from kiln.autotune.task import Task  # noqa: E402
from kiln.codegen import Target, emit_expr, jit  # noqa: E402
from kiln.codegen.build import DEFAULT_FASTMATH, param_specs  # noqa: E402
from kiln.schedule import passes as passes_mod  # noqa: E402 - the unit-loop pass, swapped by _Before
from kiln.codegen.emit_module import emit_module, fastmath_flags, symbol_name  # noqa: E402
from kiln.codegen.kernel import Kernel  # noqa: E402
from kiln.codegen.emit_module import threads_symbol  # noqa: E402
from kiln.codegen.pyentry import add_python_entry  # noqa: E402
from kiln.schedule import lower  # noqa: E402
from kiln.te.visit import free_vars  # noqa: E402

KERNELS = {
    "matmul 1024^3": ("matmul", (1024, 1024, 1024), False),
    "matmul 1024^3 tuned": ("matmul", (1024, 1024, 1024), True),
    "conv nchwc 64@56": ("conv2d_nchwc", (1, 64, 56, 56, 64, 3, 3, 1, 1), False),
    "softmax 4096x1024": ("softmax", (4096, 1024), False),
    "dwconv nchwc 64@56": ("depthwise_conv2d_nchwc", (1, 64, 56, 56, 3, 3, 1, 1), False),
    "conv nchw 64@56": ("conv2d", (1, 64, 56, 56, 64, 3, 3, 1, 1), False),
    "dense 128x512x512": ("dense", (128, 512, 512), False),
    "maxpool 64@56": ("pooling", (1, 64, 56, 56, 2), False),
    "batch_matmul 8x128^3": ("batch_matmul", (8, 128, 128, 128), False),
}


def _schedule(task: Task, db: Database | None):
    space = SearchSpace(task)
    best = db.best(task.workload_key, str(task.target), threads=1) if db else []
    return space.apply(best[0].config if best else space.default_config())


class _Before:
    """Within its block, codegen as before this commit: every loop of extent 1 emitted as an
    LLVM loop, free variables walked afresh on every question (variant name "before")."""

    def __enter__(self):
        self.saved = passes_mod.remove_unit_loops, emit_expr._free_vars
        passes_mod.remove_unit_loops = lambda stmt: stmt
        emit_expr._free_vars = lambda e: free_vars(e)

    def __exit__(self, *exc):
        passes_mod.remove_unit_loops, emit_expr._free_vars = self.saved


def _compile_phases(task: Task, db, target: Target, variant: str) -> tuple[dict, Kernel]:
    """One compile with every phase timed; the kernel as build() would return it. `variant`:
    a name from jit.PIPELINES, or "before" (O3 with the codegen before this commit)."""
    if variant == "before":
        with _Before():
            return _compile_phases(task, db, target, "o3")
    pipeline = variant
    times = {}
    clock = time.process_time  # CPU time: a busy shared machine stretches wall time
    t0 = clock()
    sch, args = _schedule(task, db)
    t1 = clock()
    func = lower(sch, args, name=task.name)
    t2 = clock()
    module = emit_module(func, target, fastmath_flags(DEFAULT_FASTMATH))
    sym, specs = symbol_name(func.name), param_specs(func)
    add_python_entry(module, sym, specs)
    t3 = clock()
    mod = jit.optimize(module, target, pipeline=pipeline)
    t4 = clock()
    engine = llvm.create_mcjit_compiler(mod, target.create_target_machine())
    engine.finalize_object()
    t5 = clock()
    times.update(schedule=t1 - t0, lower=t2 - t1, emit=t3 - t2, llvm=t4 - t3, mc=t5 - t4,
                 total=t5 - t0)
    compiled = jit.Compiled(engine, "", t5 - t3)
    kernel = Kernel(func.name, sym, specs, target, compiled.address(sym),
                    compiled.global_address(threads_symbol(sym)), entry=None, func=func,
                    optimized_ir="", keepalive=compiled, compile_seconds=t5 - t3,
                    num_threads=1)
    return times, kernel


def _arrays(task: Task) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--pipelines", default="before,o3",
                        help=f"comma-separated: before, {', '.join(jit.PIPELINES)}")
    parser.add_argument("--kernels", default=",".join(KERNELS))
    args = parser.parse_args(argv)
    pipelines = args.pipelines.split(",")
    target = Target.native()
    tmp = tempfile.mkdtemp(prefix="kiln-ct-")
    src = Path(__file__).resolve().parent.parent / "tuning_logs" / "kiln.db"
    shutil.copy(src, f"{tmp}/kiln.db")
    db = Database(f"{tmp}/kiln.db")
    rows, results = [], []
    for label in args.kernels.split(","):
        op, shape, tuned = KERNELS[label]
        task = Task.from_op(op, shape, target=str(target))
        kernels, phases = {}, {}
        for p in pipelines:
            runs = []
            for _ in range(args.repeat):
                emit_expr._free_vars.cache_clear()  # every compile pays its own walks
                times, kernel = _compile_phases(task, db if tuned else None, target, p)
                runs.append(times)
            phases[p] = {k: statistics.median(r[k] for r in runs) * 1e3 for k in runs[0]}
            kernels[p] = kernel
        arrays = _arrays(task)
        outs = {}
        for p, k in kernels.items():
            copy = [a.copy() for a in arrays]
            k(*copy)
            outs[p] = [copy[task.args.index(t)] for t in task.outputs]
        ref = outs[pipelines[0]]
        for p in pipelines[1:]:
            for a, b in zip(ref, outs[p]):
                np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5, err_msg=f"{label} {p}")
        run = {p: [] for p in pipelines}
        for _ in range(args.rounds):
            for p, k in kernels.items():
                start = time.perf_counter()
                k(*arrays)
                run[p].append(time.perf_counter() - start)
        for p in pipelines:
            ms = statistics.median(run[p]) * 1e3
            base = statistics.median(run[pipelines[0]]) * 1e3
            ph = phases[p]
            rows.append([label, p, ph["schedule"], ph["lower"], ph["emit"], ph["llvm"], ph["mc"],
                         ph["total"], ms, base / ms])
            results.append({"kernel": label, "pipeline": p, "phases_ms": ph, "run_ms": ms,
                            "speed_vs_first": base / ms})
    print_table(["kernel", "pipeline", "schedule ms", "lower ms", "emit ms", "LLVM passes ms",
                 "machine code ms", "total ms", "kernel run ms", f"speed vs {pipelines[0]}"],
                rows)
    shutil.rmtree(tmp, ignore_errors=True)
    emit_json({"bench": "kernel_compile_time", "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
