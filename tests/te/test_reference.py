"""The numpy interpreter of TE DAGs (te/reference.py), checked against plain numpy."""
import numpy as np
import pytest

from kiln import te
from kiln.te.errors import TEError
from kiln.te.reference import evaluate


def _matmul(m, n, k, dtype="float32"):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    r = te.reduce_axis(k, "k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 13, 5), (33, 1, 17), (64, 48, 31)])
def test_matmul(m, n, k, rng):
    A, B, C = _matmul(m, n, k)
    a = rng.standard_normal((m, k)).astype("float32")
    b = rng.standard_normal((k, n)).astype("float32")
    c, = evaluate(C, {A: a, B: b})
    assert c.dtype == np.float32 and c.shape == (m, n)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_matmul_in_small_blocks_matches(rng):
    """A tiny budget forces blocking over spatial and reduce axes; the result must not change."""
    A, B, C = _matmul(19, 23, 29)
    D = te.compute((19, 23), lambda i, j: C[i, j] + 1.0, name="D")
    a = rng.standard_normal((19, 29)).astype("float32")
    b = rng.standard_normal((29, 23)).astype("float32")
    c, d = evaluate([C, D], {A: a, B: b}, budget_bytes=512)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d, a @ b + 1, rtol=1e-5, atol=1e-5)


def test_generic_reduction_in_blocks(rng):
    """max-plus product: no einsum path; blocked over k with the combiner folding blocks."""
    A = te.placeholder((9, 31), name="A")
    B = te.placeholder((31, 7), name="B")
    r = te.reduce_axis(31, "k")
    C = te.compute((9, 7), lambda i, j: te.max(A[i, r] + B[r, j], axis=r))
    a, b = rng.standard_normal((9, 31)), rng.standard_normal((31, 7))
    a, b = a.astype("float32"), b.astype("float32")
    expected = (a[:, :, None] + b[None]).max(axis=1)
    for budget in (1 << 20, 256):
        c, = evaluate(C, {A: a, B: b}, budget_bytes=budget)
        np.testing.assert_array_equal(c, expected)


def test_custom_combiner_is_folded_pairwise(rng):
    # x + y + x*y over values in (0, 1): equals prod(1 + v) - 1 on the reduced set
    combine = te.comm_reducer(lambda x, y: x + y + x * y, lambda dtype: 0.0, "odd")
    A = te.placeholder((5, 11), "float64", name="A")
    r = te.reduce_axis(11, "k")
    C = te.compute((5,), lambda i: combine(A[i, r], axis=r))
    a = rng.uniform(0, 1, (5, 11))
    c, = evaluate(C, {A: a})
    np.testing.assert_allclose(c, np.prod(1 + a, axis=1) - 1, rtol=1e-12)
    c_small, = evaluate(C, {A: a}, budget_bytes=64)
    np.testing.assert_allclose(c_small, c, rtol=1e-12)


def test_reduction_with_condition(rng):
    A = te.placeholder((6, 6), name="A")
    r = te.reduce_axis(6, "k")
    lower = te.compute((6,), lambda i: te.sum(A[i, r], axis=r, where=r < i))
    a = rng.standard_normal((6, 6)).astype("float32")
    got, = evaluate(lower, {A: a})
    np.testing.assert_allclose(got, np.tril(a, -1).sum(axis=1), rtol=1e-6, atol=1e-6)


def test_reduce_axis_unused_by_the_source_repeats_the_term(rng):
    A = te.placeholder((4,), name="A")
    r = te.reduce_axis(3, "k")
    B = te.compute((4,), lambda i: te.sum(A[i] * 2.0, axis=r))
    a = rng.standard_normal(4).astype("float32")
    np.testing.assert_allclose(evaluate(B, {A: a})[0], a * 6, rtol=1e-6)


def test_select_may_read_out_of_bounds_in_its_dead_branch(rng):
    A = te.placeholder((5,), name="A")
    P = te.compute((9,), lambda i: te.select(te.all_of(i >= 2, i < 7), A[i - 2], -1.0))
    a = rng.standard_normal(5).astype("float32")
    p, = evaluate(P, {A: a})
    np.testing.assert_array_equal(p, np.pad(a, 2, constant_values=-1))


