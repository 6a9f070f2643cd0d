"""Every schedule primitive, compiled and compared with numpy on awkward shapes."""
import numpy as np
import pytest

import kiln
from kiln import te
from tests.util import assert_matches, matmul_dag, random_array, run_schedule

SHAPES = [(1, 1, 1), (7, 5, 9), (17, 13, 33), (32, 16, 64)]


def _matmul_inputs(m, k, n, rng):
    return random_array((m, k), rng=rng), random_array((k, n), rng=rng)


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_default_schedule_matmul(m, k, n, rng):
    A, B, C = matmul_dag(m, k, n)
    a, b = _matmul_inputs(m, k, n, rng)
    (c,) = run_schedule(kiln.create_schedule(C), [A, B, C], [a, b])
    assert_matches(c, a @ b)


@pytest.mark.parametrize("factor", [1, 3, 4, 8, 100])
@pytest.mark.parametrize("mode", ["factor", "nparts"])
def test_split_any_factor(factor, mode, rng):
    A = te.placeholder((37,), name="A")
    B = te.compute((37,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = kiln.create_schedule(B)
    outer, inner = s[B].split(B.op.axis[0], **{mode: factor})
    a = random_array((37,), rng=rng)
    (b,) = run_schedule(s, [A, B], [a])
    assert_matches(b, a * 2 + 1)


@pytest.mark.parametrize("m,k,n", SHAPES)
def test_tile_reorder_vectorize_parallel(m, k, n, rng):
    A, B, C = matmul_dag(m, k, n)
    s = kiln.create_schedule(C)
    i, j = C.op.axis
    (kk,) = C.op.reduce_axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    ko, ki = s[C].split(kk, factor=3)
    s[C].reorder(io, jo, ko, ii, ki, ji)
    s[C].vectorize(ji)
    s[C].unroll(ki)
    s[C].parallel(io)
    a, b = _matmul_inputs(m, k, n, rng)
    (c,) = run_schedule(s, [A, B, C], [a, b])
    assert_matches(c, a @ b)


def test_fuse_then_split_parallel(rng):
    A = te.placeholder((5, 7, 3), name="A")
    B = te.compute((5, 7, 3), lambda i, j, k: A[i, j, k] - 3.0, name="B")
    s = kiln.create_schedule(B)
    f = s[B].fuse(*B.op.axis)
    fo, fi = s[B].split(f, factor=16)
    s[B].parallel(fo)
    s[B].vectorize(fi)
    a = random_array((5, 7, 3), rng=rng)
    (b,) = run_schedule(s, [A, B], [a])
    assert_matches(b, a - 3)


@pytest.mark.parametrize("m,k,n", [(7, 5, 9), (33, 17, 20), (64, 64, 64)])
def test_cache_write_register_tile(m, k, n, rng):
    A, B, C = matmul_dag(m, k, n)
    s = kiln.create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    io, jo, ii, ji = s[C].tile(i, j, 4, 8)
    s[CL].compute_at(s[C], jo)
    ic, jc = s[CL].op.axis
    (kc,) = s[CL].op.reduce_axis
    ko, ki = s[CL].split(kc, factor=4)
    s[CL].reorder(ko, ki, ic, jc)
    s[CL].unroll(ic)
    s[CL].vectorize(jc)
    s[C].vectorize(ji)
    s[C].parallel(s[C].fuse(io, jo))
    a, b = _matmul_inputs(m, k, n, rng)
    (c,) = run_schedule(s, [A, B, C], [a, b])
    assert_matches(c, a @ b, rtol=1e-4)


def test_compute_inline_chain(rng):
    A = te.placeholder((10, 11), name="A")
    B = te.compute((10, 11), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((10, 11), lambda i, j: B[i, j] * B[i, j], name="C")
    D = te.compute((11, 10), lambda i, j: C[j, i] - 2.0, name="D")
    s = kiln.create_schedule(D)
    s[B].compute_inline()
    s[C].compute_inline()
    func = kiln.lower(s, [A, D])
    assert "B[" not in str(func) and "C[" not in str(func)
    a = random_array((10, 11), rng=rng)
    (d,) = run_schedule(s, [A, D], [a])
    assert_matches(d, ((a + 1) ** 2).T - 2)


def test_compute_at_producer_region(rng):
    """A 1-D stencil: the producer is computed per tile, over the halo the tile reads."""
    A = te.placeholder((50,), name="A")
    B = te.compute((52,), lambda i: A[te.minimum(i, 49)] * 3.0, name="B")
    C = te.compute((50,), lambda i: B[i] + B[i + 2], name="C")
    s = kiln.create_schedule(C)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], xo)
    func = kiln.lower(s, [A, C])
    assert "allocate B: float32[10]" in str(func)
    a = random_array((50,), rng=rng)
    (c,) = run_schedule(s, [A, C], [a])
    b = np.concatenate([a, [a[49], a[49]]]) * 3
    assert_matches(c, b[:50] + b[2:52])


def test_reduction_with_epilogue_compute_at(rng):
    A, B, C = matmul_dag(19, 8, 21)
    bias = te.placeholder((21,), name="bias")
    D = te.compute((19, 21), lambda i, j: te.maximum(C[i, j] + bias[j], 0.0), name="D")
    s = kiln.create_schedule(D)
    io, jo, ii, ji = s[D].tile(*D.op.axis, 8, 8)
    s[C].compute_at(s[D], jo)
    s[D].vectorize(ji)
    a, b = _matmul_inputs(19, 8, 21, rng)
    bb = random_array((21,), rng=rng)
    (d,) = run_schedule(s, [A, B, bias, D], [a, b, bb])
    assert_matches(d, np.maximum(a @ b + bb, 0), rtol=1e-4)


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64", "int8", "uint8"])
def test_dtypes_elementwise(dtype, rng):
    A = te.placeholder((13,), dtype, name="A")
    B = te.placeholder((13,), dtype, name="B")
    C = te.compute((13,), lambda i: te.maximum(A[i], B[i]) + A[i] * 2, name="C")
    s = kiln.create_schedule(C)
    s[C].vectorize(s[C].split(C.op.axis[0], factor=8)[1])
    a, b = random_array((13,), dtype, rng), random_array((13,), dtype, rng)
    (c,) = run_schedule(s, [A, B, C], [a, b])
    assert_matches(c, (np.maximum(a, b) + a * 2).astype(dtype), dtype)


def test_scalar_output_and_custom_reducer(rng):
    A = te.placeholder((6, 5), name="A")
    k0, k1 = te.reduce_axis((0, 6), "k0"), te.reduce_axis((0, 5), "k1")
    absmax = te.comm_reducer(lambda x, y: te.maximum(te.abs(x), te.abs(y)),
                             lambda dtype: 0.0, name="absmax")
    C = te.compute((), lambda: absmax(A[k0, k1], axis=[k0, k1]), name="C")
    a = random_array((6, 5), rng=rng)
    (c,) = run_schedule(kiln.create_schedule(C), [A, C], [a])
    assert_matches(c, np.abs(a).max())


def test_reduce_where_condition(rng):
    A = te.placeholder((9, 9), name="A")
    k = te.reduce_axis((0, 9), "k")
    C = te.compute((9,), lambda i: te.sum(A[i, k], axis=k, where=k <= i), name="C")
    a = random_array((9, 9), rng=rng)
    (c,) = run_schedule(kiln.create_schedule(C), [A, C], [a])
    assert_matches(c, np.tril(a).sum(axis=1))


def test_schedule_does_not_touch_te():
    A, B, C = matmul_dag(8, 8, 8)
    body_before = C.op.body
    s = kiln.create_schedule(C)
    s.cache_write(C, "local")
    s[C].split(C.op.axis[0], factor=2)
    assert C.op.body is body_before
    assert [str(step) for step in s.steps][0].startswith("s[C].cache_write")


def test_several_stages_at_one_loop_run_in_order(rng):
    """Regression: stages computed at the same loop must run producers first (a fused softmax)."""
    X = te.placeholder((5, 12), name="X")
    k1, k2 = te.reduce_axis((0, 12), "k1"), te.reduce_axis((0, 12), "k2")
    M = te.compute((5,), lambda i: te.max(X[i, k1], axis=k1), name="M")
    E = te.compute((5, 12), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    S = te.compute((5,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((5, 12), lambda i, j: E[i, j] / S[i], name="Y")
    s = kiln.create_schedule(Y)
    for stage in (M, E, S):
        s[stage].compute_at(s[Y], Y.op.axis[0])
    s[Y].parallel(Y.op.axis[0])
    x = random_array((5, 12), rng=rng)
    (y,) = run_schedule(s, [X, Y], [x])
    e = np.exp(x - x.max(axis=1, keepdims=True))
    assert_matches(y, e / e.sum(axis=1, keepdims=True))


def test_producer_read_only_by_a_sibling_stage(rng):
    """Regression: a padded input computed per output row, read by the accumulator tile
    computed deeper in the same nest (the conv2d pattern)."""
    X = te.placeholder((2, 9, 10), name="X")
    W = te.placeholder((4, 2, 3, 3), name="W")
    P = te.compute((2, 11, 12), lambda c, y, x: te.select(
        te.all_of(y >= 1, y < 10, x >= 1, x < 11),
        X[c, te.maximum(te.minimum(y - 1, 8), 0), te.maximum(te.minimum(x - 1, 9), 0)], 0.0),
        name="P")
    rc, ry, rx = (te.reduce_axis((0, n), nm) for n, nm in ((2, "rc"), (3, "ry"), (3, "rx")))
    Cv = te.compute((4, 9, 10), lambda k, y, x: te.sum(
        P[rc, y + ry, x + rx] * W[k, rc, ry, rx], axis=[rc, ry, rx]), name="Cv")
    O = te.compute((4, 9, 10), lambda k, y, x: Cv[k, y, x] + 1.0, name="O")
    s = kiln.create_schedule(O)
    k, y, x = O.op.axis
    xo, xi = s[O].split(x, factor=4)
    s[O].reorder(y, k, xo, xi)
    s[P].compute_at(s[O], y)
    s[Cv].compute_at(s[O], xo)
    xv = random_array((2, 9, 10), rng=rng)
    wv = random_array((4, 2, 3, 3), rng=rng)
    (o,) = run_schedule(s, [X, W, O], [xv, wv])
    xp = np.pad(xv, ((0, 0), (1, 1), (1, 1)))
    ref = np.zeros((4, 9, 10), np.float32)
    for dy in range(3):
        for dx in range(3):
            ref += np.einsum("cyx,kc->kyx", xp[:, dy:dy + 9, dx:dx + 10], wv[:, :, dy, dx])
    assert_matches(o, ref + 1, rtol=1e-4)
