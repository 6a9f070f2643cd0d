"""Fixed-length feature vectors from a lowered PrimFunc, read by the cost model.

The same loop IR that codegen compiles is summarised here: the loop nest around the busiest
store (extents and kinds, innermost first), vectorisation, parallelism and unrolling, the
arithmetic it performs, the bytes each loop level touches (reuse) and the access strides.
Integer dot products (te.expr's DOT4_INTRINSICS, the int8 kernels' vpdpbusd / vpmaddwd lanes)
get their own block: how many, the multiply-adds they do, the register tile they accumulate
in and the operand words that tile loads, so an int8 kernel is not read as float math.
(8-bit accesses need no feature of their own: the byte figures count each access's itemsize.)

The tuner extracts a vector for every candidate its search scores (tens per measured trial),
so the extraction walks the IR once: each stored value is scanned a single time for both its
loads and its operation counts, loop trip counts are kept per nest level, and each access's
used-variable mask is computed once and shared by the reuse, stride and working-set figures.
"""
from __future__ import annotations

import functools
import hashlib
import math
from dataclasses import dataclass, fields
from typing import NamedTuple

import numpy as np

from ..schedule.ir import (Allocate, BufferLoad, For, ForKind, IfThenElse, PrimFunc, Scope,
                           SeqStmt, Stmt, Store)
from ..te import dtype as dt
from ..te import expr as E

MAX_LEVELS = 8          # loop levels described individually around the busiest store
REUSE_LEVELS = 5        # loop levels for which the touched bytes are reported
_KINDS = (ForKind.SERIAL, ForKind.PARALLEL, ForKind.VECTORIZED, ForKind.UNROLLED)


class _Loop(NamedTuple):
    """One enclosing loop. A tuple, so nests compare in C (equal var, extent and kind)."""

    var: E.Var
    extent: int
    kind: ForKind


@dataclass(frozen=True, slots=True)
class _Access:
    """One buffer access (a Store, or a BufferLoad inside a stored value) and its loop nest."""

    loops: tuple[_Loop, ...]      # outermost first
    buffer_name: str
    itemsize: int
    index: E.Expr
    is_store: bool
    local: bool
    # per loop of `loops`: its extent when `index` uses its variable, else 1 (the factor the
    # loop contributes to the footprint)
    used_extents: tuple[int, ...]


def _const(e: E.Expr, default: int = 1) -> int:
    if type(e) is E.IntImm:
        return int(e.value)
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


_OP_NAMES = ("float_add", "float_mul", "float_fma", "float_div", "float_math", "float_cmp",
             "int_arith", "int_divmod", "select", "cast", "load")
_OP_INDEX = {name: i for i, name in enumerate(_OP_NAMES)}
# multiply-adds per int32 lane of each integer dot product (4 bytes or 2 int16 per word)
_DOT_MACS = {name: 2 if name.startswith("dot2") else 4 for name in E.DOT4_INTRINSICS}
_REGISTER_KINDS = (ForKind.UNROLLED, ForKind.VECTORIZED)
_LEAVES = (E.IntImm, E.FloatImm, E.Var)    # no children, no operation counted
_AB = ("a", "b")


def _op_name(e: E.Expr) -> str | None:
    """The operation class `e` counts as (None: not an operation)."""
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
        return None if e.name in _DOT_MACS else "float_math"
    if t is E.Select:
        return "select"
    if t is E.Cast:
        return "cast"
    if t is BufferLoad:
        return "load"
    return None


@functools.cache
def _child_names(node_cls) -> tuple[str, ...]:
    """Fields of an expression class that hold sub-expressions (te.visit.walk's choice: the
    producing tensor, names, buffers and the combiner are not descended into)."""
    skip = {"dtype", "_hash", "tensor", "name", "uid", "combiner", "buffer", "value"}
    names = tuple(f.name for f in fields(node_cls) if f.compare and f.name not in skip)
    return names + (("value",) if node_cls.__name__ == "Cast" else ())


