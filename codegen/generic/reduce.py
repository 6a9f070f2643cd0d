"""Reduction generic kernels: reductions, softmax, log_softmax, layer_norm, cumsum and the
index checks' index_range.

A reduced tensor is viewed as x[outer, n, inner] (the lowering merges the reduced axes into
n, the axes before into outer and after into inner). Two paths, picked at run time:
- inner == 1 (reduce along contiguous memory): one row per PARALLEL iteration, reduced with
  a 64-lane accumulator (four independent vector chains), a 16-lane step, a scalar tail and
  a final fold of the lanes;
- inner > 1: a strip of 16 neighbouring inner positions per PARALLEL iteration, a 16-lane
  accumulator stepping over n (rows of stride inner); the positions a strip leaves over run
  one at a time.

reduce.{sum,max,min,prod,l2}(x, y)   dims [outer, n, inner]   fparams [scale]
    y[o, i] = post(reduce over r of x[o, r, i]); post: sum * scale (scale = 1/n makes the
    mean), sqrt for l2 (of the sum of squares), none for max/min/prod.
reduce.softmax / reduce.log_softmax(x, y)   dims [outer, n, inner]   fparams [floor]
    max-subtracted, as te/ops/nn.py: softmax's exp of a shifted logit below `floor` is 0
    (no denormals).
reduce.layer_norm(x, scale, bias, y)   dims [outer, n]   fparams [epsilon, 1/n]
    (x - mean) * rsqrt(var + epsilon) * scale[j] + bias[j] per row; two passes (mean first).
reduce.cumsum_f32 / reduce.cumsum_i64(x, y)   dims [outer, n, inner, reverse, exclusive]
reduce.index_range / reduce.index_range_i32(x, y)   dims [rows, k]: int64 (int32) indices
    x[rows, k] -> int64 y[k, 2] = (~min, max) of each column (as max(~v), max(v), which
    cannot overflow where -v can; index_bounds.RunChecks decodes it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ...schedule.ir import Allocate, Buffer, ForKind, IfThenElse, Scope, Store, seq
from ...te import expr as E
from .registry import data, dims_buffer, fparams_buffer, generic_kernel, kernel, load, loop, \
    vector_loop

LANES = 16
BLOCK = 4 * LANES
ZERO = E.const(0)


@dataclass(frozen=True)
class Reducer:
    """How to fold: the start value and the combining function, in `dtype`."""

    init: float | int
    combine: Callable[[E.Expr, E.Expr], E.Expr]
    dtype: str = "float32"

    def start(self) -> E.Expr:
        return E.const(self.init, self.dtype)


SUM = Reducer(0.0, lambda a, b: a + b)
MAX = Reducer(-math.inf, E.maximum)
MIN = Reducer(math.inf, E.minimum)
PROD = Reducer(1.0, lambda a, b: a * b)
I64_MAX = Reducer(-2 ** 63, E.maximum, "int64")


def _local(name: str, size: int, dtype: str = "float32") -> Buffer:
    return Buffer(name, dtype, (size,), Scope.LOCAL)


def _vec(width: int) -> ForKind:
    return ForKind.VECTORIZED if width > 1 else ForKind.SERIAL


def row_reduce(x: Buffer, base, n, red: Reducer, f, out: Buffer, tag: str):
    """out[0] = red over r < n of f(x[base + r]) (contiguous), vectorized."""
    acc = _local(f"acc{tag}", BLOCK, red.dtype)

    def fold_in(lanes):
        return lambda q: loop(f"j{tag}{lanes}", lanes, lambda j: Store(
            acc, j, red.combine(load(acc, j), f(load(x, base + q * lanes + j)))),
            ForKind.VECTORIZED)

    blocks = E.floordiv(n, BLOCK)
    vectors = E.floordiv(n, LANES)
    return Allocate(acc, seq(
        loop(f"i{tag}", BLOCK, lambda j: Store(acc, j, red.start()), ForKind.VECTORIZED),
        loop(f"b{tag}", blocks, fold_in(BLOCK)),
        loop(f"v{tag}", vectors - blocks * 4, fold_in(LANES), start=blocks * 4),
        loop(f"t{tag}", n - vectors * LANES, lambda r: Store(
            acc, ZERO, red.combine(load(acc, 0), f(load(x, base + r)))), start=vectors * LANES),
        *fold_lanes(acc, BLOCK, red, tag),
        Store(out, ZERO, load(acc, 0))))


def fold_lanes(acc: Buffer, lanes: int, red: Reducer, tag: str) -> list:
    """acc[0] = red over acc[0:lanes] as a tree of halving vector steps (a serial fold of
    the lanes was the slowest part of reducing short rows)."""
    steps = []
    while lanes > 1:
        lanes //= 2
        steps.append(loop(f"f{tag}{lanes}", lanes, lambda j, w=lanes: Store(
            acc, j, red.combine(load(acc, j), load(acc, j + w))), _vec(lanes)))
    return steps


def strip_reduce(x: Buffer, base, stride, n, width: int, red: Reducer, f, acc: Buffer,
                 tag: str):
    """acc[j] = red over r < n of f(x[base + r * stride + j], j) for j < width."""
    return seq(
        loop(f"i{tag}", width, lambda j: Store(acc, j, red.start()), _vec(width)),
        loop(f"r{tag}", n, lambda r: loop(f"j{tag}", width, lambda j: Store(
            acc, j, red.combine(load(acc, j), f(load(x, base + r * stride + j), j))),
            _vec(width))))


def strips(d, body_of: Callable[[E.Expr, E.Expr, int], object]):
    """PARALLEL over (outer, strip of 16 inner positions): body_of(o, i, width) for a full
    strip at inner position i, else for each position left over with width 1."""
    outer, inner = load(d, 0), load(d, 2)
    count = E.floordiv(inner + (LANES - 1), LANES)

    def task(t):
        o = E.floordiv(t, count)
        i0 = E.floormod(t, count) * LANES
        left = inner - i0
        return IfThenElse(left >= LANES, body_of(o, i0, LANES),
                          loop("is", left, lambda j: body_of(o, i0 + j, 1)))
    return loop("t", outer * count, task, ForKind.PARALLEL)


# -- reductions --------------------------------------------------------------------------------

def _reduction(name: str, red: Reducer, f, post):
    @generic_kernel("reduce", name)
    def build():
        x, y = data("x", "float32"), data("y", "float32")
        d, fp = dims_buffer(), fparams_buffer()
        n, inner = load(d, 1), load(d, 2)

        def rows(o):
            res = _local("res", 1)
            return Allocate(res, seq(row_reduce(x, o * n, n, red, f, res, "r"),
                                     Store(y, o, post(load(res, 0), fp))))

        def strip(o, i, width):
            acc = _local(f"sacc{width}", width)
            return Allocate(acc, seq(
                strip_reduce(x, o * n * inner + i, inner, n, width, red,
                             lambda v, j: f(v), acc, f"s{width}"),
                loop(f"o{width}", width, lambda j: Store(
                    y, o * inner + i + j, post(load(acc, j), fp)), _vec(width))))

        body = IfThenElse(inner.eq(1), loop("o", load(d, 0), rows, ForKind.PARALLEL),
                          strips(d, strip))
        return kernel(f"reduce.{name}", [x, y], body, d, fp)
    return build


def _same(v):
    return v


_reduction("sum", SUM, _same, lambda v, fp: v * load(fp, 0))
_reduction("max", MAX, _same, lambda v, fp: v)
_reduction("min", MIN, _same, lambda v, fp: v)
_reduction("prod", PROD, _same, lambda v, fp: v)
_reduction("l2", SUM, lambda v: v * v, lambda v, fp: E.sqrt(v))


# -- softmax, log_softmax ----------------------------------------------------------------------

def _flushed_exp(shifted, floor):
    """exp of a shifted logit, 0 below `floor` (te/ops/nn.softmax's denormal flush)."""
    return E.select(shifted < floor, E.const(0.0, "float32"),
                    E.exp(E.maximum(shifted, floor)))


def _softmax(log: bool):
    name = "log_softmax" if log else "softmax"

    @generic_kernel("reduce", name)
    def build():
        x, y = data("x", "float32"), data("y", "float32")
        d, fp = dims_buffer(), fparams_buffer()
        n, inner = load(d, 1), load(d, 2)
        floor = load(fp, 0)

        def rows(o):
            base = o * n
            peak, total = _local("peak", 1), _local("total", 1)
            m = load(peak, 0)
            if log:
                steps = [row_reduce(x, base, n, SUM, lambda v: E.exp(v - m), total, "s"),
                         vector_loop("w", n, LANES, lambda j: Store(
                             y, base + j, load(x, base + j) - m - E.log(load(total, 0))))]
            else:
                steps = [vector_loop("e", n, LANES, lambda j: Store(
                             y, base + j, _flushed_exp(load(x, base + j) - m, floor))),
                         row_reduce(y, base, n, SUM, _same, total, "s"),
                         vector_loop("w", n, LANES, lambda j: Store(
                             y, base + j, load(y, base + j) / load(total, 0)))]
            return Allocate(peak, Allocate(total, seq(
                row_reduce(x, base, n, MAX, _same, peak, "m"), *steps)))

        def strip(o, i, width):
            base = o * n * inner + i
            peak, total = _local(f"peak{width}", width), _local(f"total{width}", width)

            def each(tag, value_of):
                return loop(f"r{tag}{width}", n, lambda r: loop(
                    f"j{tag}{width}", width, lambda j: Store(
                        y, base + r * inner + j, value_of(base + r * inner + j, j)),
                    _vec(width)))
            if log:
                steps = [strip_reduce(x, base, inner, n, width, SUM,
                                      lambda v, j: E.exp(v - load(peak, j)), total,
                                      f"s{width}"),
                         each("w", lambda at, j: load(x, at) - load(peak, j)
                              - E.log(load(total, j)))]
            else:
                steps = [each("e", lambda at, j: _flushed_exp(load(x, at) - load(peak, j),
                                                              floor)),
                         strip_reduce(y, base, inner, n, width, SUM, lambda v, j: v, total,
                                      f"s{width}"),
                         each("w", lambda at, j: load(y, at) / load(total, j))]
            return Allocate(peak, Allocate(total, seq(
                strip_reduce(x, base, inner, n, width, MAX, lambda v, j: v, peak,
                             f"m{width}"), *steps)))

        body = IfThenElse(inner.eq(1), loop("o", load(d, 0), rows, ForKind.PARALLEL),
                          strips(d, strip))
        return kernel(f"reduce.{name}", [x, y], body, d, fp)
    return build


_softmax(False)
_softmax(True)


# -- layer_norm --------------------------------------------------------------------------------

@generic_kernel("reduce", "layer_norm")
def _layer_norm():
    x, scale, bias, y = (data("x", "float32"), data("scale", "float32"),
                         data("bias", "float32"), data("y", "float32"))
    d, fp = dims_buffer(), fparams_buffer()
    n, eps, inv_n = load(d, 1), load(fp, 0), load(fp, 1)

    def rows(o):
        base = o * n
        total, squares = _local("total", 1), _local("squares", 1)
        mean = load(total, 0) * inv_n
        return Allocate(total, Allocate(squares, seq(
            row_reduce(x, base, n, SUM, _same, total, "s"),
            row_reduce(x, base, n, SUM, lambda v: (v - mean) * (v - mean), squares, "q"),
            vector_loop("w", n, LANES, lambda j: Store(
                y, base + j, (load(x, base + j) - mean)
                * E.rsqrt(load(squares, 0) * inv_n + eps) * load(scale, j)
                + load(bias, j))))))

    body = loop("o", load(d, 0), rows, ForKind.PARALLEL)
    return kernel("reduce.layer_norm", [x, scale, bias, y], body, d, fp)


# -- cumsum ------------------------------------------------------------------------------------

def _cumsum(suffix: str, dtype: str):
    @generic_kernel("reduce", f"cumsum_{suffix}")
    def build():
        x, y = data("x", dtype), data("y", dtype)
        d, fp = dims_buffer(), fparams_buffer()
        n, inner, reverse, exclusive = load(d, 1), load(d, 2), load(d, 3), load(d, 4)

        def strip(o, i, width):
            acc = _local(f"run{width}", width, dtype)

            def step(r):
                at = o * n * inner + E.select(reverse.eq(1), n - 1 - r, r) * inner + i

                def lane(j):
                    total = load(acc, j) + load(x, at + j)
                    return seq(Store(y, at + j, E.select(exclusive.eq(1), load(acc, j),
                                                         total)),
                               Store(acc, j, total))
                return loop(f"j{width}", width, lane, _vec(width))
            return Allocate(acc, seq(
                loop(f"i{width}", width, lambda j: Store(acc, j, E.const(0, dtype)),
                     _vec(width)),
                loop(f"r{width}", n, step)))
        return kernel(f"reduce.cumsum_{suffix}", [x, y], strips(d, strip), d, fp)
    return build


_cumsum("f32", "float32")
_cumsum("i64", "int64")


# -- index_range -------------------------------------------------------------------------------

def _index_range(name: str, dtype: str):
    @generic_kernel("reduce", name)
    def build():
        x, y = data("x", dtype), data("y", "int64")
        d, fp = dims_buffer(), fparams_buffer()
        rows, k = load(d, 0), load(d, 1)

        def wide(v):
            return E.cast(v, "int64")

        def flip(v):
            return E.call("bit_not", wide(v))

        def column(j):
            low, high = _local("low", 1, "int64"), _local("high", 1, "int64")

            def scalar(f, out, tag):
                return seq(Store(out, ZERO, I64_MAX.start()), loop(
                    f"r{tag}", rows, lambda r: Store(
                        out, ZERO, E.maximum(load(out, 0), f(load(x, r * k + j))))))
            contiguous = seq(row_reduce(x, 0, rows, I64_MAX, flip, low, "l"),
                             row_reduce(x, 0, rows, I64_MAX, wide, high, "h"))
            strided = seq(scalar(flip, low, "l"), scalar(wide, high, "h"))
            return Allocate(low, Allocate(high, seq(
                IfThenElse(k.eq(1), contiguous, strided),
                Store(y, j * 2, load(low, 0)), Store(y, j * 2 + 1, load(high, 0)))))

        return kernel(f"reduce.{name}", [x, y], loop("j", k, column), d, fp)
    return build


_index_range("index_range", "int64")
_index_range("index_range_i32", "int32")
