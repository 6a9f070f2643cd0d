"""ONNX ops converted through the function body their schema defines (AffineGrid,
CenterCropPad, the window functions): the body's nodes are converted in place like an If
branch (onnx_ops_control.inline_graph), with the node's attributes substituted for the body's
attribute references, so each op becomes the graph ops of its definition. The body and the
attribute values are found as graph/onnx/functions.py (the pre-pass for function ops without
a converter) finds them; here the inputs' types come from the converted values, so a
context-dependent body needs no shape inference.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ..ir import Value
from .core import unsupported_error, converter
from .functions import attribute_values, function_body, resolve_reference
from .control import name_outputs, inline_graph, subgraphs

# ops in the default domain converted by expanding their schema's function
FUNCTION_OPS = ("AffineGrid", "CenterCropPad", "HannWindow", "HammingWindow", "BlackmanWindow")


def _function(ctx, inputs: list[Value | None]) -> onnx.FunctionProto:
    """The function body of the current node's schema at the model's opset (a
    context-dependent one built for the converted inputs' types)."""
    node = ctx.node_proto
    schema = onnx.defs.get_schema(node.op_type, ctx.opset, node.domain)
    types = {name: helper.make_tensor_type_proto(
        helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)), v.shape)
        for name, v in zip(node.input, inputs) if name and v is not None}
    body = function_body(schema, node, ctx.opset, types)
    if body is None:
        raise unsupported_error(ctx, f"{node.op_type} at opset {ctx.opset} (no function body)")
    return body


def _resolve_refs(g: onnx.GraphProto, given: dict[str, onnx.AttributeProto]) -> None:
    """Replace, in place, attributes that refer to the function's attributes by the node's
    value (or the schema default); a reference to an attribute nobody set is dropped."""
    for n in g.node:
        kept = [r for a in n.attribute if (r := resolve_reference(a, given)) is not None]
        del n.attribute[:]
        n.attribute.extend(kept)
        for sub in subgraphs(n):
            _resolve_refs(sub, given)


def _expand(ctx, *inputs, **attrs):
    node = ctx.node_proto
    inputs = list(inputs)
    fn = _function(ctx, inputs)
    inputs += [None] * (len(fn.input) - len(inputs))
    schema = onnx.defs.get_schema(node.op_type, ctx.opset, node.domain)
    given = attribute_values(schema, node, fn)
    body = helper.make_graph(list(fn.node), f"{node.op_type}_function",
                             [helper.make_empty_tensor_value_info(n) for n in fn.input],
                             [helper.make_empty_tensor_value_info(n) for n in fn.output])
    _resolve_refs(body, given)
    opset = next((o.version for o in fn.opset_import if o.domain in ("", "ai.onnx")),
                 ctx.opset)
    saved = ctx.opset
    ctx.opset = opset
    try:
        outs = inline_graph(ctx, body, inputs, ctx.node_name)
    finally:
        ctx.opset = saved
    named = name_outputs(ctx, outs[:len(node.output)])
    return named if len(named) > 1 else named[0]


converter(*FUNCTION_OPS)(_expand)
