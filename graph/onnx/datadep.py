"""Converters for NonZero, Unique and NonMaxSuppression as graph/runtime/staged.py rewrites them: in
the domain DOMAIN, with one more output (the int64[1] count) after the ONNX ones; the ONNX
outputs become padded to their static upper bound. The plain ONNX op types stay without a
converter: only the staged model, which trims the padded outputs, may use these."""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ops import datadep as ops_datadep  # noqa: F401 - registers the graph ops emitted here
from .core import checked_axis, unsupported_error, converter

DOMAIN = "kiln.datadep"
OP_TYPES = ("NonZero", "Unique", "NonMaxSuppression")


def _numel(shape) -> int:
    return int(np.prod(shape, dtype=np.int64))


def _empty_result(ctx, arrays) -> tuple:
    """An empty input's outputs (they depend on its shape only) and a count of 0."""
    return tuple(ctx.const(a, name=name) for a, name in zip(
        arrays + [np.zeros((1,), np.int64)], ctx.output_names))


@converter(f"{DOMAIN}.NonZero")
def _nonzero(ctx, x):
    if not x.shape:
        raise unsupported_error(ctx, "NonZero of a rank-0 tensor")
    if _numel(x.shape) == 0:
        return _empty_result(ctx, [np.zeros((len(x.shape), 0), np.int64)])
    return ctx.emit("nonzero_padded", [x], n_out=2, final=True)


@converter(f"{DOMAIN}.Unique")
def _unique(ctx, x, axis=None, sorted=1):  # noqa: A002 (ONNX's name)
    a = None if axis is None else checked_axis(ctx, int(axis), len(x.shape))
    if a is None and not x.shape:
        x = ctx.emit("reshape", [x], {"shape": (1,)})
    if x.dtype == "bool":
        raise unsupported_error(ctx, "Unique of a bool tensor")
    n = _numel(x.shape) if a is None else x.shape[a]
    if n == 0:
        y = np.zeros((0,) if a is None else x.shape, np.dtype(x.dtype))
        return _empty_result(ctx, [y] + [np.zeros((0,), np.int64)] * 3)
    if _numel(x.shape) == 0:
        raise unsupported_error(ctx, "Unique along an axis of empty slices")
    return ctx.emit("unique_padded", [x], {"axis": a, "sorted": int(bool(sorted))}, n_out=5,
                    final=True)


@converter(f"{DOMAIN}.NonMaxSuppression")
def _nms(ctx, boxes, scores, max_output_boxes_per_class=None, iou_threshold=None,
         score_threshold=None, center_point_box=0):
    """max_output_boxes_per_class decides the padded size, so it is read at compile time
    (a graph input's value specialises the model); the thresholds stay run-time values."""
    if len(boxes.shape) != 3 or boxes.shape[2] != 4 or len(scores.shape) != 3 or \
            scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        raise ModelFormatError(
            f"node '{ctx.node_name}' (NonMaxSuppression): boxes {list(boxes.shape)} must be "
            f"[batches, boxes, 4] and scores {list(scores.shape)} [batches, classes, boxes]")
    if int(center_point_box) not in (0, 1):
        raise ModelFormatError(f"node '{ctx.node_name}' (NonMaxSuppression): "
                               f"center_point_box must be 0 or 1, got {center_point_box}")
    limit = 0
    if max_output_boxes_per_class is not None:
        value = ctx.static(max_output_boxes_per_class, "max_output_boxes_per_class")
        limit = int(value.reshape(-1)[0]) if value.size else 0
    for v, what in ((iou_threshold, "iou_threshold"), (score_threshold, "score_threshold")):
        if v is not None and int(np.prod(v.shape, dtype=np.int64)) != 1:
            raise ModelFormatError(f"node '{ctx.node_name}' (NonMaxSuppression): {what} must "
                                   f"hold one value, got shape {list(v.shape)}")
    if iou_threshold is None:
        iou_threshold = ctx.const(np.zeros((1,), np.dtype(boxes.dtype)))
    inputs = [boxes, scores, iou_threshold]
    if score_threshold is not None:
        inputs.append(score_threshold)
    if _numel(scores.shape) == 0:
        return _empty_result(ctx, [np.zeros((1, 3), np.int64)])
    attrs = {"max_per_class": max(limit, 0), "center_point_box": int(center_point_box),
             "has_score_threshold": int(score_threshold is not None)}
    return ctx.emit("nms_padded", inputs, attrs, n_out=2, final=True)
