"""Small ops of the ai.onnx.ml domain (Binarizer, ArrayFeatureExtractor) as graph ops, and
the optional-value ops in the cases that need no optional type (an absent input, a plain
tensor); optional and sequence values themselves stay unsupported."""
from __future__ import annotations

import numpy as np

from ..te.errors import ModelFormatError
from .onnx_ops import converter


@converter("ai.onnx.ml.Binarizer")
def _binarizer(ctx, x, threshold=0.0):
    above = ctx.emit("greater", [x, ctx.const(np.array(threshold, dtype=x.dtype))])
    return ctx.emit("cast", [above], {"to": x.dtype}, final=True)


@converter("ai.onnx.ml.ArrayFeatureExtractor")
def _array_feature_extractor(ctx, x, indices):
    """x[..., indices] (the indices along the last axis; run-time values)."""
    if len(x.shape) == 0:
        raise ModelFormatError(f"node '{ctx.node_name}' (ArrayFeatureExtractor): a scalar "
                               "input has no axis to select from")
    flat = indices if len(indices.shape) == 1 else ctx.emit(
        "reshape", [indices], {"shape": (indices.size,)})
    if len(x.shape) == 1:   # a 1-D input gives one row
        x = ctx.emit("reshape", [x], {"shape": (1, x.shape[0])})
    return ctx.emit("gather", [x, flat], {"axis": len(x.shape) - 1}, final=True)


@converter("OptionalHasElement")
def _optional_has_element(ctx, x=None):
    if x is None:   # no input: an empty optional
        return ctx.const(np.array(False), final=True)
    return ctx.const(np.array(True), final=True)   # a tensor input is always present


@converter("OptionalGetElement")
def _optional_get_element(ctx, x):
    return ctx.emit("identity", [x], final=True)   # a plain tensor (optional types: refused)
