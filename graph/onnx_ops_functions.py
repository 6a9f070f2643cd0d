"""ONNX ops converted through the function body their schema defines (AffineGrid,
CenterCropPad, the window functions): the body's nodes are converted in place like an If
branch (onnx_ops_control.inline_graph), with the node's attributes substituted for the body's
attribute references, so each op becomes the graph ops of its definition.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .ir import Value
from .onnx_ops import _unsupported, converter
from .onnx_ops_control import _name_outputs, inline_graph, subgraphs

# ops in the default domain converted by expanding their schema's function
FUNCTION_OPS = ("AffineGrid", "CenterCropPad", "HannWindow", "HammingWindow", "BlackmanWindow")


def _function(ctx, inputs: list[Value | None]) -> onnx.FunctionProto:
    """The function body of the current node's schema at the model's opset."""
    node = ctx.node_proto
    schema = onnx.defs.get_schema(node.op_type, ctx.opset, node.domain)
    plain = [v for v in schema.function_opset_versions if v <= ctx.opset]
    dependent = [v for v in schema.context_dependent_function_opset_versions
                 if v <= ctx.opset]
    proto = onnx.FunctionProto()
    if plain and (not dependent or max(plain) >= max(dependent)):
        proto.ParseFromString(schema.get_function_with_opset_version(max(plain)))
    elif dependent:
        types = [helper.make_tensor_type_proto(
            helper.np_dtype_to_tensor_dtype(np.dtype(v.dtype)), v.shape)
            if v is not None else onnx.TypeProto() for v in inputs]
        proto.ParseFromString(schema.get_context_dependent_function_with_opset_version(
            max(dependent), node.SerializeToString(), [t.SerializeToString() for t in types]))
    else:
        raise _unsupported(ctx, f"{node.op_type} at opset {ctx.opset} (no function body)")
    return proto


def _resolve_refs(g: onnx.GraphProto, given: dict[str, onnx.AttributeProto]) -> None:
    """Replace, in place, attributes that refer to the function's attributes by the node's
    value (or the schema default); a reference to an attribute nobody set is dropped."""
    for n in g.node:
        kept = []
        for a in n.attribute:
            if a.ref_attr_name:
                if a.ref_attr_name not in given:
                    continue
                b = onnx.AttributeProto()
                b.CopyFrom(given[a.ref_attr_name])
                b.name = a.name
                kept.append(b)
            else:
                kept.append(a)
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
    given = {name: a.default_value for name, a in schema.attributes.items()
             if a.default_value.name}
    given.update({a.name: a for a in node.attribute})
    for a in fn.attribute_proto:   # defaults the function itself declares
        given.setdefault(a.name, a)
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
    named = _name_outputs(ctx, outs[:len(node.output)])
    return named if len(named) > 1 else named[0]


converter(*FUNCTION_OPS)(_expand)
