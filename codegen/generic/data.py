"""Data-movement generic kernels: strided copies (transpose, slice, broadcast, split, concat)
and gathers. Every kernel moves elements of one SIZE (1, 2, 4 or 8 bytes, as int8..int64
buffers), so one kernel serves every dtype of that size (bool, float32, int64, ...).

copy.rows.<b>:  out[ooff + sum i_k*os_k + j] = in[ioff + sum i_k*is_k + j*is5]  (k < 5, j < n5)
    the innermost dim is contiguous on the output and contiguous (is5 = 1) or broadcast
    (is5 = 0) on the input: vector copies (or splats) of runs of n5 elements, cut into
    chunks of `chunk` elements so a few long runs still spread over the threads.
copy.tiles.<b>: out[ooff + sum i_k*os_k] = in[ioff + sum i_k*is_k]            (k < 6)
    any input strides (a transpose, a broadcast, a negative step); the output's innermost
    dim is contiguous (os5 = 1). Dims 4 and 5 are walked in TILE x TILE blocks, so a
    transpose reads and writes whole cache lines (the planner puts the input's unit-stride
    dim at 4).
    dims of both: [n0..n5, is0..is5, os0..os5, ioff, ooff, chunk, chunks, per]

gather.<b>.<i32|i64>: out[p, j, q] = data[p, clamp(wrap(idx[j])), q]
    dims: [pre, nidx, post, extent, per]; rows of `post` elements are vector copies (an
    embedding lookup copies table rows); post == 1 gathers single elements in blocks of
    BLOCK indices, vectorized over them.
gather_nd.<b>: out[t, q] = data[b(t)*bstride + sum_k clamp(wrap(idx[t, k])) * s_k + q]
    dims: [batches, per_batch, depth, rest, bstride, per, -, -, e_0..e_7, s_0..s_7]
gather_elements.<b>.<i32|i64>: out[p, a, q] = data[p, clamp(wrap(idx[p, a, q])), q]
    dims: [pre, nidx, post, extent, per]; post == 1 (the last axis) walks blocks of BLOCK
    indices, like gather's single elements.

Every kernel is a PARALLEL loop over tasks of `per` consecutive rows (or tiles) of a
row-major walk; a task divides its first position into coordinates once and carries them
from row to row (no integer division per row).

Indices count from the end when negative (ONNX) and are CLAMPED into the axis: never a read
out of bounds. A clamped index is still a wrong answer; the model's index checks (RunChecks)
raise the error after the run.
"""
from __future__ import annotations

from ...schedule.ir import Allocate, Buffer, ForKind, IfThenElse, Scope, Stmt, Store, seq
from ...te import expr as E
from .registry import data, dims_buffer, fparams_buffer, generic_kernel, kernel, load, \
    loop, vector_loop

RANK = 6                         # dims a copy takes (the planner merges and drops the rest)
N, IS, OS, IOFF, OOFF, CHUNK, CHUNKS, PER = 0, 6, 12, 18, 19, 20, 21, 22
ND_DEPTH = 8                     # index columns gather_nd takes
ND_PER = 5                       # where gather_nd's `per` is
BLOCK = 64                       # indices a single-element gather takes per row
ELEMENT = {1: "int8", 2: "int16", 4: "int32", 8: "int64"}
INDEX = {"i32": "int32", "i64": "int64"}
VECTOR_BYTES = 64


def lanes(size: int) -> int:
    """Lanes of a vector copy of `size`-byte elements: one 64-byte vector."""
    return VECTOR_BYTES // size


