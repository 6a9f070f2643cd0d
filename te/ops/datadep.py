"""Ops whose output length depends on the data: NonZero, Unique, NonMaxSuppression.

Each writes into a buffer of its static upper bound (the padded output) and computes, in the
same DAG, how many leading entries are real (`count`, int64[1]); whoever runs the kernel trims
the padded output to the count (graph/runtime/staged.py). Like topk (ordering.py) they are compute
stages of reductions with conditions, never an in-place sort: an element's output position is
the number of elements that come before it, so the stages schedule and fuse like any other.
"""
from __future__ import annotations

import math

from .. import expr as E
from .. import tensor as T
from ..errors import TEError
from ..tensor import Tensor, compute, reduce_axis
from ._common import check_tensor, normalize_axis
from .tags import INJECTIVE, REDUCTION

_I64 = "int64"


def _one() -> E.Expr:
    return E.const(1, _I64)


def _i64(v) -> E.Expr:
    return E.cast(v, _I64)


def _unravel(flat, shape: tuple[int, ...]) -> list:
    """The row-major coordinates (int32) of flat position `flat` in `shape`."""
    coords, rest = [], flat
    for s in reversed(shape):
        coords.insert(0, E.floormod(rest, s))
        rest = E.floordiv(rest, s)
    return coords


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def nonzero(x: Tensor, name: str | None = None) -> tuple[Tensor, Tensor]:
    """ONNX NonZero: int64[rank, numel] whose first `count` columns are the coordinates of
    x's non-zero elements in row-major order (NaN counts as non-zero), and count int64[1].

    Positions in two levels, blocks of about sqrt(numel) elements: each block's count, where
    each block starts (the counts before it) and each element's position inside its block;
    output column k then finds its block, and the element inside it. O(numel^1.5) work."""
    check_tensor("nonzero", x)
    if x.ndim == 0:
        raise TEError("nonzero(): a rank-0 input has no coordinates to list")
    name = name or "nonzero"
    n = _numel(x.shape)
    size = max(1, math.isqrt(n - 1) + 1)     # block size: ceil(sqrt(n))
    blocks = -(-n // size)
    zero, i64_0 = E.const(0, x.dtype), E.const(0, _I64)

    def flag(i):      # 1 for a non-zero element at flat position i (i < n), else 0
        at = E.minimum(i, n - 1)
        return E.select((i < n) & x(*_unravel(at, x.shape)).ne(zero), _one(), i64_0)

    r = reduce_axis(size, "r")
    block_count = compute((blocks,), lambda b: T.sum(flag(b * size + r), axis=r),
                          name=f"{name}_block_count", tag=REDUCTION)
    p = reduce_axis(blocks, "p")
    block_start = compute((blocks,), lambda b: T.sum(block_count(p), axis=p, where=p < b),
                          name=f"{name}_block_start", tag=REDUCTION)
    w = reduce_axis(size, "w")
    within = compute((n,), lambda i: T.sum(flag(E.floordiv(i, size) * size + w), axis=w,
                                            where=w < E.floormod(i, size)),
                     name=f"{name}_within", tag=REDUCTION)
    c = reduce_axis(blocks, "c")
    count = compute((1,), lambda _: T.sum(block_count(c), axis=c), name=f"{name}_count",
                    tag=REDUCTION)
    o = reduce_axis(blocks, "o")
    # the block holding output column k: the last non-empty one starting at or before k
    owner = compute((n,), lambda k: T.max(o, axis=o, where=(block_start(o) <= _i64(k))
                                          & (i64_0 < block_count(o))),
                    name=f"{name}_owner", tag=REDUCTION)
    q = reduce_axis(size, "q")

    def source(k):
        b = E.maximum(E.minimum(owner(k), blocks - 1), 0)
        i = b * size + q
        at = E.minimum(i, n - 1)
        return T.min(_i64(i), axis=q, where=flag(i).eq(_one())
                     & within(at).eq(_i64(k) - block_start(b)))

    src = compute((n,), source, name=f"{name}_src", tag=REDUCTION)

    def coord(d, k):
        s = src(k)
        digits = _unravel(E.minimum(s, E.const(n - 1, _I64)), x.shape)
        out = _i64(digits[-1])
        for j in range(x.ndim - 2, -1, -1):
            out = E.select(d.eq(j), _i64(digits[j]), out)
        return E.select((s < n) & (_i64(k) < count(0)), out, i64_0)

    coords = compute((x.ndim, n), coord, name=name, tag=INJECTIVE)
    return coords, count


def unique(x: Tensor, axis: int | None, sorted: bool,  # noqa: A002 (ONNX's name)
           name: str | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
    """ONNX Unique over the flattened x (axis None) or over the slices along `axis`: padded
    Y (the unique values/slices, sorted ascending or in order of first occurrence), indices
    (each one's first occurrence), inverse_indices (exact: each element's / slice's position
    in Y), counts, and count int64[1]. Slices compare lexicographically, as numpy's unique."""
    check_tensor("unique", x)
    name = name or "unique"
    if axis is None:
        n, m = _numel(x.shape), 1

        def elem(i, e):
            return x(*_unravel(i, x.shape))
    else:
        axis = normalize_axis("unique", x.name, axis, x.ndim)
        n = x.shape[axis]
        rest = tuple(s for d, s in enumerate(x.shape) if d != axis)
        m = _numel(rest)

        def elem(i, e):
            idx = _unravel(e, rest) if rest else []
            return x(*(idx[:axis] + [i] + idx[axis:]))

    if m == 1:   # NaNs are one value, sorted last (numpy's unique, equal_nan)
        def same(a, b):
            va, vb = elem(a, 0), elem(b, 0)
            return va.eq(vb) | (va.ne(va) & vb.ne(vb))

        def less(a, b):
            va, vb = elem(a, 0), elem(b, 0)
            return (va < vb) | (va.eq(va) & vb.ne(vb))
    else:
        e = reduce_axis(m, "e")
        # the first element at which slices a and b differ (the identity when they are equal)
        differ = compute((n, n), lambda a, b: T.min(e, axis=e, where=elem(a, e).ne(elem(b, e))),
                         name=f"{name}_differ", tag=REDUCTION)

        def same(a, b):
            return differ(a, b) >= m

        def less(a, b):
            at = E.minimum(differ(a, b), m - 1)
            return (differ(a, b) < m) & (elem(a, at) < elem(b, at))

    r = reduce_axis(n, "r")
    first = compute((n,), lambda i: T.min(_i64(r), axis=r, where=same(r, i)),
                    name=f"{name}_first", tag=REDUCTION)

    def is_first(i):
        return first(i).eq(_i64(i))

    s = reduce_axis(n, "s")
    if sorted:   # the number of distinct values/slices below this one
        rank = compute((n,), lambda i: T.sum(_one(), axis=s, where=is_first(s) & less(s, i)),
                       name=f"{name}_inverse", tag=REDUCTION)
    else:        # the number of distinct ones that first occur before this one's first
        rank = compute((n,), lambda i: T.sum(_one(), axis=s, where=is_first(s)
                                             & (_i64(s) < first(i))),
                       name=f"{name}_inverse", tag=REDUCTION)
    c = reduce_axis(n, "c")
    count = compute((1,), lambda _: T.sum(_one(), axis=c, where=is_first(c)),
                    name=f"{name}_count", tag=REDUCTION)
    q = reduce_axis(n, "q")
    src = compute((n,), lambda k: T.min(_i64(q), axis=q, where=is_first(q)
                                        & rank(q).eq(_i64(k))),
                  name=f"{name}_indices_raw", tag=REDUCTION)
    indices = compute((n,), lambda k: E.select(src(k) < n, src(k), E.const(0, _I64)),
                      name=f"{name}_indices", tag=INJECTIVE)
    w = reduce_axis(n, "w")
    counts = compute((n,), lambda k: T.sum(_one(), axis=w, where=rank(w).eq(_i64(k))),
                     name=f"{name}_counts", tag=REDUCTION)

    def value(*p):
        if axis is None:
            return elem(E.cast(E.minimum(src(p[0]), n - 1), "int32"), 0)
        at = E.cast(E.minimum(src(p[axis]), n - 1), "int32")
        return x(*(p[:axis] + (at,) + p[axis + 1:]))

    y_shape = (n,) if axis is None else x.shape
    y = compute(y_shape, value, name=name, tag=INJECTIVE)
    return y, indices, rank, counts, count


def _corners(box, center: bool):
    """(x_min, x_max, y_min, y_max) of a box as onnx's reference NonMaxSuppression reads it:
    [y1, x1, y2, x2] in any corner order, or [x_center, y_center, width, height]."""
    if center:
        hw, hh = box(2) / 2, box(3) / 2
        return box(0) - hw, box(0) + hw, box(1) - hh, box(1) + hh
    return (E.minimum(box(1), box(3)), E.maximum(box(1), box(3)),
            E.minimum(box(0), box(2)), E.maximum(box(0), box(2)))


def _suppresses(cand, kept, center: bool, iou_threshold) -> E.Expr:
    """Whether box `kept` suppresses box `cand`: IoU > threshold, with the reference's
    conditions (an empty intersection, a box or union of no area never suppresses)."""
    x1a, x1b, y1a, y1b = _corners(cand, center)
    x2a, x2b, y2a, y2b = _corners(kept, center)
    ixa, ixb = E.maximum(x1a, x2a), E.minimum(x1b, x2b)
    iya, iyb = E.maximum(y1a, y2a), E.minimum(y1b, y2b)
    inter = (ixb - ixa) * (iyb - iya)
    area1 = (x1b - x1a) * (y1b - y1a)
    area2 = (x2b - x2a) * (y2b - y2a)
    union = area1 + area2 - inter
    zero = E.const(0, inter.dtype)
    return E.all_of(ixa < ixb, iya < iyb, zero < inter, zero < area1, zero < area2,
                    zero < union, iou_threshold < inter / E.select(zero < union, union,
                                                                   E.const(1, inter.dtype)))


def non_max_suppression(boxes: Tensor, scores: Tensor, max_per_class: int, iou_threshold,
                        score_threshold, center_point_box: bool, name: str | None = None
                        ) -> tuple[Tensor, Tensor]:
    """ONNX NonMaxSuppression: padded int64[max(batches*classes*k, 1), 3] of selected
    (batch, class, box) rows, per batch then class, each class's in selection order, with
    k = min(max_per_class, boxes), and count int64[1]. `iou_threshold` / `score_threshold`
    are scalar expressions (score_threshold None: no threshold).

    Greedy selection in k rounds: a box's priority rank (higher score first, the lower index
    first among equal scores) is one reduction; round t picks the alive box of least rank,
    alive meaning above the score threshold, ranked after the previous pick and suppressed by
    none of the earlier picks (a mask carried from round to round). Two stages per round, so
    k bounds the stage count."""
    check_tensor("non_max_suppression", boxes)
    check_tensor("non_max_suppression", scores)
    if boxes.ndim != 3 or boxes.shape[2] != 4:
        raise TEError(f"non_max_suppression(): boxes must be [batches, boxes, 4], got "
                      f"{list(boxes.shape)}")
    if scores.ndim != 3 or scores.shape[0] != boxes.shape[0] or \
            scores.shape[2] != boxes.shape[1]:
        raise TEError(f"non_max_suppression(): scores must be [batches, classes, boxes] = "
                      f"[{boxes.shape[0]}, C, {boxes.shape[1]}], got {list(scores.shape)}")
    name = name or "nms"
    nb, nc, n = scores.shape
    k = max(0, min(int(max_per_class), n))

    def valid(b, c, i):
        if score_threshold is None:
            return E.const(True, "bool")
        return score_threshold < scores(b, c, i)

    r = reduce_axis(n, "r")
    rank = compute((nb, nc, n), lambda b, c, i: T.sum(_one(), axis=r, where=(
        scores(b, c, i) < scores(b, c, r)) | (scores(b, c, r).eq(scores(b, c, i)) & (r < i))),
        name=f"{name}_rank", tag=REDUCTION)
    q = reduce_axis(n, "q")
    box_of = compute((nb, nc, n), lambda b, c, p: T.min(_i64(q), axis=q,
                                                         where=rank(b, c, q).eq(_i64(p))),
                     name=f"{name}_order", tag=REDUCTION)
    def pick_stage(t: int, alive) -> Tensor:
        a = reduce_axis(n, f"a{t}")
        return compute((nb, nc), lambda b, c: T.min(rank(b, c, a), axis=a,
                                                    where=alive(b, c, a)),
                       name=f"{name}_pick{t}", tag=REDUCTION)

    def alive_stage(t: int, alive, pick: Tensor) -> Tensor:
        """Alive after round t: alive before it, ranked after its pick, not suppressed by
        it. A stage of its own (a reduction over one point, so it is never inlined): each
        round reads one mask, and the expressions stay the same size whatever k is."""
        z = reduce_axis(1, f"z{t}")

        def body(b, c, i):
            kept = E.cast(box_of(b, c, E.cast(E.minimum(pick(b, c), n - 1), "int32")), "int32")
            cond = alive(b, c, i) & (pick(b, c) < rank(b, c, i)) & ~_suppresses(
                lambda j: boxes(b, i, j), lambda j: boxes(b, kept, j), center_point_box,
                iou_threshold)
            return T.max(E.select(cond, E.const(1, "int32"), E.const(0, "int32")), axis=z)

        mask = compute((nb, nc, n), body, name=f"{name}_alive{t + 1}", tag=REDUCTION)
        return lambda b, c, i: mask(b, c, i).eq(1)

    # the rank picked in each round; int64's largest when nothing was left
    picks: list[Tensor] = []
    alive = valid
    for t in range(k):
        picks.append(pick_stage(t, alive))
        if t + 1 < k:
            alive = alive_stage(t, alive, picks[-1])

    def taken(b, c):   # how many rounds picked a box
        out = E.const(0, _I64)
        for p in picks:
            out = out + E.select(p(b, c) < n, _one(), E.const(0, _I64))
        return out

    per = compute((nb, nc), taken, name=f"{name}_per_class", tag=INJECTIVE)
    g = reduce_axis(nb * nc, "g")
    # where each (batch, class)'s rows start: the rows of every earlier one
    start = compute((nb * nc,), lambda f: T.sum(per(*_unravel(g, (nb, nc))), axis=g,
                                                  where=g < f),
                    name=f"{name}_start", tag=REDUCTION)
    h = reduce_axis(nb * nc, "h")
    count = compute((1,), lambda _: T.sum(per(*_unravel(h, (nb, nc))), axis=h),
                    name=f"{name}_count", tag=REDUCTION)
    rows = max(nb * nc * k, 1)
    u = reduce_axis(nb * nc, "u")
    owner = compute((rows,), lambda row: T.max(_i64(u), axis=u, where=(start(u) <= _i64(row)) & (
        E.const(0, _I64) < per(*_unravel(u, (nb, nc))))), name=f"{name}_owner", tag=REDUCTION)

    def row_value(row, col):
        f = E.cast(E.maximum(E.minimum(owner(row), nb * nc - 1), E.const(0, _I64)), "int32")
        b, c = _unravel(f, (nb, nc))
        t = _i64(row) - start(f)
        pick = E.const(n, _I64)
        for j, p in enumerate(picks):
            pick = E.select(t.eq(j), p(b, c), pick)
        box = box_of(b, c, E.cast(E.minimum(pick, n - 1), "int32"))
        out = E.select(col.eq(0), _i64(b), E.select(col.eq(1), _i64(c), box))
        return E.select(_i64(row) < count(0), out, E.const(0, _I64))

    selected = compute((rows, 3), row_value, name=name, tag=INJECTIVE)
    return selected, count
