"""kiln.jit on whole numerical functions, against the same functions run by numpy:
awkward shapes (1, primes), float32 and float64, results' dtypes and shapes as numpy's."""
from __future__ import annotations

import functools

import numpy as np
import pytest

import kiln
import kiln.numpy as knp

from . import workloads as W


def _jit(fn, **options):
    return kiln.jit(lambda *args: fn(knp, *args), **options)


def _check(fn, args, rtol=1e-5, atol=1e-5, f=None):
    got = (f or _jit(fn))(*args)
    want = fn(np, *args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray) and g.dtype == w.dtype and g.shape == w.shape, \
            (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def _f(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


@pytest.mark.parametrize("shape", [(1,), (7, 13), (3, 1, 17)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_selu(rng, shape, dtype):
    _check(W.selu, (_f(rng, *shape, dtype=dtype),))


@pytest.mark.parametrize("shape,axis", [((5, 11), -1), ((3, 7, 2), 1), ((1, 1), 0)])
def test_softmax(rng, shape, axis):
    _check(lambda xp, x: W.softmax(xp, x, axis), (_f(rng, *shape),))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm(rng, dtype):
    x, g, b = _f(rng, 4, 19, dtype=dtype), _f(rng, 19, dtype=dtype), _f(rng, 19, dtype=dtype)
    _check(W.layer_norm, (x, g, b), rtol=1e-4, atol=1e-4)


def test_gelu_mlp_block(rng):
    args = (_f(rng, 3, 8), _f(rng, 8, 17), _f(rng, 17), _f(rng, 17, 8), _f(rng, 8))
    _check(W.gelu_mlp, args, rtol=1e-4, atol=1e-4)


def test_kmeans_assignment_step(rng):
    centroids = _f(rng, 5, 3) * 4
    points = centroids[rng.integers(0, 5, 23)] + 0.1 * _f(rng, 23, 3)
    got = _jit(W.kmeans_assign)(points, centroids)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, W.kmeans_assign(np, points, centroids))


def test_pairwise_distances(rng):
    _check(W.pairwise_distances, (_f(rng, 7, 5), _f(rng, 11, 5)), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-9), (np.float32, 2e-3)])
def test_black_scholes(rng, dtype, tol):
    n = 37
    s, k = rng.uniform(10, 100, n).astype(dtype), rng.uniform(10, 100, n).astype(dtype)
    t = rng.uniform(0.1, 2, n).astype(dtype)
    _check(W.black_scholes, (s, k, t, 0.02, 0.3), rtol=tol, atol=tol)


def test_numexpr_boolean_expression(rng):
    a, b = _f(rng, 101), _f(rng, 1)
    got = _jit(W.numexpr_bool)(a, b)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, W.numexpr_bool(np, a, b))


@pytest.mark.parametrize("shape", [(5, 12), (1, 3), (2, 21)])
def test_reduction_over_reshaped_transpose(rng, shape):
    _check(W.transpose_reduce, (_f(rng, *shape),))


def test_numpy_functions_on_traced_values_dispatch(rng):
    """np.exp / np.mean / scipy's erf on traced values trace like knp's."""
    from scipy import special

    def fn(xp, x):
        return np.tanh(x) + np.mean(x, axis=0) * special.erf(x) + np.maximum(x, 0.5)
    _check(fn, (_f(rng, 3, 4),))


