"""How a generic kernel is declared: a builder returning a PrimFunc over PARAM buffers of
unknown length, plus two trailing parameters every generic kernel takes:

- `dims`: int32[DIMS], the run-time sizes, strides and options (each kernel documents its
  layout next to its builder);
- `fparams`: float32[FPARAMS], run-time float options (an alpha, a clip bound, an epsilon).

Builders are registered by family (one object file per family and target) and name; a
kernel is called as `family.name` (graph/generic looks it up in codegen/generic/library.py).
"""
from __future__ import annotations

from typing import Callable

from ...schedule.ir import Buffer, BufferLoad, For, ForKind, PrimFunc, Scope, Stmt, seq
from ...te import expr as E
from ...te.errors import CodegenError

# data buffers are declared this long: the kernels never know a tensor's size, and the
# int32 indexing of the loop IR holds every offset below it (larger tensors are not
# planned onto generic kernels: graph/generic checks MAX_ELEMENTS)
MAX_ELEMENTS = 1 << 30
DIMS = 32
FPARAMS = 8

FAMILIES: dict[str, dict[str, Callable[[], PrimFunc]]] = {}


def generic_kernel(family: str, name: str):
    """Register `builder() -> PrimFunc` as kernel `family.name`. The PrimFunc's params end
    with dims_buffer() and fparams_buffer(). A builder with a parameter named `target` is
    called with the Target the family is compiled for (to size a register tile)."""
    def deco(builder: Callable[[], PrimFunc]) -> Callable[[], PrimFunc]:
        kernels = FAMILIES.setdefault(family, {})
        if name in kernels:
            raise CodegenError(f"generic kernel '{family}.{name}' is registered twice")
        kernels[name] = builder
        return builder
    return deco


def data(name: str, dtype: str) -> Buffer:
    """A PARAM buffer of unknown length (see MAX_ELEMENTS)."""
    return Buffer(name, dtype, (MAX_ELEMENTS,), Scope.PARAM)


def dims_buffer() -> Buffer:
    return Buffer("dims", "int32", (DIMS,), Scope.PARAM)


def fparams_buffer() -> Buffer:
    return Buffer("fparams", "float32", (FPARAMS,), Scope.PARAM)


def kernel(name: str, buffers: list[Buffer], body: Stmt, dims: Buffer,
           fparams: Buffer) -> PrimFunc:
    """The PrimFunc `generic_<name>` of `buffers` + dims + fparams."""
    return PrimFunc("generic_" + name.replace(".", "_"), (*buffers, dims, fparams), body)


def load(buf: Buffer, index) -> E.Expr:
    return BufferLoad(buf.dtype, buf, E.const(index) if isinstance(index, int) else index)


def var(name: str) -> E.Var:
    return E.Var("int32", name)


def loop(name: str, extent, body_of: Callable[[E.Var], Stmt], kind: ForKind = ForKind.SERIAL,
         start=0) -> Stmt:
    """for v in [start, start + extent): body_of(v)."""
    v = var(name)
    return For(v, E.const(start) if isinstance(start, int) else start,
               E.const(extent) if isinstance(extent, int) else extent, kind, body_of(v))


def vector_loop(name: str, n, lanes: int, body_of: Callable[[E.Expr], Stmt],
                outer: ForKind = ForKind.SERIAL) -> Stmt:
    """body_of(i) for i in [0, n): full vectors of `lanes` (the outer loop of kind `outer`),
    then the n % lanes tail one element at a time."""
    full = E.floordiv(n, lanes) if lanes > 1 else n
    if lanes == 1:
        return loop(name, n, body_of, outer)
    vec = loop(name + ".o", full, lambda o: loop(
        name + ".v", lanes, lambda v: body_of(o * lanes + v), ForKind.VECTORIZED), outer)
    tail = loop(name + ".t", n - full * lanes, body_of, ForKind.SERIAL, start=full * lanes)
    return seq(vec, tail)
