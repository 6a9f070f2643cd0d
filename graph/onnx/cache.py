"""TensorScatter (opset 24): a KV-cache update, present[..., s, ...] = update[..., s - w[b], ...]
where the batch's write index w[b] (a run-time input) places the update, else the past value;
in "circular" mode positions wrap modulo the cache length. One TE stage that reads the
update at a clamped index under a select. Registered into the graph op tables and
onnx_ops.CONVERTERS."""
from __future__ import annotations

import numpy as np

from ...te import expr as E
from ...te.errors import ModelFormatError
from ...te.ops import tags
from ...te.tensor import compute
from ..ir import OpClass
from .core import checked_axis, converter
from ..ops.more import define


def _infer(ins, attrs):
    return [(ins[0].shape, ins[0].dtype)]


def _lower(node, args):
    past, update = args[0], args[1]
    starts = args[2] if len(args) > 2 else None
    axis, circular = node.attrs["axis"], node.attrs["circular"]
    length, count = past.shape[axis], update.shape[axis]

    def body(*i):
        start = E.cast(starts(i[0]), "int32") if starts is not None else E.const(0, "int32")
        pos = i[axis] - start
        if circular:
            pos = E.floormod(pos, length)
        written = (pos >= 0) & (pos < count)
        at = list(i)
        at[axis] = E.minimum(E.maximum(pos, 0), count - 1)
        return E.select(written, update(*at), past(*i))
    return [compute(past.shape, body, name="tensor_scatter", tag=tags.INJECTIVE)]


def _reference(node, past, update, starts=None):
    axis, circular = node.attrs["axis"], node.attrs["circular"]
    out = past.copy()
    length, count = past.shape[axis], update.shape[axis]
    for prefix in np.ndindex(*past.shape[:axis]):
        start = int(starts[prefix[0]]) if starts is not None else 0
        for s in range(count):
            pos = (start + s) % length if circular else start + s
            out[prefix + (pos,)] = update[prefix + (s,)]
    return out


define("tensor_scatter", OpClass.INJECTIVE, _infer, _lower, _reference)


@converter("TensorScatter")
def _tensor_scatter(ctx, past_cache, update, write_indices=None, axis=-2, mode="linear"):
    rank = len(past_cache.shape)
    where = checked_axis(ctx, int(axis), rank)
    if where == 0 or len(update.shape) != rank or any(
            a != b for d, (a, b) in enumerate(zip(past_cache.shape, update.shape)) if d != where):
        raise ModelFormatError(f"node '{ctx.node_name}' (TensorScatter): update "
                               f"{list(update.shape)} must match past_cache "
                               f"{list(past_cache.shape)} except along axis {where} (not 0)")
    if update.shape[where] > past_cache.shape[where]:
        raise ModelFormatError(f"node '{ctx.node_name}' (TensorScatter): {update.shape[where]} "
                               f"updates do not fit a cache of {past_cache.shape[where]}")
    if mode not in ("linear", "circular"):
        raise ModelFormatError(f"node '{ctx.node_name}' (TensorScatter): mode {mode!r}; "
                               "expected 'linear' or 'circular'")
    inputs = [past_cache, update] + ([write_indices] if write_indices is not None else [])
    return ctx.emit("tensor_scatter", inputs, {"axis": where, "circular": mode == "circular"},
                    final=True)
