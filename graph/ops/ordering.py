"""Graph ops over te/ops/ordering.py: cumprod, topk, col2im, max_unpool, det; each with its
shape inference, TE lowering and numpy reference (registered as ops_more.define does)."""
from __future__ import annotations

import itertools

import numpy as np

from ...te.ops import ordering
from ..ir import OpClass
from .more import _same, define


def _cumprod_ref(node, x):
    a = node.attrs
    axis = a["axis"]
    y = np.flip(x, axis) if a["reverse"] else x
    if a["exclusive"]:   # shift by one along the axis, a 1 first
        ones = np.ones_like(np.take(y, [0], axis))
        y = np.concatenate([ones, np.take(y, range(y.shape[axis] - 1), axis)], axis)
    out = np.cumprod(y, axis=axis, dtype=x.dtype)
    return np.flip(out, axis) if a["reverse"] else out


define("cumprod", OpClass.OPAQUE, _same,
       lambda node, args: [ordering.cumprod(args[0], node.attrs["axis"],
                                            bool(node.attrs["exclusive"]),
                                            bool(node.attrs["reverse"]))],
       _cumprod_ref)


def _topk_infer(ins, attrs):
    shape = list(ins[0].shape)
    shape[attrs["axis"]] = attrs["k"]
    return [(tuple(shape), ins[0].dtype), (tuple(shape), "int64")]


def _topk_ref(node, x):
    """Stable order, the lower index first among equal values."""
    a = node.attrs
    axis, k, n = a["axis"], a["k"], x.shape[a["axis"]]
    if a["largest"]:   # descending and stable: the ascending order of the reversed array
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, range(k), axis).astype(np.int64)
    return np.take_along_axis(x, idx, axis), idx


define("topk", OpClass.OPAQUE, _topk_infer,
       lambda node, args: list(ordering.topk(args[0], node.attrs["k"], node.attrs["axis"],
                                             bool(node.attrs["largest"]))),
       _topk_ref)


def _col2im_infer(ins, attrs):
    x = ins[0]
    size = int(np.prod(attrs["block"]))
    return [((x.shape[0], x.shape[1] // size) + tuple(attrs["image"]), x.dtype)]


def _col2im_ref(node, x):
    a = node.attrs
    image, block = a["image"], a["block"]
    nd = len(image)
    pads, strides, dil = a["pads"], a["strides"], a["dilations"]
    counts = [(image[d] + pads[d] + pads[d + nd] - dil[d] * (block[d] - 1) - 1) // strides[d]
              + 1 for d in range(nd)]
    size = int(np.prod(block))
    n, c = x.shape[0], x.shape[1] // size
    padded = np.zeros((n, c) + tuple(image[d] + pads[d] + pads[d + nd] for d in range(nd)),
                      x.dtype)
    cols = x.reshape((n, c) + tuple(block) + tuple(counts))
    for k in itertools.product(*(range(b) for b in block)):
        for pos in itertools.product(*(range(v) for v in counts)):
            at = tuple(pos[d] * strides[d] + k[d] * dil[d] for d in range(nd))
            padded[(slice(None), slice(None)) + at] += cols[(slice(None), slice(None)) + k + pos]
    crop = tuple(slice(pads[d], pads[d] + image[d]) for d in range(nd))
    return padded[(slice(None), slice(None)) + crop]


define("col2im", OpClass.OPAQUE, _col2im_infer,
       lambda node, args: [ordering.col2im(args[0], node.attrs["image"], node.attrs["block"],
                                           node.attrs["strides"], node.attrs["dilations"],
                                           node.attrs["pads"])],
       _col2im_ref)


def _max_unpool_ref(node, x, idx):
    out = np.zeros(node.attrs["out_shape"], x.dtype).reshape(-1)
    flat_x, flat_i = x.reshape(-1), idx.reshape(-1)
    for j in range(flat_x.size):   # the last writer wins
        out[flat_i[j]] = flat_x[j]
    return out.reshape(node.attrs["out_shape"])


define("max_unpool", OpClass.OPAQUE,
       lambda ins, attrs: [(tuple(attrs["out_shape"]), ins[0].dtype)],
       lambda node, args: [ordering.max_unpool(args[0], args[1],
                                               tuple(node.attrs["out_shape"]))],
       _max_unpool_ref)

define("det", OpClass.OPAQUE, lambda ins, attrs: [(ins[0].shape[:-2], ins[0].dtype)],
       lambda node, args: [ordering.det(args[0])],
       lambda node, x: np.linalg.det(x).astype(x.dtype))


def _max_pool_indices_ref(node, x, pooled):
    a = node.attrs
    top, left = a["pads"][0], a["pads"][1]
    n, c, height, width = x.shape
    out = np.zeros(pooled.shape, np.int64)
    for i in np.ndindex(*pooled.shape):
        best = None
        for ky, kx in itertools.product(range(a["kernel"][0]), range(a["kernel"][1])):
            h = i[2] * a["strides"][0] + ky * a["dilations"][0] - top
            w = i[3] * a["strides"][1] + kx * a["dilations"][1] - left
            if 0 <= h < height and 0 <= w < width and x[i[0], i[1], h, w] == pooled[i]:
                inner = h * width + w if a["storage_order"] == 0 else w * height + h
                flat = (i[0] * c + i[1]) * height * width + inner
                best = flat if best is None else min(best, flat)
        out[i] = best if best is not None else 0
    return out


define("max_pool2d_indices", OpClass.OPAQUE,
       lambda ins, attrs: [(ins[1].shape, "int64")],
       lambda node, args: [ordering.max_pool2d_indices(
           args[0], args[1], tuple(node.attrs["kernel"]), tuple(node.attrs["strides"]),
           tuple(node.attrs["pads"]), tuple(node.attrs["dilations"]),
           bool(node.attrs["ceil_mode"]), int(node.attrs["storage_order"]))],
       _max_pool_indices_ref)


def _ngram_counts_ref(node, x):
    a = node.attrs
    out = np.zeros((x.shape[0], a["out_size"]), np.float32)
    length = x.shape[1]
    for gram, target in zip(a["grams"], a["targets"]):
        n = len(gram)
        for dist in range(1, (1 if n == 1 else a["max_skip"] + 1) + 1):
            for s in range(length - dist * (n - 1)):
                hit = np.all([x[:, s + k * dist] == v for k, v in enumerate(gram)], axis=0)
                out[:, target] += hit
    return out


define("ngram_counts", OpClass.OPAQUE,
       lambda ins, attrs: [((ins[0].shape[0], attrs["out_size"]), "float32")],
       lambda node, args: [ordering.ngram_counts(args[0], node.attrs["grams"],
                                                 node.attrs["targets"], node.attrs["out_size"],
                                                 node.attrs["max_skip"])],
       _ngram_counts_ref)
