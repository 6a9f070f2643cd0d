"""`build(func, target)`: loop IR -> a callable Kernel (emit, optimize, JIT)."""
from __future__ import annotations

import llvmlite.ir as ir

from ..schedule.ir import PrimFunc, Store
from ..schedule.visitor import StmtVisitor
from ..te.errors import CodegenError
from . import llvm_types as T
from .emit_module import emit_module, fastmath_flags, symbol_name, threads_symbol
from .jit import compile_module
from .kernel import DATA_OFFSET, Kernel, ParamSpec
from .parallel import gomp_available
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


def entry_symbol(symbol: str) -> str:
    return f"{symbol}__pyentry"


def add_python_entry(module: ir.Module, symbol: str, nparams: int, data_offset: int) -> None:
    """`<symbol>__pyentry(PyObject*...)`: read each ndarray's data pointer, call the kernel."""
    kernel = module.globals[symbol]
    fn = ir.Function(module, ir.FunctionType(T.VOID, [T.PTR] * nparams), entry_symbol(symbol))
    bld = ir.IRBuilder(fn.append_basic_block("entry"))
    ptrs = []
    for arg in fn.args:
        slot = bld.gep(arg, [ir.Constant(T.I64, data_offset)], source_etype=T.I8)
        ptrs.append(bld.load(slot, typ=T.PTR, align=8))
    bld.call(kernel, ptrs)
    bld.ret_void()


def build(func: PrimFunc, target: str | Target = "native", fastmath=False) -> Kernel:
    """Compile `func` for `target` and return a Kernel callable on numpy arrays.

    fastmath: False (IEEE semantics), True (LLVM `fast` on float ops: lets reductions
    reassociate and fuse into FMAs), or a collection of LLVM flags such as ("contract",).
    """
    if not isinstance(func, PrimFunc):
        raise CodegenError(f"build() takes a PrimFunc (from kiln.schedule.lower), got "
                           f"{type(func).__name__}; use kiln.build(schedule, args) for schedules")
    target = Target.from_string(target)
    module = emit_module(func, target, fastmath_flags(fastmath), parallel=gomp_available())
    sym = symbol_name(func.name)
    if DATA_OFFSET is not None:
        add_python_entry(module, sym, len(func.params), DATA_OFFSET)
    compiled = compile_module(module, target)
    entry = compiled.address(entry_symbol(sym)) if DATA_OFFSET is not None else None
    return Kernel(func.name, sym, param_specs(func), target, compiled.address(sym),
                  compiled.global_address(threads_symbol(sym)), entry_address=entry, func=func,
                  optimized_ir=compiled.optimized_ir, keepalive=compiled,
                  compile_seconds=compiled.seconds)
