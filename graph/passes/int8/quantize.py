"""QDQ -> integer kernels: DequantizeLinear -> Conv/MatMul (-> bias Add) (-> Relu/Clip) ->
QuantizeLinear becomes one integer conv/matmul with the requantization as its epilogue.

This is the form onnxruntime's `quantize_static(quant_format=QDQ)` emits. Matched, with
x_q the uint8/int8 activation, W_q the constant int8/uint8 weight (zero point 0, per-tensor
or per-output-channel scale), b the bias (DQ of int32, or float) and y_q the output:

    acc[f]  = conv2d_integer(x_q, W_q) or matmul_integer(x_q, W_q)       (int32, exact)
    acc[f] += bias_i32[f] - x_zp * rowsum(W_q)[f]    (one int32 constant per channel, folded
              here at compile time; the conv pads with x_zp so the borders stay exact)
    y_q     = requantize(acc, M[f], y_zp, lo, hi),  M[f] = (x_scale * w_scale[f]) / y_scale
              in float32, in that order, as onnxruntime's QLinearConv computes it (the
              float64 quotient rounded once differs in the last bit for some scales, which
              moved rounding ties: ResNet-18 int8's top-1 agreed with onnxruntime's on 97%
              of random inputs, and bit for bit with this order); lo/hi clamp at the quantized
              Relu/Clip bounds (Q is monotone, so Q(relu(v)) = max(Q(v), y_zp))
Activations stay uint8/int8 between kernels. A bias whose scale is not x_scale * w_scale
(a float bias) is rounded to int32 in units of x_scale * w_scale (an error of at most half
a unit, far below y_scale). DQ -> MaxPool -> Q with equal scale and zero point becomes a
max pool on the integers (max commutes with the monotone DQ, and Q(DQ(v)) = v); so does
data movement (reshape, transpose, slice, split, concat) between equal DQs and Qs.
Patterns that do not fit (a weight zero point other than 0, runtime scales, a value read
twice) are left as they are: the float path around them stays correct.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ....te.ops.int8 import core as tq
from ...ir import Graph, Node, Value
from ...reference import run_node
from ..dce import eliminate_dead_code
from ..rewrite import Namer

log = logging.getLogger(__name__)

_QTYPES = ("uint8", "int8")


class Static:
    """Compile-time values: constants, and node outputs computed from constants only."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.producers = graph.producers()
        self.memo: dict[str, np.ndarray | None] = {}

    def __call__(self, v: Value | None) -> np.ndarray | None:
        if v is None:
            return None
        if v.name in self.graph.constants:
            return np.asarray(self.graph.constants[v.name])
        if v.name not in self.memo:
            node = self.producers.get(v.name)
            self.memo[v.name] = None
            if node is not None and len(node.outputs) == 1:
                args = [self(i) if i is not None else None for i in node.inputs]
                if all(a is not None for a, i in zip(args, node.inputs) if i is not None):
                    self.memo[v.name] = run_node(node, args)[0]
        return self.memo[v.name]


@dataclass
class _Match:
    anchor: Node
    x_q: Value
    x_scale: float
    x_zp: int
    w_q: np.ndarray           # weight as the integer kernel reads it: [F, C, KH, KW] / [K, N]
    w_scale: np.ndarray       # float64 per output channel
    bias_i32: np.ndarray      # int64 per output channel (zeros without a bias)
    y_scale: float
    y_zp: int
    y: Value                  # the QuantizeLinear's output, now the requantize's
    lo: int
    hi: int


def scalar_value(arr: np.ndarray | None, default=None):
    if arr is None:
        return default
    return arr.reshape(-1)[0].item() if arr.size == 1 else None


def single_reader(graph_consumers, outputs, v: Value) -> Node | None:
    readers = graph_consumers.get(v.name, [])
    return readers[0] if len(readers) == 1 and v.name not in outputs else None


