"""Tier 1's kernels (graph/compile/tiers.py) built several to one LLVM module.

Why: each LLVM module pays a fixed cost in a kernel's compile (parsing and verifying, the
target machines, the O1 pipeline's set-up over the module, the object file, a watch thread),
about 7 ms of CPU, 10-25% of a small kernel's (benchmarks/RESULTS.md, "the fixed costs of a
cold compile"). Linking a batch's modules and running the fast pipeline once cut tier 1's LLVM
CPU by 15-20% on default_cnn (7 kernels) and by 18% on hf_llama (22 kernels, 3 per
module). Kernels are external functions, so each one's code is what it would be alone; only
tier 1 batches: its kernels never enter the kernel cache, which is keyed per kernel.

A batch's kernels share one object file: the parent loads it once (codegen.cache.load_objects
loads each distinct object once).
"""
from __future__ import annotations

import time
from typing import Sequence

import llvmlite.binding as llvm

from ...autotune.dispatch import Selection
from ...codegen.jit import machine, optimize, slow_compile_watch
from ...codegen.target import Target
from . import parallel_build
from .tasks import ModelTask
from .tiers import FAST_CODEGEN_OPT, FAST_PIPELINE, FAST_SOURCE, fast_func

# tasks per module at most: LLVM CPU of tier 1 relative to one module per kernel, hf_llama's
# 22 kernels: 2 -> 0.86, 3 -> 0.82, 4 -> 0.80, 8 -> 0.72; default_cnn's 7: 0.83 from 2 on.
# Three, not more: several jobs per worker on a small model keep the workers balanced (with
# four, default_cnn's four convs went to one worker while the other built the thread-pool
# runtime); an idle worker takes what waits at once, and the last tasks are split over the
# workers (parallel_build.StreamingBuild).
BATCH = 3


def compile_linked(texts: Sequence[str], target: Target, pipeline: str,
                   codegen_opt: int) -> tuple[str, bytes]:
    """The modules of `texts` linked into one, through `pipeline` (codegen.jit.PIPELINES)
    to a position-independent object file: (optimized IR, object code)."""
    with slow_compile_watch(texts[0]):
        mod = llvm.parse_assembly(texts[0])
        for text in texts[1:]:
            mod.link_in(llvm.parse_assembly(text))
        mod = optimize(mod, target, pipeline)
        optimized = str(mod)      # before code generation, whose IR passes change `mod`
        code = machine(target, for_object=True, opt=codegen_opt).emit_object(mod)
    return optimized, code


def build_fast_batch(tasks: Sequence[ModelTask], target: Target,
                     selections: dict[str, Selection] | None = None,
                     threads: int | None = None) -> list[tuple]:
    """Tier 1 of `tasks` in one module: per task (name, ObjectKernel, source, CPU s, wall
    s), as parallel_build's workers report them (a task's seconds: its own scheduling,
    lowering and emission plus an equal share of the batch's LLVM time). `selections` are
    ignored (tier 1 reads no database)."""
    funcs, texts, entries, own = [], [], [], []
    for mt in tasks:
        cpu, wall = time.process_time(), time.perf_counter()
        func = fast_func(mt, target, threads)
        text, symbol, params = parallel_build.kernel_text(func, target)
        funcs.append(func)
        texts.append(text)
        entries.append((symbol, params))
        own.append((time.process_time() - cpu, time.perf_counter() - wall))
    cpu, wall = time.process_time(), time.perf_counter()
    optimized, code = compile_linked(texts, target, FAST_PIPELINE, FAST_CODEGEN_OPT)
    llvm_cpu = (time.process_time() - cpu) / len(tasks)
    llvm_wall = (time.perf_counter() - wall) / len(tasks)
    out = []
    for mt, func, (symbol, params), (c, w) in zip(tasks, funcs, entries, own):
        obj = parallel_build.ObjectKernel(func, symbol, params, optimized, code,
                                          w + llvm_wall, None)
        out.append((mt.name, obj, FAST_SOURCE, c + llvm_cpu, w + llvm_wall))
    return out


def build_serial(tasks: Sequence[ModelTask], target: Target, threads: int):
    """Tier 1 in this process, BATCH tasks to a module: (kernels, sources, stats) as
    graph/compile/model._build_kernels returns."""
    built = [row for k in range(0, len(tasks), BATCH)
             for row in build_fast_batch(tasks[k:k + BATCH], target, threads=threads)]
    objects = [(name, obj) for name, obj, *_ in built]
    kernels = parallel_build.link_and_load(objects, target, threads) if objects else {}
    cpu = {name: round(c, 4) for name, _, _, c, _ in built}
    return kernels, {name: source for name, _, source, *_ in built}, {
        "workers": 1, "worker_cpu_s": [round(sum(cpu.values()), 3)],
        "kernel_s": {name: round(w, 4) for name, *_, w in built}, "kernel_cpu_s": cpu,
        "skipped_records": 0}
