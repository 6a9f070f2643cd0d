"""The loop IR: the contract between scheduling (schedule/lower.py) and code generation.

Statements are frozen dataclasses; expressions are te.expr nodes plus BufferLoad. Buffers are
flat: every access uses one element index (row-major offset), which lowering computes.
"""
from __future__ import annotations

import enum
from dataclasses import field

from ..te.expr import Expr, Var, ir_node
from ..te.uids import UidCounter

_buffer_ids = UidCounter()


class Scope(enum.Enum):
    """Where a buffer lives. PARAM: a kernel argument; GLOBAL: kernel-lifetime scratch;
    LOCAL: scratch of one loop iteration (register/stack-sized accumulators)."""

    PARAM = "param"
    GLOBAL = "global"
    LOCAL = "local"


@ir_node
class Buffer:
    """A dense row-major array of `dtype` with a static `shape` (size = product of shape)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    scope: Scope = Scope.GLOBAL
    uid: int = field(default_factory=lambda: next(_buffer_ids))
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))


@ir_node
class BufferLoad(Expr):
    """buffer[index]: read one element at flat (row-major) int32 `index`; must be in bounds."""

    buffer: Buffer
    index: Expr


@ir_node
class Stmt:
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __str__(self):
        from .printer import stmt_str
        return stmt_str(self)


class ForKind(enum.Enum):
    """SERIAL: in order. PARALLEL: iterations run on the thread pool in any order and must
    be independent; never nested in another PARALLEL loop. VECTORIZED: constant extent; the
    iterations form SIMD lanes (codegen falls back to a serial loop when the body holds
    loops or lane-dependent stores it cannot vectorize). UNROLLED: constant extent; the body
    is copied once per iteration."""

    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


@ir_node
class For(Stmt):
    """for loop_var in [min, min + extent): body. `extent` is an int32 expression evaluated
    once before the loop; the body sees loop_var as an int32 scalar (or lane ramp)."""

    loop_var: Var
    min: Expr
    extent: Expr
    kind: ForKind
    body: Stmt


@ir_node
class Store(Stmt):
    """buffer[index] = value; value.dtype equals buffer.dtype."""

    buffer: Buffer
    index: Expr
    value: Expr


@ir_node
class Allocate(Stmt):
    """`buffer` (scope GLOBAL or LOCAL) exists, uninitialised, while `body` runs.
    Codegen puts small LOCAL buffers on the stack (64-byte aligned), large ones on the heap."""

    buffer: Buffer
    body: Stmt


@ir_node
class IfThenElse(Stmt):
    """Run then_case when cond (bool) holds, else else_case (which may be None)."""

    cond: Expr
    then_case: Stmt
    else_case: Stmt | None = None


@ir_node
class SeqStmt(Stmt):
    """Run stmts in order. Flat: never nests SeqStmt directly (use seq() to build)."""

    stmts: tuple[Stmt, ...]


@ir_node
class Evaluate(Stmt):
    """Evaluate an expression for nothing (a no-op placeholder when value is a constant)."""

    value: Expr


@ir_node
class PrimFunc:
    """A kernel: `params` are PARAM buffers in call order; `body` reads and writes them."""

    name: str
    params: tuple[Buffer, ...]
    body: Stmt
    _hash: int | None = field(default=None, init=False, repr=False, compare=False)

    def __str__(self):
        from .printer import func_str
        return func_str(self)


def seq(*stmts) -> Stmt:
    """A flat SeqStmt of the given statements (nested SeqStmts and no-ops are flattened)."""
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        elif isinstance(s, (list, tuple)):
            inner = seq(*s)
            flat.extend(inner.stmts if isinstance(inner, SeqStmt) else [inner])
        elif isinstance(s, Evaluate) and not isinstance(s.value, BufferLoad):
            continue
        else:
            flat.append(s)
    if not flat:
        from ..te.expr import const
        return Evaluate(const(0))
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))