class GraphIndex:
    """What a QDQ pattern walk reads about a graph: its constant values (folded on demand),
    each value's producer and readers, and the graph outputs."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.static = Static(graph)
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}


class Matcher(GraphIndex):
    def _dq(self, v: Value) -> Node | None:
        node = self.producers.get(v.name)
        return node if node is not None and node.op == "dequantize_linear" else None

    def activation(self, v: Value):
        """(x_q, scale, zero point) of a per-tensor DQ with static parameters."""
        dq = self._dq(v)
        if dq is None or dq.inputs[0].dtype not in _QTYPES:
            return None
        scale = scalar_value(self.static(dq.inputs[1]))
        zp = scalar_value(self.static(dq.inputs[2]) if len(dq.inputs) > 2 else None, 0)
        if scale is None or zp is None:
            return None
        return dq.inputs[0], float(scale), int(zp)

    def weight(self, v: Value, channel_axis: int):
        """(W_q, per-channel float64 scale) of DQ(const) seen through transposes; None
        unless the zero point is 0 and the scale varies only along `channel_axis`."""
        perms = []
        node = self.producers.get(v.name)
        while node is not None and node.op == "transpose":
            perms.append(node.attrs["perm"])
            node = self.producers.get(node.inputs[0].name)
        if node is None or node.op != "dequantize_linear":
            return None
        w_q = self.static(node.inputs[0])
        scale = self.static(node.inputs[1])
        zp = self.static(node.inputs[2]) if len(node.inputs) > 2 else np.zeros((), np.int8)
        if w_q is None or scale is None or zp is None or w_q.dtype.name not in _QTYPES \
                or np.any(zp):
            return None
        scale = np.broadcast_to(scale.astype(np.float64), w_q.shape)
        for perm in reversed(perms):
            w_q, scale = w_q.transpose(perm), scale.transpose(perm)
        other = tuple(a for a in range(w_q.ndim) if a != channel_axis % w_q.ndim)
        per_channel = scale.max(axis=other) if other else scale
        if not np.array_equal(scale.min(axis=other) if other else scale, per_channel):
            return None
        return np.ascontiguousarray(w_q), per_channel

    def bias(self, v: Value, conv: bool, channels: int, x_scale: float,
             w_scale: np.ndarray):
        """The int64 per-channel bias added by `v`, in units of x_scale * w_scale."""
        arr = self.static(v)
        shapes = ((channels, 1, 1), (1, channels, 1, 1)) if conv else ((channels,),
                                                                        (1, channels))
        if arr is None or arr.shape not in shapes:
            return None
        node = self.producers.get(v.name)
        while node is not None and node.op == "reshape":
            node = self.producers.get(node.inputs[0].name)
        unit = x_scale * w_scale
        if node is not None and node.op == "dequantize_linear" \
                and node.inputs[0].dtype == "int32":
            q = self.static(node.inputs[0])
            scale = self.static(node.inputs[1])
            zp = self.static(node.inputs[2]) if len(node.inputs) > 2 else None
            if q is not None and scale is not None and not np.any(zp) and np.allclose(
                    np.broadcast_to(scale, (channels,)).astype(np.float64), unit,
                    rtol=1e-6, atol=0):
                return q.reshape(-1).astype(np.int64)
        return np.round(arr.reshape(-1).astype(np.float64) / unit).astype(np.int64)

    def match(self, anchor: Node) -> _Match | None:
        conv = anchor.op == "conv2d"
        if anchor.op not in ("conv2d", "matmul"):
            return None
        act = self.activation(anchor.inputs[0])
        wt = self.weight(anchor.inputs[1], 0 if conv else 1)
        if act is None or wt is None or (not conv and wt[0].ndim != 2):
            return None
        x_q, x_scale, x_zp = act
        w_q, w_scale = wt
        channels = w_q.shape[0] if conv else w_q.shape[1]
        bias = np.zeros(channels, np.int64)
        lo, hi = -np.inf, np.inf
        cur, node = anchor.outputs[0], single_reader(self.consumers, self.outputs,
                                                      anchor.outputs[0])
        if node is not None and node.op == "add":
            other = node.inputs[1] if node.inputs[0].name == cur.name else node.inputs[0]
            got = self.bias(other, conv, channels, x_scale, w_scale)
            if got is None or node.outputs[0].shape != cur.shape:
                return None
            bias, cur = got, node.outputs[0]
            node = single_reader(self.consumers, self.outputs, cur)
        if node is not None and node.op in ("relu", "clip"):
            lo = 0.0 if node.op == "relu" else node.attr("min")
            hi = np.inf if node.op == "relu" else node.attr("max")
            lo, hi = (-np.inf if lo is None else lo), (np.inf if hi is None else hi)
            cur = node.outputs[0]
            node = single_reader(self.consumers, self.outputs, cur)
        if node is None or node.op != "quantize_linear":
            return None
        y_scale = scalar_value(self.static(node.inputs[1]))
        y_zp = scalar_value(self.static(node.inputs[2]) if len(node.inputs) > 2 else None, 0)
        if y_scale is None or y_zp is None:
            return None
        info = np.iinfo(node.attrs["dtype"])
        qlo = info.min if lo == -np.inf else max(info.min, _quantize(lo, y_scale, y_zp, info))
        qhi = info.max if hi == np.inf else min(info.max, _quantize(hi, y_scale, y_zp, info))
        return _Match(anchor, x_q, x_scale, x_zp, w_q, w_scale, bias, float(y_scale),
                      int(y_zp), node.outputs[0], int(qlo), int(qhi))


def _quantize(v: float, scale: float, zp: int, info) -> int:
    q = np.round(np.float32(v) / np.float32(scale)) + zp
    return int(np.clip(q, info.min, info.max))


def _rewrite(m: _Match, namer: Namer, constants: dict) -> list[Node]:
    """The integer kernel's nodes; the last writes m.y."""
    conv = m.anchor.op == "conv2d"
    hint = m.anchor.name

    def const(arr: np.ndarray, what: str) -> Value:
        v = Value(namer(f"{hint}/{what}"), arr.shape, arr.dtype.name)
        constants[v.name] = arr
        return v

    w = const(m.w_q, "w_q")
    red = (1, 2, 3) if conv else (0,)
    offset = m.bias_i32 - m.x_zp * m.w_q.astype(np.int64).sum(axis=red)
    if np.abs(offset).max(initial=0) >= 2 ** 31:
        return []
    per_channel = (-1, 1, 1) if conv else (-1,)
    ins = [m.x_q, w]
    if conv and m.x_zp:
        ins.append(const(np.array(m.x_zp, dtype=m.x_q.dtype), "x_zp"))
    kind = "conv2d_integer" if conv else "matmul_integer"
    attrs = {k: m.anchor.attrs[k] for k in ("strides", "dilations", "pads", "groups")} \
        if conv else {}
    acc_shape = m.anchor.outputs[0].shape
    acc = Value(namer(f"{hint}/acc"), acc_shape, "int32")
    nodes = [Node(kind, tuple(ins), (acc,), attrs, namer(f"{hint}:{kind}"))]
    if np.any(offset):
        summed = Value(namer(f"{hint}/acc_offset"), acc_shape, "int32")
        nodes.append(Node("add", (acc, const(offset.astype(np.int32).reshape(per_channel),
                                             "offset")), (summed,), {}, namer(f"{hint}:add")))
        acc = summed
    f32 = np.float32       # (x_scale * w_scale) / y_scale in float32, that order: module doc
    mult = ((f32(m.x_scale) * m.w_scale.astype(f32)) / f32(m.y_scale)).astype(f32).reshape(
        per_channel)
    zp = const(np.array(m.y_zp, dtype=m.y.dtype), "y_zp")
    nodes.append(Node("requantize", (acc, const(mult, "multiplier"), zp), (m.y,),
                      {"dtype": m.y.dtype, "lo": m.lo, "hi": m.hi},
                      namer(f"{hint}:requantize")))
    return nodes


