"""float16 / bfloat16 (float32 in registers, rounded to nearest-even when stored) and the
16/32/64-bit integer dtypes, through kiln.build against numpy (ml_dtypes for bfloat16)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import kiln
from kiln import te

R = np.random.default_rng(5)


def build(out, args, vectorize=True):
    s = kiln.create_schedule(out)
    if vectorize:
        _, inner = s[out].split(out.op.axis[-1], 8)
        s[out].vectorize(inner)
    return kiln.build(s, list(args) + [out], target="native")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("vectorize", [True, False])
def test_half_rounds_every_operation(dtype, vectorize):
    """a * b + c * 0.1: each operation's float32 result is rounded to the dtype, constants
    too, so a fused kernel gives what numpy's float16 (ml_dtypes' bfloat16) gives."""
    n = 37
    a, b, c = (R.standard_normal(n).astype(dtype) for _ in range(3))
    A, B, C = (te.placeholder((n,), dtype, name) for name in "ABC")
    out = te.compute((n,), lambda i: A[i] * B[i] + C[i] * te.const(0.1, dtype), name="out")
    got = np.empty(n, dtype)
    build(out, [A, B, C], vectorize)(a, b, c, got)
    want = a * b + c * np.asarray(0.1, dtype)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_reduction_accumulates_in_float32(dtype):
    """A half sum of products accumulates exact products in float32 and rounds once (numpy's
    float16 matmul); a float16 accumulator would drop the 1/64 steps past 2048."""
    n, k = 3, 301
    a = (R.integers(-1000, 1000, (n, k)) / 8).astype(dtype)
    b = (R.integers(-8, 9, (k,)) / 8).astype(dtype)
    A, B = te.placeholder((n, k), dtype, "A"), te.placeholder((k,), dtype, "B")
    r = te.reduce_axis(k, "r")
    out = te.compute((n,), lambda i: te.sum(A[i, r] * B[r], axis=r), name="out")
    got = np.empty(n, dtype)
    build(out, [A, B], vectorize=False)(a, b, got)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_cast_to_half_rounds_to_nearest_even(dtype):
    """Ties, values past the largest half, NaN and the subnormals of float16."""
    x = np.array([1.0 + 2.0 ** -11, 1.0 + 3 * 2.0 ** -11, 1.0 + 2.0 ** -8, 1.0 + 3 * 2.0 ** -8,
                  70000.0, -1e-6, 3e-8, np.nan, -np.inf, 0.1, 1e30, 2.0 ** -130], np.float32)
    X = te.placeholder(x.shape, "float32", "X")
    out = te.compute(x.shape, lambda i: X[i].astype(dtype), name="out")
    got = np.empty(x.shape, dtype)
    build(out, [X], vectorize=False)(x, got)
    want = x.astype(dtype)
    np.testing.assert_array_equal(np.isnan(got.astype(np.float32)), np.isnan(x))
    keep = ~np.isnan(x)
    np.testing.assert_array_equal(got.view(np.uint16)[keep], want.view(np.uint16)[keep])


def test_cast_inside_a_kernel_rounds_the_value_it_passes_on():
    """float32 -> float16 -> float32 in one expression keeps the float16 rounding."""
    x = np.array([1.0 + 2.0 ** -12, 0.1, 65519.0], np.float32)
    X = te.placeholder(x.shape, "float32", "X")
    out = te.compute(x.shape, lambda i: X[i].astype("float16").astype("float32") * 2.0,
                     name="out")
    got = np.empty(x.shape, np.float32)
    build(out, [X], vectorize=False)(x, got)
    np.testing.assert_array_equal(got, x.astype(np.float16).astype(np.float32) * 2)


@pytest.mark.parametrize("dtype", ["int16", "uint16", "uint32", "uint64"])
def test_integer_arithmetic_and_compare(dtype):
    n = 29
    info = np.iinfo(dtype)
    lo = max(info.min, -1000)
    a = R.integers(lo, 1000, n).astype(dtype)
    b = R.integers(1, 50, n).astype(dtype)
    A, B = te.placeholder((n,), dtype, "A"), te.placeholder((n,), dtype, "B")
    out = te.compute((n,), lambda i: te.select(A[i] < B[i], A[i] * B[i] + 7, A[i] // B[i]),
                     name="out")
    got = np.empty(n, dtype)
    build(out, [A, B])(a, b, got)
    with np.errstate(over="ignore"):
        want = np.where(a < b, a * b + dtype_type(dtype)(7), a // b)
    np.testing.assert_array_equal(got, want)


def dtype_type(dtype):
    return np.dtype(dtype).type


@pytest.mark.parametrize("src,dst", [("float32", "uint32"), ("uint64", "float32"),
                                     ("int16", "float16"), ("uint16", "int64"),
                                     ("bfloat16", "int32")])
def test_casts(src, dst):
    x = (R.uniform(0, 60000, 23) if src.startswith(("float", "bfloat")) else
         R.integers(0, 60000, 23)).astype(src)
    X = te.placeholder(x.shape, src, "X")
    out = te.compute(x.shape, lambda i: X[i].astype(dst), name="out")
    got = np.empty(x.shape, dst)
    build(out, [X])(x, got)
    want = x.astype(np.float32).astype(dst) if src == "bfloat16" else x.astype(dst)
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


def test_bfloat16_is_numpys_ml_dtypes():
    assert np.dtype("bfloat16") == np.dtype(ml_dtypes.bfloat16)
