"""Emission-time folding and sharing (codegen/fold.py, ExprEmitter's shared values) and i64
element offsets: the folds follow LLVM's integer semantics, kernels that depend on them
match numpy, and the emitted IR is smaller for it."""
import llvmlite.ir as ir
import numpy as np
import pytest

from .cg_util import buf, load, loop, rand
from kiln.codegen import Target, build, emit_expr, fold
from kiln.codegen.emit_module import emit_module
from kiln.schedule.ir import For, ForKind, IfThenElse, PrimFunc, Store, seq
from kiln.te import expr as E

RNG = np.random.default_rng(11)
I32 = ir.IntType(32)


def c32(v):
    return ir.Constant(I32, v)


@pytest.mark.parametrize("a,b", [(7, 2), (-7, 2), (7, -2), (-7, -2), (0, 5), (-1, 3)])
def test_divmod_folds_round_toward_negative_infinity(a, b):
    assert fold.int_value(fold.fold_divmod(c32(a), c32(b), True, False)) == a // b
    assert fold.int_value(fold.fold_divmod(c32(a), c32(b), False, False)) == a % b


def test_division_by_zero_is_not_folded():
    assert fold.fold_divmod(c32(3), c32(0), True, False) is None


def test_arithmetic_wraps_at_the_type_width():
    big = c32(2**31 - 1)
    assert fold.int_value(fold.fold_arith("add", big, c32(1))) == -2**31
    assert fold.int_value(fold.fold_arith("mul", c32(65536), c32(65536))) == 0
    # unsigned reading of the same bits (T.const stores masked values)
    assert fold.int_value(c32(4294967295)) == -1
    assert fold.int_value(c32(4294967295), unsigned=True) == 4294967295


def test_identities_return_the_other_operand():
    x = ir.Argument(ir.Function(ir.Module(), ir.FunctionType(I32, [I32]), "f"), I32)
    assert fold.fold_arith("add", x, c32(0)) is x
    assert fold.fold_arith("mul", c32(1), x) is x
    assert fold.int_value(fold.fold_arith("mul", x, c32(0))) == 0
    assert fold.fold_arith("sub", c32(0), x) is None     # 0 - x is not x


def test_compare_and_minmax_fold_signed_and_unsigned():
    assert fold.int_value(fold.fold_compare("<", c32(-1), c32(0), False)) == 1
    assert fold.int_value(fold.fold_compare("<", c32(-1), c32(0), True)) == 0
    assert fold.int_value(fold.fold_minmax(c32(-3), c32(2), True, False)) == -3
    assert fold.int_value(fold.fold_minmax(c32(-3), c32(2), False, False)) == 2


def _select_chain_kernel(n: int = 13):
    """out[e, p] = a select chain over the unrolled e picking a combination of A's reads
    (Winograd-like), with p split by 4 so its tail is guarded: every select folds per
    unrolled copy; A's reads are shared between copies."""
    A, C = buf("A", "float32", [n + 2]), buf("C", "float32", [3 * n])
    e, po, pi = E.var("e"), E.var("po"), E.var("pi")
    p = po * 4 + pi
    r0, r1, r2 = (load(A, p + k) for k in range(3))
    inner = r0 - r2
    value = E.select(e.eq(0), inner * 2.0, E.select(e.eq(1), inner + r1, r1 * r1 - inner))
    body = IfThenElse(p < n, Store(C, e * n + p, value))
    nest = loop(po, (n + 3) // 4, loop(e, 3, loop(pi, 4, body, ForKind.VECTORIZED),
                                      ForKind.UNROLLED))
    return PrimFunc("select_chain", (A, C), nest)


def _select_chain_reference(a, n):
    p = np.arange(n)
    r0, r1, r2 = a[p], a[p + 1], a[p + 2]
    inner = r0 - r2
    return np.concatenate([inner * np.float32(2), inner + r1, r1 * r1 - inner])


def test_unrolled_select_chain_matches_numpy_and_emits_one_branch_per_copy():
    n = 13
    func = _select_chain_kernel(n)
    a = rand((n + 2,), "float32", RNG)
    c = np.zeros(3 * n, np.float32)
    build(func)(a, c)
    # (r1 * r1 - inner may contract to an FMA)
    np.testing.assert_allclose(c, _select_chain_reference(a, n), rtol=1e-6, atol=1e-5)
    text = str(emit_module(func, Target.native(), ("contract",), parallel="serial"))
    body = text.split("__pyentry")[0]
    assert "icmp eq i32" not in body    # e == k folded in every unrolled copy
    assert " select " not in body       # only the chosen branch is emitted


def test_read_only_loads_are_shared_and_written_buffers_are_not():
    """B is written between two reads of it: the second read must see the store."""
    A, B, C = buf("A", "float32", [8]), buf("B", "float32", [8]), buf("C", "float32", [8])
    i = E.var("i")
    body = seq(Store(B, i, load(A, i) + load(B, i)),
               Store(C, i, load(B, i) * load(A, i)))
    func = PrimFunc("rw", (A, B, C), loop(i, 8, body))
    a, b = rand((8,), "float32", RNG), rand((8,), "float32", RNG)
    b2, c = b.copy(), np.zeros(8, np.float32)
    build(func)(a, b2, c)
    np.testing.assert_array_equal(b2, a + b)
    np.testing.assert_array_equal(c, (a + b) * a)
    text = str(emit_module(func, Target.native(), ("contract",), parallel="serial"))
    kernel = text.split("__pyentry")[0]
    assert kernel.count("load float") == 3    # A once (shared), B twice (written between)


