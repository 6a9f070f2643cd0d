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
    index divisions happen once a piece, not once a row). The inner loop is vectorized, one
    version per pattern of the inputs' inner strides (each 1, or 0 where it broadcasts).
    dims: the layout below (N_INNER... STRIDES), filled by graph/generic/ops_elementwise.py.
    Values every inner loop reads sit in a LOCAL buffer (_Registers).
"""
from __future__ import annotations

import itertools
import math

from ...schedule.ir import Allocate, Buffer, ForKind, IfThenElse, Scope, Store, seq
from ...te import expr as E
from ...te.errors import CodegenError
from .registry import (FPARAMS, data, dims_buffer, fparams_buffer, generic_kernel, kernel,
                       load, loop, vector_loop)

LANES = 16      # float32 lanes of a vector loop (LLVM splits it for narrower ISAs)

# the strided kernels' dims layout
OUTER = 5                                            # outer dims i0..i4
# dims[0:OUTER] are the outer sizes n0..n4, then:
N_INNER, BLOCK, BLOCKS, RUN, RUNS, PIECES, GROUP, GROUPS = range(OUTER, OUTER + 8)
STRIDES = OUTER + 8             # then per input k: its OUTER outer strides and its inner one

# the value dtypes of the binary kernels and where: the models' (int32 tensors are rare
# in them; each binary kernel adds ~0.25 s to the family's one-off compile)
FLOAT_INT = ("float32", "int64")


def lanes_of(dtype: str) -> int:
    """Vector lanes for a loop over `dtype` values (a 512-bit vector of 4-byte ones)."""
    return 8 if dtype in ("int64", "float64") else LANES


class _Registers:
    """Named int32 scalars of a kernel in a LOCAL buffer with constant indices, which LLVM
    promotes to registers. A PARALLEL loop's outlined body reads its buffers through pointers
    without noalias, so a value recomputed from `dims` inside an inner loop would be reloaded
    and re-divided every iteration; one stored here once is not (the loop IR has no let, and
    a one-iteration loop is inlined by schedule/passes/unit_loops.py)."""

    def __init__(self, name: str, size: int):
        self.buffer = Buffer(name, "int32", (size,), Scope.LOCAL)
        self.slots: dict[str, int] = {}

    def set(self, name: str, value) -> Store:
        slot = self.slots.setdefault(name, len(self.slots))
        if slot >= self.buffer.shape[0]:
            raise CodegenError(f"kernel registers: more than {self.buffer.shape[0]}")
        return Store(self.buffer, E.const(slot), E.const(value) if isinstance(value, int)
                     else value)

    def __getitem__(self, name: str) -> E.Expr:
        return load(self.buffer, self.slots[name])


# ------------------------------------------------------------------------------ unary

def _contiguous(name: str, in_dtype: str, out_dtype: str, fn):
    """Register kernel `name`: y[i] = fn(x[i], fparams) over contiguous pieces."""
    @generic_kernel("elementwise", name)
    def build():
        x, y = data("x", in_dtype), data("y", out_dtype)
        dims, fparams = dims_buffer(), fparams_buffer()
        reg = _Registers("regs", 4)
        params = Buffer("params", "float32", (FPARAMS,), Scope.LOCAL)
        lanes = min(lanes_of(in_dtype), lanes_of(out_dtype))

        def one_piece(p):
            stmts = [reg.set("j0", p * load(dims, 1))]
            j0 = reg["j0"]
            stmts.append(reg.set("len", E.minimum(load(dims, 1), load(dims, 0) - j0)))
            stmts += [Store(params, E.const(k), load(fparams, k)) for k in range(FPARAMS)]
            stmts.append(vector_loop("i", reg["len"], lanes,
                                     lambda i: Store(y, j0 + i, fn(load(x, j0 + i), params))))
            return Allocate(reg.buffer, Allocate(params, seq(*stmts)))
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
# is_inf: fparams [detect +inf, detect -inf] (1 or 0)
_contiguous("unary.is_inf", "float32", "bool", lambda v, p: (
    v.eq(_f(v, math.inf)) & _p(p, 0).ne(_f(v, 0))) | (v.eq(_f(v, -math.inf)) & _p(p, 1).ne(
        _f(v, 0))))

# casts (kernel cast.<src>.<dst>): E.cast, as te/ops/elementwise.cast
CAST_DTYPES = ("float32", "int64", "int32", "bool", "float16")
for _src, _dst in itertools.permutations(CAST_DTYPES, 2):
    _contiguous(f"cast.{_src}.{_dst}", _src, _dst, (lambda d: lambda v, p: E.cast(v, d))(_dst))


# ------------------------------------------------------------------------------ strided

def _strided(name: str, in_dtypes: tuple[str, ...], out_dtype: str, fn):
    """Register kernel `name`: out = fn(*inputs) under numpy broadcasting, as described in
    the module docstring."""
    @generic_kernel("elementwise", name)
    def build():
        ins = [data(f"x{k}", t) for k, t in enumerate(in_dtypes)]
        n_in = len(ins)
        out = data("y", out_dtype)
        dims, fparams = dims_buffer(), fparams_buffer()
        n_dims = STRIDES + (OUTER + 1) * n_in
        lanes = min(lanes_of(t) for t in (*in_dtypes, out_dtype))
        reg = _Registers("regs", n_dims + 32)
        for k in range(n_dims):       # the first n_dims slots hold dims
            reg.slots[f"d{k}"] = k
        d = [reg[f"d{k}"] for k in range(n_dims)]
        stride = lambda k, axis: d[STRIDES + (OUTER + 1) * k + axis]  # noqa: E731
        inner_stride = [stride(k, OUTER) for k in range(n_in)]

        def inner():
            """The block [j0, j0 + len) of one row: a vector loop per pattern of inner strides
            in {0, 1} (the only ones of contiguous inputs: an input's stride along the
            output's innermost dim is 1, or 0 where it broadcasts); any other stride runs
            nothing (the planner never passes one)."""
            def path(pattern):
                def at(k, j):
                    return reg[f"o{k}"] + reg["j0"] + j if pattern[k] else reg[f"o{k}"]

                def body(j):
                    return Store(out, reg["ob"] + reg["j0"] + j,
                                 fn(*[load(x, at(k, j)) for k, x in enumerate(ins)]))
                return vector_loop("j", reg["len"], lanes, body)

            stmt = None
            for pattern in itertools.product((0, 1), repeat=n_in):
                if not any(pattern):    # the output's inner dim is some input's
                    continue
                cond = E.all_of(*[inner_stride[k].eq(pattern[k]) for k in range(n_in)])
                stmt = IfThenElse(cond, path(pattern), stmt)
            return stmt

        def row(i4):
            return seq(*[reg.set(f"o{k}", reg[f"h{k}"] + i4 * stride(k, OUTER - 1))
                         for k in range(n_in)],
                       reg.set("ob", (reg["row0"] * d[OUTER - 1] + i4) * d[N_INNER]),
                       inner())

        def piece(p):
            # p -> (i0..i3, run r of i4, block b of j): q0 = p // blocks, q1 = q0 // runs
            # (the row of i0..i3), then // n3, // n2, // n1
            stmts = [reg.set("q0", p // d[BLOCKS]), reg.set("q1", reg["q0"] // d[RUNS])]
            for k, axis in enumerate(range(OUTER - 2, 0, -1), start=2):
                stmts.append(reg.set(f"q{k}", reg[f"q{k - 1}"] // d[axis]))
            q = [reg[f"q{k}"] for k in range(OUTER)]
            idx = [q[OUTER - 1]] + [q[OUTER - 1 - a] - q[OUTER - a] * d[a]
                                    for a in range(1, OUTER - 1)]
            stmts += [reg.set(f"h{k}", sum((idx[a] * stride(k, a) for a in range(1, OUTER - 1)),
                                            idx[0] * stride(k, 0))) for k in range(n_in)]
            stmts += [reg.set("row0", q[1]),
                      reg.set("j0", (p - q[0] * d[BLOCKS]) * d[BLOCK]),
                      reg.set("i40", (q[0] - q[1] * d[RUNS]) * d[RUN])]
            stmts.append(reg.set("len", E.minimum(d[BLOCK], d[N_INNER] - reg["j0"])))
            stmts.append(loop("i4", E.minimum(d[RUN], d[OUTER - 1] - reg["i40"]), row,
                              start=reg["i40"]))
            return seq(*stmts)

        def group(g):
            return Allocate(reg.buffer, seq(
                *[Store(reg.buffer, E.const(k), load(dims, k)) for k in range(n_dims)],
                reg.set("p0", g * d[GROUP]),
                loop("p", E.minimum(d[GROUP], d[PIECES] - reg["p0"]), piece,
                     start=reg["p0"])))
        body = loop("g", load(dims, GROUPS), group, ForKind.PARALLEL)
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
_strided("binary.prelu.float32", ("float32", "float32"), "float32",     # graph/ops/more.py
         lambda x, s: E.select(x < E.const(0.0, x.dtype), x * s, x))
_strided("binary.div.int64", ("int64", "int64"), "int64", _trunc_div)
for (_name, _fn), _dtype in itertools.product(COMPARE.items(), FLOAT_INT):
    _strided(f"binary.{_name}.{_dtype}", (_dtype, _dtype), "bool", _fn)
_strided("binary.equal.bool", ("bool", "bool"), "bool", lambda a, b: ~a.ne(b))
for _name, _fn in LOGICAL.items():
    _strided(f"binary.{_name}.bool", ("bool", "bool"), "bool", _fn)
for _dtype in (*FLOAT_INT, "bool"):
    _strided(f"where.{_dtype}", ("bool", _dtype, _dtype), _dtype, E.select)