def _scan(value: E.Expr) -> tuple[list[int], list[BufferLoad], tuple[int, int]]:
    """Operation counts, loads and (integer dot products, their multiply-adds) of one stored
    value, each distinct sub-expression once.

    Pre-order, iterative, like te.visit.walk, but in one pass for both questions and without
    hashing leaves (a leaf is neither an operation nor a load, so its repeats do not matter).
    """
    counts = [0] * len(_OP_NAMES)
    loads: list[BufferLoad] = []
    dots = macs = 0
    seen: set = set()
    stack = [value]
    while stack:
        node = stack.pop()
        t = type(node)
        if t in _LEAVES or node in seen:
            continue
        seen.add(node)
        name = _op_name(node)
        if name is not None:
            counts[_OP_INDEX[name]] += 1
        names = _child_names(t)
        if names == _AB:                      # binary operators and comparisons
            stack.append(node.b)
            stack.append(node.a)
            continue
        if t is BufferLoad:
            loads.append(node)
        elif t is E.Call and node.name in _DOT_MACS:
            dots += 1
            macs += _DOT_MACS[node.name]
        stack.extend(reversed(child_exprs(node, names)))
    return counts, loads, (dots, macs)


def child_exprs(node: E.Expr, names: tuple[str, ...]) -> list[E.Expr]:
    out = []
    for field_name in names:
        child = getattr(node, field_name)
        if isinstance(child, E.Expr):
            out.append(child)
        elif isinstance(child, tuple):
            out.extend(c for c in child if isinstance(c, E.Expr))
    return out


def _vars_of(index: E.Expr) -> frozenset:
    """The variables an index expression reads."""
    found = set()
    stack = [index]
    while stack:
        node = stack.pop()
        t = type(node)
        if t is E.Var:
            found.add(node)
        elif t not in _LEAVES:
            stack.extend(child_exprs(node, _child_names(t)))
    return frozenset(found)


class _Collector:
    """Walks the IR once, recording every access with its loop nest and counting operations."""

    def __init__(self):
        self.loops: list[_Loop] = []
        self.accesses: list[_Access] = []
        self.ops = [0.0] * len(_OP_NAMES)
        self.n_stores = 0
        self.n_guards = 0
        self.n_loops = 0
        self.local_bytes = 0
        self.global_scratch_bytes = 0
        self.dot = _DotFigures()
        self._vars: dict[E.Expr, frozenset] = {}

    def visit(self, node: Stmt) -> None:
        t = type(node)
        if t is SeqStmt:
            for stmt in node.stmts:
                self.visit(stmt)
        elif t is For:
            self._visit_for(node)
        elif t is Store:
            self._visit_store(node)
        elif t is IfThenElse:
            self.n_guards += 1
            self._count(_scan(node.cond)[0])
            self.visit(node.then_case)
            if node.else_case is not None:
                self.visit(node.else_case)
        elif t is Allocate:
            self._visit_allocate(node)
        else:
            for f in fields(node):     # other statements: descend into nested statements
                child = getattr(node, f.name)
                for c in child if isinstance(child, tuple) else (child,):
                    if isinstance(c, Stmt):
                        self.visit(c)

    def _visit_for(self, node: For) -> None:
        self.n_loops += 1
        extent = max(1, _const(node.extent))
        self.loops.append(_Loop(node.loop_var, extent, node.kind))
        self.visit(node.body)
        self.loops.pop()

    def _visit_allocate(self, node: Allocate) -> None:
        size = node.buffer.size * dt.itemsize(node.buffer.dtype)
        if node.buffer.scope is Scope.LOCAL:
            self.local_bytes += size
        else:
            self.global_scratch_bytes += size
        self.visit(node.body)

    def _visit_store(self, node: Store) -> None:
        self.n_stores += 1
        loops = tuple(self.loops)
        counts, loads, (dots, macs) = _scan(node.value)
        first = len(self.accesses)
        self._add_access(loops, node.buffer, node.index, True)
        for load in loads:
            self._add_access(loops, load.buffer, load.index, False)
        self._count(counts)
        if dots:
            trips = float(math.prod(loop.extent for loop in loops))
            self.dot.add(self.accesses[first:], dots, macs, trips)

    def _add_access(self, loops, buffer, index: E.Expr, is_store: bool) -> None:
        used = self._vars.get(index)
        if used is None:
            used = self._vars[index] = _vars_of(index)
        used_extents = tuple(loop.extent if loop.var in used else 1 for loop in loops)
        self.accesses.append(_Access(loops, buffer.name, dt.itemsize(buffer.dtype), index,
                                     is_store, buffer.scope is Scope.LOCAL, used_extents))

    def _count(self, counts: list[int]) -> None:
        # trip counts are exact integers in a float, so count * trips adds exactly what
        # `count` separate additions of `trips` would
        trips = float(math.prod(loop.extent for loop in self.loops)) if self.loops else 1.0
        for slot, count in enumerate(counts):
            if count:
                self.ops[slot] += count * trips


