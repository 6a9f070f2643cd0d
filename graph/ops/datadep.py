"""Graph ops over te/ops/datadep.py: NonZero, Unique and NonMaxSuppression as padded outputs
of their static upper bound plus an int64[1] count (graph/runtime/staged.py trims them at run time);
each with its shape inference, TE lowering and numpy reference (registered as
ops_more.define does). The references compute the same padded layout."""
from __future__ import annotations

import numpy as np

from ...te.ops import datadep
from ..ir import OpClass
from ..lower_te import _read
from .more import define


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


# -- nonzero -------------------------------------------------------------------------------

def _nonzero_ref(node, x):
    found = np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)
    out = np.zeros((x.ndim, x.size), np.int64)
    out[:, :found.shape[1]] = found
    return out, np.array([found.shape[1]], np.int64)


define("nonzero_padded", OpClass.OPAQUE,
       lambda ins, attrs: [((len(ins[0].shape), _numel(ins[0].shape)), "int64"),
                           ((1,), "int64")],
       lambda node, args: list(datadep.nonzero(args[0])),
       _nonzero_ref)


# -- unique --------------------------------------------------------------------------------

def _unique_infer(ins, attrs):
    x = ins[0]
    n = _numel(x.shape) if attrs["axis"] is None else x.shape[attrs["axis"]]
    y_shape = (n,) if attrs["axis"] is None else x.shape
    return [(y_shape, x.dtype), ((n,), "int64"), ((n,), "int64"), ((n,), "int64"),
            ((1,), "int64")]


def unique_reference(x: np.ndarray, axis: int | None, sorted_: bool):
    """(Y, indices, inverse_indices, counts) as onnx defines Unique (numpy's unique, then
    reordered by first occurrence when not sorted)."""
    y, idx, inv, cnt = np.unique(x, return_index=True, return_inverse=True,
                                 return_counts=True, axis=axis)
    inv = inv.reshape(-1)
    if not sorted_:
        order = np.argsort(idx, kind="stable")
        where = np.empty_like(order)
        where[order] = np.arange(order.size)
        y = np.take(y, order, axis=0 if axis is None else axis)
        idx, cnt, inv = idx[order], cnt[order], where[inv]
    return y, idx.astype(np.int64), inv.astype(np.int64), cnt.astype(np.int64)


def _unique_ref(node, x):
    axis = node.attrs["axis"]
    y, idx, inv, cnt = unique_reference(x, axis, bool(node.attrs["sorted"]))
    n = x.size if axis is None else x.shape[axis]
    k = idx.size

    def pad(a, along=0):
        shape = list(a.shape)
        shape[along] = n - k
        return np.concatenate([a, np.zeros(shape, a.dtype)], axis=along)

    return (pad(y, 0 if axis is None else axis), pad(idx), inv, pad(cnt),
            np.array([k], np.int64))


define("unique_padded", OpClass.OPAQUE, _unique_infer,
       lambda node, args: list(datadep.unique(args[0], node.attrs["axis"],
                                              bool(node.attrs["sorted"]))),
       _unique_ref)


# -- non_max_suppression -------------------------------------------------------------------

def _scalar(arg):
    """A threshold operand (a 0-d or 1-element tensor, or an immediate) as an expression."""
    if arg is None:
        return None
    return _read(arg, ()) if not getattr(arg, "shape", ()) else arg(*([0] * len(arg.shape)))


def _nms_rows(ins, attrs) -> int:
    nb, nc, n = ins[1].shape
    return max(nb * nc * max(0, min(attrs["max_per_class"], n)), 1)


define("nms_padded", OpClass.OPAQUE,
       lambda ins, attrs: [((_nms_rows(ins, attrs), 3), "int64"), ((1,), "int64")],
       lambda node, args: list(datadep.non_max_suppression(
           args[0], args[1], node.attrs["max_per_class"], _scalar(args[2]),
           _scalar(args[3]) if node.attrs["has_score_threshold"] else None,
           bool(node.attrs["center_point_box"]))),
       lambda node, boxes, scores, iou, score_thr=None: _nms_ref(node, boxes, scores, iou,
                                                                 score_thr))


def nms_reference(boxes, scores, max_per_class: int, iou: float, score_thr, center: bool):
    """Selected (batch, class, box) rows, as onnx's reference evaluator computes them."""
    rows = []
    for b in range(scores.shape[0]):
        for c in range(scores.shape[1]):
            s = scores[b, c]
            order = sorted((i for i in range(s.size)
                            if score_thr is None or s[i] > score_thr),
                           key=lambda i: (-s[i], i))
            kept: list[int] = []
            for i in order:
                if len(kept) >= max_per_class:
                    break
                if not any(_iou_over(boxes[b, i], boxes[b, j], center, iou) for j in kept):
                    kept.append(i)
            rows += [(b, c, i) for i in kept]
    return np.array(rows, np.int64).reshape(-1, 3)


def _iou_over(a, b, center: bool, thr) -> bool:
    def corners(box):
        if center:
            hw, hh = box[2] / 2, box[3] / 2
            return box[0] - hw, box[0] + hw, box[1] - hh, box[1] + hh
        return min(box[1], box[3]), max(box[1], box[3]), min(box[0], box[2]), max(box[0],
                                                                                  box[2])
    x1a, x1b, y1a, y1b = corners(a)
    x2a, x2b, y2a, y2b = corners(b)
    ixa, ixb, iya, iyb = max(x1a, x2a), min(x1b, x2b), max(y1a, y2a), min(y1b, y2b)
    if ixb <= ixa or iyb <= iya:
        return False
    inter = (ixb - ixa) * (iyb - iya)
    area1, area2 = (x1b - x1a) * (y1b - y1a), (x2b - x2a) * (y2b - y2a)
    union = area1 + area2 - inter
    if inter <= 0 or area1 <= 0 or area2 <= 0 or union <= 0:
        return False
    return inter / union > thr


def _nms_ref(node, boxes, scores, iou, score_thr):
    a = node.attrs
    thr = score_thr.reshape(-1)[0] if a["has_score_threshold"] else None
    found = nms_reference(boxes, scores, a["max_per_class"], iou.reshape(-1)[0], thr,
                          bool(a["center_point_box"]))
    out = np.zeros((_nms_rows([boxes, scores], a), 3), np.int64)
    out[:found.shape[0]] = found
    return out, np.array([found.shape[0]], np.int64)
