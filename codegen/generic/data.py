"""Data-movement generic kernels: strided copies (transpose, slice, broadcast, split, concat)
and gathers. Every kernel moves elements of one SIZE (1, 2, 4 or 8 bytes, as int8..int64
buffers), so one kernel serves every dtype of that size (bool, float32, int64, ...).

copy.rows.<b>:  out[ooff + sum i_k*os_k + j] = in[ioff + sum i_k*is_k + j]   (k < 5, j < n5)
    the innermost dim is contiguous on both sides: vector copies of runs of n5 elements,
    cut into chunks of `chunk` elements so a few long runs still spread over the threads.
copy.tiles.<b>: out[ooff + sum i_k*os_k] = in[ioff + sum i_k*is_k]            (k < 6)
    any input strides (a transpose, a broadcast, a negative step); the output's innermost
    dim is contiguous (os5 = 1). Dims 4 and 5 are walked in TILE x TILE blocks, so a
    transpose reads and writes whole cache lines (the planner puts the input's unit-stride
    dim at 4).
    dims of both: [n0..n5, is0..is5, os0..os5, ioff, ooff, chunk, chunks]

gather.<b>.<i32|i64>: out[p, j, q] = data[p, clamp(wrap(idx[j])), q]
    dims: [pre, nidx, post, extent]; rows of `post` elements are vector copies (an embedding
    lookup copies table rows); post == 1 gathers single elements, vectorized over j.
gather_nd.<b>: out[t, q] = data[b(t)*bstride + sum_k clamp(wrap(idx[t, k])) * s_k + q]
    dims: [batches, per_batch, depth, rest, bstride, -, -, -, e_0..e_7, s_0..s_7]
gather_elements.<b>.<i32|i64>: out[p, a, q] = data[p, clamp(wrap(idx[p, a, q])), q]
    dims: [pre, nidx, post, extent]

Indices count from the end when negative (ONNX) and are CLAMPED into the axis: never a read
out of bounds. A clamped index is still a wrong answer; the model's index checks (RunChecks)
raise the error after the run.
"""
from __future__ import annotations

from ...schedule.ir import Allocate, Buffer, ForKind, IfThenElse, Scope, Store, seq
from ...te import expr as E
from .registry import data, dims_buffer, fparams_buffer, generic_kernel, kernel, load, \
    loop, vector_loop

RANK = 6                         # dims a copy takes (the planner merges and drops the rest)
N, IS, OS, IOFF, OOFF, CHUNK, CHUNKS = 0, 6, 12, 18, 19, 20, 21
ND_DEPTH = 8                     # index columns gather_nd takes
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


def _offset(dims: Buffer, base: int, coords) -> E.Expr:
    """dims[base + ioff/ooff] + sum coords[k] * dims[stride base + k]."""
    total = None
    for k, c in enumerate(coords):
        term = c * load(dims, base + k)
        total = term if total is None else total + term
    return total


def _copy_rows(size: int):
    @generic_kernel("data", f"copy.rows.{size}")
    def build():
        x, y = data("x", ELEMENT[size]), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        n = [load(dims, N + k) for k in range(RANK)]
        chunk, chunks = load(dims, CHUNK), load(dims, CHUNKS)
        outer = n[0] * n[1] * n[2] * n[3] * n[4]

        def row(t):
            r, c = E.floordiv(t, _positive(chunks)), E.floormod(t, _positive(chunks))
            at = _split(r, n[:5])
            start = c * chunk
            src = load(dims, IOFF) + _offset(dims, IS, at) + start
            dst = load(dims, OOFF) + _offset(dims, OS, at) + start
            count = E.minimum(chunk, n[5] - start)
            return vector_loop("j", count, lanes(size),
                               lambda j: Store(y, dst + j, load(x, src + j)))
        body = loop("t", outer * chunks, row, ForKind.PARALLEL)
        return kernel(f"data.copy.rows.{size}", [x, y], body, dims, fparams)
    return build


