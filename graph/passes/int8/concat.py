"""A concat of quantized tensors with different scales on the integers: Q(concat(DQ_1(a_1),
..., DQ_n(a_n))) = concat(Q(DQ_1(a_1)), ..., Q(DQ_n(a_n))) exactly (Q is elementwise), so
each input is requantized to the output's scale and zero point where it is made, and the
concat moves bytes instead of float32 (SqueezeNet's fire modules: the expand convs wrote
float32 for the concat to quantize, 4 bytes an element written and read again). Each
Q(DQ(a_i)) is a function of one byte, which graph/passes/int8/tables.py turns into a table
that fuses into the producing conv's epilogue; onnxruntime's QLinearConcat requantizes its
inputs the same way. An input already in the output's parameters is taken as it is.
(Concats of equal parameters were made integer moves by graph/passes/int8/quantize.py.)"""
from __future__ import annotations

from ...ir import Graph, Node, Value
from ..dce import eliminate_dead_code
from .quantize import Matcher, scalar_value, single_reader
from ..rewrite import Namer


def requantized_concats(graph: Graph) -> Graph:
    """Rewrite Q(concat(DQ(a_i)...)) with static per-tensor parameters (module doc)."""
    if not any(n.op == "concat" for n in graph.nodes):
        return graph
    matcher = Matcher(graph)
    namer = Namer(graph)
    replaced: dict[str, list[Node]] = {}
    for node in graph.nodes:
        if node.op != "concat":
            continue
        q = single_reader(matcher.consumers, matcher.outputs, node.outputs[0])
        if q is None or q.op != "quantize_linear":
            continue
        y_scale = scalar_value(matcher.static(q.inputs[1]))
        zp_in = q.inputs[2] if len(q.inputs) > 2 else None
        y_zp = scalar_value(matcher.static(zp_in) if zp_in is not None else None, 0)
        acts = [matcher.activation(v) for v in node.inputs]
        if y_scale is None or y_zp is None or any(a is None for a in acts):
            continue
        dtype = q.outputs[0].dtype
        emitted, ins = [], []
        for v, (x_q, scale, zp) in zip(node.inputs, acts):
            if (scale, zp, x_q.dtype) == (float(y_scale), int(y_zp), dtype):
                ins.append(x_q)
                continue
            r = Value(namer(f"{v.name}/requantized"), v.shape, dtype)
            emitted.append(Node("quantize_linear", (v,) + tuple(q.inputs[1:]), (r,),
                                {"dtype": dtype}, namer(f"{node.name}:requantize")))
            ins.append(r)
        emitted.append(Node("concat", tuple(ins), q.outputs, node.attrs, node.name + ".int"))
        replaced[q.name] = emitted
    if not replaced:
        return graph
    nodes = []
    for node in graph.nodes:
        nodes.extend(replaced.get(node.name, [node]))
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes)))
