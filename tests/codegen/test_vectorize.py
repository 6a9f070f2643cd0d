import numpy as np
import pytest

from .cg_util import buf, elementwise, load, loop, rand
from kiln.codegen import Target, build
from kiln.schedule.ir import ForKind, IfThenElse, PrimFunc, Store, seq
from kiln.te import expr as E

RNG = np.random.default_rng(0)


@pytest.mark.parametrize("n", [1, 7, 17, 64, 1000])
@pytest.mark.parametrize("lanes", [8, 16])
def test_vector_add_mul_with_tail_guard(n, lanes):
    A, B, C = buf("A", "float32", [n]), buf("B", "float32", [n]), buf("C", "float32", [n])
    f = elementwise("axpy", n, [A, B], C, lambda a, b: a * 2.5 + b, lanes=lanes)
    k = build(f)
    a, b, c = rand(n, "float32", RNG), rand(n, "float32", RNG), np.zeros(n, np.float32)
    k(a, b, c)
    # FMA contraction (the default) rounds once: compare with a tolerance, not bit-exactly
    np.testing.assert_allclose(c, a * np.float32(2.5) + b, rtol=1e-5, atol=1e-6)


def test_vectorized_asm_uses_vector_registers():
    n = 64
    A, C = buf("A", "float32", [n]), buf("C", "float32", [n])
    width = Target.native().vector_bits
    k = build(elementwise("scale", n, [A], C, lambda a: a * 3.0 + 1.0, lanes=width // 32),
              fastmath=False)
    asm = k.asm()
    assert ("%zmm" in asm) if width == 512 else ("%ymm" in asm)
    assert "vfmadd" not in asm  # strict IEEE: no contraction
    assert "<8 x float>" in k.llvm_ir() or "<16 x float>" in k.llvm_ir()


def test_fastmath_contracts_to_fma():
    n = 64
    A, C = buf("A", "float32", [n]), buf("C", "float32", [n])
    k = build(elementwise("scale", n, [A], C, lambda a: a * 3.0 + 1.0), fastmath=True)
    assert "fast" in k.llvm_ir()
    a, c = rand(n, "float32", RNG), np.zeros(n, np.float32)
    k(a, c)
    np.testing.assert_allclose(c, a * 3 + 1, rtol=1e-6)


def test_broadcast_gather_and_scatter_loads():
    # out[i, j] = A[j*2] (stride-2 gather) + B[i] (lane-invariant splat), scattered by 3
    rows, cols = 5, 8
    A, B = buf("A", "float32", [2 * cols]), buf("B", "float32", [rows])
    C = buf("C", "float32", [rows * cols * 3])
    i, j = E.var("i"), E.var("j")
    body = Store(C, (i * cols + j) * 3, load(A, j * 2) + load(B, i))
    f = PrimFunc("gs", (A, B, C), loop(i, rows, loop(j, cols, body, ForKind.VECTORIZED)))
    k = build(f)
    a, b = rand(2 * cols, "float32", RNG), rand(rows, "float32", RNG)
    c = np.zeros(rows * cols * 3, np.float32)
    k(a, b, c)
    expected = np.zeros_like(c)
    expected[::3] = (a[::2][None, :] + b[:, None]).ravel()
    np.testing.assert_array_equal(c, expected)


def test_nonlinear_index_gather():
    n = 24
    A, C = buf("A", "int32", [n]), buf("C", "int32", [n])
    i = E.var("i")
    f = PrimFunc("rev", (A, C), loop(i, n, Store(C, i, load(A, E.floormod(i * 5, n))),
                                     ForKind.VECTORIZED))
    a, c = np.arange(n, dtype=np.int32) * 7, np.zeros(n, np.int32)
    build(f)(a, c)
    np.testing.assert_array_equal(c, a[(np.arange(n) * 5) % n])


def test_lane_invariant_store_falls_back_to_serial():
    # s[0] = s[0] + A[i] over a "vectorized" i must accumulate every lane in order
    n = 8
    A, S = buf("A", "float32", [n]), buf("S", "float32", [1])
    i = E.var("i")
    f = PrimFunc("acc", (A, S), loop(i, n, Store(S, E.const(0), load(S, 0) + load(A, i)),
                                     ForKind.VECTORIZED))
    a, s = np.arange(n, dtype=np.float32), np.ones(1, np.float32)
    build(f)(a, s)
    assert s[0] == 1 + a.sum()


def test_if_else_with_lane_condition_and_vector_else():
    # C[i] = i < 5 ? A[i] : -A[i], written as IfThenElse with else branch inside vector lanes
    n = 32
    A, C = buf("A", "float32", [n]), buf("C", "float32", [n])
    io, ii = E.var("io"), E.var("ii")
    idx = io * 8 + ii
    stmt = IfThenElse(idx < 5, Store(C, idx, load(A, idx)), Store(C, idx, -load(A, idx)))
    f = PrimFunc("ite", (A, C), loop(io, 4, loop(ii, 8, stmt, ForKind.VECTORIZED)))
    a, c = rand(n, "float32", RNG), np.zeros(n, np.float32)
    build(f)(a, c)
    np.testing.assert_array_equal(c, np.where(np.arange(n) < 5, a, -a))


def test_vectorized_loop_with_inner_loop_and_nonconstant_min():
    # a vectorized loop whose body holds a loop is emitted serially; min depends on outer var
    rows, cols, red = 3, 6, 4
    A, C = buf("A", "float32", [rows, cols + red]), buf("C", "float32", [rows, cols + 2])
    i, j, r = E.var("i"), E.var("j"), E.var("r")
    out = i * (cols + 2) + j
    acc = Store(C, out, load(C, out) + load(A, i * (cols + red) + j - 2 + r))
    body = loop(i, rows, loop(j, cols, loop(r, red, acc), ForKind.VECTORIZED, start=2))
    f = PrimFunc("win", (A, C), body)
    a = rand((rows, cols + red), "float32", RNG)
    c = np.zeros((rows, cols + 2), np.float32)
    build(f)(a, c)
    expected = np.zeros_like(c)
    for jj in range(2, cols + 2):
        expected[:, jj] = a[:, jj - 2: jj - 2 + red].sum(axis=1)
    np.testing.assert_allclose(c, expected, rtol=1e-5)


def test_sequence_of_stores_in_vector_body_reads_earlier_store():
    n = 16
    A, T, C = buf("A", "float32", [n]), buf("T", "float32", [n]), buf("C", "float32", [n])
    i = E.var("i")
    body = seq(Store(T, i, load(A, i) + 1.0), Store(C, i, load(T, i) * 2.0))
    f = PrimFunc("two", (A, T, C), loop(i, n, body, ForKind.VECTORIZED))
    a, t, c = rand(n, "float32", RNG), np.zeros(n, np.float32), np.zeros(n, np.float32)
    build(f)(a, t, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_default_build_contracts_multiply_add_to_fma():
    n = 64
    A, C = buf("A", "float32", [n]), buf("C", "float32", [n])
    k = build(elementwise("scale", n, [A], C, lambda a: a * 3.0 + 1.0))
    assert "vfmadd" in k.asm() and " fast " not in k.llvm_ir()
