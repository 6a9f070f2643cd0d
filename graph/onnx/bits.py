"""BitCast: a tensor's bytes read as another dtype of the same size, one TE Call per element
(te.reinterpret), so it fuses with its producers and consumers like any elementwise op.
Registered into the graph op tables (ops_more.define) and onnx_ops.CONVERTERS."""
from __future__ import annotations

import numpy as np

from ...te import expr as E
from ...te.dtype import itemsize
from ...te.errors import ModelFormatError
from ...te.ops import tags
from ...te.tensor import compute
from ..ir import OpClass
from .core import converter
from ..ops.more import define


def _infer(ins, attrs):
    return [(ins[0].shape, attrs["to"])]


def _lower(node, args):
    x, to = args[0], node.attrs["to"]
    return [compute(x.shape, lambda *i: E.reinterpret(x(*i), to), name="bitcast",
                    tag=tags.ELEMWISE)]


def _reference(node, x):
    return np.ascontiguousarray(x).view(node.attrs["to"])


define("bitcast", OpClass.ELEMWISE, _infer, _lower, _reference)


@converter("BitCast")
def _bitcast(ctx, x, to):
    dtype = ctx.onnx_dtype(to)
    if itemsize(dtype) != itemsize(x.dtype):
        raise ModelFormatError(f"node '{ctx.node_name}' (BitCast): {x.dtype} and {dtype} "
                               "differ in size; BitCast needs types of the same bit width")
    return ctx.emit("bitcast", [x], {"to": dtype}, final=True)
