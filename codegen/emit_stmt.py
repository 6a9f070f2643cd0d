"""Statements -> LLVM control flow: serial, unrolled and vectorized loops, stores, allocations,
conditionals. PARALLEL loops are handed to codegen/parallel.py.
"""
from __future__ import annotations

import logging

import llvmlite.ir as ir

from ..schedule.ir import (Allocate, Evaluate, For, ForKind, IfThenElse, Scope, SeqStmt, Stmt,
                           Store)
from ..schedule.visitor import StmtMutator
from ..te import dtype as dt
from ..te import expr as E
from ..te.errors import CodegenError
from ..te.visit import substitute
from . import emit_expr, fold, loop_hints, masked_tail
from . import llvm_types as T
from ..schedule.analysis import free_vars as _free_vars
from ..schedule.analysis import lane_stride
from .emit_expr import ADDRESS, ExprEmitter, Lanes, _at_lane_base
from .parallel import emit_parallel

log = logging.getLogger(__name__)

STACK_LIMIT_BYTES = 256 * 1024   # larger scratch buffers go to the heap
MAX_VECTOR_LANES = 64            # wider VECTORIZED loops become serial loops for LLVM


def const_extent(e: E.Expr) -> int | None:
    return e.value if isinstance(e, E.IntImm) else None


def is_vectorizable(stmt: Stmt, var: E.Var) -> bool:
    """Whether `stmt` can run with `var` as a lane ramp: only stores (each indexed by the
    lane), conditionals and no-ops; any loop, allocation or lane-invariant store says no."""
    if isinstance(stmt, Store):
        return var in _free_vars(stmt.index)
    if isinstance(stmt, SeqStmt):
        return all(is_vectorizable(s, var) for s in stmt.stmts)
    if isinstance(stmt, IfThenElse):
        return is_vectorizable(stmt.then_case, var) and (
            stmt.else_case is None or is_vectorizable(stmt.else_case, var))
    return isinstance(stmt, Evaluate)


class _Rename(StmtMutator):
    def __init__(self, mapping):
        self.mapping = mapping

    def visit_expr(self, expr):
        return substitute(expr, self.mapping)

    def visit_Store(self, node):  # the visitor skips `buffer` fields; Store has exprs only
        return self.generic_visit(node)


