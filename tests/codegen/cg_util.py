"""Hand-built loop IR for codegen tests (the schedule layer is not needed)."""
from __future__ import annotations

import numpy as np

from kiln.schedule.ir import (Buffer, BufferLoad, For, ForKind, IfThenElse, PrimFunc, Scope,
                              Store, seq)
from kiln.te import expr as E


def buf(name: str, dtype: str, shape, scope: Scope = Scope.PARAM) -> Buffer:
    return Buffer(name, dtype, tuple(shape), scope)


def load(b: Buffer, index) -> BufferLoad:
    return BufferLoad(b.dtype, b, E.const(index) if isinstance(index, int) else index)


def loop(var, extent, body, kind=ForKind.SERIAL, start=0) -> For:
    return For(var, E.const(start), E.const(extent), kind, body)


def elementwise(name: str, n: int, ins: list[Buffer], out: Buffer, fn, lanes: int = 8,
                kind: ForKind = ForKind.VECTORIZED) -> PrimFunc:
    """out[i] = fn(*[in[i]]) as `for io: for ii in <kind>(lanes): if i < n: ...`."""
    io, ii = E.var("io"), E.var("ii")
    i = io * lanes + ii
    store = Store(out, i, fn(*[load(b, i) for b in ins]))
    body = store if n % lanes == 0 else IfThenElse(i < n, store)
    outer = (n + lanes - 1) // lanes
    return PrimFunc(name, tuple(ins) + (out,), loop(io, outer, loop(ii, lanes, body, kind)))


def rand(shape, dtype, rng, low=-10, high=10):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.uniform(low, high, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(low, info.min), min(high, info.max) + 1, shape).astype(dtype)


__all__ = ["buf", "load", "loop", "elementwise", "rand", "seq"]
