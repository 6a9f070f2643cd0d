"""matmul, dense and batch_matmul against numpy (ONNX MatMul semantics for batch_matmul)."""
import numpy as np
import pytest

from kiln import te
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.ops import tags


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (17, 13, 19), (5, 33, 2)])
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul(run, rng, m, n, k, ta, tb):
    A = te.placeholder((k, m) if ta else (m, k), name="A")
    B = te.placeholder((n, k) if tb else (k, n), name="B")
    C = ops.matmul(A, B, transpose_a=ta, transpose_b=tb)
    assert C.op.tag == tags.MATMUL and C.shape == (m, n)
    a = rng.standard_normal(A.shape).astype("float32")
    b = rng.standard_normal(B.shape).astype("float32")
    want = (a.T if ta else a) @ (b.T if tb else b)
    np.testing.assert_allclose(run(C, {A: a, B: b})[0], want, rtol=1e-5, atol=1e-5)


def test_matmul_int8_with_int32_accumulator(run, rng):
    A = te.placeholder((3, 40), "int8", name="A")
    B = te.placeholder((40, 5), "int8", name="B")
    C = ops.matmul(A, B, out_dtype="int32")
    a = rng.integers(-128, 128, (3, 40)).astype(np.int8)
    b = rng.integers(-128, 128, (40, 5)).astype(np.int8)
    got, = run(C, {A: a, B: b})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, a.astype(np.int32) @ b.astype(np.int32))


@pytest.mark.parametrize("with_bias", [False, True])
def test_dense(run, rng, with_bias):
    X = te.placeholder((3, 7), name="X")
    W = te.placeholder((11, 7), name="W")
    bias = te.placeholder((11,), name="bias") if with_bias else None
    Y = ops.dense(X, W, bias)
    x = rng.standard_normal((3, 7)).astype("float32")
    w = rng.standard_normal((11, 7)).astype("float32")
    feeds = {X: x, W: w}
    want = x @ w.T
    if with_bias:
        feeds[bias] = rng.standard_normal(11).astype("float32")
        want = want + feeds[bias]
    np.testing.assert_allclose(run(Y, feeds)[0], want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 4), (2, 4, 5)),
    ((1, 3, 4), (6, 4, 5)),        # batch broadcast
    ((2, 1, 3, 4), (5, 4, 2)),     # rank broadcast
    ((4,), (4, 3)),                # 1-D lhs
    ((2, 3, 4), (4,)),             # 1-D rhs
    ((4,), (4,)),                  # dot product -> scalar
    ((3, 4), (4, 5)),
])
def test_batch_matmul_matches_numpy_matmul(run, rng, a_shape, b_shape):
    A = te.placeholder(a_shape, name="A")
    B = te.placeholder(b_shape, name="B")
    C = ops.batch_matmul(A, B)
    a = rng.standard_normal(a_shape).astype("float32")
    b = rng.standard_normal(b_shape).astype("float32")
    want = np.matmul(a, b)
    assert C.shape == want.shape
    np.testing.assert_allclose(run(C, {A: a, B: b})[0], want, rtol=1e-5, atol=1e-5)


def test_matmul_of_3d_goes_to_batch_matmul(rng):
    A = te.placeholder((2, 3, 4), name="A")
    B = te.placeholder((2, 5, 4), name="B")
    C = ops.matmul(A, B, transpose_b=True)
    assert C.op.tag == tags.BATCH_MATMUL and C.shape == (2, 3, 5)


def test_matmul_errors():
    A = te.placeholder((3, 4), name="A")
    B = te.placeholder((5, 6), name="B")
    with pytest.raises(TEError, match="matmul\\(\\): the reduction dimensions differ: "
                       "'A'\\[3, 4\\] @ 'B'\\[5, 6\\] \\(4 vs 5\\)"):
        ops.matmul(A, B)
    with pytest.raises(TEError, match="'A' is float32 but 'I' is int32.*out_dtype"):
        ops.matmul(A, te.placeholder((4, 2), "int32", name="I"))
    with pytest.raises(TEError, match="dense\\(\\): expects x\\[batch, in\\] and weight"):
        ops.dense(A, B)
    with pytest.raises(TEError, match="batch_matmul\\(\\): shapes cannot be broadcast"):
        ops.batch_matmul(te.placeholder((2, 3, 4), name="P"), te.placeholder((3, 4, 5), name="Q"))
