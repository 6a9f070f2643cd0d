"""Ops that order, accumulate or scatter along an axis: cumulative product, top-k, col2im
(the adjoint of im2col), max-unpooling and the determinant of small matrices.

Each is a few compute stages of reductions with conditions (`where=`), so they schedule,
fuse and tune like any other stage; none sorts in place.
"""
from __future__ import annotations

import itertools

from .. import expr as E
from .. import tensor as T
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ._common import check_tensor, normalize_axis
from .indexing import cumulative
from .tags import INJECTIVE, REDUCTION


def cumprod(x: Tensor, axis: int, exclusive: bool = False, reverse: bool = False,
            name: str | None = None) -> Tensor:
    """ONNX CumProd along `axis` (exclusive: the first element is 1)."""
    return cumulative("cumprod", T.prod, x, axis, exclusive, reverse, name)


def _with(p, axis: int, value) -> list:
    return [value if d == axis else p[d] for d in range(len(p))]


def topk(x: Tensor, k: int, axis: int = -1, largest: bool = True,
         name: str | None = None) -> tuple[Tensor, Tensor]:
    """ONNX TopK: the k largest (or smallest) elements along `axis`, sorted, and their int64
    indices; equal values keep their order (the lower index first). Three stages: every
    element's rank (how many elements come before it), the index of rank j, the value there."""
    check_tensor("topk", x)
    axis = normalize_axis("topk", x.name, axis, x.ndim)
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise TEError(f"topk(): k={k} is out of range for axis {axis} of extent {n}")
    r = reduce_axis(n, "r")

    def rank_body(*p):
        mine, other = x(*p), x(*_with(p, axis, r))
        beats = (mine < other) if largest else (other < mine)
        return T.sum(E.const(1, "int64"), axis=r,
                     where=beats | (other.eq(mine) & (r < p[axis])))

    rank = compute(x.shape, rank_body, name=f"{name or 'topk'}_rank", tag=REDUCTION)
    out_shape = tuple(k if d == axis else s for d, s in enumerate(x.shape))
    q = reduce_axis(n, "q")
    indices = compute(out_shape, lambda *p: T.min(
        E.cast(q, "int64"), axis=q, where=rank(*_with(p, axis, q)).eq(E.cast(p[axis], "int64"))),
        name=f"{name or 'topk'}_indices", tag=REDUCTION)
    values = compute(out_shape, lambda *p: x(*_with(p, axis, E.minimum(E.cast(
        indices(*p), "int32"), n - 1))), name=name or "topk", tag=INJECTIVE)
    return values, indices


