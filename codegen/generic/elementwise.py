"""Elementwise generic kernels: unary maps, casts, broadcasting binary ops and where.

The scalar math of every op is the TE ops' (te/ops/elementwise.py, graph/lower_te.py,
graph/ops/more.py), so a model gives the same numbers on these kernels as on its specialised
ones; only the loops differ. Every kernel writes a C-contiguous output.

unary.<op>[.<dtype>], cast.<src>.<dst>: y[i] = op(x[i]) for i < n, in contiguous pieces.
    dims: [n, piece, pieces]  (pieces = ceil(n / piece), the PARALLEL loop's extent; the
    planner makes it 1 for small n so no thread wakes)   fparams: the op's options.

binary.<op>.<dtype>, where.<dtype>: out[o, j] = op(in_k[off_k(o) + j * t_k]) over up to 5
    outer dims o = (i0..i4) and an inner dim j, each input k with its own strides (0 where it
    broadcasts), in elements. The PARALLEL loop runs over groups of `group` pieces; a piece
    is one (i0..i3), a run of `run` values of i4 and a block of `block` values of j (so the
    index divisions happen once a piece, not once a row). The inner loop takes a vectorized
    fast path when every input's inner stride is 0 or 1, else loads lane by lane.
    dims: the layout below (N_INNER... STRIDES).
"""
from __future__ import annotations

import itertools
import math

from ...schedule.ir import Buffer, ForKind, IfThenElse, Store
from ...te import expr as E
from .registry import data, dims_buffer, fparams_buffer, generic_kernel, kernel, load, loop, \
    vector_loop

LANES = 16      # float32 lanes of a vector loop (LLVM splits it for narrower ISAs)

# the strided kernels' dims layout
OUTER = 5                                            # outer dims i0..i4
# dims[0:OUTER] are the outer sizes n0..n4, then:
N_INNER, BLOCK, BLOCKS, RUN, RUNS, PIECES, GROUP, GROUPS = range(OUTER, OUTER + 8)
STRIDES = OUTER + 8             # then per input k: its OUTER outer strides and its inner one

FLOAT_INT = ("float32", "int64", "int32")


def lanes_of(dtype: str) -> int:
    """Vector lanes for a loop over `dtype` values (a 512-bit vector of 4-byte ones)."""
    return 8 if dtype in ("int64", "float64") else LANES


def _let(name: str, value, body_of):
    """body_of(v) with v bound to `value` (a one-iteration loop: the IR has no let)."""
    return loop(name, 1, body_of, start=value)


# ------------------------------------------------------------------------------ unary

def _contiguous(name: str, in_dtype: str, out_dtype: str, fn):
    """Register kernel `name`: y[i] = fn(x[i], fparams) over contiguous pieces."""
    @generic_kernel("elementwise", name)
    def build():
        x, y = data("x", in_dtype), data("y", out_dtype)
        dims, fparams = dims_buffer(), fparams_buffer()
        n, piece = load(dims, 0), load(dims, 1)
        lanes = min(lanes_of(in_dtype), lanes_of(out_dtype))

        def one_piece(p):
            return _let("j0", p * piece, lambda j0: vector_loop(
                "i", E.minimum(piece, n - j0), lanes,
                lambda i: Store(y, j0 + i, fn(load(x, j0 + i), fparams))))
        body = loop("p", load(dims, 2), one_piece, ForKind.PARALLEL)
        return kernel(name, [x, y], body, dims, fparams)
    return build


def _f(v: E.Expr, value: float) -> E.Expr:
    return E.const(float(value), v.dtype)


def _p(fparams: Buffer, k: int) -> E.Expr:
    return load(fparams, k)


def _softplus(v):
    # as graph/ops/more.py: max(v, 0) + log1p(exp(-|v|)), no overflow for large |v|
    return E.maximum(v, _f(v, 0)) + E.call("log1p", E.exp(-E.abs(v)))


def _hard(v, alpha, beta):
    return E.minimum(E.maximum(v * alpha + beta, _f(v, 0)), _f(v, 1))


def _sign(v):
    zero = E.const(0, v.dtype)
    return E.select(zero < v, E.const(1, v.dtype), E.select(v < zero, E.const(-1, v.dtype),
                                                            zero))


_SQRT_2_PI = math.sqrt(2.0 / math.pi)

