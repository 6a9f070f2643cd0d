"""Quantized adds rounded the way onnxruntime rounds them.

ONNX's QDQ semantics round a quantized add once, after dequantizing both sides:

    y = saturate(round_half_even(((a - za) * sa + (b - zb) * sb) / sc) + zc)

onnxruntime runs DequantizeLinear -> Add -> QuantizeLinear as QLinearAdd, whose x86 kernel
scales by the ratios instead, all in float32 (the order of operations, found by matching
its outputs bit for bit on the adds of two quantized models):

    ra = sa / sc,  rb = sb / sc,  fixed = zc - fma(ra, za, rb * zb)
    y  = saturate(round_half_even(fma(a, ra, fma(b, rb, fixed))))

Both are within one step of the exact value, but near ties land on different integers (3 of
25,088 values of one add in a random-weight MobileNetV2), and one step there became another
top-1 class on ~3% of random inputs. Written in onnxruntime's form, Kiln's int8 models give
onnxruntime's int8 outputs bit for bit (benchmarks/RESULTS.md, 2026-11-26 14:45 UTC): codegen fuses
each multiply-add into one FMA ("contract" is a default fast-math flag). The numpy
reference of the rewritten graph rounds each product, which may move a tie the other way,
still within one step.

Matched: quantize_linear(add(dequantize_linear(a, sa, za), dequantize_linear(b, sb, zb)),
sc, zc) on uint8/int8, every scale and zero point a constant scalar (per-tensor), both
operands of the output's shape (onnxruntime's kernel treats a broadcast scalar otherwise),
the add read only by the quantize. Anything else keeps the QDQ form.
"""
from __future__ import annotations

import numpy as np

from ...ir import FrozenDict, Graph, Node, Value
from ..dce import eliminate_dead_code
from ..rewrite import Namer

_QTYPES = ("uint8", "int8")


def _scalar(graph: Graph, v: Value | None) -> float | None:
    """A constant scalar's value (an absent zero point: 0); None when not a constant."""
    if v is None:
        return 0.0
    arr = graph.constants.get(v.name)
    if arr is None or np.asarray(arr).size != 1:
        return None
    return np.asarray(arr).reshape(()).item()


def ratio_form(sa: float, za: float, sb: float, zb: float, sc: float, zc: float
               ) -> tuple[np.float32, np.float32, np.float32]:
    """(ra, rb, fixed) in float32, as onnxruntime's kernel computes them (module docstring;
    the fused multiply-add in float64, exact for a float32 times an 8-bit integer)."""
    f32, f64 = np.float32, np.float64
    ra, rb = f32(sa) / f32(sc), f32(sb) / f32(sc)
    fused = f32(f64(ra) * f64(za) + f64(f32(rb * f32(zb))))
    return ra, rb, f32(f32(zc) - fused)


def _ratio_nodes(q: Node, a: Value, b: Value, params, namer: Namer,
                 constants: dict) -> list[Node]:
    ra, rb, fixed = ratio_form(*params)
    hint, shape = q.name, q.outputs[0].shape

    def value(what: str, dtype: str = "float32") -> Value:
        return Value(namer(f"{hint}/{what}"), shape, dtype)

    def const(x, what: str, shape: tuple[int, ...] = ()) -> Value:
        arr = np.asarray(x).reshape(shape)
        v = Value(namer(f"{hint}/{what}"), shape, arr.dtype.name)
        constants[v.name] = arr
        return v

    def scale(x, what: str) -> Value:
        # one-element arrays, not 0-d: a 0-d float constant becomes an immediate in the
        # kernel's DAG (graph/lower_te.py _is_immediate), and these depend on the model's
        # scales, so the workload key (and the tuning records) would be this model's alone
        return const(x, what, (1,))

    fa, fb, b_scaled, b_fixed, a_scaled, total = (value(w) for w in (
        "a_float", "b_float", "b_scaled", "b_fixed", "a_scaled", "sum"))
    none = FrozenDict({})
    to_float = FrozenDict({"to": "float32"})
    return [
        Node("cast", (a,), (fa,), to_float, namer(f"{hint}:cast_a")),
        Node("cast", (b,), (fb,), to_float, namer(f"{hint}:cast_b")),
        Node("mul", (fb, scale(rb, "rb")), (b_scaled,), none, namer(f"{hint}:mul_b")),
        Node("add", (b_scaled, scale(fixed, "fixed")), (b_fixed,), none,
             namer(f"{hint}:add_fixed")),
        Node("mul", (fa, scale(ra, "ra")), (a_scaled,), none, namer(f"{hint}:mul_a")),
        Node("add", (a_scaled, b_fixed), (total,), none, namer(f"{hint}:add")),
        Node("quantize_linear", (total, const(np.float32(1.0), "unit"),
                                 const(np.zeros((), q.outputs[0].dtype), "zero")),
             q.outputs, q.attrs, q.name),
    ]


def quantized_binaries(graph: Graph, op: str, same_shape: bool = False):
    """(quantize, op node, its two dequantizes) for every QuantizeLinear to 8 bits whose input
    is an `op` node read by it alone (not a graph output) over two DequantizeLinears from 8
    bits (with `same_shape`, of the quantize's shape: no broadcast)."""
    producer = {v.name: n for n in graph.nodes for v in n.outputs}
    consumers = graph.consumers()
    outputs = {v.name for v in graph.outputs}
    for q in graph.nodes:
        if q.op != "quantize_linear" or q.outputs[0].dtype not in _QTYPES:
            continue
        node = producer.get(q.inputs[0].name)
        if node is None or node.op != op or len(consumers.get(node.outputs[0].name, ())) != 1 \
                or node.outputs[0].name in outputs:
            continue
        dqs = [producer.get(v.name) for v in node.inputs]
        if any(d is None or d.op != "dequantize_linear" or d.inputs[0].dtype not in _QTYPES
               or (same_shape and d.inputs[0].shape != q.outputs[0].shape) for d in dqs):
            continue
        yield q, node, dqs


def replace_quantize_nodes(graph: Graph, swap: dict[str, list[Node]], constants: dict) -> Graph:
    """`graph` with each quantize named in `swap` replaced by its nodes, new `constants`, and
    what no longer feeds anything removed."""
    if not swap:
        return graph
    nodes = [m for n in graph.nodes for m in swap.get(n.name, [n])]
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=constants))


def onnxruntime_rounded_adds(graph: Graph) -> Graph:
    """Rewrite every matched quantized add (module docstring) into onnxruntime's form."""
    namer, constants = Namer(graph), dict(graph.constants)
    swap: dict[str, list[Node]] = {}
    for q, _, (da, db) in quantized_binaries(graph, "add", same_shape=True):
        zero_point = lambda n: n.inputs[2] if len(n.inputs) > 2 else None  # noqa: E731
        params = [_scalar(graph, v) for v in (da.inputs[1], zero_point(da), db.inputs[1],
                                              zero_point(db), q.inputs[1], zero_point(q))]
        if any(p is None for p in params) or not params[4]:
            continue
        swap[q.name] = _ratio_nodes(q, da.inputs[0], db.inputs[0], params, namer, constants)
    return replace_quantize_nodes(graph, swap, constants)
