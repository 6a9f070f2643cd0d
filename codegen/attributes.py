"""Function attributes of the functions that hold kernel code."""
from __future__ import annotations

import llvmlite.ir as ir


class _KernelAttributes(ir.values.FunctionAttributes):
    """llvmlite's function attributes plus the string attribute "no-builtin-memcpy"."""

    _known = ir.values.FunctionAttributes._known | {'"no-builtin-memcpy"'}


def kernel_function_attributes(fn: ir.Function) -> None:
    """Attributes of every function holding kernel code: nounwind, and "no-builtin-memcpy",
    which stops LLVM's loop idiom recognition from turning copy loops into memcpy calls
    (with i64 element offsets it can see them: the max pool's copies into its stack
    buffers became three 7 KB library calls and the kernel ran 0.77x)."""
    fn.attributes = _KernelAttributes(fn.attributes)
    fn.attributes.add("nounwind")
    fn.attributes.add('"no-builtin-memcpy"')