def _copy_tiles(size: int):
    side = tile(size)

    @generic_kernel("data", f"copy.tiles.{size}")
    def build():
        x, y = data("x", ELEMENT[size]), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        n = [load(dims, N + k) for k in range(RANK)]
        blocks4 = E.floordiv(n[4] + (side - 1), side)
        blocks5 = E.floordiv(n[5] + (side - 1), side)

        def block(t):
            at = _split(t, n[:4] + [blocks4, blocks5])
            b4, b5 = at[4] * side, at[5] * side
            src = load(dims, IOFF) + _offset(dims, IS, at[:4])
            dst = load(dims, OOFF) + _offset(dims, OS, at[:4])

            def line(i4):
                s = src + i4 * load(dims, IS + 4) + b5 * load(dims, IS + 5)
                d = dst + i4 * load(dims, OS + 4) + b5
                return vector_loop("j", E.minimum(E.const(side), n[5] - b5), side,
                                   lambda j: Store(y, d + j, load(x, s + j * load(dims, IS + 5))))
            return loop("i4", E.minimum(E.const(side), n[4] - b4), line, start=b4)
        body = loop("t", n[0] * n[1] * n[2] * n[3] * blocks4 * blocks5, block, ForKind.PARALLEL)
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
        pre, nidx, post, extent = (load(dims, k) for k in range(4))

        def row(t):
            p, j = E.floordiv(t, _positive(nidx)), E.floormod(t, _positive(nidx))
            src = (p * extent + _clamped(load(idx, j), extent)) * post
            return vector_loop("q", post, lanes(size),
                               lambda q: Store(y, t * post + q, load(x, src + q)))

        def singles(p):
            return vector_loop("j", nidx, 16, lambda j: Store(
                y, p * nidx + j, load(x, p * extent + _clamped(load(idx, j), extent))))
        body = IfThenElse(post.eq(1), loop("p", pre, singles, ForKind.PARALLEL),
                          loop("t", pre * nidx, row, ForKind.PARALLEL))
        return kernel(f"data.gather.{size}.{itype}", [x, idx, y], body, dims, fparams)
    return build


def _gather_nd(size: int):
    @generic_kernel("data", f"gather_nd.{size}")
    def build():
        x, idx, y = data("x", ELEMENT[size]), data("idx", "int64"), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        batches, per_batch, depth, rest, bstride = (load(dims, k) for k in range(5))
        at = Buffer("at", "int32", (1,), Scope.LOCAL)

        def row(t):
            column = lambda k: Store(at, E.const(0), load(at, 0) + _clamped(
                load(idx, t * depth + k), load(dims, 8 + k)) * load(dims, 16 + k))
            return Allocate(at, seq(
                Store(at, E.const(0), E.floordiv(t, _positive(per_batch)) * bstride),
                loop("k", depth, column),
                vector_loop("q", rest, lanes(size),
                            lambda q: Store(y, t * rest + q, load(x, load(at, 0) + q)))))
        body = loop("t", batches * per_batch, row, ForKind.PARALLEL)
        return kernel(f"data.gather_nd.{size}", [x, idx, y], body, dims, fparams)
    return build


def _gather_elements(size: int, itype: str):
    @generic_kernel("data", f"gather_elements.{size}.{itype}")
    def build():
        x, idx, y = data("x", ELEMENT[size]), data("idx", INDEX[itype]), data("y", ELEMENT[size])
        dims, fparams = dims_buffer(), fparams_buffer()
        pre, nidx, post, extent = (load(dims, k) for k in range(4))

        def row(t):
            p = E.floordiv(t, _positive(nidx))
            return vector_loop("q", post, 16, lambda q: Store(
                y, t * post + q,
                load(x, (p * extent + _clamped(load(idx, t * post + q), extent)) * post + q)))
        body = loop("t", pre * nidx, row, ForKind.PARALLEL)
        return kernel(f"data.gather_elements.{size}.{itype}", [x, idx, y], body, dims, fparams)
    return build


for _size in ELEMENT:
    _copy_rows(_size)
    _copy_tiles(_size)
    _gather_nd(_size)
    for _itype in INDEX:
        _gather(_size, _itype)
        _gather_elements(_size, _itype)
