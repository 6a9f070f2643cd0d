"""LLVM loop metadata: which loops LLVM must not unroll, to cut compile time where
unrolling buys no speed.

A conv or GEMM kernel zeroes its accumulator tile, accumulates into it over the reduction,
then copies it out (with the fused epilogue). Kiln's loop IR arrives with its register tile
unrolled and vectorised; LLVM still fully unrolls every small constant-trip nest around it:
the zeroing and the copy-out (a conv's 4x8x4 zero-fill became ~60 basic blocks of guarded
stores), and the kernel-tap loops around the input-channel loop (a 3x3 conv's tail tile, 9
copies of a 96-line body), and every later pass and the machine-code step pay for the copies.

Two rules, on the loop IR after tail splitting (as codegen emits it):
- cold siblings: in a statement sequence, a child with no accumulation (no store that reads
  the buffer it writes) whose sibling with an accumulation runs at least COLD_RATIO times as
  many loop iterations runs once per tile: every loop in it is hinted. A kernel with no
  accumulation (injective, layout) gets nothing from this rule, nor does a softmax's
  normalisation (as many iterations as its reductions).
- outer loops of an accumulation: a serial loop of at most MAX_OUTER_EXTENT iterations with
  an accumulation and another serial loop inside is hinted; the innermost serial loops stay
  LLVM's to unroll (where it pays).
Hinted loops get `llvm.loop.unroll.disable`. Semantics are unchanged: the metadata only stops
LLVM's unrollers. ResNet-50's kernels: LLVM CPU -40%, kernel speed within noise
(benchmarks/RESULTS.md, 2026-11-26 05:45 UTC).

KILN_LOOP_HINTS=0 turns the metadata off, =cold keeps the first rule only (for A/B
measurements); the metadata is part of the emitted IR, hence of the kernel cache key.
"""
from __future__ import annotations


import llvmlite.ir as ir

from ..schedule.ir import Allocate, BufferLoad, For, ForKind, IfThenElse, SeqStmt, Stmt, Store
from ..te import expr as E
from ..te.visit import walk
from .runtime_config import loop_hints_setting

COLD_RATIO = 16        # a 3x3 depthwise conv's copy-out (1/11 of its steps) stays hot
UNKNOWN_EXTENT = 64     # a loop of symbolic extent counts as this many iterations
MAX_OUTER_EXTENT = 16   # LLVM fully unrolls small loops only: longer ones are left alone
_LOOP_ID = "_kiln_unroll_disable"


def mode() -> str:
    """"all" (default), "cold" (the cold-sibling rule only) or "off" (KILN_LOOP_HINTS)."""
    value = loop_hints_setting()
    return {"0": "off", "off": "off", "cold": "cold"}.get(value, "all")


def has_update(stmt: Stmt, memo: dict) -> bool:
    """Whether a store under `stmt` reads the buffer it writes (an accumulation)."""
    key = id(stmt)
    if key in memo:
        return memo[key]
    if isinstance(stmt, Store):
        found = any(isinstance(n, BufferLoad) and n.buffer == stmt.buffer
                    for n in walk(stmt.value))
    elif isinstance(stmt, SeqStmt):
        found = any(has_update(x, memo) for x in stmt.stmts)
    elif isinstance(stmt, (For, Allocate)):
        found = has_update(stmt.body, memo)
    elif isinstance(stmt, IfThenElse):
        found = has_update(stmt.then_case, memo) or (
            stmt.else_case is not None and has_update(stmt.else_case, memo))
    else:
        found = False
    memo[key] = found
    return found


