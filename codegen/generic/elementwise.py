"""Elementwise generic kernels.

unary.<op>: y[i] = op(x[i]) for i < n.   dims: [n]   fparams: the op's options, if any.
"""
from __future__ import annotations

from ...schedule.ir import ForKind, Store
from ...te import expr as E
from .registry import data, dims_buffer, fparams_buffer, generic_kernel, kernel, load, \
    vector_loop

LANES = 16      # float32 lanes of a vector loop (LLVM splits it for narrower ISAs)


def _unary(op: str, fn):
    @generic_kernel("elementwise", f"unary.{op}")
    def build():
        x, y = data("x", "float32"), data("y", "float32")
        dims, fparams = dims_buffer(), fparams_buffer()
        body = vector_loop("i", load(dims, 0), LANES,
                           lambda i: Store(y, i, fn(load(x, i), fparams)), ForKind.PARALLEL)
        return kernel(f"unary.{op}", [x, y], body, dims, fparams)
    return build


_unary("relu", lambda v, p: E.maximum(v, E.const(0.0)))
