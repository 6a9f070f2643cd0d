"""Emission-time folding and sharing (codegen/fold.py, ExprEmitter's shared values) and i64
element offsets: the folds follow LLVM's integer semantics, kernels that depend on them
match numpy, and the emitted IR is smaller for it."""
import llvmlite.ir as ir
import numpy as np
import pytest

from .cg_util import buf, load, loop, rand
from kiln.codegen import Target, build, emit_expr, fold
from kiln.codegen.emit_module import emit_module
from kiln.schedule.ir import ForKind, IfThenElse, PrimFunc, Store, seq
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
