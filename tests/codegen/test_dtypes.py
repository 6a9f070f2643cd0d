import numpy as np
import pytest

from .cg_util import buf, elementwise, load, loop, rand
from kiln.codegen import build
from kiln.schedule.ir import ForKind, PrimFunc, Store
from kiln.te import expr as E

RNG = np.random.default_rng(1)
INTS = ["int32", "int64", "int8", "uint8"]
KINDS = [ForKind.VECTORIZED, ForKind.SERIAL]

BINARY = {
    "add": (E.add, lambda a, b: a + b),
    "sub": (E.sub, lambda a, b: a - b),
    "mul": (E.mul, lambda a, b: a * b),
    "min": (E.minimum, np.minimum),
    "max": (E.maximum, np.maximum),
    "floordiv": (E.floordiv, lambda a, b: a // b),
    "floormod": (E.floormod, lambda a, b: a % b),
}


def _binary(dtype, op, kind, n=37, out_dtype=None):
    A, B = buf("A", dtype, [n]), buf("B", dtype, [n])
    C = buf("C", out_dtype or dtype, [n])
    return elementwise(f"{op}_{dtype}", n, [A, B], C, BINARY[op][0], kind=kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", INTS + ["float64"])
@pytest.mark.parametrize("op", list(BINARY))
def test_binary_ops_match_numpy(dtype, op, kind):
    if dtype == "float64" and op in ("floordiv", "floormod"):
        pytest.skip("float floordiv lowers to floor(a / b): covered in test_intrinsics")
    n = 37
    low = 0 if dtype == "uint8" else -100
    a = rand(n, dtype, RNG, low=low, high=100)
    b = rand(n, dtype, RNG, low=low, high=100)
    if op in ("floordiv", "floormod"):
        b[b == 0] = 3
        b[:4] = np.array([3, -3, 7, -7] if dtype != "uint8" else [3, 200, 7, 255], dtype)
        a[:4] = np.array([-7, 7, -1, -100] if dtype != "uint8" else [250, 7, 0, 254], dtype)
    c = np.zeros(n, dtype)
    build(_binary(dtype, op, kind))(a, b, c)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(c, BINARY[op][1](a, b).astype(dtype))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["int32", "uint8", "int8", "float32"])
def test_comparisons_store_bool(dtype, kind):
    n = 40
    A, B = buf("A", dtype, [n]), buf("B", dtype, [n])
    outs = [buf(name, "bool", [n]) for name in ("LT", "LE", "EQ", "NE")]
    io, ii = E.var("io"), E.var("ii")
    i = io * 8 + ii
    a_, b_ = load(A, i), load(B, i)
    from kiln.schedule.ir import seq
    body = seq(Store(outs[0], i, a_ < b_), Store(outs[1], i, a_ <= b_),
               Store(outs[2], i, a_.eq(b_)), Store(outs[3], i, a_.ne(b_)))
    f = PrimFunc("cmp", (A, B, *outs), loop(io, n // 8, loop(ii, 8, body, kind)))
    a = rand(n, dtype, RNG, low=0, high=255 if dtype == "uint8" else 5)
    b = rand(n, dtype, RNG, low=0, high=255 if dtype == "uint8" else 5)
    if dtype == "uint8":
        a[:2], b[:2] = [200, 3], [3, 200]  # unsigned order: 200 > 3
    res = [np.zeros(n, bool) for _ in outs]
    build(f)(a, b, *res)
    for got, want in zip(res, [a < b, a <= b, a == b, a != b]):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kind", KINDS)
def test_bool_logic_and_select(kind):
    n = 24
    P, Q = buf("P", "bool", [n]), buf("Q", "bool", [n])
    X, Y = buf("X", "float32", [n]), buf("Y", "float32", [n])
    f = elementwise("logic", n, [P, Q, X], Y, lambda p, q, x: E.select(
        (p & ~q) | (x > 0.5), x * 2.0, -x), kind=kind)
    p, q = rand(n, "bool", RNG), rand(n, "bool", RNG)
    x, y = rand(n, "float32", RNG, -1, 1), np.zeros(n, np.float32)
    build(f)(p, q, x, y)
    np.testing.assert_array_equal(y, np.where((p & ~q) | (x > 0.5), x * 2, -x))


CASTS = [("float32", "int32"), ("float32", "uint8"), ("float64", "int8"), ("int32", "float32"),
         ("uint8", "int32"), ("int8", "int32"), ("uint8", "float32"), ("int64", "int32"),
         ("int32", "int64"), ("bool", "float32"), ("float32", "bool"), ("int32", "bool"),
         ("float32", "float64"), ("float64", "float32"), ("bool", "int32"), ("int8", "uint8")]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("src,dst", CASTS)
def test_casts_match_numpy(src, dst, kind):
    n = 19
    A, C = buf("A", src, [n]), buf("C", dst, [n])
    f = elementwise("cast", n, [A], C, lambda a: E.cast(a, dst), kind=kind)
    if src.startswith("float"):
        a = rand(n, src, RNG, low=0 if dst == "uint8" else -100, high=200 if dst == "uint8"
                 else 100)
        if dst == "int8":
            a = np.clip(a, -128, 127).astype(src)
        a[0] = 0.0
    else:
        a = rand(n, src, RNG, low=-128, high=255)
    c = np.zeros(n, dst)
    build(f)(a, c)
    np.testing.assert_array_equal(c, a.astype(dst))


@pytest.mark.parametrize("kind", KINDS)
def test_floordiv_floormod_negative_constants(kind):
    # both signs of dividend and constant divisor, including the nonneg fast path
    n = 64
    A = buf("A", "int32", [n])
    outs = [buf(f"O{k}", "int32", [n]) for k in range(4)]
    io, ii = E.var("io"), E.var("ii")
    i = io * 8 + ii
    from kiln.schedule.ir import seq
    a_ = load(A, i)
    body = seq(Store(outs[0], i, E.floordiv(a_, E.const(4))),
               Store(outs[1], i, E.floormod(a_, E.const(-3))),
               Store(outs[2], i, E.floordiv(i - 30, E.const(8))),   # loop-var index math
               Store(outs[3], i, E.floormod(i, E.const(6))))        # provably non-negative
    f = PrimFunc("fdm", (A, *outs), loop(io, n // 8, loop(ii, 8, body, kind)))
    a = np.arange(-32, 32, dtype=np.int32) * 3
    res = [np.zeros(n, np.int32) for _ in outs]
    build(f)(a, *res)
    idx = np.arange(n)
    for got, want in zip(res, [a // 4, a % -3, (idx - 30) // 8, idx % 6]):
        np.testing.assert_array_equal(got, want)


def test_int_abs_and_uint8_wraparound():
    n = 16
    A, C = buf("A", "int8", [n]), buf("C", "int8", [n])
    a = np.array(list(range(-8, 8)), np.int8) * 15
    c = np.zeros(n, np.int8)
    build(elementwise("iabs", n, [A], C, lambda x: E.abs(x) + E.const(100, "int8")))(a, c)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(c, (np.abs(a) + np.int8(100)).astype(np.int8))


def test_float64_vector_lanes():
    n = 20
    A, C = buf("A", "float64", [n]), buf("C", "float64", [n])
    a, c = rand(n, "float64", RNG), np.zeros(n)
    build(elementwise("d", n, [A], C, lambda x: x * x - x / 3.0, lanes=4))(a, c)
    # a contracted multiply-add rounds once: near x = 1/3 the relative error of the
    # (tiny) result is large, its absolute error within an ulp of x*x
    np.testing.assert_allclose(c, a * a - a / 3.0, rtol=1e-15, atol=4e-16)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "uint32"])
@pytest.mark.parametrize("op", ["floordiv", "floormod"])
def test_divisor_zero_or_minus_one_known_only_at_run_time(dtype, op, kind):
    # x86 traps on a zero divisor and on INT_MIN / -1 (the whole process dies of SIGFPE);
    # a run-time divisor takes numpy's answers instead: a // 0 == a % 0 == 0, a // -1 == -a
    n = 37
    info = np.iinfo(dtype)
    a = rand(n, dtype, RNG, low=max(info.min, -100), high=100)
    b = rand(n, dtype, RNG, low=max(info.min, -5), high=5)
    b[:6] = 0
    a[:3] = [info.min, info.max, 0]
    if info.min < 0:
        b[6:9] = -1
        a[6:9] = [info.min, info.max, 5]
    c = np.zeros(n, dtype)
    build(_binary(dtype, op, kind))(a, b, c)
    with np.errstate(over="ignore", divide="ignore"):
        np.testing.assert_array_equal(c, BINARY[op][1](a, b).astype(dtype))
