"""LLVM IR -> optimized module -> machine code in an MCJIT engine (one engine per kernel)."""
from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import tempfile
import threading
import time
from dataclasses import dataclass

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ..te.errors import CodegenError, InternalError
from .target import Target, init_llvm

log = logging.getLogger(__name__)


@dataclass
class Compiled:
    """A finalized engine plus the optimized IR text; the engine keeps the code alive."""

    engine: llvm.ExecutionEngine
    optimized_ir: str
    seconds: float

    def address(self, symbol: str) -> int:
        addr = self.engine.get_function_address(symbol)
        if not addr:
            raise InternalError(f"symbol {symbol!r} missing from the compiled module; this is "
                                "a bug in Kiln")
        return addr

    def global_address(self, symbol: str) -> int:
        return self.engine.get_global_value_address(symbol)


# Pipeline variants for measuring compile time against kernel speed
# (benchmarks/kernel_compile_time.py): name -> (speed level, LLVM's loop vectoriser, SLP
# vectoriser, loop unrolling, loop interleaving). NOTE: "o3" stays the default. Kiln's loop IR
# arrives tiled, unrolled and vectorised, but switching LLVM's loop passes off measured no
# robust compile-time gain and lost kernel speed: without unrolling (which also stops full
# unrolling of small constant loops) the default 1024^3 GEMM ran at 0.63x, the tuned one at
# 0.41x and the depthwise conv at 0.70x; most pass time is SCEV work (IndVarSimplify,
# LoopIdiomRecognize, LoopLoadElimination) that no tuning option turns off. O2 changed kernel
# speed both ways (conv nchw 64@56 0.80x, conv nchwc 1.16x) for no steady compile-time gain.
# Leaner hand-built pipelines lost more: SROA/instcombine/GVN/DSE/unroll without LICM ran the
# blocked conv at 0.27x; LLVM's function simplification pipeline alone (no vectorisers, no
# runtime unrolling) at 0.77-0.96x on pooling, NCHW conv, dense and depthwise conv.
# 2026-11-25 20:35 UTC (i64 offsets on, ResNet-50's kernels, benchmarks/kernel_ab.py): O2 would
# cut LLVM's passes by a third and machine code by a quarter, but a conv (68b20e8a) ran 0.79x and
# 0.81x, the Winograd input transforms 0.82-0.88x in two runs; `-unroll-allow-partial=false`
# (machine code -20%) ran the Winograd input transforms at 0.67-0.73x; without the loop
# vectoriser 39 of 40 objects were identical for ~5% less pass time. None kept.
PIPELINES = {
    "o3": (3, True, True, True, True),
    "o3-novec": (3, False, True, True, True),
    "o3-nounroll": (3, True, True, False, True),
    "o3-nointerleave": (3, True, True, True, False),
    "o3-noloop": (3, False, False, False, False),
    "o2": (2, True, True, True, True),
    "o1": (1, True, True, True, True),
}


@functools.lru_cache(maxsize=16)
def machine(target: Target, for_object: bool = False, opt: int = 3) -> llvm.TargetMachine:
    """`target.create_target_machine(...)`, one per process for each setting, for the pass
    pipeline and object code of every kernel. LLVM builds a target machine's subtarget (the
    CPU's features, scheduling model, cost tables) lazily and keeps it: a new machine per
    kernel rebuilt it each time, 1-3 ms of a kernel's 25-130 ms of compile CPU; the machine
    code and optimized IR are byte-identical either way (benchmarks/kernel_cpu.py
    --compare-objects). Not for MCJIT engines, which take ownership of theirs. (A forked
    worker inherits the parent's; LLVM calls are serialised by llvmlite's lock.)"""
    return target.create_target_machine(for_object=for_object, opt=opt)