def iterations(stmt: Stmt) -> int:
    """Steps `stmt` runs: loop iterations (unrolled copies included, a vectorised loop's
    lanes one step), a branch its larger side, a symbolic extent UNKNOWN_EXTENT."""
    if isinstance(stmt, For):
        if stmt.kind is ForKind.VECTORIZED:
            return iterations(stmt.body)
        n = stmt.extent.value if isinstance(stmt.extent, E.IntImm) else UNKNOWN_EXTENT
        return max(1, n) * iterations(stmt.body)
    if isinstance(stmt, SeqStmt):
        return sum(iterations(x) for x in stmt.stmts) or 1
    if isinstance(stmt, Allocate):
        return iterations(stmt.body)
    if isinstance(stmt, IfThenElse):
        return max(iterations(stmt.then_case),
                   iterations(stmt.else_case) if stmt.else_case is not None else 1)
    return 1


def _loops(stmt: Stmt, out: set) -> None:
    if isinstance(stmt, For):
        out.add(stmt)
        _loops(stmt.body, out)
    elif isinstance(stmt, SeqStmt):
        for x in stmt.stmts:
            _loops(x, out)
    elif isinstance(stmt, Allocate):
        _loops(stmt.body, out)
    elif isinstance(stmt, IfThenElse):
        _loops(stmt.then_case, out)
        if stmt.else_case is not None:
            _loops(stmt.else_case, out)


def cold_loops(body: Stmt) -> frozenset:
    """The loops of `body` that get `llvm.loop.unroll.disable` (see the module docstring)."""
    which = mode()
    if which == "off":
        return frozenset()
    memo: dict = {}
    out: set = set()

    def visit(st: Stmt) -> None:
        if isinstance(st, SeqStmt):
            hot = [iterations(x) for x in st.stmts if has_update(x, memo)]
            most = max(hot, default=0)
            for x in st.stmts:
                if most and not has_update(x, memo) and most >= COLD_RATIO * iterations(x):
                    _loops(x, out)
                else:
                    visit(x)
        elif isinstance(st, (For, Allocate)):
            visit(st.body)
        elif isinstance(st, IfThenElse):
            visit(st.then_case)
            if st.else_case is not None:
                visit(st.else_case)

    visit(body)
    if which == "all":
        out |= outer_loops(body, memo)
    return frozenset(out)


def outer_loops(body: Stmt, memo: dict | None = None) -> set:
    """The serial loops of `body` of at most MAX_OUTER_EXTENT iterations with an
    accumulation and another serial loop inside."""
    memo = {} if memo is None else memo
    found: set = set()

    def visit(st: Stmt) -> bool:
        """Whether `st` holds a serial loop (and collect on the way)."""
        if isinstance(st, For):
            inner = visit(st.body)
            small = isinstance(st.extent, E.IntImm) and st.extent.value <= MAX_OUTER_EXTENT
            if st.kind is ForKind.SERIAL and small and inner and has_update(st.body, memo):
                found.add(st)
            return inner or st.kind is ForKind.SERIAL
        if isinstance(st, SeqStmt):
            return any([visit(x) for x in st.stmts])
        if isinstance(st, Allocate):
            return visit(st.body)
        if isinstance(st, IfThenElse):
            a = visit(st.then_case)
            return (visit(st.else_case) if st.else_case is not None else False) or a
        return False

    visit(body)
    return found


def unroll_disable(ctx):
    """The module's `!{!self, !{"llvm.loop.unroll.disable"}}` loop id (one per module);
    `ctx` is a codegen ModuleContext or an llvmlite module."""
    mod = getattr(ctx, "module", ctx)
    md = getattr(mod, _LOOP_ID, None)
    if md is None:
        hint = mod.add_metadata([ir.MetaDataString(mod, "llvm.loop.unroll.disable")])
        md = mod.add_metadata([hint])
        md.operands = (md, *md.operands)   # a loop id's first operand is itself
        setattr(mod, _LOOP_ID, md)
    return md


def metadata_for(ctx, loop: For):
    """The `llvm.loop` metadata of serial loop `loop` in module context `ctx`, or None."""
    cold = getattr(ctx, "cold_loops", None)
    if not cold or loop not in cold:
        return None
    return unroll_disable(ctx)
