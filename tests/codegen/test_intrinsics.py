"""Every math intrinsic against numpy (float64 reference), vectorized and scalar."""
import math

import numpy as np
import pytest

from .cg_util import buf, elementwise
from kiln.codegen import build
from kiln.schedule.ir import ForKind
from kiln.te import expr as E

RNG = np.random.default_rng(3)
_erf = np.vectorize(math.erf)
SPECIAL = np.array([np.inf, -np.inf, np.nan, 0.0], np.float64)


def _inputs(name):
    u = RNG.uniform
    return {
        "exp": np.concatenate([u(-104, 88.7, 3000), u(-1, 1, 500)]),
        "log": np.concatenate([np.exp(u(-100, 88, 3000)), [1.0, 1e-40, 3e-39, 2.0]]),
        "tanh": np.concatenate([u(-12, 12, 2000), u(-1, 1, 1000), [1e-6, -1e-6]]),
        "sigmoid": u(-80, 80, 3000),
        "erf": np.concatenate([u(-6, 6, 2000), u(-1.2, 1.2, 1000)]),
        "sqrt": u(0, 1e6, 1000), "rsqrt": u(1e-6, 1e6, 1000),
        "abs": u(-1e3, 1e3, 1000),
        "floor": np.concatenate([u(-50, 50, 1000), [-2.5, -0.5, 0.5, 1.5, 2.5]]),
        "ceil": np.concatenate([u(-50, 50, 1000), [-2.5, -0.5, 0.5, 1.5, 2.5]]),
        "round": np.concatenate([u(-50, 50, 1000), [-2.5, -0.5, 0.5, 1.5, 2.5]]),
        "sin": u(-20, 20, 1000), "cos": u(-20, 20, 1000),
        "log1p": np.concatenate([u(-0.99, 100, 1000), [1e-7, -1e-7]]),
        "expm1": np.concatenate([u(-20, 20, 1000), [1e-7, -1e-7]]),
    }[name]


REFERENCE = {
    "exp": np.exp, "log": np.log, "tanh": np.tanh, "erf": _erf,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)), "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "sin": np.sin, "cos": np.cos, "log1p": np.log1p, "expm1": np.expm1,
}
# float32 tolerances: polynomial implementations are within ~3 ulp
RTOL32 = {"exp": 2e-7, "log": 2e-7, "tanh": 3e-7, "sigmoid": 3e-7, "erf": 4e-7}


def _run(name, x, dtype, kind, lanes=8):
    n = len(x)
    A, C = buf("A", dtype, [n]), buf("C", dtype, [n])
    k = build(elementwise(name, n, [A], C, lambda a: E.call(name, a), lanes=lanes, kind=kind))
    out = np.zeros(n, dtype)
    k(np.ascontiguousarray(x, dtype), out)
    return out


@pytest.mark.parametrize("kind", [ForKind.VECTORIZED, ForKind.SERIAL])
@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_float32_intrinsic_matches_numpy(name, kind):
    x = _inputs(name).astype(np.float32)
    got = _run(name, x, "float32", kind)
    with np.errstate(all="ignore"):
        want = REFERENCE[name](x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=RTOL32.get(name, 1e-6), atol=1e-44)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_float64_intrinsic_matches_numpy(name):
    x = _inputs(name)
    got = _run(name, x, "float64", ForKind.VECTORIZED, lanes=4)
    with np.errstate(all="ignore"):
        want = REFERENCE[name](x)
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf"])
def test_float32_special_values(name):
    x = np.concatenate([SPECIAL, [-0.0, 100.0, -100.0, -1.0]]).astype(np.float32)
    got = _run(name, x, "float32", ForKind.VECTORIZED)
    with np.errstate(all="ignore"):
        want = REFERENCE[name](x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=RTOL32[name], atol=1e-44)  # nan/inf must match


def test_polynomial_exp_is_vector_code():
    n = 64
    A, C = buf("A", "float32", [n]), buf("C", "float32", [n])
    k = build(elementwise("vexp", n, [A], C, E.exp))
    ir_text = k.llvm_ir()
    assert "<8 x float>" in ir_text or "<16 x float>" in ir_text
    assert "@expf" not in ir_text   # no libm call per lane


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_matches_numpy(dtype):
    n = 333
    X, Y, C = buf("X", dtype, [n]), buf("Y", dtype, [n]), buf("C", dtype, [n])
    k = build(elementwise("pow", n, [X, Y], C, E.power, lanes=4))
    x, y = RNG.uniform(0.01, 10, n).astype(dtype), RNG.uniform(-3, 3, n).astype(dtype)
    c = np.zeros(n, dtype)
    k(x, y, c)
    np.testing.assert_allclose(c, np.power(x.astype(np.float64), y), rtol=2e-6 if
                               dtype == "float32" else 1e-14)


@pytest.mark.parametrize("kind", [ForKind.VECTORIZED, ForKind.SERIAL])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("exponent", [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, -2.0, 0.5, 3.5])
def test_pow_by_constant_matches_numpy(exponent, dtype, kind):
    """A constant small positive integer power is products of x (vector code, no libm);
    other constants keep powf. Odd length (37), negatives, zeros, inf and nan included."""
    x = np.concatenate([RNG.uniform(-30, 30, 31), [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-30]])
    x = x.astype(dtype)
    n = len(x)
    A, C = buf("A", dtype, [n]), buf("C", dtype, [n])
    const = E.FloatImm(dtype, exponent)
    k = build(elementwise("powc", n, [A], C, lambda a: E.power(a, const), lanes=8, kind=kind))
    out = np.zeros(n, dtype)
    k(x, out)
    with np.errstate(all="ignore"):
        want = np.power(x.astype(np.float64), exponent).astype(dtype)
    unrolled = exponent in (1.0, 2.0, 3.0, 4.0)
    # numpy's pow differs from C's powf on (-inf) ** 0.5 and nan ** 0: compare those only
    # where the products replace powf
    keep = slice(None) if unrolled else slice(0, 31)
    np.testing.assert_allclose(out[keep], want[keep], rtol=4e-7 if dtype == "float32" else
                               1e-15)
    calls = "@powf" in k.llvm_ir() or "@pow(" in k.llvm_ir()
    if exponent != 0.0:      # x ** 0 is folded to 1 before codegen
        assert calls != unrolled


def test_float_floordiv_floormod_lower_to_floor():
    n = 40
    A, B, Q = buf("A", "float32", [n]), buf("B", "float32", [n]), buf("Q", "float32", [n])
    k = build(elementwise("ffd", n, [A, B], Q, lambda a, b: E.floormod(a, b)))
    a, b = RNG.uniform(-10, 10, n).astype(np.float32), RNG.uniform(0.5, 3, n).astype(np.float32)
    b[::2] *= -1
    q = np.zeros(n, np.float32)
    k(a, b, q)
    np.testing.assert_allclose(q, a - np.floor(a / b) * b, rtol=1e-5, atol=1e-5)
