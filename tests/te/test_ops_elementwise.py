"""Elementwise and broadcasting operators against numpy, on both backends."""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.ops import tags
from kiln.te.reference import evaluate

_erf = np.vectorize(math.erf)

UNARY = {
    "relu": (ops.relu, lambda x: np.maximum(x, 0)),
    "leaky_relu": (lambda t: ops.leaky_relu(t, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "clip": (lambda t: ops.clip(t, -0.5, 0.75), lambda x: np.clip(x, -0.5, 0.75)),
    "sigmoid": (ops.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (ops.tanh, np.tanh),
    "exp": (ops.exp, np.exp),
    "log": (lambda t: ops.log(ops.abs(t)), lambda x: np.log(np.abs(x))),
    "sqrt": (lambda t: ops.sqrt(ops.abs(t)), lambda x: np.sqrt(np.abs(x))),
    "rsqrt": (lambda t: ops.rsqrt(ops.abs(t)), lambda x: 1 / np.sqrt(np.abs(x))),
    "erf": (ops.erf, _erf),
    "gelu": (ops.gelu, lambda x: 0.5 * x * (1 + _erf(x / np.sqrt(2)))),
    "hard_sigmoid": (ops.hard_sigmoid, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
    "hard_swish": (ops.hard_swish, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    "abs": (ops.abs, np.abs),
    "neg": (ops.neg, np.negative),
    "sign": (ops.sign, np.sign),
    "floor": (ops.floor, np.floor),
    "ceil": (ops.ceil, np.ceil),
    "reciprocal": (ops.reciprocal, lambda x: 1 / x),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("shape", [(1,), (3, 17)])
def test_unary(run, rng, name, shape):
    build, expected = UNARY[name]
    X = te.placeholder(shape, name="X")
    Y = build(X)
    assert tags.is_injective(Y.op.tag)
    x = (rng.standard_normal(shape) * 3).astype("float32")
    got, = run(Y, {X: x})
    np.testing.assert_allclose(got, expected(x.astype(np.float64)), rtol=2e-5, atol=2e-6)


def test_round_is_half_to_even(run):
    X = te.placeholder((6,), name="X")
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4], np.float32)
    np.testing.assert_array_equal(run(ops.round(X), {X: x})[0], np.round(x))


def test_cast_truncates_toward_zero(run):
    X = te.placeholder((5,), name="X")
    Y = ops.cast(X, "int32")
    x = np.array([-2.7, -0.5, 0.0, 0.9, 3.99], np.float32)
    got, = run(Y, {X: x})
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, x.astype(np.int32))


def test_relu_on_integers(run):
    X = te.placeholder((7,), "int8", name="X")
    x = np.arange(-3, 4, dtype=np.int8)
    np.testing.assert_array_equal(run(ops.relu(X), {X: x})[0], np.maximum(x, 0))


def test_float_op_rejects_int_tensor():
    X = te.placeholder((3,), "int32", name="ints")
    with pytest.raises(TEError, match="exp\\(\\): tensor 'ints' has dtype int32.*cast"):
        ops.exp(X)


BINARY = {
    "add": (ops.add, np.add),
    "subtract": (ops.subtract, np.subtract),
    "multiply": (ops.multiply, np.multiply),
    "divide": (ops.divide, np.divide),
    "maximum": (ops.maximum, np.maximum),
    "minimum": (ops.minimum, np.minimum),
    "power": (lambda a, b: ops.power(ops.abs(a), b), lambda a, b: np.power(np.abs(a), b)),
    "equal": (ops.equal, np.equal),
    "not_equal": (ops.not_equal, np.not_equal),
    "less": (ops.less, np.less),
    "less_equal": (ops.less_equal, np.less_equal),
    "greater": (ops.greater, np.greater),
    "greater_equal": (ops.greater_equal, np.greater_equal),
}


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("a_shape,b_shape", [((5, 1, 3), (4, 1)), ((7,), (7,)), ((1,), (2, 3))])
def test_binary_broadcast(run, rng, name, a_shape, b_shape):
    build, expected = BINARY[name]
    A = te.placeholder(a_shape, name="A")
    B = te.placeholder(b_shape, name="B")
    C = build(A, B)
    a = rng.integers(-3, 4, a_shape).astype("float32")   # small ints make equal() meaningful
    b = rng.integers(1, 4, b_shape).astype("float32")
    want = expected(a, b)
    assert C.shape == want.shape
    assert C.op.tag == (tags.ELEMWISE if a_shape == b_shape else tags.BROADCAST)
    got, = run(C, {A: a, B: b})
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_scalar_operands_take_the_tensor_dtype(run, rng):
    A = te.placeholder((3, 4), name="A")
    C = ops.multiply(ops.add(A, 1), 2.5)
    D = ops.subtract(10.0, A)
    assert C.dtype == D.dtype == "float32"
    a = rng.standard_normal((3, 4)).astype("float32")
    c, d = run([C, D], {A: a})
    np.testing.assert_allclose(c, (a + 1) * 2.5, rtol=1e-6)
    np.testing.assert_allclose(d, 10 - a, rtol=1e-6)


def test_integer_divide_floors_and_mod_follows_divisor(run):
    A = te.placeholder((4,), "int32", name="A")
    B = te.placeholder((4,), "int32", name="B")
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    q, r = run([ops.divide(A, B), ops.floor_mod(A, B)], {A: a, B: b})
    np.testing.assert_array_equal(q, a // b)
    np.testing.assert_array_equal(r, np.mod(a, b))


def test_logical_ops(run):
    A = te.placeholder((4,), "bool", name="A")
    B = te.placeholder((2, 1), "bool", name="B")
    a = np.array([True, False, True, False])
    b = np.array([[True], [False]])
    got = run([ops.logical_and(A, B), ops.logical_or(A, B), ops.logical_xor(A, B),
               ops.logical_not(A)], {A: a, B: b})
    for value, want in zip(got, [a & b, a | b, a ^ b, ~a]):
        np.testing.assert_array_equal(value, want)


def test_where_broadcasts_three_ways(run, rng):
    Cond = te.placeholder((3, 1), "bool", name="cond")
    X = te.placeholder((1, 4), name="X")
    Y = te.placeholder((4,), name="Y")
    out = ops.where(Cond, X, Y)
    c = np.array([[True], [False], [True]])
    x = rng.standard_normal((1, 4)).astype("float32")
    y = rng.standard_normal(4).astype("float32")
    np.testing.assert_array_equal(run(out, {Cond: c, X: x, Y: y})[0], np.where(c, x, y))


def test_broadcast_to(run, rng):
    X = te.placeholder((3, 1), name="X")
    Y = ops.broadcast_to(X, (2, 3, 5))
    x = rng.standard_normal((3, 1)).astype("float32")
    np.testing.assert_array_equal(run(Y, {X: x})[0], np.broadcast_to(x, (2, 3, 5)))


def test_broadcast_errors_name_the_tensors():
    A = te.placeholder((3, 4), name="lhs")
    B = te.placeholder((5,), name="rhs")
    with pytest.raises(TEError, match="add\\(\\): shapes cannot be broadcast together: "
                       "'lhs'\\[3, 4\\], 'rhs'\\[5\\]"):
        ops.add(A, B)
    with pytest.raises(TEError, match="broadcast_to\\(\\): tensor 'lhs' of shape \\[3, 4\\] "
                       "cannot be broadcast to \\[3, 5\\]"):
        ops.broadcast_to(A, (3, 5))
    with pytest.raises(TEError, match="at least one operand must be a Tensor"):
        ops.add(1.0, 2.0)


_dims = st.lists(st.integers(1, 4), min_size=0, max_size=3)


@st.composite
def _broadcastable_pair(draw):
    out = draw(_dims)
    def operand():
        keep = draw(st.integers(0, len(out)))
        return tuple(d if draw(st.booleans()) else 1 for d in out[len(out) - keep:])
    return operand(), operand()


@settings(max_examples=40, deadline=None)
@given(_broadcastable_pair(), st.sampled_from(["add", "multiply", "maximum", "less"]))
def test_random_broadcast_shapes(shapes, name):
    a_shape, b_shape = shapes
    build, expected = BINARY[name]
    A = te.placeholder(a_shape, name="A")
    B = te.placeholder(b_shape, name="B")
    rng = np.random.default_rng(len(a_shape) * 7 + len(b_shape))
    a = rng.standard_normal(a_shape).astype("float32")
    b = rng.standard_normal(b_shape).astype("float32")
    got, = evaluate(build(A, B), {A: a, B: b})
    want = expected(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6)