def _max_pool_on_integers(node: Node, matcher: Matcher) -> Node | None:
    """Q(max_pool(DQ(x_q))) with Q's scale and zero point equal to DQ's -> max_pool(x_q)."""
    act = matcher.activation(node.inputs[0])
    q = single_reader(matcher.consumers, matcher.outputs, node.outputs[0])
    if act is None or q is None or q.op != "quantize_linear":
        return None
    y_scale = scalar_value(matcher.static(q.inputs[1]))
    y_zp = scalar_value(matcher.static(q.inputs[2]) if len(q.inputs) > 2 else None, 0)
    if (y_scale, y_zp) != (act[1], act[2]) or q.outputs[0].dtype != act[0].dtype:
        return None
    return Node("max_pool2d", (act[0],), q.outputs, node.attrs, node.name + ".int")


# data movement that commutes with a per-tensor DQ: each output element is one input element
_MOVES = ("reshape", "transpose", "slice", "split", "concat")


def _move_on_integers(node: Node, matcher: Matcher) -> tuple[list[Node], Node] | None:
    """Q(move(DQ(x_q), ...)) with every DQ's and every Q's scale, zero point and type equal
    -> move(x_q, ...) (a reshape, transpose, slice, split or concat; ShuffleNet's channel
    shuffles and splits): exact, since the move picks elements and Q(DQ(v)) = v for one
    scale and zero point (|v - zp| <= 255, so v - zp survives the float scale and back).
    Returns the Q nodes (the first takes the new node) and the new node, or None."""
    params = None
    data = node.inputs if node.op == "concat" else node.inputs[:1]
    ints = []
    for v in data:
        act = matcher.activation(v)
        if act is None or (params is not None and act[1:] + (act[0].dtype,) != params):
            return None
        params = act[1:] + (act[0].dtype,)
        ints.append(act[0])
    rest = node.inputs[len(data):]
    if any(v is not None and matcher.static(v) is None for v in rest):
        return None
    qs = []
    for out in node.outputs:
        q = single_reader(matcher.consumers, matcher.outputs, out)
        if q is None or q.op != "quantize_linear":
            return None
        y_scale = scalar_value(matcher.static(q.inputs[1]))
        y_zp = scalar_value(matcher.static(q.inputs[2]) if len(q.inputs) > 2 else None, 0)
        if y_scale is None or (float(y_scale), y_zp, q.outputs[0].dtype) != params:
            return None
        qs.append(q)
    moved = Node(node.op, tuple(ints) + tuple(rest), tuple(q.outputs[0] for q in qs),
                 node.attrs, node.name + ".int")
    return qs, moved