def tile(size: int) -> int:
    """The side of a transpose tile: a cache line of elements, at least 16."""
    return max(16, VECTOR_BYTES // size)


def _positive(e: E.Expr) -> E.Expr:
    """A run-time divisor never 0 (the loops it serves run 0 times when it is)."""
    return E.maximum(e, E.const(1))


def _split(flat: E.Expr, extents: list[E.Expr]) -> list[E.Expr]:
    """The coordinates of row-major position `flat` over `extents` (outermost first)."""
    out = []
    for n in reversed(extents[1:]):
        n = _positive(n)
        out.append(E.floormod(flat, n))
        flat = E.floordiv(flat, n)
    out.append(flat)
    return out[::-1]


def _local(name: str, n: int) -> Buffer:
    return Buffer(name, "int32", (n,), Scope.LOCAL)


def _with_local(buf: Buffer, values, body: Stmt) -> Stmt:
    """`buf` (scratch of one loop iteration) holds `values` while `body` runs."""
    return Allocate(buf, seq(*(Store(buf, E.const(k), v) for k, v in enumerate(values)), body))


def _advance(c: Buffer, extents: list[E.Expr]) -> Stmt:
    """c[last] += 1, carried into the outer coordinates at each extent."""
    def step(k):
        bump = Store(c, E.const(k), load(c, k) + 1)
        if k == 0:
            return bump
        return seq(bump, IfThenElse(load(c, k).eq(extents[k]),
                                    seq(Store(c, E.const(k), E.const(0)), step(k - 1))))
    return step(len(extents) - 1)


def _tasks(dims: Buffer, count: int, extents_of, per_of, body_of) -> Stmt:
    """A PARALLEL loop over tasks of per_of(d) consecutive positions of the row-major walk
    over extents_of(d); body_of(d, coords) runs at each position. d(k) reads dims[k]: inside
    a task from a local copy of dims[:count], because the parallel body reaches the kernel's
    arguments through a closure, where LLVM cannot prove that a store to the output leaves
    `dims` alone, and would reload (and re-divide) every dims value in every loop."""
    def total_of(d):
        total = None
        for n in extents_of(d):
            total = n if total is None else total * n
        return total

    outer = lambda k: load(dims, k)  # noqa: E731
    local = _local("d", count)
    inner = lambda k: load(local, k)  # noqa: E731
    extents = extents_of(inner)
    c = _local("c", len(extents))
    per, total = _positive(per_of(inner)), total_of(inner)

    def task(t):
        first = t * per
        walk = loop("r", E.minimum(per, total - first), lambda r: seq(
            body_of(inner, [load(c, k) for k in range(len(extents))]), _advance(c, extents)))
        return _with_local(local, [load(dims, k) for k in range(count)],
                           _with_local(c, _split(first, extents), walk))
    outer_per = _positive(per_of(outer))
    return loop("t", E.floordiv(total_of(outer) + outer_per - 1, outer_per), task,
                ForKind.PARALLEL)


def _offset(d, base: int, coords) -> E.Expr:
    """sum coords[k] * d(base + k)."""
    total = None
    for k, c in enumerate(coords):
        term = c * d(base + k)
        total = term if total is None else total + term
    return total


def _copy_rows(size: int):
    @generic_kernel("data", f"copy.rows.{size}")
    def build():
        x, y = data("x", ELEMENT[size]), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        at = _local("at", 3)

        def row(d, c):
            start = c[5] * d(CHUNK)
            count = load(at, 2)
            copy = vector_loop("j", count, lanes(size), lambda j: Store(
                y, load(at, 1) + j, load(x, load(at, 0) + j)))
            splat = vector_loop("j", count, lanes(size), lambda j: Store(
                y, load(at, 1) + j, load(x, load(at, 0))))
            return _with_local(at, [d(IOFF) + _offset(d, IS, c[:5]) + start * d(IS + 5),
                                    d(OOFF) + _offset(d, OS, c[:5]) + start,
                                    E.minimum(d(CHUNK), d(N + 5) - start)],
                               IfThenElse(d(IS + 5).eq(0), splat, copy))
        body = _tasks(dims, PER + 1, lambda d: [d(N + k) for k in range(5)] + [d(CHUNKS)],
                      lambda d: d(PER), row)
        return kernel(f"data.copy.rows.{size}", [x, y], body, dims, fparams)
    return build


def _copy_tiles(size: int):
    side = tile(size)

    @generic_kernel("data", f"copy.tiles.{size}")
    def build():
        x, y = data("x", ELEMENT[size]), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        at = _local("at", 4)

        def blocks(n):
            return E.floordiv(n + (side - 1), side)

        def block(d, c):
            b4, b5 = c[4] * side, c[5] * side
            head = [d(IOFF) + _offset(d, IS, c[:4]) + b4 * d(IS + 4) + b5 * d(IS + 5),
                    d(OOFF) + _offset(d, OS, c[:4]) + b4 * d(OS + 4) + b5,
                    E.minimum(E.const(side), d(N + 4) - b4),
                    E.minimum(E.const(side), d(N + 5) - b5)]
            # a serial inner loop: LLVM's own vectoriser does better with the run-time
            # stride than lane-by-lane loads (A/B in benchmarks/RESULTS.md)
            return _with_local(at, head, loop("i4", load(at, 2), lambda i4: loop(
                "j", load(at, 3), lambda j: Store(
                    y, load(at, 1) + i4 * d(OS + 4) + j,
                    load(x, load(at, 0) + i4 * d(IS + 4) + j * d(IS + 5))))))
        body = _tasks(dims, PER + 1,
                      lambda d: [d(N + k) for k in range(4)] + [blocks(d(N + 4)),
                                                                 blocks(d(N + 5))],
                      lambda d: d(PER), block)
        return kernel(f"data.copy.tiles.{size}", [x, y], body, dims, fparams)
    return build


def _clamped(index: E.Expr, extent: E.Expr) -> E.Expr:
    """An index (int32/int64) counted from the end when negative, clamped into
    [0, extent - 1], as int32. Done in the index's own width: a huge int64 index must not
    wrap into range when narrowed."""
    n = E.cast(extent, index.dtype)
    wrapped = E.select(index < E.const(0, index.dtype), index + n, index)
    inside = E.maximum(E.minimum(wrapped, n - E.const(1, index.dtype)), E.const(0, index.dtype))
    return E.cast(inside, "int32")


def _gather(size: int, itype: str):
    @generic_kernel("data", f"gather.{size}.{itype}")
    def build():
        x, idx, y = data("x", ELEMENT[size]), data("idx", INDEX[itype]), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        at = _local("at", 3)
        # d(0..4): pre, nidx, post, extent, per

        def row(d, c):
            p, j = c
            return _with_local(at, [(p * d(3) + _clamped(load(idx, j), d(3))) * d(2),
                                    (p * d(1) + j) * d(2)],
                               vector_loop("q", d(2), lanes(size), lambda q: Store(
                                   y, load(at, 1) + q, load(x, load(at, 0) + q))))

        def singles(d, c):
            p, b = c
            return _with_local(at, [p * d(3), p * d(1), b * BLOCK],
                               vector_loop("j", E.minimum(E.const(BLOCK), d(1) - load(at, 2)),
                                           16, lambda j: Store(
                                   y, load(at, 1) + load(at, 2) + j, load(x, load(at, 0) + _clamped(
                                       load(idx, load(at, 2) + j), d(3))))))
        rows = _tasks(dims, 5, lambda d: [d(0), d(1)], lambda d: d(4), row)
        single = _tasks(dims, 5, lambda d: [d(0), E.floordiv(d(1) + (BLOCK - 1), BLOCK)],
                        lambda d: d(4), singles)
        body = IfThenElse(load(dims, 2).eq(1), single, rows)
        return kernel(f"data.gather.{size}.{itype}", [x, idx, y], body, dims, fparams)
    return build


def _gather_nd(size: int):
    @generic_kernel("data", f"gather_nd.{size}")
    def build():
        x, idx, y = data("x", ELEMENT[size]), data("idx", "int64"), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        at = _local("at", 2)
        # d(0..5): batches, per_batch, depth, rest, bstride, per; e_k = d(8+k), s_k = d(16+k)

        def row(d, c):
            b, m = c
            column = lambda k: Store(at, E.const(0), load(at, 0) + _clamped(  # noqa: E731
                load(idx, load(at, 1) * d(2) + k), d(8 + k)) * d(16 + k))
            return _with_local(at, [b * d(4), b * d(1) + m], seq(
                loop("k", d(2), column),
                vector_loop("q", d(3), lanes(size), lambda q: Store(
                    y, load(at, 1) * d(3) + q, load(x, load(at, 0) + q)))))
        body = _tasks(dims, 16 + ND_DEPTH, lambda d: [d(0), d(1)], lambda d: d(ND_PER), row)
        return kernel(f"data.gather_nd.{size}", [x, idx, y], body, dims, fparams)
    return build


def _gather_elements(size: int, itype: str):
    @generic_kernel("data", f"gather_elements.{size}.{itype}")
    def build():
        x, idx, y = data("x", ELEMENT[size]), data("idx", INDEX[itype]), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        at = _local("at", 2)
        # d(0..4): pre, nidx, post, extent, per

        def row(d, c):
            p, a = c
            return _with_local(at, [p * d(3) * d(2), (p * d(1) + a) * d(2)],
                               vector_loop("q", d(2), 16, lambda q: Store(
                                   y, load(at, 1) + q, load(x, load(at, 0) + _clamped(
                                       load(idx, load(at, 1) + q), d(3)) * d(2) + q))))

        def singles(d, c):
            p, b = c
            return _with_local(at, [p * d(3), p * d(1) + b * BLOCK],
                               vector_loop("a", E.minimum(E.const(BLOCK), d(1) - b * BLOCK), 16,
                                           lambda a: Store(y, load(at, 1) + a, load(
                                               x, load(at, 0) + _clamped(
                                                   load(idx, load(at, 1) + a), d(3))))))
        rows = _tasks(dims, 5, lambda d: [d(0), d(1)], lambda d: d(4), row)
        single = _tasks(dims, 5, lambda d: [d(0), E.floordiv(d(1) + (BLOCK - 1), BLOCK)],
                        lambda d: d(4), singles)
        body = IfThenElse(load(dims, 2).eq(1), single, rows)
        return kernel(f"data.gather_elements.{size}.{itype}", [x, idx, y], body, dims, fparams)
    return build


for _size in ELEMENT:
    _copy_rows(_size)
    _copy_tiles(_size)
    _gather_nd(_size)
    for _itype in INDEX:
        _gather(_size, _itype)
        _gather_elements(_size, _itype)
