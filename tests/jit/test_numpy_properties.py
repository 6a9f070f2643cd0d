"""kiln.jit against numpy on random shapes, broadcasts and dtypes (hypothesis): sizes 0, 1,
primes; float32, float64, int32, bool. Each jitted function is reused across examples (one
kernel per new signature), examples are few and small so the file stays fast."""
from __future__ import annotations

import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
import kiln.numpy as knp

DIMS = st.sampled_from([0, 1, 2, 3, 5, 7])
DTYPES = st.sampled_from(["float32", "float64", "int32", "bool"])
FAST = settings(max_examples=8, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def broadcast_pair(draw):
    """Two shapes that broadcast: a random shape, the other with some dims set to 1 or
    dropped from the left."""
    shape = tuple(draw(st.lists(DIMS, min_size=0, max_size=3)))
    other = [d if draw(st.booleans()) else 1 for d in shape]
    return shape, tuple(other[draw(st.integers(0, len(other))):])


def _array(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) > 0.5
    if dtype == "int32":
        return rng.integers(-9, 10, shape).astype(np.int32)
    return (rng.standard_normal(shape) * 3).astype(dtype)


def _same(got, want, tol):
    assert got.dtype == want.dtype and got.shape == want.shape, \
        (got.dtype, got.shape, want.dtype, want.shape)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _mixed(a, b):
    # bool arithmetic follows numpy (+ is or, * is and); - of bools is an error in both
    return (a + b, a * b, a > b, a == b, np.maximum(a, b), knp.where(a > b, a, b))


def _arith(a, b):
    return (a - b, a * 2 + b * 0.5, a ** 2, abs(a) + 1, -a, a <= b)


_JIT_MIXED = kiln.jit(_mixed, max_traces=10 ** 6)
_JIT_ARITH = kiln.jit(_arith, max_traces=10 ** 6)
_JIT_FLOAT = kiln.jit(lambda a, b: (knp.exp(knp.tanh(a)) / (1 + knp.abs(b)),
                                    knp.sqrt(knp.abs(a)) - knp.log1p(b * b),
                                    knp.clip(a, -1, 2.5), knp.sign(b)), max_traces=10 ** 6)


@FAST
@given(pair=broadcast_pair(), dtypes=st.tuples(DTYPES, DTYPES), swap=st.booleans())
def test_broadcasting_binary_ops_and_promotion(rng, pair, dtypes, swap):
    shapes = pair[::-1] if swap else pair
    a, b = (_array(rng, s, d) for s, d in zip(shapes, dtypes))
    for g, w in zip(_JIT_MIXED(a, b), _mixed(a, b)):
        _same(g, w, 1e-5)


@FAST
@given(pair=broadcast_pair(), dtype=st.sampled_from(["float32", "float64", "int32"]))
def test_arithmetic(rng, pair, dtype):
    a, b = _array(rng, pair[0], dtype), _array(rng, pair[1], dtype)
    for g, w in zip(_JIT_ARITH(a, b), _arith(a, b)):
        _same(g, w, 1e-5)


@FAST
@given(pair=broadcast_pair(), dtype=st.sampled_from(["float32", "float64"]))
def test_float_math(rng, pair, dtype):
    a, b = _array(rng, pair[0], dtype), _array(rng, pair[1], dtype)
    want = (np.exp(np.tanh(a)) / (1 + np.abs(b)), np.sqrt(np.abs(a)) - np.log1p(b * b),
            np.clip(a, -1, 2.5), np.sign(b))
    for g, w in zip(_JIT_FLOAT(a, b), want):
        _same(g, w, 1e-5 if dtype == "float64" else 2e-5)


def _reduce(x, axis, keepdims):
    return (x.sum(axis=axis, keepdims=keepdims), knp.mean(x, axis=axis, keepdims=keepdims),
            x.max(axis=axis, keepdims=keepdims), x.min(axis=axis, keepdims=keepdims))


_JIT_REDUCE = kiln.jit(_reduce, static_argnames=["axis", "keepdims"], max_traces=10 ** 6)


@FAST
@given(shape=st.lists(st.sampled_from([1, 2, 3, 5]), min_size=1, max_size=3),
       dtype=st.sampled_from(["float32", "float64", "int32"]), data=st.data(),
       keepdims=st.booleans())
def test_reductions_with_negative_axes_and_keepdims(rng, shape, dtype, data, keepdims):
    rank = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-rank, rank - 1),
                               st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank,
                                        unique=True).map(tuple)))
    x = _array(rng, tuple(shape), dtype)
    want = (np.sum(x, axis=axis, keepdims=keepdims), np.mean(x, axis=axis, keepdims=keepdims),
            np.max(x, axis=axis, keepdims=keepdims), np.min(x, axis=axis, keepdims=keepdims))
    for g, w in zip(_JIT_REDUCE(x, axis=axis, keepdims=keepdims), want):
        _same(np.asarray(g), np.asarray(w), 1e-5)


