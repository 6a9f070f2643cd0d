"""ONNX converters for CumProd, TopK, Compress, Col2Im, MaxUnpool, Det, Upsample and Pad's
'wrap' mode. Inputs that decide a shape (TopK's k, Compress's condition, Col2Im's image and
block shapes, MaxUnpool's output_shape, Upsample's scales, Pad's pads) are read at compile
time (ctx.static); data stays a run-time argument."""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ...te.ops.ordering import MAX_DET_ORDER
from ..ops import ordering as ops_ordering  # noqa: F401 - registers the graph ops emitted here
from .core import checked_axis, unsupported_error, convert_max_pool, convert_pad
from .registry import converter
from .spatial import asymmetric_resize, windowed_1d


@converter("CumProd")
def _cumprod(ctx, x, axis, exclusive=0, reverse=0):
    a = checked_axis(ctx, int(ctx.static(axis, "axis").reshape(-1)[0]), len(x.shape))
    return ctx.emit("cumprod", [x], {"axis": a, "exclusive": int(exclusive),
                                     "reverse": int(reverse)}, final=True)


@converter("TopK")
def _topk(ctx, x, k_in=None, axis=-1, k=None, largest=1, sorted=1):  # noqa: A002 (ONNX)
    if k_in is not None:
        k = ctx.static(k_in, "K").reshape(-1)
        if k.size != 1:
            raise ModelFormatError(f"node '{ctx.node_name}' (TopK): K must hold one value, "
                                   f"got {k.size}")
        k = k[0]
    if k is None:
        raise ModelFormatError(f"node '{ctx.node_name}' (TopK) has no k")
    a = checked_axis(ctx, axis, len(x.shape))
    if not 0 <= int(k) <= x.shape[a]:
        raise ModelFormatError(f"node '{ctx.node_name}' (TopK): k={int(k)} is out of range "
                               f"for axis {a} of {list(x.shape)}")
    if int(k) == 0 or 0 in x.shape:   # empty outputs: known from the shapes alone
        shape = tuple(int(k) if d == a else n for d, n in enumerate(x.shape))
        return tuple(ctx.const(arr, name=name) for arr, name in zip(
            (np.zeros(shape, np.dtype(x.dtype)), np.zeros(shape, np.int64)), ctx.output_names))
    return ctx.emit("topk", [x], {"k": int(k), "axis": a, "largest": int(largest)},
                    n_out=2, final=True)


@converter("Compress")
def _compress(ctx, x, condition, axis=None):
    """The condition decides the output's length, so it is read at compile time; the kept
    slices are a gather at constant positions."""
    keep = np.nonzero(ctx.static(condition, "condition").reshape(-1))[0].astype(np.int64)
    if axis is None:
        x = ctx.emit("reshape", [x], {"shape": (x.size,)})
        a = 0
    else:
        a = checked_axis(ctx, axis, len(x.shape))
    if keep.size and keep[-1] >= x.shape[a]:
        raise ModelFormatError(f"node '{ctx.node_name}' (Compress): the condition selects "
                               f"position {keep[-1]} of an axis of {x.shape[a]}")
    if keep.size == 0:
        raise unsupported_error(ctx, "a Compress that keeps nothing (an empty output)")
    return ctx.emit("gather", [x, ctx.const(keep)], {"axis": a}, final=True)


def _ints(ctx, value, n: int, fill: int, what: str) -> tuple[int, ...]:
    items = tuple(int(v) for v in value) if value is not None else (fill,) * n
    if len(items) != n:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): {what} {list(items)} "
                               f"must have {n} entries")
    return items


@converter("Col2Im")
def _col2im(ctx, x, image_shape, block_shape, dilations=None, pads=None, strides=None):
    image = tuple(int(v) for v in ctx.static(image_shape, "image_shape").reshape(-1))
    block = tuple(int(v) for v in ctx.static(block_shape, "block_shape").reshape(-1))
    nd = len(image)
    if len(block) != nd:
        raise ModelFormatError(f"node '{ctx.node_name}' (Col2Im): image_shape {list(image)} "
                               f"and block_shape {list(block)} differ in length")
    attrs = {"image": image, "block": block,
             "strides": _ints(ctx, strides, nd, 1, "strides"),
             "dilations": _ints(ctx, dilations, nd, 1, "dilations"),
             "pads": _ints(ctx, pads, 2 * nd, 0, "pads")}
    return ctx.emit("col2im", [x], attrs, final=True)


