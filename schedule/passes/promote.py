"""Register promotion of accumulator tiles: a loop-IR rewrite that codegen runs before emitting.

A reduction's register tile updates `acc[E] = acc[E] + ...` inside a reduction loop, where E
depends only on the unrolled/vectorised tile loops below it. Left to LLVM, the accumulators
stay in registers only if LICM promotes them, which needs the accumulator's alloca proven not
captured; capture tracking gives up after 100 uses (-capture-tracking-max-uses-to-explore),
and the unrolled init, update and copy-out accesses of a 6-row x 2-vector tile need about 165
(4 rows: under 40). From 5 rows on, every accumulator was loaded and stored every k step.

`promote_register_tiles` does that promotion itself: around the outermost loop in which every
access to the buffer has the same loop-invariant base, it copies the tile into a small buffer
of its own, indexed only by the tile's static loops, and copies it back after the loop:

    allocate acc.reg[rows * width]
    for tile loops: acc.reg[t] = acc[E]           # prologue
    for k ...: ... acc.reg[t] = acc.reg[t] + ...  # the loop, reading/writing acc.reg
    for tile loops: acc[E] = acc.reg[t]           # epilogue

Every access to acc.reg is then at a constant offset once codegen unrolls and vectorises the
tile, so SROA turns it into SSA values (phis across k). The rewrite preserves semantics: the
tile points map one-to-one onto the buffer elements they touched (checked), and the prologue
and epilogue keep the guards that bound E.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

from ..ir import (Allocate, Buffer, BufferLoad, For, ForKind, IfThenElse, Scope, Stmt,
                  Store, seq)
from ..bound import const_interval, interval
from ..simplify import simplify
from ..visitor import StmtMutator, StmtVisitor
from ...te import dtype as dt
from ...te import expr as E
from ...te.visit import ExprMutator, walk
from ..analysis import free_vars   # remembered (a frozenset)

MAX_TILE_LANES = 64  # codegen vectorises loops of at most this many lanes (emit_stmt)


def promote_register_tiles(stmt: Stmt, max_bytes: int) -> Stmt:
    """Give every accumulator tile of at most `max_bytes` that a loop updates at loop-invariant
    positions its own register buffer around the outermost such loop (see module docstring).
    Returns `stmt` itself when there is nothing to promote."""
    return _Promoter(max_bytes)(stmt)


class _Promoter(StmtMutator):
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.ranges: dict[E.Var, tuple[int, int]] = {}   # enclosing loops with constant bounds
        self.skip: set[Buffer] = set()                    # promoted buffers and their copies

    def visit_For(self, loop: For) -> Stmt:
        bounds = _const_bounds(loop)
        if bounds is not None:
            self.ranges[loop.loop_var] = bounds
        try:
            if loop.kind in (ForKind.SERIAL, ForKind.UNROLLED):
                promoted = self._promote(loop)
                if promoted is not None:
                    return promoted
            return self.generic_visit(loop)
        finally:
            self.ranges.pop(loop.loop_var, None)

    def _promote(self, loop: For) -> Stmt | None:
        """`loop` wrapped in prologue/epilogue for each buffer it can promote, or None. When
        the tile is guarded (a tail), a guard-free copy runs for every tile it provably
        holds for: a guard inside the unrolled tile is a branch per row per k step."""
        plans = [_plan(loop, buf, self.max_bytes, self.ranges)
                 for buf in _stored_buffers(loop) if buf not in self.skip]
        plans = [p for p in plans if p is not None]
        if not plans:
            return None
        for plan in plans:
            self.skip |= {plan.buf, plan.reg}
        bounds = [_tile_conditions(plan) for plan in plans]
        if not any(p.guards for p in plans) or any(b is None for b in bounds):
            return self._wrap(loop, loop.body, plans)
        full = simplify(E.all_of(*(b[0] for b in bounds)))
        guarded = self._wrap(loop, loop.body, plans)
        some = simplify(bounds[0][1])
        if len(plans) == 1 and _stored_buffers(loop) == [plans[0].buf] and not isinstance(
                some, E.IntImm):
            # the loop stores nothing else: a tile wholly out of range does nothing at all
            guarded = IfThenElse(some, guarded)
        if _is_false(full):
            return guarded
        dropped = [g for plan in plans for g in plan.guards]
        fast = self._wrap(loop, _DropGuards(dropped)(loop.body),
                          [plan.without_guards() for plan in plans])
        if isinstance(full, E.IntImm):      # every tile is whole
            return fast
        return IfThenElse(full, fast, guarded)

    def _wrap(self, loop: For, body: Stmt, plans: list[_Plan]) -> Stmt:
        for plan in plans:
            body = _Redirect(plan)(body)
        result: Stmt = For(loop.loop_var, loop.min, loop.extent, loop.kind, self.visit(body))
        for plan in plans:
            result = Allocate(plan.reg, seq(plan.copy(into_reg=True), result,
                                            plan.copy(into_reg=False)))
        return result


def _tile_conditions(plan: _Plan) -> tuple[E.Expr, E.Expr] | None:
    """Two conditions free of the tile's loop variables: under the first, every tile guard
    of `plan` holds at every tile point (a whole tile); unless the second holds, none holds
    at any point (the tile is wholly out of range). None when a guard is not a conjunction
    of `a < b` terms whose range over the tile is known (lowering's guards all are)."""
    ranges = {f.loop_var: _const_bounds(f) for f in plan.tile}
    whole, some = [], []
    for guard in plan.guards:
        for term in _conjuncts(guard.cond):
            if not free_vars(term) & set(ranges):
                whole.append(term)
                some.append(term)
                continue
            if not isinstance(term, E.LT) or free_vars(term.b) & set(ranges):
                return None
            bounds = interval(term.a, ranges)
            if bounds is None:
                return None
            whole.append(E.LT(term.dtype, bounds[1], term.b))
            some.append(E.LT(term.dtype, bounds[0], term.b))
    return E.all_of(*whole), E.all_of(*some)


def _is_false(cond: E.Expr) -> bool:
    return isinstance(cond, E.IntImm) and not cond.value


def _conjuncts(cond: E.Expr) -> list[E.Expr]:
    if isinstance(cond, E.And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _const_bounds(loop: For) -> tuple[int, int] | None:
    if isinstance(loop.min, E.IntImm) and isinstance(loop.extent, E.IntImm):
        return loop.min.value, loop.min.value + loop.extent.value - 1
    return None


@dataclass
class _Plan:
    """How buffer `buf`, accessed at `index`, maps to register buffer `reg` at `reg_index`."""

    buf: Buffer
    index: E.Expr
    reg: Buffer
    reg_index: E.Expr
    frames: list[For | IfThenElse]     # the tile loops and the guards kept for the copies

    @property
    def guards(self) -> list[IfThenElse]:
        """The kept guards that test the tile's own loops (a tail of the tile)."""
        tile_vars = {f.loop_var for f in self.tile}
        return [f for f in self.frames
                if isinstance(f, IfThenElse) and free_vars(f.cond) & tile_vars]

    @property
    def tile(self) -> list[For]:
        return [f for f in self.frames if isinstance(f, For)]

    def without_guards(self) -> "_Plan":
        """The plan for tiles its tile guards hold everywhere in (see _tile_conditions)."""
        guards = self.guards
        return _Plan(self.buf, self.index, self.reg, self.reg_index,
                     [f for f in self.frames if not any(f is g for g in guards)])

    def copy(self, into_reg: bool) -> Stmt:
        """The prologue (buf -> reg) or epilogue (reg -> buf) nest."""
        if into_reg:
            body: Stmt = Store(self.reg, self.reg_index,
                               BufferLoad(self.buf.dtype, self.buf, self.index))
        else:
            body = Store(self.buf, self.index, BufferLoad(self.reg.dtype, self.reg,
                                                          self.reg_index))
        for frame in reversed(self.frames):
            if isinstance(frame, For):
                body = For(frame.loop_var, frame.min, frame.extent, frame.kind, body)
            else:
                body = IfThenElse(frame.cond, body)
        return body


@functools.lru_cache(maxsize=1 << 14)
def _buffer_loads(expr) -> tuple:
    """The distinct BufferLoad nodes of `expr`, in walk order. Remembered: the access scan
    below walks every expression of a loop body once per candidate buffer, which was a
    seventh of a ResNet-50 conv's IR emission."""
    return tuple(n for n in walk(expr) if isinstance(n, BufferLoad))


class _Accesses(StmtVisitor):
    """Every store and load of one buffer under a statement, with the For/If path to each
    store; also notes whether the buffer is allocated inside."""

    def __init__(self, buf: Buffer):
        self.buf = buf
        self.path: list = []
        self.stores: list[tuple[Store, list]] = []
        self.loads = 0
        self.allocated = False
        self.else_branch = False

    def visit_expr(self, expr):
        self.loads += sum(1 for n in _buffer_loads(expr) if n.buffer == self.buf)

    def visit_For(self, node: For):
        self.visit_expr(node.min)
        self.visit_expr(node.extent)
        self.path.append(node)
        self.visit(node.body)
        self.path.pop()

    def visit_IfThenElse(self, node: IfThenElse):
        self.visit_expr(node.cond)
        self.path.append(node)
        self.visit(node.then_case)
        self.path.pop()
        if node.else_case is not None:
            before = (len(self.stores), self.loads)
            self.visit(node.else_case)
            self.else_branch |= (len(self.stores), self.loads) != before

    def visit_Allocate(self, node: Allocate):
        self.allocated |= node.buffer == self.buf
        self.generic_visit(node)

    def visit_Store(self, node: Store):
        if node.buffer == self.buf:
            self.stores.append((node, list(self.path)))
        self.generic_visit(node)


class _StoredBuffers(StmtVisitor):
    def __init__(self):
        self.buffers: dict[Buffer, None] = {}

    def visit_Store(self, node: Store):
        self.buffers.setdefault(node.buffer, None)


def _stored_buffers(loop: For) -> list[Buffer]:
    found = _StoredBuffers()
    found(loop.body)
    return list(found.buffers)


def _plan(loop: For, buf: Buffer, max_bytes: int, ranges: dict) -> _Plan | None:
    """The promotion of `buf` around `loop`, or None when it is not an invariant tile update:
    one store (under Fors and Ifs only) whose value reads `buf` at the store's own index,
    no other access, an index that is linear and one-to-one in static tile loops below `loop`
    and otherwise invariant in `loop`, and a tile of at most `max_bytes`. `ranges` holds
    the bounds of the loops enclosing `loop`."""
    acc = _Accesses(buf)
    acc(loop.body)
    if acc.allocated or acc.else_branch or len(acc.stores) != 1:
        return None
    store, path = acc.stores[0]
    if any(isinstance(f, For) and f.kind is ForKind.PARALLEL for f in path):
        return None
    reads = [n for n in _buffer_loads(store.value) if n.buffer == buf]
    if not reads or acc.loads != len(reads) or any(r.index != store.index for r in reads):
        return None
    if _buffer_loads(store.index):
        return None
    inside = {loop.loop_var} | {f.loop_var for f in path if isinstance(f, For)}
    coeffs = _linear_coefficients(store.index, inside)
    if coeffs is None:
        return None
    tile = [f for f in path if isinstance(f, For) and coeffs.get(f.loop_var, 0) != 0]
    tile_vars = {f.loop_var for f in tile}
    if set(coeffs) - tile_vars or not all(_static(f) for f in tile):
        return None                      # depends on `loop` itself or on a dynamic loop
    if not _one_to_one([(coeffs[f.loop_var], f.extent.value) for f in tile]):
        return None
    frames = _copy_frames(path, tile_vars, inside)
    if frames is None or (len(frames) < len(tile) + _guards(path) and not _in_bounds(
            store.index, buf, tile, ranges)):
        return None     # a dropped guard must not be what kept the index in bounds
    size = 1
    for f in tile:
        size *= f.extent.value
    if size * dt.itemsize(buf.dtype) > max_bytes:
        return None
    reg = Buffer(f"{buf.name}.reg", buf.dtype, (size,), Scope.LOCAL)
    return _Plan(buf, store.index, reg, _flat_index(tile), frames)


def _static(loop: For) -> bool:
    """Whether codegen emits every iteration of `loop` with a constant loop variable."""
    if not (isinstance(loop.min, E.IntImm) and isinstance(loop.extent, E.IntImm)):
        return False
    if loop.extent.value == 1 or loop.kind is ForKind.UNROLLED:
        return True
    return loop.kind is ForKind.VECTORIZED and loop.extent.value <= MAX_TILE_LANES


def _guards(path: list) -> int:
    return sum(1 for f in path if isinstance(f, IfThenElse))


def _in_bounds(index: E.Expr, buf: Buffer, tile: list[For], ranges: dict) -> bool:
    """Whether `index` stays inside `buf` for every tile point and enclosing loop value."""
    span = dict(ranges)
    span.update({f.loop_var: _const_bounds(f) for f in tile})
    bounds = const_interval(index, span)
    return bounds is not None and bounds[0] >= 0 and bounds[1] < buf.size


def _copy_frames(path: list, tile_vars: set, inside: set) -> list | None:
    """The tile loops and the guards that bound the tile, in path order. A guard that tests
    only loops outside the tile (the reduction's tail) is dropped: copying an element in and
    back out unchanged is harmless. A guard mixing both kinds cannot be split: None."""
    frames = []
    for frame in path:
        if isinstance(frame, For):
            if frame.loop_var in tile_vars:
                frames.append(frame)
            continue
        used = free_vars(frame.cond)
        if _buffer_loads(frame.cond):
            return None
        reduction_vars = used & (inside - tile_vars)
        if not reduction_vars:
            frames.append(frame)
        elif used & tile_vars:
            return None
    return frames


def _flat_index(tile: list[For]) -> E.Expr:
    """Row-major index of a tile point over the tile loops (in nesting order)."""
    index: E.Expr = E.const(0)
    for f in tile:
        offset = f.loop_var if f.min.value == 0 else f.loop_var - f.min.value
        index = index * f.extent.value + offset
    return simplify(index)


def _one_to_one(terms: list[tuple[int, int]]) -> bool:
    """Whether sum(c * x) with x in [0, extent) is one-to-one: sorted by |c|, each |c| must
    exceed the span of all the smaller terms (a mixed-radix numbering). A loop of extent 1
    adds no point: x[M, 1, K] @ W's unit axis has the rows' coefficient, and counting it
    left the whole register tile in memory (2.6x slower than x[1, M, K] @ W)."""
    span = 0
    terms = [t for t in terms if t[1] > 1]
    for c, extent in sorted(terms, key=lambda t: abs(t[0])):
        if abs(c) <= span:
            return False
        span += abs(c) * (extent - 1)
    return True


def _linear_coefficients(e: E.Expr, inner: set) -> dict | None:
    """{var: coefficient} of the `inner` variables in integer expression `e` when `e` is
    linear in them (the rest of `e` may be anything free of them), else None."""
    if not free_vars(e) & inner:
        return {}
    t = type(e)
    if t is E.Var:
        return {e: 1}
    if t in (E.Add, E.Sub):
        a, b = _linear_coefficients(e.a, inner), _linear_coefficients(e.b, inner)
        if a is None or b is None:
            return None
        sign = 1 if t is E.Add else -1
        out = dict(a)
        for v, c in b.items():
            out[v] = out.get(v, 0) + sign * c
        return {v: c for v, c in out.items() if c}
    if t is E.Mul:
        for x, k in ((e.a, e.b), (e.b, e.a)):
            if isinstance(k, E.IntImm):
                inner_terms = _linear_coefficients(x, inner)
                if inner_terms is None:
                    return None
                return {v: c * k.value for v, c in inner_terms.items() if c * k.value}
    return None


class _DropGuards(StmtMutator):
    """The loop body with the given guard nodes (by identity) replaced by their then-case."""

    def __init__(self, guards: list[IfThenElse]):
        self.guards = guards

    def visit_IfThenElse(self, node: IfThenElse) -> Stmt:
        if any(node is g for g in self.guards):
            return self.visit(node.then_case)
        return self.generic_visit(node)


class _Redirect(StmtMutator):
    """The promoted loop's body with the plan's store and loads moved to the register
    buffer."""

    def __init__(self, plan: _Plan):
        self.plan = plan
        self.loads = _ReplaceLoads(plan)

    def visit_Store(self, node: Store) -> Stmt:
        if node.buffer != self.plan.buf:
            return node
        return Store(self.plan.reg, self.plan.reg_index, self.loads(node.value))


class _ReplaceLoads(ExprMutator):
    def __init__(self, plan: _Plan):
        super().__init__()
        self.plan = plan

    def visit_BufferLoad(self, node: BufferLoad) -> E.Expr:
        if node.buffer != self.plan.buf:
            return self.generic_visit(node)
        return BufferLoad(node.dtype, self.plan.reg, self.plan.reg_index)
