"""Quantized multiplies rounded the way onnxruntime rounds them.

ONNX's QDQ semantics evaluate DequantizeLinear -> Mul -> QuantizeLinear in float32:

    y = saturate(round_half_even((((a - za) * sa) * ((b - zb) * sb)) / sc) + zc)

onnxruntime runs the pattern as QLinearMul, which multiplies the integers first and scales
once (matched bit for bit over all 65,536 byte pairs at RegNet-Y-400MF's squeeze-excitation
scales, where the float32 form above differs at 2 of them):

    y = saturate(round_half_even(float32((a - za) * (b - zb)) * ((sa * sb) / sc) + zc))

The integer product is exact in float32 (|.| <= 255 * 255 < 2^24), so this form rounds the
real product twice (the multiplier, the result) where the QDQ form rounds four times; at the
two differing pairs it is the one that equals the exactly rounded value (one was RegNet-Y's
last difference from onnxruntime int8, a product of 92.500005 steps that the float32 QDQ
form makes exactly 92.5 and rounds to 92). The zero point is added before rounding, as
onnxruntime does: at an exact tie, an odd zero point moves the even neighbour (int8 pairs
at zero point 17 differed at 12 of 65,536 with it added after).

Matched: quantize_linear(mul(dequantize_linear(a, sa, za), dequantize_linear(b, sb, zb)),
sc, zc) on uint8/int8, every scale and zero point a constant scalar, the mul read only by
the quantize (its operands may broadcast: a squeeze-excitation gate [N, C, 1, 1]). Anything
else keeps the QDQ form. Runs before the layout passes: the rewritten chain is elementwise
(cast, subtract, multiply) and follows the activations like any epilogue.
"""
from __future__ import annotations

import numpy as np

from ...ir import FrozenDict, Graph, Node, Value
from .quantize import Static, scalar_value
from .add import quantized_binaries, replace_quantize_nodes
from ..rewrite import Namer


def _params(static: Static, dq: Node):
    scale = scalar_value(static(dq.inputs[1]))
    zp = dq.inputs[2] if len(dq.inputs) > 2 else None
    zero = scalar_value(static(zp), None) if zp is not None else 0
    return None if scale is None or zero is None else (float(scale), int(zero))


def _nodes(q: Node, dqs, params, namer: Namer, constants: dict) -> list[Node]:
    (sa, za), (sb, zb), (sc, zc) = params
    f32 = np.float32
    mult = f32(f32(f32(sa) * f32(sb)) / f32(sc))
    hint = q.name

    def const(x, what: str, dtype, shape=(1,)) -> Value:
        # operands: one-element arrays, not 0-d: a 0-d float constant would become an
        # immediate in the kernel (graph/passes/int8/add.py says why that is avoided);
        # the quantize's unit scale and zero point 0-d, per-tensor for the layout passes
        arr = np.asarray(x, dtype=dtype).reshape(shape)
        v = Value(namer(f"{hint}/{what}"), arr.shape, arr.dtype.name)
        constants[v.name] = arr
        return v

    none, to_float = FrozenDict({}), FrozenDict({"to": "float32"})
    out, centred = [], []
    for k, (dq, zero) in enumerate(zip(dqs, (za, zb))):
        x = dq.inputs[0]
        fx = Value(namer(f"{hint}/x{k}_float"), x.shape, "float32")
        out.append(Node("cast", (x,), (fx,), to_float, namer(f"{hint}:cast{k}")))
        if zero:
            cx = Value(namer(f"{hint}/x{k}_centred"), x.shape, "float32")
            out.append(Node("sub", (fx, const(zero, f"zp{k}", "float32")), (cx,), none,
                            namer(f"{hint}:sub{k}")))
            fx = cx
        centred.append(fx)
    shape = q.outputs[0].shape
    product = Value(namer(f"{hint}/product"), shape, "float32")
    scaled = Value(namer(f"{hint}/scaled"), shape, "float32")
    shifted = Value(namer(f"{hint}/shifted"), shape, "float32")
    out += [Node("mul", tuple(centred), (product,), none, namer(f"{hint}:mul")),
            Node("mul", (product, const(mult, "multiplier", "float32")), (scaled,), none,
                 namer(f"{hint}:scale")),
            Node("add", (scaled, const(zc, "zero_point", "float32")), (shifted,), none,
                 namer(f"{hint}:shift")),
            Node("quantize_linear", (shifted, const(1.0, "unit", "float32", ()),
                                     const(0, "zero", q.outputs[0].dtype, ())),
                 q.outputs, q.attrs, q.name)]
    return out


def onnxruntime_rounded_muls(graph: Graph) -> Graph:
    """Rewrite every matched quantized multiply (module docstring) into onnxruntime's form."""
    if not any(n.op == "mul" for n in graph.nodes):
        return graph
    static = Static(graph)
    namer, constants = Namer(graph), dict(graph.constants)
    swap: dict[str, list[Node]] = {}
    for q, _, dqs in quantized_binaries(graph, "mul"):
        params = [_params(static, d) for d in dqs] + [_params(static, q)]
        if any(p is None for p in params) or not params[2][0]:
            continue
        swap[q.name] = _nodes(q, dqs, params, namer, constants)
    return replace_quantize_nodes(graph, swap, constants)