def _index(x, key):
    # static arguments must hash: slices travel as ("slice", start, stop, step) (slice
    # objects are unhashable before Python 3.12)
    return x[tuple(slice(*k[1:]) if isinstance(k, tuple) else k for k in key)] * 2


_JIT_INDEX = kiln.jit(_index, static_argnames=["key"], max_traces=10 ** 6)


@st.composite
def basic_index(draw, shape):
    key = []
    for n in shape:
        kind = draw(st.sampled_from(["slice", "int", "all", "none"]))
        if kind == "int" and n:
            key.append(draw(st.integers(-n, n - 1)))
        elif kind == "slice":
            bounds = st.one_of(st.none(), st.integers(-n - 2, n + 2))
            key.append(slice(draw(bounds), draw(bounds),
                             draw(st.sampled_from([None, 1, 2, -1, -3]))))
        elif kind == "none":
            key += [None, slice(None)]
        else:
            key.append(slice(None))
    return tuple(key)


@FAST
@given(shape=st.lists(st.sampled_from([0, 1, 3, 5]), min_size=1, max_size=3), data=st.data())
def test_basic_indexing(rng, shape, data):
    x = _array(rng, tuple(shape), "float32")
    key = data.draw(basic_index(tuple(shape)))
    static = tuple(("slice", k.start, k.stop, k.step) if isinstance(k, slice) else k
                   for k in key)
    _same(_JIT_INDEX(x, key=static), x[key] * 2, 0)


def test_reshape_transpose_chains_with_negative_axes(rng):
    f = kiln.jit(lambda x: (x.reshape(3, -1).T.reshape(-1, 5, 2).transpose(2, 0, 1)
                            .sum(axis=-2), knp.moveaxis(x, -1, 0), knp.expand_dims(x, -1)
                            .squeeze(-1), knp.swapaxes(x, 0, -1)))
    x = _array(rng, (2, 3, 5), "float32")
    want = (x.reshape(3, -1).T.reshape(-1, 5, 2).transpose(2, 0, 1).sum(axis=-2),
            np.moveaxis(x, -1, 0), x, np.swapaxes(x, 0, -1))
    for g, w in zip(f(x), want):
        _same(g, w, 1e-5)


def test_argmax_var_std_cumsum(rng):
    f = kiln.jit(lambda x: (x.argmax(axis=-1), knp.argmin(x), x.var(axis=0), x.std(ddof=1),
                            knp.cumsum(x, axis=1)))
    x = _array(rng, (4, 7), "float64")
    want = (x.argmax(axis=-1), np.argmin(x), x.var(axis=0), x.std(ddof=1), np.cumsum(x, axis=1))
    for g, w in zip(f(x), want):
        _same(np.asarray(g), np.asarray(w), 1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # a handful of signatures: no retrace warning
        f(x[:3])