# float32 unary ops: fn(v, fparams); the fparams each reads are named in the lowering
UNARY_FLOAT = {
    "relu": lambda v, p: E.maximum(v, _f(v, 0)),
    "neg": lambda v, p: -v,
    "abs": lambda v, p: E.abs(v),
    "exp": lambda v, p: E.exp(v),
    "log": lambda v, p: E.log(v),
    "sqrt": lambda v, p: E.sqrt(v),
    "reciprocal": lambda v, p: _f(v, 1) / v,
    "erf": lambda v, p: E.erf(v),
    "tanh": lambda v, p: E.tanh(v),
    "sigmoid": lambda v, p: E.sigmoid(v),
    "hard_swish": lambda v, p: v * _hard(v, _f(v, 1 / 6), _f(v, 0.5)),
    "hard_sigmoid": lambda v, p: _hard(v, _p(p, 0), _p(p, 1)),                # alpha, beta
    "leaky_relu": lambda v, p: E.select(v > 0, v, v * _p(p, 0)),              # alpha
    "clip": lambda v, p: E.minimum(E.maximum(v, _p(p, 0)), _p(p, 1)),         # lo, hi
    "gelu": lambda v, p: 0.5 * v * (1.0 + E.erf(v * (1 / math.sqrt(2)))),
    "gelu_tanh": lambda v, p: 0.5 * v * (1.0 + E.tanh(
        _SQRT_2_PI * (v + 0.044715 * v * v * v))),
    "square": lambda v, p: v * v,       # pow(x, 2): as codegen/intrinsics._integer_power
    "cube": lambda v, p: v * v * v,     # pow(x, 3)
    "elu": lambda v, p: E.select(v < 0, _p(p, 0) * E.call("expm1", v), v),    # alpha
    "selu": lambda v, p: _p(p, 1) * E.select(                                 # alpha, gamma
        v <= 0, _p(p, 0) * E.call("expm1", v), v),
    "celu": lambda v, p: E.maximum(v, _f(v, 0)) + E.minimum(                   # alpha
        _f(v, 0), _p(p, 0) * E.call("expm1", v / _p(p, 0))),
    "thresholded_relu": lambda v, p: E.select(_p(p, 0) < v, v, _f(v, 0)),      # alpha
    "shrink": lambda v, p: E.select(v < -_p(p, 0), v + _p(p, 1), E.select(    # lambd, bias
        _p(p, 0) < v, v - _p(p, 1), _f(v, 0))),
    "softplus": lambda v, p: _softplus(v),
    "softsign": lambda v, p: v / (_f(v, 1) + E.abs(v)),
    "mish": lambda v, p: v * E.tanh(_softplus(v)),
    "swish": lambda v, p: v * E.sigmoid(_p(p, 0) * v),                        # alpha
    "sign": lambda v, p: _sign(v),
}
# graph/ops/more.py's math ops, each one intrinsic call
MATH = ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh",
        "atanh", "floor", "ceil", "round")
for _name in MATH:
    UNARY_FLOAT[_name] = (lambda n: lambda v, p: E.call(n, v))(_name)

for _name, _fn in UNARY_FLOAT.items():
    _contiguous(f"unary.{_name}", "float32", "float32", _fn)

# integer unary ops (kernel unary.<op>.<dtype>)
UNARY_INT = {"neg": lambda v, p: -v, "abs": lambda v, p: E.abs(v),
             "relu": lambda v, p: E.maximum(v, E.const(0, v.dtype)),
             "sign": lambda v, p: _sign(v)}
for (_name, _fn), _dtype in itertools.product(UNARY_INT.items(), ("int64", "int32")):
    _contiguous(f"unary.{_name}.{_dtype}", _dtype, _dtype, _fn)

_contiguous("unary.logical_not.bool", "bool", "bool", lambda v, p: ~v)
_contiguous("unary.is_nan", "float32", "bool", lambda v, p: v.ne(v))

# casts (kernel cast.<src>.<dst>): E.cast, as te/ops/elementwise.cast
CAST_DTYPES = ("float32", "int64", "int32", "bool", "float16")
for _src, _dst in itertools.permutations(CAST_DTYPES, 2):
    _contiguous(f"cast.{_src}.{_dst}", _src, _dst, (lambda d: lambda v, p: E.cast(v, d))(_dst))


# ------------------------------------------------------------------------------ strided

def _lets(pairs, body_of):
    """body_of([v...]) with each v bound to its value, in order (a later value may use the
    earlier vars): values read once, kept in registers, not reloaded in inner loops."""
    def bind(k, bound):
        if k == len(pairs):
            return body_of(bound)
        name, value = pairs[k]
        value = value(bound) if callable(value) else value
        return _let(name, value, lambda v: bind(k + 1, [*bound, v]))
    return bind(0, [])