def fuse_quantized_kernels(graph: Graph) -> Graph:
    """Rewrite DQ -> conv/matmul -> Q (and DQ -> max pool -> Q) into integer kernels."""
    if not any(n.op == "dequantize_linear" for n in graph.nodes):
        return graph
    matcher = Matcher(graph)
    namer = Namer(graph)
    constants = dict(graph.constants)
    replaced: dict[str, list[Node]] = {}        # the Q node's name -> nodes emitted there
    position = {n.name: k for k, n in enumerate(graph.nodes)}
    for node in graph.nodes:
        if node.op == "max_pool2d":
            pooled = _max_pool_on_integers(node, matcher)
            if pooled is not None:
                q = matcher.consumers[node.outputs[0].name][0]
                replaced[q.name] = [pooled]
            continue
        if node.op in _MOVES:
            found = _move_on_integers(node, matcher)
            if found is not None:
                qs, moved = found
                first = min(qs, key=lambda q: position[q.name])
                for q in qs:
                    replaced[q.name] = [moved] if q is first else []
            continue
        m = matcher.match(node)
        if m is None:
            continue
        nodes = _rewrite(m, namer, constants)
        if nodes:
            q = matcher.producers[m.y.name]
            replaced[q.name] = nodes
    if not replaced:
        return graph
    log.debug("integer kernels for %d QDQ patterns", len(replaced))
    nodes = []
    for node in graph.nodes:
        nodes.extend(replaced.get(node.name, [node]))
    graph = eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=constants))
    return graph.replace(nodes=_sink_dequantizes(graph.nodes))


def _sink_dequantizes(nodes: tuple[Node, ...]) -> tuple[Node, ...]:
    """Each dequantize_linear moved down to just before its first reader. Fusion seeds groups
    in node order: a residual branch's DQ placed early would seed the residual add's group
    and pull the other branch's requantize out of its conv's epilogue (the conv then writes
    its int32 accumulator); placed late, the conv's group reaches the add first."""
    readers: dict[str, int] = {}
    for k, node in enumerate(nodes):
        for v in node.inputs:
            if v is not None:
                readers.setdefault(v.name, k)
    moved: dict[int, list[Node]] = {}
    kept = []
    for k, node in enumerate(nodes):
        first = readers.get(node.outputs[0].name)
        if node.op == "dequantize_linear" and first is not None and first > k + 1:
            moved.setdefault(first, []).append(node)
        else:
            kept.append((k, node))
    out = []
    for k, node in kept:
        out.extend(moved.get(k, []))
        out.append(node)
    return tuple(out)


# -- packed int8 kernels -----------------------------------------------------------------------

def byte_word(byte: int) -> int:
    """The int32 whose 4 bytes all equal `byte` (0..255)."""
    return int(np.full(4, byte, np.uint8).view(np.int32)[0])


