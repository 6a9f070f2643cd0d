"""Expressions -> LLVM values, scalar or vector.

Inside a VECTORIZED loop the loop variable is a lane ramp; every expression that depends on it
becomes a vector value and everything else stays scalar (splatted where the two meet). Loads
pick a contiguous vector load, a scalar load + splat, or a per-lane gather from the index form.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import llvmlite.ir as ir

from ..schedule.analysis import free_vars as _free_vars
from ..schedule.analysis import lane_stride
from ..schedule.ir import Buffer, BufferLoad
from ..te import dtype as dt
from ..te import expr as E
from ..te.errors import CodegenError
from ..te.visit import child_exprs, substitute
from . import fold
from . import llvm_types as T
from .dot4 import (ACCUMULATING_INTRINSICS, MIXED_LANE_INTRINSICS, dot4_strategies,
                   emit_dot4, target_features)
from .intrinsics import emit_call
from .lookup import emit_lookup8

_FCMP = {E.LT: "<", E.LE: "<=", E.EQ: "==", E.NE: "!="}
_LEAVES = (E.IntImm, E.FloatImm, E.Var)
# Element offsets computed in i64 (expr(index=ADDRESS)) cut a ResNet-50 conv's O3 time from
# 0.86 to 0.25 s (IndVarSimplify and LoopLoadElimination no longer see through sign
# extensions). The max pool ran 35% slower with them at first: LLVM's loop idiom pass could
# then see its copy loops and made them memcpy calls; kernels now carry "no-builtin-memcpy"
# (codegen/attributes.py) and the max pool runs as fast as with i32 offsets (A/B runs in
# benchmarks/RESULTS.md, 2026-11-25 20:35 UTC). Off (False), ADDRESS means index=True.
# Off for a while after a fresh-clone CI run spent 25+ minutes in LLVM's O3 pipeline on one
# reduce_max kernel of a random ONNX graph: the cause was not the offsets (the kernel hangs
# with i32 offsets too) but a PARALLEL loop of extent 1 around a whole-tensor max chain,
# which LLVM's loop vectoriser walked in exponential time; such loops are now inlined
# (codegen/emit_module.remove_unit_loops). benchmarks/llvm_hang_hunt.py over 700 random
# reduction graphs for znver3 and znver4 with the offsets on: slowest kernel 1.5 s.
WIDE_ADDRESSES = True
ADDRESS = "address"   # expr(index=ADDRESS): an element offset, int32 arithmetic done in i64
_OPAQUE = (BufferLoad, E.Cast, E.Call)  # emitted at their own width, then widened


@dataclass(frozen=True)
class Lanes:
    """The active vectorized loop: `var` is a ramp starting at `base` (an Expr) over `count`."""

    var: E.Var
    base: E.Expr
    count: int


@functools.lru_cache(maxsize=1 << 14)
def _at_lane_base(index: E.Expr, var: E.Var, base: E.Expr) -> E.Expr:
    """`index` with the lane variable replaced by the ramp's start (a contiguous access's
    first element), remembered: every unrolled copy of a vector load asks again."""
    return substitute(index, {var: base})


class ExprEmitter:
    # a vector tail's lane mask while one guarded statement is emitted masked, and the
    # buffers it reads and writes unmasked (codegen/masked_tail.py)
    lane_mask: ir.Value | None = None
    unmasked: frozenset = frozenset()

    """Mixin of FunctionEmitter: expression emission. Needs builder, vars, buffers, lanes,
    nonneg, fastmath flags and the module context `mod`.

    Values are shared between expr() calls (emission-time CSE): an integer or read-only
    expression emitted once is reused wherever its value is still valid: until the scope
    it was emitted in ends (a loop body, a branch of a conditional) or one of its variables
    is bound anew (an unrolled loop's next copy). Loads are shared only from buffers nothing
    in the function writes (`readonly`). Without it, every store of an unrolled tile
    re-emitted its whole index arithmetic and every unrolled copy re-read its inputs, for
    LLVM's GVN to merge again.
    """

    builder: ir.IRBuilder
    vars: dict
    buffers: dict
    lanes: Lanes | None
    nonneg: set
    fm: tuple
    mod: object

    # ------------------------------------------------------------------ sharing
    def init_sharing(self, readonly=frozenset()) -> None:
        self.readonly = frozenset(readonly)
        self._shared: dict = {}
        self._scopes: list[list] = [[]]
        self._control = 0
        self._var_level: dict = {}
        self._share_ok: dict = {}

    def push_scope(self, var: E.Var | None = None, level: int | None = None):
        """Open a scope: a control-flow region (var None: code that may not run, whose values
        do not dominate what follows), or the binding of `var`. Returns what pop_scope needs.
        `level`: the scope the values that depend on `var` belong to, when not this new one
        (a vector loop's lane ramp, see outer_level)."""
        self._scopes.append([])
        new = len(self._scopes) - 1
        if var is None:
            saved, self._control = self._control, new
            return ("control", saved)
        saved = self._var_level.get(var)
        self._var_level[var] = new if level is None else level
        return ("var", var, saved)

    def outer_level(self, e: E.Expr) -> int:
        """The innermost open scope that the value of `e` depends on (its variables'
        bindings and the control-flow region): where a value computed from `e` stays valid.
        A vectorized loop's lane variable is bound at the level of its start: the ramp is the
        same value every time the loop is entered there (each unrolled copy around it), so
        what depends on the lanes is shared between the copies, keyed on the Lanes too."""
        level = self._control
        for v in _free_vars(e):
            level = max(level, self._var_level.get(v, 0))
        return level

    def pop_scope(self, token) -> None:
        for key in self._scopes.pop():
            self._shared.pop(key, None)
        if token[0] == "control":
            self._control = token[1]
        elif token[2] is None:
            del self._var_level[token[1]]
        else:
            self._var_level[token[1]] = token[2]

    def _shareable(self, e: E.Expr) -> bool:
        ok = self._share_ok.get(e)
        if ok is None:
            if isinstance(e, BufferLoad):   # a GuardedLoad's mask and safe load too
                ok = e.buffer in self.readonly and all(self._shareable(c) for c in child_exprs(e))
            else:
                ok = all(self._shareable(c) for c in child_exprs(e))
            self._share_ok[e] = ok
        return ok

    def _remember(self, key, e: E.Expr, value: ir.Value) -> None:
        self._shared[key] = value
        self._scopes[self.outer_level(e)].append(key)

    # ------------------------------------------------------------------ entry points
    def expr(self, e: E.Expr, *, index: bool = False) -> ir.Value:
        """Emit `e`; `index=True` marks int arithmetic nsw (indices are in bounds);
        `index=ADDRESS` (with WIDE_ADDRESSES on; else the same as True) also computes
        int32 values in i64 (nsw), as the element offsets of
        loads and stores: LLVM then has no sign extension of i32 index arithmetic to see
        through (IndVarSimplify and LoopLoadElimination spent most of a conv's O3 time in
        scalar evolution over those)."""
        saved = getattr(self, "_memo", None), getattr(self, "_index", False)
        if index is ADDRESS and not WIDE_ADDRESSES:
            index = True
        self._memo, self._index = {}, index
        try:
            return self._emit(e)
        finally:
            self._memo, self._index = saved

    def depends_on_lanes(self, e: E.Expr) -> bool:
        return self.lanes is not None and self.lanes.var in _free_vars(e)

    def _emit(self, e: E.Expr) -> ir.Value:
        if type(e) is E.IntImm:     # a third of all calls: T.const shares the constant
            return self._emit_IntImm(e)
        lanes = self.lanes
        key = ((e, self._index, lanes) if lanes is not None and lanes.var in _free_vars(e)
               else (e, self._index))
        hit = self._memo.get(key)
        if hit is None:
            if self._index is ADDRESS and isinstance(e, _OPAQUE):
                hit = self._widen_opaque(e)
                self._memo[key] = hit
                return hit
            leaf = isinstance(e, _LEAVES) and not (self._index is ADDRESS and
                                                   isinstance(e, E.Var))
            hit = None if leaf else self._shared.get(key)
            if hit is None:
                method = getattr(self, "_emit_" + type(e).__name__, None)
                if method is None:
                    raise CodegenError(f"codegen cannot emit expression node "
                                       f"{type(e).__name__} ({e}); lower it first (Reduce and "
                                       "TensorLoad must not reach the loop IR)")
                hit = method(e)
                if not leaf and not isinstance(hit, ir.Constant) and self._shareable(e):
                    self._remember(key, e, hit)
            self._memo[key] = hit
        return hit

    def _widen_opaque(self, e: E.Expr) -> ir.Value:
        """A load, cast or call inside an address: emitted as usual, an int32 result then
        sign-extended to i64."""
        self._index = True
        try:
            value = self._emit(e)
        finally:
            self._index = ADDRESS
        return self._widen(value) if e.dtype == "int32" else value

    def _widen(self, value: ir.Value) -> ir.Value:
        if (isinstance(value, ir.CastInstr) and value.opname == "trunc"
                and value.operands[0].type == T.I64):
            return value.operands[0]    # a loop counter (emit_stmt.loop), i64 already
        start = fold.int_value(value)
        if start is not None:
            return ir.Constant(T.I64, start)
        if T.is_vector(value) and isinstance(value, ir.Constant) and isinstance(
                value.constant, list):
            lanes = [fold.int_value(c if isinstance(c, ir.Constant) else ir.Constant(T.I32, c))
                     for c in value.constant]
            if None not in lanes:
                return ir.Constant(ir.VectorType(T.I64, len(lanes)), lanes)
        return self.builder.sext(value, _like(value, T.I64))

    def _pair(self, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        la, lb = T.lanes_of(a), T.lanes_of(b)
        if la and not lb:
            b = T.splat(self.builder, b, la)
        elif lb and not la:
            a = T.splat(self.builder, a, lb)
        return a, b

    # ------------------------------------------------------------------ leaves
    def _emit_IntImm(self, e):
        if self._index is ADDRESS and e.dtype == "int32":
            return T.const("int64", e.value)
        return T.const(e.dtype, e.value)

    def _emit_FloatImm(self, e):
        return T.const(e.dtype, e.value)

    def _emit_Var(self, e):
        try:
            value = self.vars[e]
            return self._widen(value) if self._index is ADDRESS and e.dtype == "int32" else value
        except KeyError:
            raise CodegenError(f"variable '{e.name}' is used outside the loop that binds it; "
                               "every free variable of a kernel must be a loop variable") from None

    def _emit_BufferLoad(self, e: BufferLoad):
        ptr = self.buffer_ptr(e.buffer)
        mem_ty = T.memory_type(e.buffer.dtype)
        align = dt.itemsize(e.buffer.dtype)
        lanes = self.lanes
        if lanes is None or not self.depends_on_lanes(e.index):
            idx = self.expr(e.index, index=ADDRESS)
            if T.is_vector(idx):
                raise CodegenError(f"internal: vector index for load of {e.buffer.name}")
            return self._from_memory(e.buffer.dtype, self.builder.load(
                self.element_ptr(ptr, mem_ty, idx), typ=mem_ty, align=align))
        if lane_stride(e.index, lanes.var) == 1:
            base = self.expr(_at_lane_base(e.index, lanes.var, lanes.base), index=ADDRESS)
            vty = ir.VectorType(mem_ty, lanes.count)
            if self.lane_mask is not None and e.buffer not in self.unmasked:
                return self._from_memory(e.buffer.dtype, self.masked_access(
                    "load", self.element_ptr(ptr, mem_ty, base), vty, e.buffer.dtype))
            value = self.builder.load(self.element_ptr(ptr, mem_ty, base), typ=vty, align=align)
            return self._from_memory(e.buffer.dtype, value)
        stride = lane_stride(e.index, lanes.var)
        if stride is not None and strided_load_ok(stride):
            return self._from_memory(e.buffer.dtype, self._strided_load(e, stride))
        idx = self.expr(e.index, index=ADDRESS)
        out = ir.Constant(ir.VectorType(mem_ty, lanes.count), ir.Undefined)
        for lane in range(lanes.count):
            i = self.builder.extract_element(idx, ir.Constant(T.I32, lane))
            v = self.builder.load(self.element_ptr(ptr, mem_ty, i), typ=mem_ty, align=align)
            out = self.builder.insert_element(out, v, ir.Constant(T.I32, lane))
        return self._from_memory(e.buffer.dtype, out)

    def _strided_load(self, e: BufferLoad, stride: int) -> ir.Value:
        """The lanes of a load whose index steps by a constant `stride` (|stride| <= 4, not 0
        or 1) as one contiguous read of the elements they span, then a shuffle picking each
        lane's element: a stride-2 depthwise conv or pooling window read its pixels lane by
        lane before (extract the index, scalar load, insert, 16 times per vector).

        No element outside the span [lowest lane's, highest lane's] is read, so a buffer
        ending at the last lane's element is safe: the read is a llvm.masked.load of
        count * |stride| elements with the tail past the span masked off (on AVX-512 one
        masked and |stride| - 1 plain zmm loads, then vpermt2ps; a load of exactly the span,
        an odd vector length, was split into xmm loads and inserts, 14 instructions against 9
        for stride 2 and 27 against 13 for stride 3; on AVX2 15 against 13), or of exactly the
        span where the target has no native masked load of the type. Under a lane mask
        (codegen/masked_tail.py) the element mask holds only the active lanes' elements:
        masked-off lanes touch no memory."""
        lanes = self.lanes
        count, step = lanes.count, abs(stride)
        mem_ty = T.memory_type(e.buffer.dtype)
        first = min(0, (count - 1) * stride)          # the lowest lane's offset from lane 0's
        picks = [k * stride - first for k in range(count)]
        span, width = (count - 1) * step + 1, count * step
        base = self.expr(_at_lane_base(e.index, lanes.var, lanes.base), index=ADDRESS)
        bld = self.builder
        ptr = self.element_ptr(self.buffer_ptr(e.buffer), mem_ty, base)
        if first:
            ptr = bld.gep(ptr, [ir.Constant(T.I64, first)], inbounds=True, source_etype=mem_ty)
        target = getattr(self.mod, "target", None)
        if self.lane_mask is not None and e.buffer not in self.unmasked:
            where = {p: k for k, p in enumerate(picks)}
            mask = bld.shuffle_vector(
                self.lane_mask, ir.Constant(self.lane_mask.type, None),
                ir.Constant(ir.VectorType(T.I32, width), [where.get(j, count)
                                                          for j in range(width)]))
            wide = self.masked_access("load", ptr, ir.VectorType(mem_ty, width),
                                      e.buffer.dtype, mask=mask)
        elif width == span or not _native_masked_load(target, e.buffer.dtype):
            wide = bld.load(ptr, typ=ir.VectorType(mem_ty, span), align=dt.itemsize(
                e.buffer.dtype))
        else:
            mask = ir.Constant(ir.VectorType(T.I1, width), [int(j < span) for j in range(width)])
            wide = self.masked_access("load", ptr, ir.VectorType(mem_ty, width),
                                      e.buffer.dtype, mask=mask)
        return bld.shuffle_vector(wide, ir.Constant(wide.type, ir.Undefined),
                                  ir.Constant(ir.VectorType(T.I32, count), picks))

    def masked_access(self, kind: str, ptr: ir.Value, vty: ir.VectorType, dtype: str,
                      value: ir.Value | None = None, mask: ir.Value | None = None
                      ) -> ir.Value | None:
        """llvm.masked.load (masked-off lanes 0) or llvm.masked.store under `lane_mask`
        (codegen/masked_tail.py), or under `mask` when given (a load's element mask):
        masked-off lanes touch no memory."""
        align = ir.Constant(T.I32, dt.itemsize(dtype))
        mask = self.lane_mask if mask is None else mask
        name = f"v{vty.count}{_mangle(vty.element)}"
        if kind == "load":
            fn = self.mod.declare(f"llvm.masked.load.{name}.p0", vty,
                                  [T.PTR, T.I32, mask.type, vty])
            return self.builder.call(fn, [ptr, align, mask, ir.Constant(vty, None)])
        fn = self.mod.declare(f"llvm.masked.store.{name}.p0", ir.VoidType(),
                              [vty, T.PTR, T.I32, mask.type])
        self.builder.call(fn, [value, ptr, align, opaque_mask(self.builder, mask)])
        return None

    def _emit_GuardedLoad(self, e):
        """A masked contiguous vector load (schedule/passes/uniform_select.py); its safe, clamped
        load wherever it is not a stride-1 access of the vector loop."""
        lanes = self.lanes
        if (lanes is None or lane_stride(e.index, lanes.var) != 1
                or not _native_masked_load(getattr(self.mod, "target", None), e.buffer.dtype)):
            return self._emit(e.safe)
        mask = self._emit(e.mask)
        if not T.is_vector(mask):
            mask = T.splat(self.builder, mask, lanes.count)
        mem_ty = T.memory_type(e.buffer.dtype)
        base = self.expr(_at_lane_base(e.index, lanes.var, lanes.base), index=ADDRESS)
        ptr = self.element_ptr(self.buffer_ptr(e.buffer), mem_ty, base)
        vty = ir.VectorType(mem_ty, lanes.count)
        fn = self.mod.declare(f"llvm.masked.load.v{lanes.count}{_mangle(mem_ty)}.p0", vty,
                              [T.PTR, T.I32, mask.type, vty])
        value = self.builder.call(fn, [ptr, ir.Constant(T.I32, dt.itemsize(e.buffer.dtype)),
                                       mask, ir.Constant(vty, None)])
        return self._from_memory(e.buffer.dtype, value)

    def _from_memory(self, dtype: str, value: ir.Value) -> ir.Value:
        bld = self.builder
        if dtype == "float16":
            return bld.fpext(value, _like(value, ir.FloatType()))
        if dtype == "bfloat16":  # the high half of a float32
            wide = bld.shl(bld.zext(value, _like(value, T.I32)), T.const_like(
                _like(value, T.I32), 16))
            return bld.bitcast(wide, _like(value, ir.FloatType()))
        if dtype != "bool":
            return value
        return bld.icmp_unsigned("!=", value, T.const_like(value.type, 0))

    def to_memory(self, dtype: str, value: ir.Value) -> ir.Value:
        bld = self.builder
        if dtype == "float16":  # fptrunc rounds to nearest-even (F16C vcvtps2ph)
            return bld.fptrunc(value, _like(value, ir.HalfType()))
        if dtype == "bfloat16":
            return self._to_bfloat16(value)
        if dtype != "bool":
            return value
        return bld.zext(value, _like(value, T.I8))

    def _to_bfloat16(self, value: ir.Value) -> ir.Value:
        """float32 -> bfloat16 bits, rounded to nearest-even; NaN stays a (quiet) NaN:
        bits + 0x7fff + ((bits >> 16) & 1), then the high 16 bits."""
        bld = self.builder
        ity = _like(value, T.I32)
        bits = bld.bitcast(value, ity)
        odd = bld.and_(bld.lshr(bits, T.const_like(ity, 16)), T.const_like(ity, 1))
        rounded = bld.add(bld.add(bits, T.const_like(ity, 0x7FFF)), odd)
        quiet = bld.or_(bits, T.const_like(ity, 0x00400000))
        isnan = bld.fcmp_unordered("uno", value, value)
        high = bld.lshr(bld.select(isnan, quiet, rounded), T.const_like(ity, 16))
        return bld.trunc(high, _like(value, T.I16))

    def buffer_ptr(self, buf: Buffer) -> ir.Value:
        try:
            return self.buffers[buf]
        except KeyError:
            raise CodegenError(f"buffer '{buf.name}' is used but is neither a parameter of the "
                               "kernel nor allocated around its use; add it to the params or "
                               "wrap the use in an Allocate") from None

    def element_ptr(self, ptr: ir.Value, mem_ty: ir.Type, idx32: ir.Value) -> ir.Value:
        idx = self.builder.sext(idx32, T.I64) if idx32.type.width < 64 else idx32
        return self.builder.gep(ptr, [idx], inbounds=True, source_etype=mem_ty)

    # ------------------------------------------------------------------ arithmetic
    def round_half(self, dtype: str, value: ir.Value) -> ir.Value:
        """A float16/bfloat16 operation's float32 result rounded to its dtype (nearest-even),
        so a fused kernel gives what the operations give one by one, as numpy's float16 does
        (a float32 +, -, *, / or sqrt rounded to float16 is the correctly rounded result)."""
        if not dt.is_half(dtype):
            return value
        return self._from_memory(dtype, self.to_memory(dtype, value))

    def float_flags(self, dtype: str) -> tuple[str, ...]:
        """The fast-math flags of one float operation. A half dtype's operations drop
        `contract`: each one is rounded to the dtype, and on a CPU with native half arithmetic
        (AVX512-FP16) LLVM would otherwise narrow them to half and fuse a*b+c into one rounding."""
        if not dt.is_half(dtype):
            return self.fm
        return tuple(flag for flag in self.fm if flag != "contract")

    def _binop(self, e, float_op, int_op):
        a, b = self._pair(self._emit(e.a), self._emit(e.b))
        if dt.is_float(e.dtype):
            return self.round_half(e.dtype, getattr(self.builder, float_op)(
                a, b, flags=self.float_flags(e.dtype)))
        if int_op in fold._ARITH and (folded := fold.fold_arith(int_op, a, b)) is not None:
            return folded
        flags = ("nsw",) if self._index and e.dtype in ("int32", "int64") else ()
        return getattr(self.builder, int_op)(a, b, flags=flags)

    def _emit_Add(self, e):
        fused = self._accumulated_dot(e)
        return fused if fused is not None else self._binop(e, "fadd", "add")

    def _accumulated_dot(self, e: E.Add) -> ir.Value | None:
        """`acc + dot4(...)` (either order) as one vpdpbusd accumulating into acc, on a
        target that lowers the dot with VNNI; None elsewhere (the plain add: the AVX2
        lowerings are emitted as before)."""
        if e.dtype != "int32":
            return None
        if isinstance(e.b, E.Call) and e.b.name in ACCUMULATING_INTRINSICS:
            acc_e, call = e.a, e.b
        elif isinstance(e.a, E.Call) and e.a.name in ACCUMULATING_INTRINSICS:
            acc_e, call = e.b, e.a
        else:
            return None
        if not _has_vnni(getattr(self.mod, "target", None)):
            return None
        acc = self._emit(acc_e)
        args = [self._emit(a) for a in call.args]
        if call.name not in MIXED_LANE_INTRINSICS:
            lanes = max(T.lanes_of(v) or 0 for v in (acc, *args))
            if lanes:
                acc, *args = [v if T.lanes_of(v) else T.splat(self.builder, v, lanes)
                              for v in (acc, *args)]
        return emit_dot4(self, call.name, *args, acc=acc)

    def _emit_Sub(self, e):
        return self._binop(e, "fsub", "sub")

    def _emit_Mul(self, e):
        return self._binop(e, "fmul", "mul")

    def _emit_Div(self, e):
        if dt.is_float(e.dtype):
            a, b = self._pair(self._emit(e.a), self._emit(e.b))
            return self.round_half(e.dtype, self.builder.fdiv(a, b, flags=self.float_flags(e.dtype)))
        return self._floor_divmod(e, want_div=True)

    def _emit_FloorDiv(self, e):
        return self._floor_divmod(e, want_div=True)

    def _emit_FloorMod(self, e):
        return self._floor_divmod(e, want_div=False)

    def _floor_divmod(self, e, want_div: bool) -> ir.Value:
        if dt.is_float(e.dtype):
            raise CodegenError(f"{type(e).__name__} on {e.dtype} ({e}); use te.floordiv / "
                               "te.floormod, which lower float operands to floor(a / b)")
        a, b = self._pair(self._emit(e.a), self._emit(e.b))
        bld = self.builder
        folded = fold.fold_divmod(a, b, want_div, dt.is_unsigned(e.dtype))
        if folded is not None:
            return folded
        unsigned = dt.is_unsigned(e.dtype)
        zero, one = T.const_like(a.type, 0), T.const_like(a.type, 1)
        divisor = _known_int(b, unsigned)
        # x86 traps (SIGFPE, the whole process) on a zero divisor and on INT_MIN / -1; a
        # divisor only known at run time takes numpy's answers instead: a // 0 == a % 0 == 0,
        # a // -1 == -a (wrapping). Constant divisors need no guard.
        by_zero = None if divisor is not None and divisor != 0 else bld.icmp_signed("==", b, zero)
        if unsigned or (self.is_nonneg(e.a) and self.is_nonneg(e.b)):
            safe = b if by_zero is None else bld.select(by_zero, one, b)
            out = bld.udiv(a, safe) if want_div else bld.urem(a, safe)
            return out if by_zero is None else bld.select(by_zero, zero, out)
        by_minus_one = (None if divisor is not None and divisor != -1
                        else bld.icmp_signed("==", b, T.const_like(a.type, -1)))
        odd = by_zero if by_minus_one is None else (
            by_minus_one if by_zero is None else bld.or_(by_zero, by_minus_one))
        safe = b if odd is None else bld.select(odd, one, b)
        q, r = bld.sdiv(a, safe), bld.srem(a, safe)
        if by_minus_one is not None:
            q = bld.select(by_minus_one, bld.sub(zero, a), q)
        if by_zero is not None:
            q = bld.select(by_zero, zero, q)
        nonzero = bld.icmp_signed("!=", r, zero)
        signs_differ = bld.icmp_signed("<", bld.xor(r, b), zero)
        fix = bld.and_(nonzero, signs_differ)
        if want_div:
            return bld.select(fix, bld.sub(q, one), q)
        return bld.select(fix, bld.add(r, b), r)

    def is_nonneg(self, e: E.Expr) -> bool:
        """A conservative proof that integer `e` is >= 0 (enables the unsigned fast path)."""
        if isinstance(e, E.IntImm):
            return e.value >= 0
        if isinstance(e, E.Var):
            return e in self.nonneg
        if isinstance(e, (E.Add, E.Mul, E.FloorDiv, E.Min)):
            return self.is_nonneg(e.a) and self.is_nonneg(e.b)
        if isinstance(e, E.FloorMod):
            return isinstance(e.b, E.IntImm) and e.b.value > 0
        if isinstance(e, E.Max):
            return self.is_nonneg(e.a) or self.is_nonneg(e.b)
        return False

    def _minmax(self, e, pick_smaller: bool):
        a, b = self._pair(self._emit(e.a), self._emit(e.b))
        if not dt.is_float(e.dtype):
            folded = fold.fold_minmax(a, b, pick_smaller, dt.is_unsigned(e.dtype))
            if folded is not None:
                return folded
        if dt.is_float(e.dtype):
            less = self.builder.fcmp_ordered("<", a, b, flags=self.fm)
        elif dt.is_unsigned(e.dtype):
            less = self.builder.icmp_unsigned("<", a, b)
        else:
            less = self.builder.icmp_signed("<", a, b)
        return self.builder.select(less, a, b) if pick_smaller else self.builder.select(
            less, b, a)

    def _emit_Min(self, e):
        return self._minmax(e, True)

    def _emit_Max(self, e):
        return self._minmax(e, False)

    # ------------------------------------------------------------------ logic
    def _compare(self, e):
        a, b = self._pair(self._emit(e.a), self._emit(e.b))
        op, src = _FCMP[type(e)], e.a.dtype
        if dt.is_float(src):
            if op == "!=":  # numpy: nan != x is true
                return self.builder.fcmp_unordered(op, a, b, flags=self.fm)
            return self.builder.fcmp_ordered(op, a, b, flags=self.fm)
        folded = fold.fold_compare(op, a, b, dt.is_unsigned(src))
        if folded is not None:
            return folded
        if dt.is_unsigned(src):
            return self.builder.icmp_unsigned(op, a, b)
        return self.builder.icmp_signed(op, a, b)

    _emit_LT = _emit_LE = _emit_EQ = _emit_NE = _compare

    def _emit_And(self, e):
        a = self._emit(e.a)
        known = fold.int_value(a)
        if known is not None:   # false && b -> false; true && b -> b (b is pure)
            return self._emit(e.b) if known else a
        return self.builder.and_(*self._pair(a, self._emit(e.b)))

    def _emit_Or(self, e):
        a = self._emit(e.a)
        known = fold.int_value(a)
        if known is not None:   # true || b -> true; false || b -> b
            return a if known else self._emit(e.b)
        return self.builder.or_(*self._pair(a, self._emit(e.b)))

    def _emit_Not(self, e):
        a = self._emit(e.a)
        known = fold.int_value(a)
        if known is not None and a.type.width == 1:
            return fold.bool_const(not known)
        return self.builder.xor(a, T.const_like(a.type, 1))

    def _emit_Select(self, e):
        cond = self._emit(e.cond)
        known = fold.int_value(cond)
        if known is not None:   # a constant condition: only the chosen branch is emitted
            return self._emit(e.t if known else e.f)
        t, f = self._emit(e.t), self._emit(e.f)
        t, f = self._pair(t, f)
        if T.is_vector(cond) and not T.is_vector(t):
            t, f = T.splat(self.builder, t, cond.type.count), T.splat(
                self.builder, f, cond.type.count)
        elif T.is_vector(t) and not T.is_vector(cond):
            pass  # a scalar i1 may select between whole vectors
        return self.builder.select(cond, t, f)

    # ------------------------------------------------------------------ casts and calls
    def _emit_Cast(self, e):
        return self.cast(self._emit(e.value), e.value.dtype, e.dtype)

    def cast(self, v: ir.Value, src: str, dst: str) -> ir.Value:
        bld, lanes = self.builder, T.lanes_of(v)
        dst_ty = T.value_type(dst, lanes)
        if src == dst:
            return v
        if dst == "bool":
            zero = T.const_like(v.type, 0)
            if dt.is_float(src):
                return bld.fcmp_unordered("!=", v, zero)
            return bld.icmp_unsigned("!=", v, zero)
        if dt.is_half(dst):  # compute in float32, then round to what the dtype can hold
            return self._from_memory(dst, self.to_memory(dst, self.cast(v, src, "float32")))
        if dt.is_float(src) and dt.is_float(dst):
            if v.type == dst_ty:   # a half dtype held as float32
                return v
            return bld.fpext(v, dst_ty) if dt.bits(dst) > dt.bits(src) else bld.fptrunc(v, dst_ty)
        if dt.is_float(src):
            if dt.is_unsigned(dst) and dt.bits(dst) >= 32:
                return bld.fptoui(v, dst_ty)
            if dt.bits(dst) >= 32:
                return bld.fptosi(v, dst_ty)
            # narrow ints wrap like numpy on x86: convert through int32 then truncate
            return bld.trunc(bld.fptosi(v, T.value_type("int32", lanes)), dst_ty)
        if dt.is_float(dst):
            return bld.uitofp(v, dst_ty) if dt.is_unsigned(src) else bld.sitofp(v, dst_ty)
        sb, db = dt.bits(src), dt.bits(dst)
        if db < sb:
            return bld.trunc(v, dst_ty)
        if db == sb:
            return v
        return bld.zext(v, dst_ty) if dt.is_unsigned(src) else bld.sext(v, dst_ty)

    def _emit_Call(self, e: E.Call):
        if e.name == "lookup8":       # its 256 immediates become constant vectors, not lanes
            return emit_lookup8(self, e, self._emit(e.args[0]))
        args = [self._emit(a) for a in e.args]
        if e.name in MIXED_LANE_INTRINSICS:      # its lowering sees which args are invariant
            return emit_call(self, e, args)
        if len(args) == 2:
            args = list(self._pair(*args))
        elif len(args) > 2 and any(T.lanes_of(a) for a in args):   # splat scalars to the vectors
            lanes = max(T.lanes_of(a) or 0 for a in args)
            args = [a if T.lanes_of(a) else T.splat(self.builder, a, lanes) for a in args]
        return self.round_half(e.dtype, emit_call(self, e, args))


@functools.lru_cache(maxsize=None)
def _has_vnni(target) -> bool:
    return any(how == "vnni" for _, how in dot4_strategies(target_features(target)))


def opaque_mask(builder: ir.IRBuilder, mask: ir.Value) -> ir.Value:
    """`mask` passed through an empty inline asm, so LLVM cannot see which lanes it holds.

    LLVM 22's X86 backend (llvm/llvm-project#179489, fixed after 22.1.0) rewrites a masked
    store whose mask is a constant with one true lane into a scalar store of the element
    *before* truncation: `masked.store(trunc <8 x i32> to <8 x i8>, mask <0,0,1,0,...>)`
    stores 4 bytes, 3 of them past the lane (or past the buffer's end, corrupting the heap
    when a uint8 quantize's tail had one valid lane). A tail's mask becomes such a constant
    once a guard over unrolled loops folds, so every masked store takes an opaque mask: it
    costs two mask moves; the one-lane rewrite needs a constant and never fires.
    Masked loads keep theirs (their one-lane rewrite is correct, and pays)."""
    count = mask.type.count
    bits = ir.IntType(count)
    word = ir.IntType(32 if count <= 32 else 64)
    packed = builder.zext(builder.bitcast(mask, bits), word)
    asm = ir.InlineAsm(ir.FunctionType(word, [word]), "", "=r,0", side_effect=False)
    hidden = builder.call(asm, [packed], attrs=("nounwind", "readnone"))
    return builder.bitcast(builder.trunc(hidden, bits), mask.type)


STRIDED_MAX = 4   # the widest lane stride loaded as one span (|stride| vectors + shuffles)


def strided_load_ok(stride: int) -> bool:
    """Whether a load with this constant lane stride is one contiguous read of its span plus
    a shuffle (ExprEmitter._strided_load), not a per-lane gather: a reversed contiguous load
    (-1) or |stride| 2..STRIDED_MAX."""
    return stride == -1 or 2 <= abs(stride) <= STRIDED_MAX


@functools.lru_cache(maxsize=None)
def _native_masked_load(target, dtype: str) -> bool:
    """Whether `target` has a masked vector load of `dtype`'s elements (AVX/AVX2 vmaskmov:
    32 and 64 bits; AVX-512BW: 8 and 16 too). Elsewhere LLVM expands one into a branch per
    lane, slower than the clamped per-lane reads it replaces."""
    feats = target_features(target)
    if dt.itemsize(dtype) >= 4:
        return bool(feats & {"avx", "avx2", "avx512f"})
    return "avx512bw" in feats


def _mangle(ty: ir.Type) -> str:
    """LLVM's intrinsic-name spelling of a scalar memory type: f32, f64, f16, i8, ..."""
    names = {ir.FloatType: "f32", ir.DoubleType: "f64", ir.HalfType: "f16"}
    for cls, name in names.items():
        if isinstance(ty, cls):
            return name
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise CodegenError(f"internal: no intrinsic name for element type {ty}")


def _like(value: ir.Value, element: ir.Type) -> ir.Type:
    """`element`, as a vector with the lanes of `value` when it is a vector."""
    return ir.VectorType(element, value.type.count) if T.is_vector(value) else element


def _known_int(v: ir.Value, unsigned: bool) -> int | None:
    """The value of an integer constant, scalar or the same in every vector lane, else None."""
    if isinstance(v, ir.Constant) and isinstance(v.type, ir.VectorType):
        lanes = v.constant if isinstance(v.constant, (list, tuple)) else None
        values = {fold.int_value(c, unsigned) for c in lanes} if lanes else {None}
        return values.pop() if len(values) == 1 else None
    return fold.int_value(v, unsigned)