def test_integer_arithmetic_follows_numpy(rng):
    a = rng.integers(-50, 50, (4, 5)).astype(np.int32)
    b = rng.integers(1, 50, (5,)).astype(np.int32)
    _check(lambda xp, a, b: ((a * 3 + b) // 2 - a % 3, a / b, a.sum(axis=0), a.mean()), (a, b))


def test_bool_logic_and_reductions(rng):
    a, b = rng.random((4, 5)) > 0.5, rng.random((5,)) > 0.5
    _check(lambda xp, a, b: ((a & ~b) | (a ^ b), a.any(axis=0), a.all(axis=1), a.sum()),
           (a, b))


def test_matmul_einsum_and_rank1_products(rng):
    def fn(xp, a, b, v):
        return (xp.einsum("bij,bjk->bik", a, b), a @ v, v @ v, xp.einsum("bii->bi", a[:, :, :3]),
                xp.outer(v, v))
    _check(fn, (_f(rng, 2, 3, 4), _f(rng, 2, 4, 5), _f(rng, 4)), rtol=1e-4, atol=1e-4)


def test_indexing_concatenate_and_casts(rng):
    def fn(xp, a, b):
        return (a[1:, ::-2, None, 2] * 2, a[..., [0, 2, -1]], a[-1], xp.concatenate(
            [a[:, :, 0], b], axis=-1), (a * 10).astype(xp.int32), xp.stack([b, b], axis=-1))
    _check(fn, (_f(rng, 5, 7, 3), _f(rng, 5, 2)))


def test_float64_stays_float64_and_python_scalars_are_weak(rng):
    x64, x32 = _f(rng, 5, dtype=np.float64), _f(rng, 5)
    _check(lambda xp, a, b, s: (a * b + 1.5, b * s, b * 2, a.astype(xp.float32) + b), (x64, x32,
                                                                                       0.25))


def test_zero_size_axes(rng):
    _check(lambda xp, a, b: ((a + b).sum(axis=1), xp.exp(a), a.any(axis=0)),
           (_f(rng, 0, 3), _f(rng, 3)))


def test_returning_inputs_and_constants(rng):
    x = _f(rng, 3)
    f = _jit(lambda xp, a: (a, a + 1, a, np.arange(3)))
    out = f(x)
    assert out[0] is not x and out[2] is not out[0]
    np.testing.assert_array_equal(out[0], x)
    np.testing.assert_array_equal(out[3], np.arange(3))


def test_softmax_and_layer_norm_compositions_compile_to_one_kernel(rng):
    x, g, b = _f(rng, 6, 13), _f(rng, 13), _f(rng, 13)
    sm, ln = _jit(W.softmax), _jit(W.layer_norm)
    assert sm.compile(x).plan.steps[0].ops == ("softmax",)
    assert [s.ops for s in ln.compile(x, g, b).plan.steps] == [("layer_norm",)]
    assert "= softmax(%args_0, axis=1)" in str(sm.trace(x))


def test_compositions_whose_intermediates_escape_stay_as_written(rng):
    def softmax_and_exp(xp, x):
        e = xp.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True), e
    x = _f(rng, 4, 9)
    f = _jit(softmax_and_exp)
    assert all("softmax" not in s.ops for s in f.compile(x).plan.steps)
    _check(softmax_and_exp, (x,), f=f)
    # over a middle axis the softmax op applies too
    _check(lambda xp, x: W.softmax(xp, x, axis=1), (_f(rng, 2, 5, 3),))


_R = np.random.default_rng(7)
x = _R.standard_normal((4, 6)).astype("f")
y = _R.standard_normal((6, 3)).astype("f")
i64 = _R.integers(-5, 5, (4, 6))
u8 = _R.integers(0, 255, (4, 6)).astype(np.uint8)
IDIOMS = {
 "T@": (lambda xp, x, y: x.T.T @ y, (x, y)),
 "newaxis": (lambda xp, x, y: x[..., None] * x[:, None, :], (x, y)),
 "sum01": (lambda xp, x, y: xp.sum(x, axis=(0, 1)), (x, y)),
 "mean0": (lambda xp, x, y: x.mean(0) + len(x) + x.shape[1], (x, y)),
 "zeros_like": (lambda xp, x, y: xp.zeros_like(x) + xp.ones_like(x, dtype=xp.int32), (x, y)),
 "ones_const": (lambda xp, x, y: x + xp.ones(6) * xp.linspace(0, 1, 6), (x, y)),
 "astype_bool": (lambda xp, x, y: (x.astype(bool), xp.where(x > 0, x, 0)), (x, y)),
 "int64": (lambda xp, a, b: (a / 2, a // 3, a ** 2, -a, abs(a), a.sum(), xp.sqrt(xp.abs(a))), (i64, i64)),
 "uint8": (lambda xp, a, b: (a + 1, a.astype(xp.float32) / 255, a.max(), a > 100), (u8, u8)),
 "pow05": (lambda xp, x, y: xp.abs(x) ** 0.5, (x, y)),
 "flat": (lambda xp, x, y: (x.reshape(-1), x.flatten(), x.ravel()[::-1], x[:, -1], x[::-1, 1:4:2]), (x, y)),
 "masks": (lambda xp, x, y: (((x > 0) & (x < 1)), ~(x > 0), (x > 0).any(), (x > 0).all(axis=0)), (x, y)),
 "intmatmul": (lambda xp, a, b: a @ a.T, (i64, i64)),
 "f64mm": (lambda xp, a, b: a @ b, (x.astype(np.float64), y.astype(np.float64))),
 "take_np": (lambda xp, x, y: x[np.array([3, 0, 0])] + x[[1, 2, 3]], (x, y)),
 "minmax": (lambda xp, x, y: (xp.maximum(x, 0.0), xp.minimum(1, x), xp.clip(x, 0, None), x.clip(-0.5, 0.5)), (x, y)),
 "cast_chain": (lambda xp, x, y: (x * 100).astype(xp.int16).astype(xp.float64) / 3, (x, y)),
 "exp2log2": (lambda xp, x, y: (xp.exp2(x), xp.log2(xp.abs(x) + 1), xp.log10(xp.abs(x) + 1), xp.expm1(x), xp.square(x)), (x, y)),
 "round": (lambda xp, x, y: (xp.round(x * 10), xp.floor(x), xp.ceil(x), xp.trunc(x), xp.round(x, 2)), (x, y)),
 "mod": (lambda xp, x, y: (x % 0.7, xp.fmod(x, 0.7), x // 0.3), (x, y)),
 "scalar_ret": (lambda xp, x, y: x.sum() * 2, (x, y)),
 "0d_arg": (lambda xp, x, s: x * s, (x, np.float32(3))),
 "py_int_arg": (lambda xp, x, s: x * s, (x, 3)),
 "list_arg": (lambda xp, x, s: x[0] * s, (x, [1., 2., 3., 4., 5., 6.])),
 "tuple_arg": (lambda xp, x, t: t[0] * x + t[1], (x, (x, y.sum()))),
 "concat_none": (lambda xp, x, y: xp.concatenate([x, y.T], axis=None), (x, y)),
 "logaddexp": (lambda xp, x, y: (xp.logaddexp(x, 0.5), xp.hypot(x, x)), (x, y)),
 "var_int": (lambda xp, a, b: (a.var(), a.std(axis=1), a.mean(axis=-1, keepdims=True)), (i64, i64)),
 "argmax_kd": (lambda xp, x, y: (x.argmax(axis=0, keepdims=True), x.argmin()), (x, y)),
 "prod": (lambda xp, x, y: (x.prod(axis=1), xp.prod(x)), (x, y)),
 "bool_sum": (lambda xp, x, y: ((x > 0).sum(axis=1), (x > 0).mean()), (x, y)),
 "outer_inner": (lambda xp, x, y: (xp.outer(x[0], y[0]), xp.dot(x[0], x[1]), xp.inner(x[0], x[1])), (x, y)),
 "einsum_trace": (lambda xp, x, y: (xp.einsum("ij->", x), xp.einsum("ij,ij->i", x, x), xp.einsum("ij->ji", x)), (x, y)),
}
del x, y, i64, u8


@pytest.mark.parametrize("name", list(IDIOMS))
def test_numpy_idioms(name):
    """Everyday numpy code: views and T, newaxis, constants from knp.ones/linspace, int64 and
    uint8 math, casts, masks, integer-array indexing, Python-number and list arguments."""
    fn, args = IDIOMS[name]
    got = kiln.jit(functools.partial(fn, knp))(*args)
    want = fn(np, *args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-4,
                                   atol=1e-4)