def optimize(module: ir.Module | str | llvm.ModuleRef, target: Target, pipeline: str = "o3",
             timing: list[str] | None = None) -> llvm.ModuleRef:
    """Parse, verify and run an LLVM pipeline (default O3); returns the optimized module.
    `module` may also be its text (str(module)), or a parsed module (optimized in place).

    timing: a list to append LLVM's pass-timing report to (where compile time goes).
    """
    if pipeline not in PIPELINES:
        raise CodegenError(f"unknown LLVM pipeline {pipeline!r}; choose one of "
                           f"{', '.join(PIPELINES)}")
    init_llvm()
    parsed = module if isinstance(module, llvm.ModuleRef) else None
    text = "" if parsed is not None else module if isinstance(module, str) else str(module)
    try:
        mod = parsed if parsed is not None else llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as exc:
        name = parsed.name if parsed is not None else _module_name(text)
        raise InternalError(f"codegen produced invalid LLVM IR for module {name!r}: "
                            f"{exc}; this is a bug in Kiln") from exc
    tm = machine(target)
    mod.triple = target.triple
    mod.data_layout = str(tm.target_data)
    level, vectorize, slp, unroll, interleave = PIPELINES[pipeline]
    pto = llvm.create_pipeline_tuning_options(speed_level=level)
    pto.loop_vectorization, pto.slp_vectorization = vectorize, slp
    pto.loop_unrolling, pto.loop_interleaving = unroll, interleave
    pb = llvm.create_pass_builder(tm, pto)
    if timing is not None:
        pb.start_pass_timing()
    pb.getModulePassManager().run(mod, pb)
    if timing is not None:
        timing.append(pb.finish_pass_timing())
    return mod


# A kernel still in LLVM after this many seconds is logged (a warning naming it, with its IR
# saved to a file to replay): no kernel should take more than a few seconds, and LLVM cannot
# be interrupted, so a pathological one (an exponential pass, as the unit parallel loop of
# codegen/emit_module.remove_unit_loops was) would otherwise hang its process silently.
SLOW_LLVM_SECONDS = 60.0


def _module_name(text: str) -> str:
    found = re.match(r'; ModuleID = "([^"]*)"', text)
    return found.group(1) if found else "?"


def _report_slow(name: str, text: str, seconds: float) -> None:
    fd, path = tempfile.mkstemp(prefix=f"kiln-slow-{name[:40]}-", suffix=".ll")
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    log.warning("kernel %r has been in LLVM for %.0f s (%d lines of IR); LLVM cannot be "
                "interrupted: its module is saved in %s to replay (codegen.jit.optimize) and "
                "report as a Kiln bug", name, seconds, text.count("\n"), path)


@contextlib.contextmanager
def slow_compile_watch(text: str, seconds: float | None = None):
    """Logs a warning (see _report_slow) if the block is still running after `seconds`
    (default SLOW_LLVM_SECONDS): wraps LLVM's work on the module whose IR is `text`."""
    seconds = SLOW_LLVM_SECONDS if seconds is None else seconds
    timer = threading.Timer(seconds, _report_slow, (_module_name(text), text, seconds))
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def compile_module(module: ir.Module, target: Target) -> Compiled:
    """Optimize and JIT `module` for `target` (which must run on this host)."""
    _check_host(target)
    start = time.perf_counter()
    text = str(module)
    with slow_compile_watch(text):
        mod = optimize(text, target)
        optimized = str(mod)
        engine = llvm.create_mcjit_compiler(mod, target.create_target_machine())
        engine.finalize_object()
    seconds = time.perf_counter() - start
    log.debug("compiled %s in %.1f ms", module.name, seconds * 1e3)
    return Compiled(engine, optimized, seconds)


def _check_host(target: Target) -> None:
    if not target.can_run_on_host():
        raise CodegenError(f"cannot run code for target '{target}' on this machine (its vector "
                           f"ISA is not supported here); use target='native' to run, or "
                           "export_library() to cross-compile")


def compile_object(module: ir.Module | str, target: Target, pipeline: str = "o3",
                   codegen_opt: int = 3) -> tuple[str, bytes, float]:
    """Optimize `module` (or its text) and emit a position-independent object file, as
    export and the kernel cache store it: (optimized IR, object code, seconds).
    pipeline, codegen_opt: the LLVM pipeline (PIPELINES) and code generation level; the
    defaults are what every cached kernel is built with (graph/compile/tiers.py's fast
    tier passes others, and never reaches the kernel cache)."""
    _check_host(target)
    start = time.perf_counter()
    text = module if isinstance(module, str) else str(module)
    with slow_compile_watch(text):
        mod = optimize(text, target, pipeline)
        optimized = str(mod)      # before code generation, whose IR passes change `mod`
        code = machine(target, for_object=True, opt=codegen_opt).emit_object(mod)
    return optimized, code, time.perf_counter() - start


def assembly(optimized_ir: str, target: Target) -> str:
    """Assembly text of already-optimized IR."""
    init_llvm()
    mod = llvm.parse_assembly(optimized_ir)
    return target.create_target_machine().emit_assembly(mod)


def object_code(optimized_ir: str, target: Target) -> bytes:
    """A position-independent object file of already-optimized IR (for shared libraries)."""
    init_llvm()
    mod = llvm.parse_assembly(optimized_ir)
    return target.create_target_machine(for_object=True).emit_object(mod)