def test_integer_semantics():
    A = te.placeholder((5,), "int32", name="A")
    B = te.compute((5,), lambda i: (A[i] // 3) * 10 + A[i] % 3, name="B")
    W = te.compute((1,), lambda i: A[0] * 2**30 * 4, name="W")  # wraps like int32
    a = np.array([-7, -1, 0, 5, 2**31 - 1], dtype=np.int32)
    b, w = evaluate([B, W], {A: a})
    np.testing.assert_array_equal(b, (a // 3) * 10 + a % 3)
    assert b.dtype == np.int32
    assert w.dtype == np.int32 and w[0] == 0  # -7 * 2**32 wraps to 0 in 32 bits


def test_int_sum_wraps_in_its_dtype():
    A = te.placeholder((3,), "int32", name="A")
    r = te.reduce_axis(3, "k")
    S = te.compute((1,), lambda i: te.sum(A[r], axis=r))
    a = np.array([2**31 - 1, 1, 1], dtype=np.int32)
    s, = evaluate(S, {A: a})
    assert s.dtype == np.int32 and s[0] == -2**31 + 1


def test_intrinsics(rng):
    X = te.placeholder((17,), name="X")
    Y = te.compute((17,), lambda i: te.erf(X[i]) + te.sigmoid(X[i]) + te.rsqrt(X[i] * X[i] + 1.0)
                   + te.tanh(X[i]) + te.exp(X[i]) + te.abs(X[i]) + te.floor(X[i] * 2.0))
    x = rng.standard_normal(17).astype("float32")
    from math import erf
    expected = (np.array([erf(v) for v in x]) + 1 / (1 + np.exp(-x)) + 1 / np.sqrt(x * x + 1)
                + np.tanh(x) + np.exp(x) + np.abs(x) + np.floor(x * 2))
    np.testing.assert_allclose(evaluate(Y, {X: x})[0], expected, rtol=1e-5, atol=1e-6)


def test_scalar_output_and_input():
    A = te.placeholder((), name="A")
    B = te.compute((), lambda: A[()] * 3.0, name="B")
    b, = evaluate(B, {A: np.array(2.0, dtype=np.float32)})
    assert b.shape == () and b == 6.0


def test_missing_input_is_named():
    A, B, C = _matmul(2, 2, 2)
    with pytest.raises(TEError, match="no value for placeholder 'B' float32\\[2, 2\\]"):
        evaluate(C, {A: np.zeros((2, 2), np.float32)})


def test_wrong_input_shape_or_dtype():
    A, B, C = _matmul(2, 3, 4)
    with pytest.raises(TEError, match="placeholder 'A' expects float32\\[2, 4\\], got "
                       "float64\\[2, 4\\].*astype"):
        evaluate(C, {A: np.zeros((2, 4)), B: np.zeros((4, 3), np.float32)})
    with pytest.raises(TEError, match="placeholder 'B' expects float32\\[4, 3\\], got "
                       "float32\\[3, 4\\]"):
        evaluate(C, {A: np.zeros((2, 4), np.float32), B: np.zeros((3, 4), np.float32)})


def test_unbound_variable_is_reported():
    n = te.var("n")
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] * te.cast(n, "float32"), name="B")
    with pytest.raises(TEError, match="compute 'B' uses variable 'n'"):
        evaluate(B, {A: np.zeros(4, np.float32)})


def test_large_matmul_stays_in_budget():
    """1024^3 matmul: the einsum path needs only the operands, no 4 GB product."""
    import tracemalloc
    A, B, C = _matmul(1024, 1024, 1024)
    a = np.ones((1024, 1024), np.float32)
    b = np.full((1024, 1024), 0.5, np.float32)
    tracemalloc.start()
    try:
        c, = evaluate(C, {A: a, B: b})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 256 * 2**20
    np.testing.assert_array_equal(c[::97, ::89], np.full((11, 12), 512.0, np.float32))


def test_generic_reduction_peak_memory_is_bounded(rng):
    import tracemalloc
    A = te.placeholder((256, 256), name="A")
    B = te.placeholder((256, 256), name="B")
    r = te.reduce_axis(256, "k")
    C = te.compute((256, 256), lambda i, j: te.max(A[i, r] + B[r, j], axis=r))
    a = rng.standard_normal((256, 256)).astype("float32")
    tracemalloc.start()
    try:
        c, = evaluate(C, {A: a, B: a}, budget_bytes=8 * 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 24 * 2**20  # the full 256^3 product would be 64 MB
    np.testing.assert_array_equal(c[:3], (a[:3, :, None] + a[None]).max(axis=1))