@converter("MaxUnpool")
def _max_unpool(ctx, x, indices, output_shape=None, kernel_shape=None, pads=None,
                strides=None):
    nd = len(x.shape) - 2
    if not kernel_shape:
        raise ModelFormatError(f"node '{ctx.node_name}' (MaxUnpool) has no kernel_shape")
    kernel = _ints(ctx, kernel_shape, nd, 1, "kernel_shape")
    strides = _ints(ctx, strides, nd, 1, "strides")
    pads = _ints(ctx, pads, 2 * nd, 0, "pads")
    inferred = x.shape[:2] + tuple((x.shape[2 + d] - 1) * strides[d] + kernel[d] - pads[d]
                                   - pads[d + nd] for d in range(nd))
    out = inferred if output_shape is None else tuple(
        int(v) for v in ctx.static(output_shape, "output_shape").reshape(-1))
    if len(out) != len(x.shape) or out[:2] != x.shape[:2] or any(
            o < i for o, i in zip(out, inferred)):
        raise ModelFormatError(f"node '{ctx.node_name}' (MaxUnpool): output_shape "
                               f"{list(out)} does not fit the input {list(x.shape)} (at "
                               f"least {list(inferred)})")
    # the indices address the inferred shape; a larger output_shape adds zeros at the ends
    y = ctx.emit("max_unpool", [x, indices], {"out_shape": inferred}, final=out == inferred)
    if out == inferred:
        return y
    extra = tuple(o - i for o, i in zip(out, inferred))
    return ctx.emit("pad", [y], {"pads": (0,) * len(out) + extra, "mode": "constant",
                                 "value": 0.0}, final=True)


@converter("Det")
def _det(ctx, x):
    if len(x.shape) < 2 or x.shape[-1] != x.shape[-2]:
        raise ModelFormatError(f"node '{ctx.node_name}' (Det): input {list(x.shape)} must be "
                               "[..., n, n]")
    if x.shape[-1] > MAX_DET_ORDER:
        raise unsupported_error(ctx, f"Det of {x.shape[-1]}x{x.shape[-1]} matrices (Kiln's Det "
                                f"is built for n <= {MAX_DET_ORDER})")
    return ctx.emit("det", [x], final=True)


@converter("Upsample")
def _upsample(ctx, x, scales_in=None, mode="nearest", scales=None, height_scale=None,
              width_scale=None):
    """Resize with the asymmetric coordinate map (Upsample's definition)."""
    if scales_in is not None:
        scales = ctx.static(scales_in, "scales").reshape(-1)
    if scales is None:
        raise ModelFormatError(f"node '{ctx.node_name}' (Upsample) has no scales")
    scales = [float(s) for s in scales]
    if len(scales) != len(x.shape) or min(scales) < 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (Upsample): scales {scales} must be "
                               f">= 1, one per axis of {list(x.shape)}")
    if mode not in ("nearest", "linear", "bilinear"):
        raise ModelFormatError(f"node '{ctx.node_name}' (Upsample): mode {mode!r}; expected "
                               "nearest or linear")
    return asymmetric_resize(ctx, x, scales, "nearest" if mode == "nearest" else "linear")


_pad = convert_pad


@converter("Pad")
def _pad_with_wrap(ctx, x, pads_in=None, value_in=None, axes_in=None, mode="constant",
                   pads=None, value=0.0):
    if mode != "wrap":
        return _pad(ctx, x, pads_in, value_in, axes_in, mode=mode, pads=pads, value=value)
    rank = len(x.shape)
    pads = [int(p) for p in ctx.static(pads_in, "pads").reshape(-1)]
    if axes_in is not None:
        axes = [checked_axis(ctx, int(a), rank) for a in ctx.static(axes_in, "axes").reshape(-1)]
        full = [0] * (2 * rank)
        for k, a in enumerate(axes):
            full[a], full[a + rank] = pads[k], pads[k + len(axes)]
        pads = full
    if len(pads) != 2 * rank:
        raise ModelFormatError(f"node '{ctx.node_name}' (Pad): {len(pads)} pads for rank {rank}")
    y = x
    for a in range(rank):
        y = _wrap_axis(ctx, y, a, pads[a], pads[a + rank])
    return ctx.emit("identity", [y], final=True)


