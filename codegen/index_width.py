"""The loop IR indexes with int32 (loop variables, flat element offsets of BufferLoad/Store;
codegen widens offsets to i64 only for the address arithmetic), so a kernel whose buffer
holds more than 2**31 - 1 elements, or whose loop runs longer, cannot be emitted correctly.
This check says so by name before LLVM sees a mix of i32 and i64 operands (which failed
inside llvmlite: "Operands must be the same type, got (i32, i64)").
"""
from __future__ import annotations

from ..schedule.ir import Allocate, Buffer, For, PrimFunc
from ..schedule.visitor import StmtVisitor
from ..te import expr as E
from ..te.errors import CodegenError

INT32_MAX = 2 ** 31 - 1


def _too_big(func: PrimFunc, buf: Buffer) -> CodegenError:
    axis = max(range(len(buf.shape)), key=lambda a: buf.shape[a])
    return CodegenError(
        f"kernel '{func.name}': buffer '{buf.name}' {buf.dtype}{list(buf.shape)} has "
        f"{buf.size} elements (extent {buf.shape[axis]} on axis {axis}); Kiln's kernels "
        f"index with 32-bit integers, so a tensor holds at most {INT32_MAX} elements. "
        "Split the tensor (or the batch) into parts below that size.")


class _Sizes(StmtVisitor):
    def __init__(self, func: PrimFunc):
        self.func = func

    def visit_Allocate(self, node: Allocate):
        if node.buffer.size > INT32_MAX:
            raise _too_big(self.func, node.buffer)
        self.generic_visit(node)

    def visit_For(self, node: For):
        for what, e in (("extent", node.extent), ("start", node.min)):
            if isinstance(e, E.IntImm) and not -INT32_MAX - 1 <= e.value <= INT32_MAX:
                raise CodegenError(
                    f"kernel '{self.func.name}': loop '{node.loop_var.name}' has {what} "
                    f"{e.value}; Kiln's kernels index with 32-bit integers (at most "
                    f"{INT32_MAX})")
        self.generic_visit(node)


def check_index_width(func: PrimFunc) -> None:
    """CodegenError naming the buffer and extent when `func` needs indices wider than int32."""
    for buf in func.params:
        if buf.size > INT32_MAX:
            raise _too_big(func, buf)
    _Sizes(func)(func.body)