class FunctionEmitter(ExprEmitter):
    """Emits the statements of one LLVM function (the kernel or an outlined parallel body)."""

    def __init__(self, mod, fn: ir.Function, buffers: dict, *, nonneg: set | None = None,
                 in_parallel: bool = False):
        self.mod, self.fn, self.fm = mod, fn, mod.fastmath
        self.init_sharing(getattr(mod, "readonly", ()))
        self.vars: dict = {}
        self.buffers = dict(buffers)
        self.nonneg = set(nonneg or ())
        self.lanes: Lanes | None = None
        self.in_parallel = in_parallel
        # stack buffers being emitted -> their Allocate's body (then its loop variables), and
        # the unmasked ones whose masked-off lanes a masked tail must keep (_mixed_lanes)
        self.allocations: dict = {}
        self.keep_lanes: frozenset = frozenset()
        self.entry = fn.append_basic_block("entry")
        self.entry_builder = ir.IRBuilder(self.entry)
        self.builder = ir.IRBuilder(fn.append_basic_block("start"))

    def finish(self) -> None:
        """Close the function: the entry block (allocas) falls through to the code."""
        self.builder.ret_void()
        self.entry_builder.branch(self.fn.basic_blocks[1])

    def alloca(self, ty: ir.Type, align: int = 64) -> ir.Value:
        slot = self.entry_builder.alloca(ty)
        slot.align = align
        slot.type = T.PTR  # llvmlite types alloca results; the kernel uses opaque pointers
        return slot

    # ------------------------------------------------------------------ dispatch
    def emit(self, stmt: Stmt) -> None:
        method = getattr(self, "_stmt_" + type(stmt).__name__, None)
        if method is None:
            raise CodegenError(f"codegen cannot emit statement {type(stmt).__name__}")
        method(stmt)

    def _stmt_SeqStmt(self, s: SeqStmt) -> None:
        for child in s.stmts:
            self.emit(child)

    def _stmt_Evaluate(self, s: Evaluate) -> None:
        pass  # expressions are pure: nothing to do

    # ------------------------------------------------------------------ loops
    def loop(self, start: ir.Value, end: ir.Value, body, loop_md=None) -> None:
        """for i in [start, end): body(i) with an int32 phi. `loop_md`: the latch branch's
        `llvm.loop` metadata (codegen/loop_hints.py), if any."""
        bld = self.builder
        pre = bld.block
        header = self.fn.append_basic_block("for.header")
        inner = self.fn.append_basic_block("for.body")
        done = self.fn.append_basic_block("for.end")
        wide = emit_expr.WIDE_ADDRESSES
        ty = T.I64 if wide else T.I32
        if wide:    # an i64 counter: element offsets use it as is (see _widen)
            start, end = self._widen(start), self._widen(end)
        bld.branch(header)
        bld.position_at_end(header)
        i = bld.phi(ty, name="i")
        i.add_incoming(start, pre)
        bld.cbranch(bld.icmp_signed("<", i, end), inner, done)
        bld.position_at_end(inner)
        scope = self.push_scope()
        try:
            body(bld.trunc(i, T.I32) if wide else i)
        finally:
            self.pop_scope(scope)
        nxt = bld.add(i, ir.Constant(ty, 1), flags=("nsw",))
        i.add_incoming(nxt, bld.block)
        latch = bld.branch(header)
        if loop_md is not None:
            latch.set_metadata("llvm.loop", loop_md)
        bld.position_at_end(done)

    def _bind(self, var: E.Var, value: ir.Value, body: Stmt, min_expr: E.Expr,
              level: int | None = None) -> None:
        if self.is_nonneg(min_expr):
            self.nonneg.add(var)
        self.vars[var] = value
        scope = self.push_scope(var, level)
        try:
            self.emit(body)
        finally:
            self.pop_scope(scope)
            del self.vars[var]

    def _stmt_For(self, s: For) -> None:
        if s.loop_var.dtype != "int32":
            raise CodegenError(f"loop variable '{s.loop_var.name}' has dtype "
                               f"{s.loop_var.dtype}; loop variables must be int32")
        extent = const_extent(s.extent)
        if s.kind is ForKind.PARALLEL:
            emit_parallel(self, s)
        elif s.kind is ForKind.UNROLLED and extent is not None:
            self._unrolled(s, extent)
        elif (s.kind is ForKind.VECTORIZED and extent is not None and self.lanes is None
              and 1 < extent <= MAX_VECTOR_LANES and is_vectorizable(s.body, s.loop_var)):
            self._vectorized(s, extent)
        else:
            if s.kind is ForKind.VECTORIZED and extent != 1:
                log.debug("vectorized loop %s emitted as a serial loop", s.loop_var.name)
            self.serial(s)

    def serial(self, s: For) -> None:
        start = self.expr(s.min, index=True)
        end = self.builder.add(start, self.expr(s.extent, index=True), flags=("nsw",))
        self.loop(start, end, lambda i: self._bind(s.loop_var, i, s.body, s.min),
                  loop_hints.metadata_for(self.mod, s))

    def _unrolled(self, s: For, extent: int) -> None:
        base = self.expr(s.min, index=True)
        for k in range(extent):
            value = (ir.Constant(T.I32, s.min.value + k) if isinstance(s.min, E.IntImm)
                     else self.builder.add(base, ir.Constant(T.I32, k), flags=("nsw",)))
            self._bind(s.loop_var, value, s.body, s.min)

    def _vectorized(self, s: For, extent: int) -> None:
        base = self.expr(s.min, index=True)
        self.lanes = Lanes(s.loop_var, s.min, extent)
        try:
            self._bind(s.loop_var, T.ramp(self.builder, base, extent), s.body, s.min,
                       level=self.outer_level(s.min))
        finally:
            self.lanes = None

    # ------------------------------------------------------------------ memory
    def _stmt_Store(self, s: Store) -> None:
        buf = s.buffer
        ptr, mem_ty, align = self.buffer_ptr(buf), T.memory_type(buf.dtype), dt.itemsize(buf.dtype)
        if s.value.dtype != buf.dtype:
            raise CodegenError(f"store to '{buf.name}' ({buf.dtype}) of a {s.value.dtype} value "
                               f"({s.value}); cast the value first")
        value = self.expr(s.value)
        bld = self.builder
        if self.lanes is None or not self.depends_on_lanes(s.index):
            if T.is_vector(value):
                raise CodegenError(f"internal: lane-dependent value stored to a lane-invariant "
                                   f"index of '{buf.name}'; this is a bug in Kiln")
            idx = self.expr(s.index, index=ADDRESS)
            bld.store(self.to_memory(buf.dtype, value), self.element_ptr(ptr, mem_ty, idx),
                      align=align)
            return
        lanes = self.lanes
        if not T.is_vector(value):
            value = T.splat(bld, value, lanes.count)
        value = self.to_memory(buf.dtype, value)
        if lane_stride(s.index, lanes.var) == 1:
            base = self.expr(_at_lane_base(s.index, lanes.var, lanes.base), index=ADDRESS)
            if self.lane_mask is not None and buf not in self.unmasked:
                self.masked_access("store", self.element_ptr(ptr, mem_ty, base), value.type,
                                   buf.dtype, value)
                return
            at = self.element_ptr(ptr, mem_ty, base)
            if self.lane_mask is not None and buf in self.keep_lanes:
                # an unmasked (register-tile) buffer keeps its masked-off lanes: a guard
                # inside a reduction (a scan's `if j <= i`) finds them valid again later
                value = bld.select(self.lane_mask, value, bld.load(at, typ=value.type, align=align))
            bld.store(value, at, align=align)
            return
        idx = self.expr(s.index, index=ADDRESS)
        for lane in range(lanes.count):  # scatter, lanes in order (the last write wins)
            k = ir.Constant(T.I32, lane)
            bld.store(bld.extract_element(value, k),
                      self.element_ptr(ptr, mem_ty, bld.extract_element(idx, k)), align=align)

    def _stmt_Allocate(self, s: Allocate) -> None:
        buf = s.buffer
        if buf.scope is Scope.PARAM:
            raise CodegenError(f"Allocate of '{buf.name}' with scope PARAM; parameters are "
                               "passed in, allocate GLOBAL or LOCAL buffers only")
        mem_ty = T.memory_type(buf.dtype)
        nbytes = max(1, buf.size) * dt.itemsize(buf.dtype)
        if nbytes <= STACK_LIMIT_BYTES:
            self.buffers[buf] = self.alloca(ir.ArrayType(mem_ty, max(1, buf.size)))
            self.allocations[buf] = s.body      # for masked tails' steady guards
            try:
                self.emit(s.body)
            finally:
                del self.buffers[buf]
                del self.allocations[buf]
            return
        rounded = (nbytes + 63) // 64 * 64
        target = self.mod.target   # size_t is 32 bits on wasm32 (the deploy export)
        size_t = T.I32 if target is not None and target.triple.startswith("wasm32") else T.I64
        malloc = self.mod.declare("aligned_alloc", T.PTR, [size_t, size_t])
        free = self.mod.declare("free", T.VOID, [T.PTR])
        ptr = self.builder.call(malloc, [ir.Constant(size_t, 64), ir.Constant(size_t, rounded)])
        self.buffers[buf] = ptr
        try:
            self.emit(s.body)
        finally:
            del self.buffers[buf]
        self.builder.call(free, [ptr])

    # ------------------------------------------------------------------ conditionals
    def _stmt_IfThenElse(self, s: IfThenElse) -> None:
        cond = self.expr(s.cond)
        known = fold.int_value(cond)
        if known is not None:   # decided at emission (a guard over unrolled constants)
            if known or s.else_case is not None:
                self.emit(s.then_case if known else s.else_case)
            return
        if T.is_vector(cond):
            self._lane_if(s, cond)
            return
        self._branch(cond, lambda: self.emit(s.then_case),
                     None if s.else_case is None else lambda: self.emit(s.else_case))

    def _branch(self, cond: ir.Value, then, otherwise) -> None:
        if otherwise is None:
            with self.builder.if_then(cond):
                self._scoped(then)
            return
        with self.builder.if_else(cond) as (then_block, else_block):
            with then_block:
                self._scoped(then)
            with else_block:
                self._scoped(otherwise)

    def _scoped(self, emit) -> None:
        """Run `emit` in a control-flow scope: values it emits are not reused after it."""
        scope = self.push_scope()
        try:
            emit()
        finally:
            self.pop_scope(scope)

    def _lane_if(self, s: IfThenElse, cond: ir.Value) -> None:
        """Lane-dependent condition: all lanes true -> vector then-case, all false -> vector
        else-case, mixed -> the whole statement as a scalar loop over the lanes."""
        bld, lanes = self.builder, self.lanes
        mask = bld.bitcast(cond, ir.IntType(lanes.count))
        all_true = bld.icmp_unsigned("==", mask, ir.Constant(ir.IntType(lanes.count), -1))
        all_false = bld.icmp_unsigned("==", mask, ir.Constant(ir.IntType(lanes.count), 0))
        else_vector = (lambda: self.emit(s.else_case)) if s.else_case is not None else (
            lambda: None)
        self._branch(all_true, lambda: self.emit(s.then_case), lambda: self._branch(
            all_false, else_vector, lambda: self._mixed_lanes(s, cond)))

    def _mixed_lanes(self, s: IfThenElse, cond: ir.Value) -> None:
        """Some lanes true: the then-case as one masked vector statement where
        codegen/masked_tail.py proves it safe and the target masks natively, else a scalar
        loop over the lanes."""
        lanes = self.lanes
        unmasked = (masked_tail.plan(s.then_case, lanes.var, lanes.base, lanes.count)
                    if masked_tail.ENABLED and s.else_case is None and self.lane_mask is None
                    else None)
        target = getattr(self.mod, "target", None)
        if unmasked is None or not all(
                emit_expr._native_masked_load(target, b.dtype)
                for b in masked_tail.buffers(s.then_case) if b not in unmasked):
            self._scalar_lanes(s)
            return
        keep = frozenset(b for b in unmasked if b not in self.allocations or not
                         masked_tail.steady(s.cond, lanes.var, self._loop_vars_in(b)))
        self.lane_mask, self.unmasked, self.keep_lanes = cond, unmasked, keep
        try:
            self.emit(s.then_case)
        finally:
            self.lane_mask, self.unmasked, self.keep_lanes = None, frozenset(), frozenset()

    def _loop_vars_in(self, buf) -> frozenset:
        """The loop variables bound inside `buf`'s Allocate (computed once per buffer)."""
        body = self.allocations[buf]
        if not isinstance(body, frozenset):
            body = self.allocations[buf] = masked_tail.loop_vars(body)
        return body

    def _scalar_lanes(self, s: Stmt) -> None:
        lanes = self.lanes
        fresh = E.Var("int32", lanes.var.name)
        body = _Rename({lanes.var: fresh})(s)
        self.lanes = None
        saved = self.vars.pop(lanes.var)
        try:
            self.serial(For(fresh, lanes.base, E.const(lanes.count), ForKind.SERIAL, body))
        finally:
            self.lanes = lanes
            self.vars[lanes.var] = saved