def col2im(x: Tensor, image: tuple[int, ...], block: tuple[int, ...],
           strides: tuple[int, ...], dilations: tuple[int, ...],
           pads: tuple[int, ...], name: str | None = None) -> Tensor:
    """ONNX Col2Im: x [N, C * prod(block), L] (one column per sliding-block position) summed
    back into an image [N, C, *image]; pads = begins then ends, one per spatial axis."""
    check_tensor("col2im", x)
    nd = len(image)
    bsize = 1
    for b in block:
        bsize *= b
    if x.ndim != 3 or x.shape[1] % bsize:
        raise TEError(f"col2im(): input {list(x.shape)} must be [N, C * {bsize}, L]")
    counts = [(image[d] + pads[d] + pads[d + nd] - dilations[d] * (block[d] - 1) - 1)
              // strides[d] + 1 for d in range(nd)]
    total = 1
    for c in counts:
        total *= c
    if total != x.shape[2]:
        raise TEError(f"col2im(): {x.shape[2]} columns, but image {list(image)} with block "
                      f"{list(block)} has {counts} = {total} block positions")
    ks = [reduce_axis(b, f"k{d}") for d, b in enumerate(block)]

    def body(*p):
        n, c, y = p[0], p[1], p[2:]
        conds, col, blk = [], E.const(0, "int32"), E.const(0, "int32")
        for d in range(nd):
            off = y[d] + pads[d] - ks[d] * dilations[d]
            conds += [E.const(0, "int32") <= off, E.floormod(off, strides[d]).eq(0),
                      E.floordiv(off, strides[d]) < counts[d]]
            col = col * counts[d] + E.maximum(E.minimum(E.floordiv(off, strides[d]),
                                                        counts[d] - 1), 0)
            blk = blk * block[d] + ks[d]
        return T.sum(x(n, c * bsize + blk, col), axis=ks, where=E.all_of(*conds))

    return compute((x.shape[0], x.shape[1] // bsize) + tuple(image), body,
                   name=name or "col2im", tag=REDUCTION)


def max_unpool(x: Tensor, indices: Tensor, out_shape: tuple[int, ...],
               name: str | None = None) -> Tensor:
    """ONNX MaxUnpool: zeros of `out_shape` [N, C, *spatial] with x's values put back at
    `indices` (flat positions in the whole output, as MaxPool's Indices); an output point
    that several inputs name takes the last of them (as onnx's reference)."""
    check_tensor("max_unpool", x)
    spatial_in = x.shape[2:]
    rs = [reduce_axis(s, f"r{d}") for d, s in enumerate(spatial_in)]

    def first(*p):
        n, c, y = p[0], p[1], p[2:]
        flat = E.cast(n, "int64") * out_shape[1] + E.cast(c, "int64")
        for d, v in enumerate(y):
            flat = flat * out_shape[2 + d] + E.cast(v, "int64")
        pos = E.const(0, "int64")
        for d, r in enumerate(rs):
            pos = pos * spatial_in[d] + E.cast(r, "int64")
        return T.max(pos, axis=rs, where=E.cast(indices(n, c, *rs), "int64").eq(flat))

    found = compute(out_shape, first, name=f"{name or 'max_unpool'}_source", tag=REDUCTION)
    size = 1
    for s in spatial_in:
        size *= s

    def body(*p):
        n, c = p[0], p[1]
        pos = found(*p)
        reads = []
        rest = E.maximum(pos, E.const(0, "int64"))
        for s in reversed(spatial_in):
            reads.insert(0, E.cast(E.floormod(rest, s), "int32"))
            rest = E.floordiv(rest, s)
        return E.select(E.const(0, "int64") <= pos, x(n, c, *reads), E.const(0, x.dtype))

    return compute(out_shape, body, name=name or "max_unpool", tag=INJECTIVE)


def _permutation_sign(perm: tuple[int, ...]) -> int:
    sign, seen = 1, set()
    for start in range(len(perm)):
        if start in seen:
            continue
        length, j = 0, start
        while j not in seen:
            seen.add(j)
            j = perm[j]
            length += 1
        sign *= -1 if length % 2 == 0 else 1
    return sign


# the permutation expansion has n! * n terms: fine for the small matrices this is for
MAX_DET_ORDER = 4


def det(x: Tensor, name: str | None = None) -> Tensor:
    """ONNX Det over the last two axes of x [..., n, n], n <= MAX_DET_ORDER, by the
    permutation (Leibniz) expansion: one elementwise stage."""
    check_tensor("det", x)
    n = x.shape[-1]
    if x.ndim < 2 or x.shape[-2] != n:
        raise TEError(f"det(): input {list(x.shape)} must be [..., n, n]")
    if n > MAX_DET_ORDER:
        raise TEError(f"det(): a {n}x{n} matrix; det is built for n <= {MAX_DET_ORDER}")

    def body(*b):
        total = None
        for perm in itertools.permutations(range(n)):
            term = None
            for i, j in enumerate(perm):
                v = x(*b, i, j)
                term = v if term is None else term * v
            if _permutation_sign(perm) < 0:
                term = -term
            total = term if total is None else total + term
        return total if total is not None else E.const(1, x.dtype)

    return compute(x.shape[:-2], body, name=name or "det", tag=INJECTIVE)


def max_pool2d_indices(x: Tensor, pooled: Tensor, kernel, stride, padding, dilation,
                       ceil_mode: bool = False, storage_order: int = 0,
                       name: str | None = None) -> Tensor:
    """ONNX MaxPool's Indices output: for each window of x[N, C, H, W] the flat int64 index
    (row-major over the whole x, or with H and W swapped when storage_order=1) of the first
    tap equal to `pooled` (max_pool2d's result over the same windows)."""
    from .pooling import _Window   # the pooling window geometry, shared with max_pool2d
    base = name or "max_pool2d_indices"
    win = _Window(base, x, kernel, stride, padding, dilation, ceil_mode)
    _, channels, height, width = x.shape
    ry, rx = reduce_axis(win.kernel[0], "ry"), reduce_axis(win.kernel[1], "rx")

    def body(n, c, y, xx):
        ty, tx = win.taps(y, xx, ry, rx)
        h, w = ty - win.lo[0], tx - win.lo[1]
        inside = E.all_of(E.const(0, "int32") <= h, h < height, E.const(0, "int32") <= w,
                          w < width)
        value = x(n, c, E.maximum(E.minimum(h, height - 1), 0),
                  E.maximum(E.minimum(w, width - 1), 0))
        plane = (E.cast(n, "int64") * channels + E.cast(c, "int64")) * (height * width)
        inner = (E.cast(h, "int64") * width + E.cast(w, "int64") if storage_order == 0
                 else E.cast(w, "int64") * height + E.cast(h, "int64"))
        return T.min(plane + inner, axis=[ry, rx],
                     where=inside & value.eq(pooled(n, c, y, xx)))

    return compute(pooled.shape, body, name=base, tag=REDUCTION)


def ngram_counts(x: Tensor, grams: tuple[tuple[int, ...], ...], targets: tuple[int, ...],
                 out_size: int, max_skip: int, name: str | None = None) -> Tensor:
    """ONNX TfIdfVectorizer's term frequencies over integer rows x[B, C]: out[b, j] counts,
    for every gram whose target is j, the positions s and skip distances d (1 .. max_skip +
    1; unigrams once) with x[b, s + k * d] == gram[k] for every k. One reduction stage per
    gram, then one stage adding each gram's count into its output column."""
    check_tensor("ngram_counts", x)
    if x.ndim != 2:
        raise TEError(f"ngram_counts(): x must be [B, C], got {list(x.shape)}")
    rows, length = x.shape
    def counter(gram: tuple[int, ...], g: int):
        n = len(gram)
        skips = 1 if n == 1 else max_skip + 1
        rd, rs = reduce_axis(skips, f"d{g}"), reduce_axis(length, f"s{g}")

        def body(b):
            dist = rd + 1
            conds = [rs + dist * (n - 1) < length]
            for k, value in enumerate(gram):
                at = E.minimum(rs + dist * k, length - 1)
                conds.append(E.cast(x(b, at), "int64").eq(E.const(int(value), "int64")))
            return T.sum(E.const(1.0, "float32"), axis=[rd, rs], where=E.all_of(*conds))
        return compute((rows,), body, name=f"{name or 'ngram'}_count{g}", tag=REDUCTION)

    stages = [counter(gram, g) for g, gram in enumerate(grams)]

    def gather(b, j):
        total = E.const(0.0, "float32")
        for stage, target in zip(stages, targets):
            total = total + E.select(j.eq(int(target)), stage(b), E.const(0.0, "float32"))
        return total

    return compute((rows, out_size), gather, name=name or "ngram_counts", tag=INJECTIVE)
