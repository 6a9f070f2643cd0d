"""A frozen copy of the first feature extractor (FEATURE_VERSION v1), kept as the oracle for
the fast one in kiln.autotune.features: on kernels without integer dot products the v2 vector
starts with the v1 one bit for bit (and the rest is zero), so stored v1 vectors of float tasks
carry over to v2 (features.upgrade_vector) and mix safely in the database and the transfer
prior. Do not optimise this file; if the feature definition changes, bump FEATURE_VERSION and
drop or replace this copy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from kiln.schedule.ir import (Allocate, BufferLoad, For, ForKind, IfThenElse, PrimFunc, Scope,
                              Store)
from kiln.autotune.features import V1_LENGTH as N_FEATURES
from kiln.schedule.visitor import StmtVisitor
from kiln.te import dtype as dt
from kiln.te import expr as E
from kiln.te.visit import walk

MAX_LEVELS = 8          # loop levels described individually around the busiest store
REUSE_LEVELS = 5        # loop levels for which the touched bytes are reported
_KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED)


@dataclass(frozen=True)
class _Loop:
    var: E.Var
    extent: int
    kind: ForKind


@dataclass(frozen=True)
class _Access:
    """One buffer access (a Store, or a BufferLoad inside a stored value) and its loop nest."""

    loops: tuple[_Loop, ...]      # outermost first
    buffer_name: str
    itemsize: int
    index: E.Expr
    is_store: bool
    local: bool
    used: frozenset = frozenset()  # the variables of `index` (computed once per access)


def _const(e: E.Expr, default: int = 1) -> int:
    value = _eval(e, {})
    return default if value is None else int(value)


def _eval(e: E.Expr, env: dict) -> float | None:
    """Evaluate an integer index expression with the given variable values (others: 0)."""
    t = type(e)
    if t is E.IntImm or t is E.FloatImm:
        return e.value
    if t is E.Var:
        return env.get(e, 0)
    if t is E.Cast:
        return _eval(e.value, env)
    if isinstance(e, E.BinaryOp):
        a, b = _eval(e.a, env), _eval(e.b, env)
        if a is None or b is None:
            return None
        if t is E.Add:
            return a + b
        if t is E.Sub:
            return a - b
        if t is E.Mul:
            return a * b
        if t is E.FloorDiv:
            return a // b if b else None
        if t is E.FloorMod:
            return a % b if b else None
        if t is E.Min:
            return min(a, b)
        if t is E.Max:
            return max(a, b)
    if t is E.Select:
        return _eval(e.t, env)
    return None


class _Collector(StmtVisitor):
    """Walks the IR once, recording every access with its loop nest and counting operations."""

    def __init__(self):
        self.loops: list[_Loop] = []
        self.accesses: list[_Access] = []
        self.ops = np.zeros(len(_OP_NAMES))
        self.n_stores = 0
        self.n_guards = 0
        self.n_loops = 0
        self.local_bytes = 0
        self.global_scratch_bytes = 0
        self._vars: dict[E.Expr, frozenset] = {}

    def _used(self, index: E.Expr) -> frozenset:
        hit = self._vars.get(index)
        if hit is None:
            hit = frozenset(v for v in walk(index) if isinstance(v, E.Var))
            self._vars[index] = hit
        return hit

    def trips(self) -> float:
        return float(math.prod(loop.extent for loop in self.loops)) if self.loops else 1.0

    def visit_For(self, node: For) -> None:
        self.n_loops += 1
        self.loops.append(_Loop(node.loop_var, max(1, _const(node.extent)), node.kind))
        self.visit(node.body)
        self.loops.pop()

    def visit_IfThenElse(self, node: IfThenElse) -> None:
        self.n_guards += 1
        self._count_ops(node.cond)
        self.generic_visit(node)

    def visit_Allocate(self, node: Allocate) -> None:
        size = node.buffer.size * dt.itemsize(node.buffer.dtype)
        if node.buffer.scope is Scope.LOCAL:
            self.local_bytes += size
        else:
            self.global_scratch_bytes += size
        self.visit(node.body)

    def visit_Store(self, node: Store) -> None:
        self.n_stores += 1
        loops = tuple(self.loops)
        local = node.buffer.scope is Scope.LOCAL
        self.accesses.append(_Access(loops, node.buffer.name, dt.itemsize(node.buffer.dtype),
                                     node.index, True, local, self._used(node.index)))
        for sub in walk(node.value):
            if isinstance(sub, BufferLoad):
                self.accesses.append(_Access(loops, sub.buffer.name,
                                             dt.itemsize(sub.buffer.dtype), sub.index, False,
                                             sub.buffer.scope is Scope.LOCAL,
                                             self._used(sub.index)))
        self._count_ops(node.value)

    def _count_ops(self, value: E.Expr) -> None:
        trips = self.trips()
        for sub in walk(value):
            name = _op_name(sub)
            if name is not None:
                self.ops[_OP_INDEX[name]] += trips


_OP_NAMES = ("float_add", "float_mul", "float_fma", "float_div", "float_math", "float_cmp",
             "int_arith", "int_divmod", "select", "cast", "load")
_OP_INDEX = {name: i for i, name in enumerate(_OP_NAMES)}


def _op_name(e: E.Expr) -> str | None:
    t = type(e)
    is_float = isinstance(e.dtype, str) and dt.is_float(e.dtype)
    if t in (E.Add, E.Sub):
        if is_float:
            fused = isinstance(e.a, E.Mul) or isinstance(e.b, E.Mul)
            return "float_fma" if fused else "float_add"
        return "int_arith"
    if t is E.Mul:
        return "float_mul" if is_float else "int_arith"
    if t is E.Div:
        return "float_div"
    if t in (E.FloorDiv, E.FloorMod):
        return "int_divmod"
    if t in (E.Min, E.Max):
        return "float_cmp" if is_float else "int_arith"
    if isinstance(e, E.CmpOp):
        return "float_cmp" if dt.is_float(e.a.dtype) else "int_arith"
    if t is E.Call:
        return "float_math"
    if t is E.Select:
        return "select"
    if t is E.Cast:
        return "cast"
    if t is BufferLoad:
        return "load"
    return None


def _stride(access: _Access, var: E.Var) -> float:
    """Elements the access moves when `var` goes from 0 to 1 (others at 0)."""
    lo, hi = _eval(access.index, {var: 0}), _eval(access.index, {var: 1})
    if lo is None or hi is None:
        return 0.0
    return abs(hi - lo)


def _footprint(access: _Access, inner: tuple[_Loop, ...]) -> float:
    """Distinct elements touched by `access` while the loops `inner` run (a product bound)."""
    return float(math.prod(loop.extent for loop in inner if loop.var in access.used))


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


def _busiest(accesses: list[_Access]) -> tuple[_Loop, ...]:
    stores = [a for a in accesses if a.is_store] or accesses
    if not stores:
        return ()
    return max(stores, key=lambda a: (math.prod(l.extent for l in a.loops), len(a.loops))).loops


def _level_features(loops: tuple[_Loop, ...]) -> list[float]:
    out: list[float] = []
    innermost_first = list(reversed(loops))[:MAX_LEVELS]
    for level in range(MAX_LEVELS):
        if level < len(innermost_first):
            loop = innermost_first[level]
            out.append(_log(loop.extent))
            out.extend(1.0 if loop.kind is k else 0.0 for k in _KINDS)
        else:
            out.extend([0.0] * (1 + len(_KINDS)))
    return out


def _memory_features(accesses: list[_Access], nest: tuple[_Loop, ...]) -> list[float]:
    # Bytes touched by the innermost 1..REUSE_LEVELS loops of the busiest nest, per access
    # (global and local separately), and the full footprint: the reuse each tiling achieves.
    reuse_global = [0.0] * REUSE_LEVELS
    reuse_local = [0.0] * REUSE_LEVELS
    contiguous = strided = invariant = 0.0
    per_buffer: dict[str, float] = {}
    for access in accesses:
        if access.loops != nest[:len(access.loops)] or not access.loops:
            continue
        target = reuse_local if access.local else reuse_global
        for level in range(REUSE_LEVELS):
            inner = access.loops[max(0, len(access.loops) - level - 1):]
            target[level] += _footprint(access, inner) * access.itemsize
        stride = _stride(access, access.loops[-1].var)
        if stride == 0:
            invariant += 1
        elif stride == 1:
            contiguous += 1
        else:
            strided += 1
        total = _footprint(access, access.loops) * access.itemsize
        per_buffer[access.buffer_name] = max(per_buffer.get(access.buffer_name, 0.0), total)
    out = [_log(x) for x in reuse_global] + [_log(x) for x in reuse_local]
    out += [contiguous, strided, invariant, _log(sum(per_buffer.values())),
            float(len(per_buffer))]
    return out


def _tile_working_set(accesses: list[_Access], nest: tuple[_Loop, ...]) -> float:
    """Bytes touched per iteration of the outermost parallel (or outermost) loop."""
    start = next((i for i, l in enumerate(nest) if l.kind is ForKind.PARALLEL), 0) + 1
    inner = nest[start:]
    return sum(_footprint(a, tuple(l for l in a.loops if l in inner)) * a.itemsize
               for a in accesses if not a.local)


def extract_features(func: PrimFunc) -> np.ndarray:
    """A float32 vector of length N_FEATURES describing `func` (same for equal IR)."""
    collector = _Collector()
    collector(func.body)
    nest = _busiest(collector.accesses)
    vector = max((l.extent for a in collector.accesses for l in a.loops
                  if l.kind is ForKind.VECTORIZED), default=1)
    parallel = max((math.prod(l.extent for l in a.loops if l.kind is ForKind.PARALLEL)
                    for a in collector.accesses), default=1)
    unrolled = max((math.prod(l.extent for l in a.loops if l.kind is ForKind.UNROLLED)
                    for a in collector.accesses), default=1)
    total_trips = float(math.prod(l.extent for l in nest)) if nest else 1.0
    flops = float(collector.ops[:6].sum())
    param_bytes = sum(b.size * dt.itemsize(b.dtype) for b in func.params)
    values = (_level_features(nest) + [_log(x) for x in collector.ops]
              + _memory_features(collector.accesses, nest)
              + [float(vector), _log(parallel), _log(unrolled), float(collector.n_stores),
                 float(collector.n_guards), float(collector.n_loops),
                 _log(collector.local_bytes), _log(collector.global_scratch_bytes),
                 _log(_tile_working_set(collector.accesses, nest)), _log(total_trips),
                 math.log2((1.0 + flops) / (1.0 + param_bytes))])
    assert len(values) == N_FEATURES, "feature layout out of sync with FEATURE_NAMES"
    return np.asarray(values, dtype=np.float32)
