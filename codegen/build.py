"""`build(func, target)`: loop IR -> a callable Kernel (emit, optimize, JIT)."""
from __future__ import annotations

import contextlib
import gc
import time
import zlib

from ..schedule.ir import PrimFunc, Store
from ..schedule.visitor import StmtVisitor
from ..te.errors import CodegenError
from . import cache
from .emit_module import emit_module, fastmath_flags, pool_symbol, symbol_name, threads_symbol
from .jit import compile_module, compile_object
from .kernel import Kernel, ParamSpec
from .runtime import backend
from .runtime_config import resolve_threads
from .pyentry import AVAILABLE as PYENTRY, add_python_entry, entry_symbol, table_symbol
from .target import Target


class _Written(StmtVisitor):
    def __init__(self):
        self.buffers = set()

    def visit_Store(self, node: Store):
        self.buffers.add(node.buffer)
        self.generic_visit(node)


def param_specs(func: PrimFunc) -> tuple[ParamSpec, ...]:
    """Name, dtype, shape and written-ness of every parameter of `func`."""
    written = _Written()
    written(func.body)
    return tuple(ParamSpec(b.name, b.dtype, tuple(b.shape), b in written.buffers)
                 for b in func.params)


DEFAULT_FASTMATH = ("contract",)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector off for the duration (back on after, if it was on).
    Emitting a kernel allocates hundreds of thousands of short-lived objects (llvmlite IR
    values, folded expressions), each burst triggering collections that scan every object
    alive (the model's graph, the expression caches): a third of the CPU time of emitting
    ResNet-50's kernels. What the emission leaves behind is collected later, as before."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def build(func: PrimFunc, target: str | Target = "native", fastmath=DEFAULT_FASTMATH,
          cache_kernel: bool = True, num_threads: int | None = None) -> Kernel:
    """Compile `func` for `target` and return a Kernel callable on numpy arrays.

    fastmath: the default ("contract",) lets LLVM fuse a*b+c into one FMA, as C compilers do by
    default (-ffp-contract=on); everything else keeps IEEE semantics. False: strict IEEE
    (no contraction). True: LLVM `fast` on float ops (reductions may reassociate). Or any
    collection of LLVM fast-math flag names.
    cache_kernel: look the kernel up in (and add it to) the persistent kernel cache
    (codegen/cache.py) when KILN_CACHE_DIR does not turn it off; tuning candidates, built
    once each, pass False.
    num_threads: the kernel's thread count (default: KILN_NUM_THREADS, else every core).
    """
    if not isinstance(func, PrimFunc):
        raise CodegenError(f"build() takes a PrimFunc (from kiln.schedule.lower), got "
                           f"{type(func).__name__}; use kiln.build(schedule, args) for schedules")
    target = Target.from_string(target)     # an entry point: parsed once, here
    num_threads = resolve_threads(num_threads)
    parallel = backend()
    with gc_paused():
        module = emit_module(func, target, fastmath_flags(fastmath), parallel=parallel)
        sym, specs = symbol_name(func.name), param_specs(func)
        add_python_entry(module, sym, specs)
        store = cache.kernel_store() if cache_kernel else None
        text = str(module) if store is not None else None
    if store is not None:
        return _build_cached(func, text, sym, specs, target, store, num_threads)
    compiled = compile_module(module, target)
    entry = None
    if PYENTRY:
        entry = (compiled.address(entry_symbol(sym)), compiled.global_address(table_symbol(sym)))
    return Kernel(func.name, sym, specs, target, compiled.address(sym),
                  compiled.global_address(threads_symbol(sym)), entry=entry, func=func,
                  optimized_ir=compiled.optimized_ir, keepalive=compiled,
                  pool_slot=(compiled.global_address(pool_symbol(sym)) if parallel == "kiln"
                             else None),
                  compile_seconds=compiled.seconds, num_threads=num_threads)


def _build_cached(func: PrimFunc, text: str, sym: str, specs, target: Target,
                  store: cache.Store, num_threads: int) -> Kernel:
    """build() through the kernel cache: keyed on the module's LLVM IR text (see
    codegen.cache); a miss compiles to an object file and stores it, a hit only loads."""
    start = time.perf_counter()
    key = cache.kernel_key(text, target, specs)
    obj, optimized = cache.read_object(store, key), None
    if obj is None:
        optimized, code, seconds = compile_object(text, target)
        obj = cache.CachedObject(func.name, sym, specs, code,
                                 zlib.compress(optimized.encode(), 1), seconds)
        cache.store_object(store, key, obj)
    kernel = cache.load_objects([obj], target, [key], num_threads=num_threads)[0]
    kernel.name, kernel.func = func.name, func
    kernel.compile_seconds = time.perf_counter() - start
    if optimized is not None:
        kernel._optimized_ir = optimized
    return kernel