class _DotFigures:
    """The integer dot products: totals over the function, and the register tile of the
    busiest dot store (its innermost run of unrolled and vectorized loops, the straight-line
    code whose accumulators live in vector registers)."""

    def __init__(self):
        self.dots = 0.0              # int32 dot lanes, times their trips
        self.macs = 0.0              # their multiply-adds
        self.busiest = 0.0
        self.tile = (0.0, 0.0, 0.0, 0.0)  # dots, operand words, accumulator vectors, lanes

    def add(self, accesses: list[_Access], dots: int, macs: int, trips: float) -> None:
        """A store whose value has `dots` dot products doing `macs` multiply-adds per trip;
        accesses[0] is the store."""
        store = accesses[0]
        self.dots += dots * trips
        self.macs += macs * trips
        if macs * trips <= self.busiest:
            return
        self.busiest = macs * trips
        block = 0                   # innermost loops of the register tile
        while block < len(store.loops) and store.loops[-1 - block].kind in _REGISTER_KINDS:
            block += 1
        loops = store.loops[len(store.loops) - block:]

        def footprint(a: _Access) -> float:
            return float(math.prod(a.used_extents[len(a.loops) - block:]))
        lanes = math.prod(l.extent for l in loops if l.kind is ForKind.VECTORIZED)
        # the operands: every load but the accumulator's own (acc = acc + dot(...))
        words = sum(footprint(a) * a.itemsize / 4.0 for a in accesses[1:]
                    if a.buffer_name != store.buffer_name)
        self.tile = (dots * math.prod(l.extent for l in loops), words,
                     footprint(store) / lanes, float(lanes))

    def features(self, param_bytes: int) -> list[float]:
        tile_dots, words, accumulators, lanes = self.tile
        return [_log(self.dots), _log(self.macs), _log(tile_dots), _log(words),
                tile_dots / words if words else 0.0, accumulators, lanes,
                math.log2((1.0 + 2.0 * self.macs) / (1.0 + param_bytes)) if self.macs else 0.0]


def _stride(access: _Access, var: E.Var) -> float:
    """Elements the access moves when `var` goes from 0 to 1 (others at 0)."""
    lo, hi = _eval(access.index, {var: 0}), _eval(access.index, {var: 1})
    if lo is None or hi is None:
        return 0.0
    return abs(hi - lo)


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
        depth = len(access.loops)
        if not depth or access.loops != nest[:depth]:
            continue
        target = reuse_local if access.local else reuse_global
        footprint = 1     # of the innermost `level + 1` loops, growing outwards
        for level in range(REUSE_LEVELS):
            if level < depth:
                footprint *= access.used_extents[depth - 1 - level]
            target[level] += float(footprint) * access.itemsize
        stride = _stride(access, access.loops[-1].var)
        if stride == 0:
            invariant += 1
        elif stride == 1:
            contiguous += 1
        else:
            strided += 1
        total = float(math.prod(access.used_extents)) * access.itemsize
        per_buffer[access.buffer_name] = max(per_buffer.get(access.buffer_name, 0.0), total)
    out = [_log(x) for x in reuse_global] + [_log(x) for x in reuse_local]
    out += [contiguous, strided, invariant, _log(sum(per_buffer.values())),
            float(len(per_buffer))]
    return out


def _tile_working_set(accesses: list[_Access], nest: tuple[_Loop, ...]) -> float:
    """Bytes touched per iteration of the outermost parallel (or outermost) loop."""
    start = next((i for i, l in enumerate(nest) if l.kind is ForKind.PARALLEL), 0) + 1
    inner = frozenset(nest[start:])
    total = 0.0
    for a in accesses:
        if not a.local:
            footprint = math.prod(e for l, e in zip(a.loops, a.used_extents) if l in inner)
            total += float(footprint) * a.itemsize
    return total


def _max_kind_product(accesses: list[_Access], kind: ForKind) -> int:
    """The largest product of `kind` loop extents around any access (1 when none)."""
    return max((math.prod(l.extent for l in a.loops if l.kind is kind) for a in accesses),
               default=1)


