"""Compile a model's distinct kernels in worker processes, then load them as one library.

LLVM dominates model compile time (the O3 pipeline and machine-code emission are ~75% of a
ResNet-18 compile), and llvmlite serialises every LLVM call behind one process-wide lock, so
threads cannot overlap it. Each worker (forked, so nothing is re-imported) schedules, lowers,
emits and optimises one kernel and returns a position-independent object file plus the
optimized IR; the parent loads the objects together into its JIT (codegen/object_loader.py, as the
kernel cache loads a cached model's).
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import time
import zlib
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Callable, Sequence

from ...autotune.dispatch import Selection
from ...codegen.build import DEFAULT_FASTMATH, gc_paused, param_specs
from ...codegen.emit_module import emit_module, fastmath_flags, release, symbol_name
from ...codegen import cache
from ...codegen.jit import compile_object as jit_compile_object
from ...codegen.kernel import Kernel, ParamSpec
from ...codegen import runtime as _runtime
from ...codegen.runtime import backend, pool_address
from ...codegen.pyentry import add_python_entry
from ...codegen.runtime_config import c_compiler_setting
from ...codegen.target import Target
from ...schedule.ir import PrimFunc
from ...te.errors import KilnError
from ..deferred import resolve_pending
from .tasks import ModelTask

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ObjectKernel:
    """One compiled kernel as data: what a worker sends back to the parent."""

    func: PrimFunc
    symbol: str
    params: tuple[ParamSpec, ...]
    optimized_ir: str | Callable[[], str]   # or how to read it (a cached kernel's)
    object_code: bytes
    seconds: float                # emit + optimise + object code, wall clock
    cache_key: str | None = None  # its entry in the kernel cache (codegen.cache)


def linker() -> str | None:
    """The C compiler driver that links object files into a shared library, if any."""
    for name in (c_compiler_setting(), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def can_fork_workers() -> bool:
    """Worker processes can help: this is no daemonic multiprocessing worker (those may not
    have children)."""
    return not multiprocessing.current_process().daemon


def kernel_text(func: PrimFunc, target: Target) -> tuple[str, str, tuple[ParamSpec, ...]]:
    """`func`'s LLVM module as text, with its checked Python entry, for an object file (no
    parallel runtime bound yet: the parent links the pool): (text, symbol, params)."""
    with gc_paused():
        module = emit_module(func, target, fastmath_flags(DEFAULT_FASTMATH), parallel=None)
        symbol, params = symbol_name(func.name), param_specs(func)
        add_python_entry(module, symbol, params)
        text = str(module)
        release(module)
        return text, symbol, params


def compile_object(func: PrimFunc, target: Target) -> ObjectKernel:
    """codegen.build's emit and optimise steps, ending in an object file instead of a JIT;
    through the kernel cache when it is on (the same key as codegen.build's)."""
    start = time.perf_counter()
    tgt = target
    text, symbol, params = kernel_text(func, tgt)
    store = cache.kernel_store()
    key = cache.kernel_key(text, tgt, params) if store is not None else None
    hit = cache.read_object(store, key) if store is not None else None
    if hit is not None:
        return ObjectKernel(func, symbol, params, hit.ir_text, hit.object_code,
                            time.perf_counter() - start, key)
    optimized_ir, code, _ = jit_compile_object(text, tgt)
    seconds = time.perf_counter() - start
    if store is not None:
        cache.store_object(store, key, cache.CachedObject(
            func.name, symbol, params, code, zlib.compress(optimized_ir.encode(), 1), seconds))
    return ObjectKernel(func, symbol, params, optimized_ir, code, seconds, key)


def _work(job: tuple) -> tuple[str, ObjectKernel, str, int, float, float]:
    """Worker entry: build one task to an object file (schedule fallback as in the parent);
    also says which worker did it, its CPU and wall seconds (schedule and lowering
    included)."""
    mt, target, selection, build_task, threads = job
    cpu, wall = time.process_time(), time.perf_counter()
    with gc_paused():       # scheduling, lowering and emission: see codegen.build.gc_paused
        obj, kind = build_task(mt, target, selection,
                               lambda func: compile_object(func, target), threads)
    return (mt.name, obj, kind, os.getpid(), time.process_time() - cpu,
            time.perf_counter() - wall)


def _ready_runtime() -> None:
    """Compile (or load from the cache) the parallel runtime the loaded kernels will point
    at, in the parent while it waits for the workers: otherwise the first kernel loaded
    does it after they finish (~0.1-0.2 s of LLVM with an empty cache). Errors are left
    for that kernel to raise."""
    if backend() != "kiln":
        return
    try:
        pool_address()
    except KilnError as exc:
        log.debug("parallel runtime not ready ahead of loading: %s", exc)


def _work_batch(job: tuple) -> list[tuple]:
    """Worker entry for several tasks built together (graph/compile/fast_batch.py): one
    result per task, as _work's."""
    tasks, target, selections, build_batch, threads = job
    with gc_paused():       # as _work
        built = build_batch(tasks, target, selections, threads)
    return [(name, obj, kind, os.getpid(), cpu, wall) for name, obj, kind, cpu, wall in built]


def _runtime_job() -> bytes | None:
    """Worker entry: the thread pool's object code for the parent to load
    (codegen.runtime.native_runtime_object); None where errors or another backend leave it
    to the parent (the first kernel it loads raises what is wrong)."""
    try:
        return _runtime.native_runtime_object()
    except KilnError as exc:
        log.debug("parallel runtime not built in a worker: %s", exc)
        return None


def _pool_context():
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("fork" if "fork" in methods else "spawn")


def link_and_load(objects: Sequence[tuple[str, ObjectKernel]], target: Target,
                  threads: int) -> dict[str, Kernel]:
    """Load the objects together (codegen/object_loader.py; as the kernel cache loads a
    model's): {kernel name: Kernel}. Relocation only, in this process: linking them with the C
    compiler driver into a shared library and loading that took 35 ms for a 21-kernel model,
    this 7 ms (benchmarks/RESULTS.md, compile time against onnxruntime)."""
    loaded = cache.load_objects(
        [cache.CachedObject(name, obj.symbol, obj.params, obj.object_code, b"", obj.seconds)
         for name, obj in objects], target, num_threads=threads)
    kernels = {}
    for (name, obj), kernel in zip(objects, loaded):
        kernel.func, kernel.compile_seconds = obj.func, obj.seconds
        kernel._optimized_ir, kernel.cache_key = obj.optimized_ir, obj.cache_key
        kernels[name] = kernel
    return kernels


class StreamingBuild:
    """build_in_workers for tasks handed over one at a time, as graph/tasks.extract_tasks
    finds them: the workers start on the first ones while the parent lowers and keys the
    rest (0.4-0.9 s of a ResNet-50's serial start). The pool starts with the second task
    (a model of one task compiles in this process, as compile_model's serial path does:
    `started` says which), or at once with `early=True`: then it is forked before the
    parent's serial start (graph passes, task extraction), and its first job builds the
    thread-pool runtime (codegen.runtime) that the parent would otherwise compile while
    the workers build kernels (0.09-0.13 s of LLVM on a cold cache, on the cores the workers
    need; benchmarks/RESULTS.md, "the fixed costs of a cold compile").
    `select(mt)` is the task's Selection (autotune/dispatch.py).
    Use as a context manager: leaving it on an error cancels what was not started."""

    def __init__(self, target: Target, jobs: int, build_task: Callable,
                 select: Callable[[ModelTask], Selection], threads: int,
                 early: bool = False, batch: int = 1):
        self.target, self.jobs, self.threads = target, jobs, threads
        self.build_task, self.select, self.batch = build_task, select, batch
        self.selections: dict[str, Selection] = {}
        self._waiting: list[ModelTask] = []
        self._futures: list = []
        self._pool: ProcessPoolExecutor | None = None
        self._runtime = None
        self._start = time.perf_counter()
        if early:
            self._open()

    def _open(self) -> None:
        self._start = time.perf_counter()
        self._pool = ProcessPoolExecutor(max_workers=self.jobs, mp_context=_pool_context())
        if backend() == "kiln" and not _runtime.pool_loaded():
            self._runtime = self._pool.submit(_runtime_job)

    @property
    def started(self) -> bool:
        return self._pool is not None

    def add(self, mt: ModelTask) -> None:
        self.selections[mt.name] = self.select(mt)
        self._waiting.append(mt)
        if self._pool is None and len(self._waiting) < 2:
            return
        if self._pool is None:
            self._open()
        # batches: a full one, or what waits as soon as a worker is idle (a small model's
        # few tasks are not left to one worker)
        if len(self._waiting) >= self.batch or self._busy() < self.jobs:
            self._submit()

    def _busy(self) -> int:
        """Jobs sent to the pool and not done."""
        return sum(not f.done() for f in [*self._futures, self._runtime] if f is not None)

    def _submit(self, parts: int = 1) -> None:
        """Hand the waiting tasks to the pool: one job each, or with batches, in `parts`
        near-equal batches."""
        if self.batch > 1 and self._waiting:
            size = -(-len(self._waiting) // max(1, min(parts, len(self._waiting))))
            for k in range(0, len(self._waiting), size):
                chunk = self._waiting[k:k + size]
                # build_task(tasks, target, selections, threads): a list of _work's results
                self._futures.append(self._pool.submit(
                    _work_batch, (tuple(chunk), self.target,
                                  {t.name: self.selections[t.name] for t in chunk},
                                  self.build_task, self.threads)))
        for task in self._waiting if self.batch == 1 else ():
            self._futures.append(self._pool.submit(
                _work, (task, self.target, self.selections[task.name], self.build_task,
                        self.threads)))
        self._waiting.clear()

    def finish(self, meanwhile: Callable[[], None] | None = None
               ) -> tuple[dict[str, Kernel], dict[str, str], dict]:
        """Wait for every kernel (readying the runtime and the deferred constants
        meanwhile, then calling `meanwhile`), link and load them: as build_in_workers
        returns."""
        if self._pool is None:
            raise KilnError("StreamingBuild.finish(): fewer than two tasks were added, so no "
                            "worker started; build them in this process")
        self._submit(parts=self.jobs)       # the last tasks, split over the workers
        resolve_pending()           # the constants the graph passes deferred, meanwhile
        if self._runtime is not None and (code := self._runtime.result()) is not None:
            pool_address(code)      # a worker built it
        _ready_runtime()            # else here, while the workers compile
        if meanwhile is not None:
            meanwhile()
        results = [r for f in self._futures for r in
                   (f.result() if self.batch > 1 else [f.result()])]
        self._pool.shutdown()
        return _collect(results, self.target, self.threads, self._start)

    def __enter__(self) -> "StreamingBuild":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _collect(results: list, target: Target, threads: int, start: float
             ) -> tuple[dict[str, Kernel], dict[str, str], dict]:
    objects = [(name, obj) for name, obj, *_ in results]
    kernels = link_and_load(objects, target, threads) if objects else {}
    per_worker: dict[int, float] = {}
    for *_, pid, cpu, _ in results:
        per_worker[pid] = per_worker.get(pid, 0.0) + cpu
    stats = {"workers": len(per_worker),
             "worker_cpu_s": sorted((round(c, 3) for c in per_worker.values()), reverse=True),
             "kernel_s": {r[0]: round(r[5], 4) for r in results},
             "kernel_cpu_s": {r[0]: round(r[4], 4) for r in results}}
    log.info("built %d kernels in %d processes in %.1f s (worker CPU s: %s)", len(objects),
             len(per_worker), time.perf_counter() - start, stats["worker_cpu_s"])
    return kernels, {name: kind for name, _, kind, *_ in results}, stats


def build_in_workers(tasks: Sequence[ModelTask], target: Target,
                     selections: dict[str, Selection], jobs: int, build_task: Callable,
                     threads: int
                     ) -> tuple[dict[str, Kernel], dict[str, str], dict]:
    """Build every task in a pool of `jobs` processes, handed out in graph order; returns
    kernels and schedule sources by task name, and the CPU seconds each worker spent (on an
    idle machine the busiest one bounds the wall time). `selections` (by task name) are the
    records the parent chose (autotune/dispatch.py), so workers never open SQLite."""
    # NOTE: no compile-cost model exists yet. FLOPs are a poor proxy: ResNet-18's max-pool
    # (3 MFLOP) spends 23 s in LLVM, the convs 1-2 s each, so largest-FLOPs-first started
    # it last (busiest-worker speedup 1.2x); in graph order it starts second.
    order = list(tasks)
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=min(jobs, len(tasks)),
                             mp_context=_pool_context()) as pool:
        pending = pool.map(_work, [(mt, target, selections[mt.name], build_task, threads)
                                   for mt in order])
        _ready_runtime()        # while the workers compile
        resolve_pending()       # the constants the graph passes deferred, likewise
        results = list(pending)
    return _collect(results, target, threads, start)