def test_value_from_a_guarded_branch_is_not_reused_after_it():
    """i*3 first appears inside a guard; the store after the guard recomputes it (a value
    defined in a branch does not dominate what follows; LLVM's verifier would reject it)."""
    A, C = buf("A", "float32", [30]), buf("C", "float32", [20])
    i = E.var("i")
    body = seq(IfThenElse(i < 5, Store(C, i, load(A, i * 3))),
               Store(C, i + 10, load(A, i * 3 + 1)))
    func = PrimFunc("guarded", (A, C), loop(i, 10, body))
    a, c = rand((30,), "float32", RNG), np.zeros(20, np.float32)
    build(func)(a, c)
    want = np.zeros(20, np.float32)
    want[:5] = a[np.arange(5) * 3]
    want[10:] = a[np.arange(10) * 3 + 1]
    np.testing.assert_array_equal(c, want)


@pytest.mark.parametrize("wide", [False, True])
def test_gather_with_int32_index_loaded_from_memory(wide, monkeypatch):
    """An index read from an int32 buffer inside an address (widened to i64 when
    WIDE_ADDRESSES is on), per lane, with constant terms folded."""
    monkeypatch.setattr(emit_expr, "WIDE_ADDRESSES", wide)
    X, I, C = buf("X", "float32", [16]), buf("I", "int32", [8]), buf("C", "float32", [8])
    i = E.var("i")
    body = Store(C, i, load(X, load(I, i) + 4 - 2 * E.const(2)))
    func = PrimFunc("gather", (X, I, C), loop(i, 8, body, ForKind.VECTORIZED))
    x = rand((16,), "float32", RNG)
    idx = np.array([3, 0, 15, 7, 7, 1, 9, 2], np.int32)
    c = np.zeros(8, np.float32)
    build(func)(x, idx, c)
    np.testing.assert_array_equal(c, x[idx])


def _unrolled_around_lanes(n_rows: int, lanes: int):
    """out[r, l] = (a[l] * 3 + b[l]) * (r + 1) over unrolled rows r, vector lanes l: the
    lane-dependent sum a*3 + b is the same in every unrolled row."""
    A, B, C = (buf(x, "float32", [n_rows * lanes]) for x in "ABC")
    r, v = E.var("r"), E.var("v")
    store = Store(C, r * lanes + v, (load(A, v) * 3.0 + load(B, v)) * E.cast(r + 1, "float32"))
    inner = For(v, E.const(0), E.const(lanes), ForKind.VECTORIZED, store)
    return PrimFunc("rows", (A, B, C), loop(r, n_rows, inner, ForKind.UNROLLED))


@pytest.mark.parametrize("rows, lanes", [(1, 8), (3, 8), (5, 16), (7, 4)])
def test_lane_values_are_shared_between_unrolled_copies(rows, lanes):
    """The vector loop's lanes are the same ramp in every unrolled row: its loads and the
    sum built from them are emitted once, and the kernel still matches numpy."""
    func = _unrolled_around_lanes(rows, lanes)
    a, b = rand((rows * lanes,), "float32", RNG), rand((rows * lanes,), "float32", RNG)
    c = np.zeros(rows * lanes, np.float32)
    build(func)(a, b, c)
    av, bv = a[:lanes], b[:lanes]
    want = np.concatenate([(av * np.float32(3) + bv) * np.float32(r + 1) for r in range(rows)])
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-5)
    text = str(emit_module(func, Target.native(), ("contract",), parallel="serial"))
    kernel = text.split("__pyentry")[0]
    assert kernel.count(f"load <{lanes} x float>") == 2     # a and b once, not per row


@pytest.mark.parametrize("rows, lanes", [(3, 8), (4, 16)])
def test_lane_values_are_not_shared_when_the_ramp_depends_on_the_row(rows, lanes):
    """A vector loop starting at r * lanes reads other elements in every row: nothing
    lane-dependent may be reused between the rows."""
    n = rows * lanes
    A, B, C = (buf(x, "float32", [n]) for x in "ABC")
    r, v = E.var("r"), E.var("v")
    store = Store(C, v, (load(A, v) * 3.0 + load(B, v)) * E.cast(r + 1, "float32"))
    inner = For(v, r * lanes, E.const(lanes), ForKind.VECTORIZED, store)
    func = PrimFunc("rows_shifted", (A, B, C), loop(r, rows, inner, ForKind.UNROLLED))
    a, b = rand((n,), "float32", RNG), rand((n,), "float32", RNG)
    c = np.zeros(n, np.float32)
    build(func)(a, b, c)
    scale = np.repeat(np.arange(1, rows + 1, dtype=np.float32), lanes)
    np.testing.assert_allclose(c, (a * np.float32(3) + b) * scale, rtol=1e-6, atol=1e-5)


def test_lane_values_are_not_shared_between_vector_loops_of_other_widths():
    """Two vector loops over the same variable with different widths (a tile and its tail)
    after an unrolled copy of each: values of one width never stand in for the other."""
    A, C = buf("A", "float32", [24]), buf("C", "float32", [48])
    r, v = E.var("r"), E.var("v")
    wide = For(v, E.const(0), E.const(16), ForKind.VECTORIZED,
               Store(C, r * 24 + v, load(A, v) * 2.0 + 1.0))
    tail = For(v, E.const(16), E.const(8), ForKind.VECTORIZED,
               Store(C, r * 24 + v, load(A, v) * 2.0 + 1.0))
    func = PrimFunc("tiles", (A, C), loop(r, 2, seq(wide, tail), ForKind.UNROLLED))
    a, c = rand((24,), "float32", RNG), np.zeros(48, np.float32)
    build(func)(a, c)
    want = np.tile(a * np.float32(2) + np.float32(1), 2)
    np.testing.assert_allclose(c, want, rtol=1e-6, atol=1e-6)