FEATURE_NAMES: tuple[str, ...] = tuple(
    [f"level{level}_{what}" for level in range(MAX_LEVELS)
     for what in ("log_extent",) + tuple(f"is_{k.value}" for k in _KINDS)]
    + [f"log_{name}" for name in _OP_NAMES]
    + [f"log_bytes_global_l{level}" for level in range(REUSE_LEVELS)]
    + [f"log_bytes_local_l{level}" for level in range(REUSE_LEVELS)]
    + ["n_contiguous", "n_strided", "n_invariant", "log_footprint", "n_buffers"]
    + ["vector_width", "log_parallel_extent", "log_unrolled_extent", "n_stores", "n_guards",
       "n_loops", "log_local_bytes", "log_scratch_bytes", "log_tile_working_set",
       "log_total_trips", "log_flops_per_byte"]
    + ["log_int_dots", "log_int_macs", "log_dot_tile_dots", "log_dot_tile_operand_words",
       "dot_tile_dots_per_operand_word", "dot_tile_accumulator_vectors", "dot_tile_lanes",
       "log_dot_ops_per_byte"])
N_FEATURES = len(FEATURE_NAMES)
# stored with each feature vector in the database: vectors of another layout are not read
# (but see upgrade_vector). v2 appended the integer dot-product block to v1 and stopped
# counting dot products as float_math.
FEATURE_VERSION = "v2-" + hashlib.sha256(",".join(FEATURE_NAMES).encode()).hexdigest()[:12]
V1_LENGTH = FEATURE_NAMES.index("log_int_dots")
V1_VERSION = "v1-" + hashlib.sha256(",".join(FEATURE_NAMES[:V1_LENGTH]).encode()).hexdigest()[:12]
LEGACY_VERSIONS = (V1_VERSION,)
# tensors of these dtypes hold no packed integer words (the dot products' operands)
_FLOAT_TASK_DTYPES = frozenset({"float32", "float64", "int64"})
_FLOAT_MATH = FEATURE_NAMES.index("log_float_math")


def upgrade_vector(version: str, vector: np.ndarray,
                   dtypes: tuple[str, ...] = ()) -> np.ndarray | None:
    """A stored vector of an older layout in this one, or None when that cannot be exact.

    v2 is v1 followed by the dot-product block, and v1 counted a dot product as float_math.
    So a v1 vector describes a kernel without dot products, and its v2 vector is the v1 one
    followed by zeros, when its float_math is 0 or its task's tensors (`dtypes`, () when
    unknown) are all float32, float64 or int64; otherwise None.
    """
    if version == FEATURE_VERSION:
        return vector
    if version != V1_VERSION or len(vector) != V1_LENGTH:
        return None
    if vector[_FLOAT_MATH] != 0 and not (dtypes and set(dtypes) <= _FLOAT_TASK_DTYPES):
        return None
    return np.concatenate([np.asarray(vector, np.float32),
                           np.zeros(N_FEATURES - V1_LENGTH, np.float32)])


def extract_features(func: PrimFunc) -> np.ndarray:
    """A float32 vector of length N_FEATURES describing `func` (same for equal IR)."""
    collector = _Collector()
    collector.visit(func.body)
    accesses = collector.accesses
    nest = _busiest(accesses)
    vector = max((l.extent for a in accesses for l in a.loops
                  if l.kind is ForKind.VECTORIZED), default=1)
    parallel = _max_kind_product(accesses, ForKind.PARALLEL)
    unrolled = _max_kind_product(accesses, ForKind.UNROLLED)
    total_trips = float(math.prod(l.extent for l in nest)) if nest else 1.0
    flops = float(sum(collector.ops[:6]))
    param_bytes = sum(b.size * dt.itemsize(b.dtype) for b in func.params)
    values = (_level_features(nest) + [_log(x) for x in collector.ops]
              + _memory_features(accesses, nest)
              + [float(vector), _log(parallel), _log(unrolled), float(collector.n_stores),
                 float(collector.n_guards), float(collector.n_loops),
                 _log(collector.local_bytes), _log(collector.global_scratch_bytes),
                 _log(_tile_working_set(accesses, nest)), _log(total_trips),
                 math.log2((1.0 + flops) / (1.0 + param_bytes))]
              + collector.dot.features(param_bytes))
    assert len(values) == N_FEATURES, "feature layout out of sync with FEATURE_NAMES"
    return np.asarray(values, dtype=np.float32)