def _wrap_axis(ctx, x, axis: int, before: int, after: int):
    """x along `axis` extended periodically: a negative pad crops first (as onnxruntime),
    then positions -before .. n+after-1 of the n kept read kept[i mod n]; a gather at
    constant positions."""
    dim = x.shape[axis]
    if before == 0 and after == 0:
        return x
    start, stop = max(-before, 0), dim - max(-after, 0)
    if stop <= start:
        raise ModelFormatError(f"node '{ctx.node_name}' (Pad): pads {before}, {after} crop "
                               f"away all {dim} elements of axis {axis}; nothing to wrap")
    n = stop - start
    positions = np.arange(-max(before, 0), n + max(after, 0), dtype=np.int64) % n + start
    return ctx.emit("gather", [x, ctx.const(positions)], {"axis": axis})


_max_pool = windowed_1d(convert_max_pool)   # 1-D inputs as 2-D ones (spatial.py)


def max_pool_with_indices(ctx, x, **attrs):
    """MaxPool's optional Indices output: a second kernel finding, in each window, the first
    input position equal to the pooled maximum."""
    names = ctx.output_names
    if len(names) < 2 or not names[1] or len(x.shape) != 4:
        return _max_pool(ctx, x, **attrs)
    ctx.output_names = names[:1]
    try:
        y = _max_pool(ctx, x, **attrs)
    finally:
        ctx.output_names = names
    pooled = ctx.nodes[-1]
    assert pooled.op == "max_pool2d", pooled.op   # what the 2-D MaxPool converter emits
    window = {k: pooled.attrs[k] for k in ("kernel", "strides", "pads", "dilations",
                                           "ceil_mode")}
    window["storage_order"] = int(attrs.get("storage_order", 0))
    ctx.output_names = [names[1]]
    try:
        idx = ctx.emit("max_pool2d_indices", [x, y], window, final=True)
    finally:
        ctx.output_names = names
    return y, idx


@converter("TfIdfVectorizer")
def _tfidf(ctx, x, max_gram_length, max_skip_count, min_gram_length, mode, ngram_counts,
           ngram_indexes, pool_int64s=None, pool_strings=None, weights=None):
    """The pool's grams of the lengths asked for, counted by one kernel (ngram_counts); the
    IDF/TFIDF weighting is elementwise."""
    if pool_int64s is None:
        raise unsupported_error(ctx, "TfIdfVectorizer over strings (pool_strings)")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ModelFormatError(f"node '{ctx.node_name}' (TfIdfVectorizer): mode {mode!r}; "
                               "expected TF, IDF or TFIDF")
    if len(x.shape) not in (1, 2):
        raise ModelFormatError(f"node '{ctx.node_name}' (TfIdfVectorizer): input "
                               f"{list(x.shape)} must be [C] or [B, C]")
    pool, bounds = list(pool_int64s), list(ngram_counts) + [len(pool_int64s)]
    grams, targets, gram_id = [], [], 0
    for size in range(1, len(ngram_counts) + 1):
        items = pool[bounds[size - 1]:bounds[size]]
        for k in range(len(items) // size):
            if min_gram_length <= size <= max_gram_length:
                grams.append(tuple(int(v) for v in items[k * size:(k + 1) * size]))
                targets.append(int(ngram_indexes[gram_id]))
            gram_id += 1
    out_size = max(int(i) for i in ngram_indexes) + 1
    rows = x if len(x.shape) == 2 else ctx.emit("reshape", [x], {"shape": (1, x.shape[0])})
    counts = ctx.emit("ngram_counts", [rows], {"grams": tuple(grams), "targets": tuple(targets),
                                               "out_size": out_size,
                                               "max_skip": int(max_skip_count)})
    if mode != "TF":
        w = np.ones(out_size, np.float32)
        if weights:   # one per gram of the pool (the spec, onnxruntime): on its column
            w[np.asarray(ngram_indexes, np.int64)] = np.asarray(weights, np.float32)
        if mode == "IDF":
            present = ctx.emit("greater", [counts, ctx.const(np.zeros((), np.float32))])
            counts = ctx.emit("mul", [ctx.emit("cast", [present], {"to": "float32"}),
                                      ctx.const(w)])
        elif weights:
            counts = ctx.emit("mul", [counts, ctx.const(w)])
    shape = counts.shape if len(x.shape) == 2 else (out_size,)
    return ctx.emit("reshape", [counts], {"shape": shape}, final=True)