def _strided(name: str, in_dtypes: tuple[str, ...], out_dtype: str, fn):
    """Register kernel `name`: out = fn(*inputs) under numpy broadcasting, as described in
    the module docstring."""
    @generic_kernel("elementwise", name)
    def build():
        ins = [data(f"x{k}", t) for k, t in enumerate(in_dtypes)]
        out = data("y", out_dtype)
        dims, fparams = dims_buffer(), fparams_buffer()
        n_dims = STRIDES + (OUTER + 1) * len(ins)
        lanes = min(lanes_of(t) for t in (*in_dtypes, out_dtype))

        def kernel_body(d):
            stride = lambda k, axis: d[STRIDES + (OUTER + 1) * k + axis]  # noqa: E731
            inner_stride = [stride(k, OUTER) for k in range(len(ins))]

            def inner(offsets, o_base, j0, length):
                """The block [j0, j0 + length) of one row: a fast path per pattern of inner
                strides in {0, 1}, then the general one."""
                def path(pattern):
                    def at(k, j):
                        if pattern is None:
                            return offsets[k] + (j0 + j) * inner_stride[k]
                        return offsets[k] + j0 + j if pattern[k] else offsets[k]

                    def body(j):
                        return Store(out, o_base + j0 + j,
                                     fn(*[load(x, at(k, j)) for k, x in enumerate(ins)]))
                    return vector_loop("j", length, 1 if pattern is None else lanes, body)

                stmt = path(None)
                for pattern in itertools.product((1, 0), repeat=len(ins)):
                    cond = E.all_of(*[inner_stride[k].eq(pattern[k]) for k in range(len(ins))])
                    stmt = IfThenElse(cond, path(pattern), stmt)
                return stmt

            def piece(p):
                # p -> (i0..i3, run r of i4, block b of j); q_k: p with the k last digits off
                # q = [p // blocks, that // runs (the row of i0..i3), that // n3, // n2, // n1]
                pairs = [("q0", p // d[BLOCKS]), ("q1", lambda v: v[0] // d[RUNS])]
                for axis in range(OUTER - 2, 0, -1):
                    pairs.append((f"q{OUTER - axis}", (lambda a: lambda v: v[-1] // d[a])(axis)))

                def with_digits(q):
                    b = p - q[0] * d[BLOCKS]
                    r = q[0] - q[1] * d[RUNS]
                    idx = [q[OUTER - 1]] + [q[OUTER - 1 - a] - q[OUTER - a] * d[a]
                                            for a in range(1, OUTER - 1)]
                    head = [sum((idx[a] * stride(k, a) for a in range(1, OUTER - 1)),
                                idx[0] * stride(k, 0)) for k in range(len(ins))]
                    row0 = q[1]           # (i0..i3) flattened
                    more = [("j0", b * d[BLOCK]), ("i4_0", r * d[RUN]),
                            ("row0", row0)] + [(f"h{k}", h) for k, h in enumerate(head)]

                    def go(v):
                        j0, i4_0, row0, head = v[0], v[1], v[2], v[3:]
                        length = E.minimum(d[BLOCK], d[N_INNER] - j0)

                        def rows(i4):
                            return _lets(
                                [(f"o{k}", head[k] + i4 * stride(k, OUTER - 1))
                                 for k in range(len(ins))] +
                                [("ob", (row0 * d[OUTER - 1] + i4) * d[N_INNER]),
                                 ("len", length)],
                                lambda w: inner(w[:len(ins)], w[len(ins)], j0, w[-1]))
                        return loop("i4", E.minimum(d[RUN], d[OUTER - 1] - i4_0), rows,
                                    start=i4_0)
                    return _lets(more, go)
                return _lets(pairs, with_digits)

            def group(g):
                return _let("p0", g * d[GROUP], lambda p0: loop(
                    "p", E.minimum(d[GROUP], d[PIECES] - p0), piece, start=p0))
            return loop("g", d[GROUPS], group, ForKind.PARALLEL)

        body = _lets([(f"d{k}", load(dims, k)) for k in range(n_dims)], kernel_body)
        return kernel(name, [*ins, out], body, dims, fparams)
    return build


def _trunc_div(a, b):
    """ONNX integer Div (toward zero) from floor division, as graph/lower_te.py's; a zero
    divisor gives 0 (codegen/emit_expr guards it: no trap)."""
    q = E.floordiv(a, b)
    inexact = E.floormod(a, b).ne(0) & (a < 0).ne(b < 0)
    return E.select(inexact, q + 1, q)


ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "max": E.maximum, "min": E.minimum}
COMPARE = {"equal": lambda a, b: a.eq(b), "less": lambda a, b: a < b,
           "greater": lambda a, b: b < a, "less_equal": lambda a, b: a <= b,
           "greater_equal": lambda a, b: b <= a}
LOGICAL = {"logical_and": lambda a, b: a & b, "logical_or": lambda a, b: a | b,
           "logical_xor": lambda a, b: a.ne(b)}

for (_name, _fn), _dtype in itertools.product(ARITH.items(), FLOAT_INT):
    _strided(f"binary.{_name}.{_dtype}", (_dtype, _dtype), _dtype, _fn)
_strided("binary.div.float32", ("float32", "float32"), "float32", lambda a, b: a / b)
_strided("binary.pow.float32", ("float32", "float32"), "float32", E.power)
for _dtype in ("int64", "int32"):
    _strided(f"binary.div.{_dtype}", (_dtype, _dtype), _dtype, _trunc_div)
for (_name, _fn), _dtype in itertools.product(COMPARE.items(), FLOAT_INT):
    _strided(f"binary.{_name}.{_dtype}", (_dtype, _dtype), "bool", _fn)
_strided("binary.equal.bool", ("bool", "bool"), "bool", lambda a, b: ~a.ne(b))
for _name, _fn in LOGICAL.items():
    _strided(f"binary.{_name}.bool", ("bool", "bool"), "bool", _fn)
for _dtype in (*FLOAT_INT, "bool"):
    _strided(f"where.{_dtype}", ("bool", _dtype, _dtype), _dtype, E.select)
