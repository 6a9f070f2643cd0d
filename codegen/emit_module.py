"""PrimFunc -> llvmlite ir.Module: the kernel's signature, its thread-count global and body."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import llvmlite.ir as ir

from ..schedule.ir import PrimFunc, Stmt, Store
from ..schedule.visitor import StmtVisitor
from ..te.errors import CodegenError
from . import llvm_types as T
from . import loop_hints, masked_tail
from .attributes import kernel_function_attributes
from .emit_stmt import FunctionEmitter
from .index_width import check_index_width
from ..schedule.passes import CODEGEN, PassOptions, run_passes
from .runtime import backend
from .target import Target

FastMath = tuple[str, ...]


# Symbols the generated code links against; a kernel may not take one of these names.
_RESERVED = {"exp", "log", "tanh", "erf", "log1p", "expm1", "sin", "cos", "pow", "log1pf",
             "expm1f", "sinf", "cosf", "powf", "tan", "tanf", "asin", "asinf", "acos", "acosf",
             "atan", "atanf", "sinh", "sinhf", "cosh", "coshf", "asinh", "asinhf", "acosh",
             "acoshf", "atanh", "atanhf", "free", "aligned_alloc", "malloc",
             "GOMP_parallel", "omp_get_thread_num", "omp_get_num_threads", "main", "syscall",
             "getpid", "sched_yield", "sched_getcpu", "sched_getaffinity",
             "sched_setaffinity", "pthread_create", "pthread_detach"}


def symbol_name(name: str) -> str:
    """A C identifier for kernel `name` (invalid characters become '_', and names of
    C library functions the kernel calls get a `kiln_` prefix)."""
    sym = re.sub(r"[^A-Za-z0-9_]", "_", name)
    if not sym or sym[0].isdigit() or sym in _RESERVED or sym.startswith("llvm"):
        sym = "kiln_" + sym
    return sym


def fastmath_flags(fastmath) -> FastMath:
    """True -> ('fast',); False/None -> (); or an explicit collection of LLVM flag names."""
    if fastmath is True:
        return ("fast",)
    if not fastmath:
        return ()
    known = {"fast", "nnan", "ninf", "nsz", "arcp", "contract", "afn", "reassoc"}
    flags = tuple(fastmath)
    bad = [f for f in flags if f not in known]
    if bad:
        raise CodegenError(f"unknown fast-math flag(s) {bad}; use True, False or a subset of "
                           f"{sorted(known)}")
    return flags


@dataclass
class ModuleContext:
    """What every function of one kernel module shares."""

    module: ir.Module
    name: str
    fastmath: FastMath
    parallel: str                  # "kiln", "gomp" or "serial" (codegen.runtime.backend)
    threads_global: ir.GlobalVariable | None = None
    pool_global: ir.GlobalVariable | None = None
    target: Target | None = None   # for intrinsics lowered by CPU feature (codegen/dot4.py)
    readonly: frozenset = frozenset()  # parameters no statement stores to (loads are shared)
    cold_loops: frozenset = frozenset()  # loops LLVM must not unroll (codegen/loop_hints.py)
    _counter: int = field(default=0)

    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name)
        return fn

    def fresh_name(self, kind: str) -> str:
        self._counter += 1
        return f"{self.name}__{kind}{self._counter}"


def threads_symbol(symbol: str) -> str:
    return f"{symbol}__num_threads"


def pool_symbol(symbol: str) -> str:
    """The kernel's pointer to the thread pool's entry (set by the loader; null: serial)."""
    return f"{symbol}__parallel_for"


def register_file_bytes(target: Target) -> int:
    """Bytes of the target's vector register file (16 registers, 32 with AVX-512): the
    largest accumulator tile codegen promotes to registers."""
    return (32 if target.vector_bits >= 512 else 16) * target.vector_bits // 8


class _Stored(StmtVisitor):
    def __init__(self):
        self.buffers: set = set()

    def visit_Store(self, node: Store):
        self.buffers.add(node.buffer)
        self.generic_visit(node)


def _stored_buffers(stmt: Stmt) -> set:
    stored = _Stored()
    stored(stmt)
    return stored.buffers


def emit_module(func: PrimFunc, target: Target, fastmath: FastMath,
                parallel: str | None = None) -> ir.Module:
    """Build the LLVM module of `func`: one external function `symbol_name(func.name)`.
    parallel: how PARALLEL loops run ("kiln", "gomp", "serial"); default runtime.backend()."""
    if parallel is None:
        parallel = backend()
    if parallel not in ("kiln", "gomp", "serial"):
        raise CodegenError(f"emit_module(parallel={parallel!r}): expected 'kiln', 'gomp' or "
                           "'serial'")
    check_index_width(func)     # int32 indices: a 2**40 extent is an error naming it
    seen = set()
    for b in func.params:
        if b in seen:
            raise CodegenError(f"buffer '{b.name}' appears twice in the params of kernel "
                               f"'{func.name}'; each parameter must be a distinct buffer")
        seen.add(b)
    sym = symbol_name(func.name)
    module = ir.Module(name=sym)
    module.triple = target.triple
    ctx = ModuleContext(module, sym, fastmath, parallel, target=target)
    gv = ir.GlobalVariable(module, T.I32, threads_symbol(sym))
    gv.initializer = ir.Constant(T.I32, 1)
    ctx.threads_global = gv
    if parallel == "kiln":
        ctx.pool_global = ir.GlobalVariable(module, T.PTR, pool_symbol(sym))
        ctx.pool_global.initializer = ir.Constant(T.PTR, None)
    fn = ir.Function(module, ir.FunctionType(T.VOID, [T.PTR] * len(func.params)), sym)
    for arg, buf in zip(fn.args, func.params):
        arg.name = symbol_name(buf.name)
        arg.add_attribute("noalias")
        arg.add_attribute("captures(none)")
    kernel_function_attributes(fn)
    # the CPU-specific loop-IR passes (schedule/passes), then translation only
    options = PassOptions(register_file_bytes(target), masked_tail.ENABLED)
    body = run_passes(func, CODEGEN, options).body
    ctx.readonly = frozenset(func.params) - _stored_buffers(body)
    ctx.cold_loops = loop_hints.cold_loops(body)
    emitter = FunctionEmitter(ctx, fn, dict(zip(func.params, fn.args)))
    emitter.emit(body)
    emitter.finish()
    return module


def release(module: ir.Module) -> None:
    """Empty `module` (it must not be used after): its functions, blocks and instructions
    point at each other (a loop's phi and its increment at each other, too), so without this
    they wait for Python's cycle collector, which then traverses every object a kernel's
    emission made (a quarter of a million for MobileNet's 32 kernels); freed here by
    reference counting once the caller drops the module."""
    for fn in module.functions:
        for block in fn.blocks:
            for instr in block.instructions:
                instr.operands = ()
                if isinstance(instr, ir.PhiInstr):
                    instr.incomings = []
            block.instructions, block.terminator = [], None
        fn.blocks, fn.args = [], ()
    module.globals.clear()
