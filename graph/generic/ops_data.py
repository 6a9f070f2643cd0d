"""Data movement onto the generic copy and gather kernels (codegen/generic/data.py).

Every copy-like op (transpose, slice, broadcast_to, split, concat) is described as a walk over
its output's dims, each with an extent, an input stride and an output stride (elements), plus
start offsets; `plan_copy` then drops unit dims, merges dims that walk both sides evenly and
picks the kernel (contiguous rows or tiles). Kernels go by element size, not dtype.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ...codegen.generic.data import (BLOCK, CHUNK, CHUNKS, ELEMENT, IOFF, IS, N, ND_DEPTH,
                                     ND_PER, OOFF, OS, PER, RANK, tile)
from ...codegen.generic.registry import MAX_ELEMENTS
from .lowering import Unsupported, lowers, merge_dims

# a contiguous run longer than this is cut into chunks the threads share
CHUNK_ELEMENTS = 1 << 14
# a kernel's walk is cut into about this many tasks (the threads take runs of them; a task
# divides its first position into coordinates, then carries them)
TASKS = 64


# a call moving fewer bytes than this runs as one task, on the calling thread (the thread
# pool runs a loop of one iteration inline): waking the other thread cost more than it saved
# on copies up to 400 KB, and halved an 800 KB concat (benchmarks/RESULTS.md)
SERIAL_BYTES = 1 << 19


def per_task(positions: int, nbytes: int) -> int:
    """Positions (rows, tiles) per task of a walk over `positions` moving `nbytes`."""
    if nbytes < SERIAL_BYTES:
        return max(1, positions)
    return max(1, -(-positions // TASKS))


def contiguous_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= int(d)
    return out[::-1]


def element_size(ctx, arr: np.ndarray) -> int:
    size = arr.dtype.itemsize
    if size not in ELEMENT:
        raise Unsupported(ctx.describe(f"{arr.dtype} elements ({size} bytes) are not moved by "
                                       f"the generic kernels (sizes {sorted(ELEMENT)})"))
    return size


def _check_size(ctx, *arrays: np.ndarray) -> None:
    for a in arrays:
        if a.size > MAX_ELEMENTS:
            raise Unsupported(ctx.describe(f"an array of {a.size} elements is more than the "
                                           f"generic kernels index ({MAX_ELEMENTS})"))


def plan_copy(ctx, x: np.ndarray, y: np.ndarray, extents, istrides, ostrides,
              ioff: int = 0, ooff: int = 0) -> None:
    """Call a copy kernel: y[ooff + sum i_k*os_k] = x[ioff + sum i_k*is_k] over `extents`.
    A walk that would leave x or y is refused (a planning bug, never a stray access)."""
    _check_size(ctx, x, y)
    size = element_size(ctx, x)
    if any(int(n) == 0 for n in extents):
        return
    for arr, off, strides in ((x, ioff, istrides), (y, ooff, ostrides)):
        low = off + sum(min(0, (n - 1) * s) for n, s in zip(extents, strides))
        high = off + sum(max(0, (n - 1) * s) for n, s in zip(extents, strides))
        if low < 0 or high >= arr.size:
            raise Unsupported(ctx.describe(
                f"a copy over {list(extents)} would reach elements {low}..{high} of an array "
                f"of {arr.size}"))
    dims = merge_dims(extents, istrides, ostrides) or [(1, 1, 1)]
    if not any(o == 1 for _, _, o in dims):
        dims.append((1, 1, 1))        # a window one element wide: runs of one element
    inner = max(k for k in range(len(dims)) if dims[k][2] == 1)
    rest = dims[:inner] + dims[inner + 1:]
    if dims[inner][1] in (0, 1):       # contiguous or broadcast along the runs
        kernel, order = "rows", rest + [dims[inner]]
    else:
        # tiles: the dim the input walks with the smallest step goes next to the inner one
        near = min(range(len(rest)), key=lambda k: (abs(rest[k][1]) or 1 << 62, -k),
                   default=None)
        if near is None:
            order = [(1, 0, 0), dims[inner]]
        else:
            order = rest[:near] + rest[near + 1:] + [rest[near], dims[inner]]
        kernel = "tiles"
    if len(order) > RANK:
        raise Unsupported(ctx.describe(f"a copy over {len(order)} dims that do not merge "
                                       f"(the generic copy takes {RANK})"))
    order = [(1, 0, 0)] * (RANK - len(order)) + order
    d = [0] * (PER + 1)
    for k, (n, i, o) in enumerate(order):
        d[N + k], d[IS + k], d[OS + k] = n, i, o
    d[IOFF], d[OOFF] = ioff, ooff
    outer = int(np.prod([n for n, _, _ in order[:-2]]))
    nbytes = int(np.prod([n for n, _, _ in order])) * size
    if kernel == "rows":
        run = order[-1][0]
        outer *= order[-2][0]
        chunk = run if outer >= TASKS or run <= CHUNK_ELEMENTS else CHUNK_ELEMENTS
        d[CHUNK], d[CHUNKS] = chunk, -(-run // chunk)
        d[PER] = per_task(outer * d[CHUNKS], nbytes)
    else:
        side = tile(size)
        d[PER] = per_task(outer * -(-order[-2][0] // side) * -(-order[-1][0] // side),
                          nbytes)
    ctx.call(f"data.copy.{kernel}.{size}", [x, y], d)


# ------------------------------------------------------------------ copy-like ops
@lowers("transpose")
def _transpose(node, ctx):
    x, y = ctx.input(0), ctx.output(0)
    perm = [int(p) for p in node.attrs["perm"]]
    st = contiguous_strides(x.shape)
    plan_copy(ctx, x, y, y.shape, [st[p] for p in perm], contiguous_strides(y.shape))


def _slice_walk(ctx, shape, starts, ends, steps):
    """(extents, input strides, input offset) of a slice; checked to stay inside `shape`."""
    st = contiguous_strides(shape)
    extents, strides, off = [], [], 0
    for k, (dim, b, e, s) in enumerate(zip(shape, starts, ends, steps)):
        b, e, s = int(b), int(e), int(s)
        if s == 0:
            raise Unsupported(ctx.describe(f"slice step 0 on axis {k}"))
        n = len(range(b, e, s))
        if n and not (0 <= b < dim and 0 <= b + (n - 1) * s < dim):
            raise Unsupported(ctx.describe(f"slice of axis {k} (extent {dim}) from {b} to {e} "
                                           f"step {s} leaves the axis"))
        extents.append(n)
        strides.append(st[k] * s)
        off += (b * st[k]) if n else 0
    return extents, strides, off


@lowers("slice")
def _slice(node, ctx):
    x, y = ctx.input(0), ctx.output(0)
    a = node.attrs
    if not len(a["starts"]) == len(a["ends"]) == len(a["steps"]) == x.ndim:
        raise Unsupported(ctx.describe(f"slice attrs {dict(a)} do not cover the {x.ndim} "
                                       f"axes of the input"))
    extents, strides, off = _slice_walk(ctx, x.shape, a["starts"], a["ends"], a["steps"])
    if tuple(extents) != y.shape:
        raise Unsupported(ctx.describe(f"slice gives {extents}, the output is {list(y.shape)}"))
    plan_copy(ctx, x, y, extents, strides, contiguous_strides(y.shape), off)


@lowers("broadcast_to")
def _broadcast_to(node, ctx):
    x, y = ctx.input(0), ctx.output(0)
    lead = y.ndim - x.ndim
    if lead < 0:
        raise Unsupported(ctx.describe(f"broadcast of {list(x.shape)} to {list(y.shape)}"))
    st = contiguous_strides(x.shape)
    strides = []
    for k, n in enumerate(y.shape):
        if k < lead or x.shape[k - lead] == 1:
            strides.append(0)
        elif x.shape[k - lead] == n:
            strides.append(st[k - lead])
        else:
            raise Unsupported(ctx.describe(f"{list(x.shape)} does not broadcast to "
                                           f"{list(y.shape)}"))
    plan_copy(ctx, x, y, y.shape, strides, contiguous_strides(y.shape))


@lowers("split")
def _split(node, ctx):
    x = ctx.input(0)
    axis = int(node.attrs["axis"]) % max(x.ndim, 1)
    st = contiguous_strides(x.shape)
    at = 0
    for k in range(len(node.outputs)):
        y = ctx.output(k)
        plan_copy(ctx, x, y, y.shape, st, contiguous_strides(y.shape), at * st[axis])
        at += y.shape[axis]
    if at != x.shape[axis]:
        raise Unsupported(ctx.describe(f"split parts cover {at} of axis {axis}'s "
                                       f"{x.shape[axis]}"))


@lowers("concat")
def _concat(node, ctx):
    y = ctx.output(0)
    axis = int(node.attrs["axis"]) % max(y.ndim, 1)
    ost = contiguous_strides(y.shape)
    at = 0
    for k in range(len(node.inputs)):
        x = ctx.input(k)
        if x.dtype != y.dtype:
            raise Unsupported(ctx.describe(f"concat of {x.dtype} into {y.dtype}"))
        plan_copy(ctx, x, y, x.shape, contiguous_strides(x.shape), ost, 0, at * ost[axis])
        at += x.shape[axis]
    if at != y.shape[axis]:
        raise Unsupported(ctx.describe(f"concat inputs fill {at} of axis {axis}'s "
                                       f"{y.shape[axis]}"))


# ------------------------------------------------------------------ gathers
def _index_type(ctx, idx: np.ndarray, allowed=("int32", "int64")) -> str:
    if idx.dtype.name not in allowed:
        raise Unsupported(ctx.describe(f"indices of dtype {idx.dtype}; the generic gathers "
                                       f"take {', '.join(allowed)}"))
    return "i32" if idx.dtype == np.int32 else "i64"


def _nothing_to_read(ctx, y: np.ndarray, extent: int) -> bool:
    """True when the output is empty (no call); Unsupported when it is not but the axis it
    reads is (every index is out of range: clamping has nothing to clamp to)."""
    if y.size == 0:
        return True
    if extent == 0:
        raise Unsupported(ctx.describe("indices into an empty axis"))
    return False


@lowers("gather")
def _gather(node, ctx):
    x, idx, y = ctx.input(0), ctx.input(1), ctx.output(0)
    _check_size(ctx, x, idx, y)
    axis = int(node.attrs["axis"]) % max(x.ndim, 1)
    itype, size = _index_type(ctx, idx), element_size(ctx, x)
    extent = x.shape[axis]
    if _nothing_to_read(ctx, y, extent):
        return
    pre, post = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
    rows = pre * (idx.size if post > 1 else -(-idx.size // BLOCK))
    ctx.call(f"data.gather.{size}.{itype}", [x, idx, y],
             [pre, idx.size, post, extent, per_task(rows, y.nbytes)])


@lowers("gather_elements")
def _gather_elements(node, ctx):
    x, idx, y = ctx.input(0), ctx.input(1), ctx.output(0)
    _check_size(ctx, x, idx, y)
    axis = int(node.attrs["axis"]) % max(x.ndim, 1)
    itype, size = _index_type(ctx, idx), element_size(ctx, x)
    if any(i != d for k, (i, d) in enumerate(zip(idx.shape, x.shape)) if k != axis):
        raise Unsupported(ctx.describe(f"indices {list(idx.shape)} differ from the data "
                                       f"{list(x.shape)} off axis {axis}"))
    extent = x.shape[axis]
    if _nothing_to_read(ctx, y, extent):
        return
    pre, post = int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis + 1:]))
    nidx = idx.shape[axis]
    rows = pre * (nidx if post > 1 else -(-nidx // BLOCK))
    ctx.call(f"data.gather_elements.{size}.{itype}", [x, idx, y],
             [pre, nidx, post, extent, per_task(rows, y.nbytes)])


@lowers("gather_nd")
def _gather_nd(node, ctx):
    x, idx, y = ctx.input(0), ctx.input(1), ctx.output(0)
    _check_size(ctx, x, idx, y)
    _index_type(ctx, idx, ("int64",))
    size = element_size(ctx, x)
    b = int(node.attrs.get("batch_dims", 0))
    depth = idx.shape[-1] if idx.ndim else 0
    if not 1 <= depth <= ND_DEPTH or b + depth > x.ndim or idx.shape[:b] != x.shape[:b]:
        raise Unsupported(ctx.describe(f"gather_nd of {list(x.shape)} by indices "
                                       f"{list(idx.shape)} with batch_dims {b} (at most "
                                       f"{ND_DEPTH} index columns)"))
    axes = x.shape[b:b + depth]
    if _nothing_to_read(ctx, y, min(axes)):
        return
    batches = int(np.prod(x.shape[:b]))
    per_batch = int(np.prod(idx.shape[b:-1]))
    rest = int(np.prod(x.shape[b + depth:]))
    st = contiguous_strides(x.shape)
    d = [batches, per_batch, depth, rest, int(np.prod(x.shape[b:])), 0, 0, 0]
    d[ND_PER] = per_task(batches * per_batch, y.nbytes)
    d += list(axes) + [1] * (ND_DEPTH - depth) + st[b:b + depth]
    ctx.call(f"data.gather_nd.{size}", [x, idx, y], d)