def _pack_rewrite(node: Node, graph: Graph, namer: Namer, constants: dict) -> list[Node]:
    """conv2d_integer / matmul_integer with a constant int8 weight -> pack_int8x4 of the
    activation + conv2d_int8x4 / matmul_int8x4 (dot4 intrinsics over the reduction axis
    split by 4) [+ the int8-activation compensation]; [] when it does not apply."""
    conv = node.op == "conv2d_integer"
    x, w = node.inputs[0], node.inputs[1]
    weight = graph.constants.get(w.name) if w is not None else None
    if weight is None or weight.dtype != np.int8 or (conv and node.attrs["groups"] != 1) \
            or (not conv and weight.ndim != 2):
        return []
    hint = node.name

    def value(shape, dtype, what):
        return Value(namer(f"{hint}/{what}"), shape, dtype)

    nodes, pad_byte = [], 0
    pads = node.attrs["pads"] if conv else None
    if conv and len(node.inputs) > 2 and node.inputs[2] is not None:
        zx = node.inputs[2]
        zp = graph.constants.get(zx.name)
        if zp is not None:
            pad_byte = int(np.asarray(zp).reshape(-1)[0])
        elif any(pads):
            if zx.shape != () or zx.dtype != x.dtype:
                return []
            # a runtime zero point (dynamic quantization: Whisper's audio convs) fills the
            # padding: pad with it first, then an unpadded packed conv
            top, left, bottom, right = pads
            n, c, h, w_ = x.shape
            padded = value((n, c, h + top + bottom, w_ + left + right), x.dtype, "x_padded")
            nodes.append(Node("pad", (x, zx), (padded,), {
                "pads": (0, 0, top, left, 0, 0, bottom, right), "mode": "constant",
                "value": 0.0}, namer(f"{hint}:pad")))
            x, pads = padded, (0, 0, 0, 0)
        # (unpadded, e.g. a ViT's patch embedding under dynamic quantization, the zero
        # point is never read)
    flip = x.dtype == "int8"
    axis = 1 if conv else len(x.shape) - 1
    packed_shape = list(x.shape)
    packed_shape[axis] = (packed_shape[axis] + 3) // 4
    xp = value(tuple(packed_shape), "int32", "x_packed")
    nodes.append(Node("pack_int8x4", (x,), (xp,), {"axis": axis, "flip": flip},
                      namer(f"{hint}:pack_int8x4")))
    words = tq.pack_weight_int8x4(weight, 1 if conv else 0)
    wp = value(words.shape, "int32", "w_packed")
    constants[wp.name] = words
    seven_bit = bool(weight.min() >= -64 and weight.max() <= 63)
    symmetric = bool(weight.min() >= -127)
    out = node.outputs[0]
    acc = value(out.shape, "int32", "acc") if flip else out
    if conv:
        attrs = {"strides": node.attrs["strides"], "dilations": node.attrs["dilations"],
                 "pads": pads}
        attrs.update(pad_word=byte_word((pad_byte + 128) % 256 if flip else pad_byte % 256),
                     seven_bit=seven_bit, symmetric=symmetric)
        nodes.append(Node("conv2d_int8x4", (xp, wp), (acc,), attrs,
                          namer(f"{hint}:conv2d_int8x4")))
    else:
        nodes.append(Node("matmul_int8x4", (xp, wp), (acc,), {"seven_bit": seven_bit,
                                                               "symmetric": symmetric},
                          namer(f"{hint}:matmul_int8x4")))
    if flip:    # the kernel read x + 128: take 128 * the weight sums off again
        sums = weight.astype(np.int64).sum(axis=(1, 2, 3) if conv else 0)
        fix = (-128 * sums).astype(np.int32).reshape((-1, 1, 1) if conv else (-1,))
        fix_value = Value(namer(f"{hint}/flip_offset"), fix.shape, "int32")
        constants[fix_value.name] = fix
        nodes.append(Node("add", (acc, fix_value), (out,), {}, namer(f"{hint}:add")))
    return nodes


def pack_integer_kernels(graph: Graph) -> Graph:
    """Rewrite integer convs (groups 1) and matmuls with constant int8 weights into the packed
    dot4 kernels; others (grouped/depthwise convs, uint8 or runtime weights) stay as they
    are."""
    if not any(n.op in ("conv2d_integer", "matmul_integer") for n in graph.nodes):
        return graph
    namer = Namer(graph)
    constants = dict(graph.constants)
    nodes, changed = [], False
    for node in graph.nodes:
        new = (_pack_rewrite(node, graph, namer, constants)
               if node.op in ("conv2d_integer", "matmul_integer") else [])
        nodes.extend(new or [node])
        changed = changed or bool(new)
    if not changed:
        return graph
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=constants))
