"""Move layout changes (transpose, reshape) past the elementwise ops that read them.

An elementwise op commutes with a transpose or a reshape of its operands:
relu(transpose(x)) == transpose(relu(x)), and add(T(a), T(b)) == T(add(a, b)) when both
operands move alike, a constant operand moving the opposite way (transposed by the inverse
permutation, or reshaped group by group). Sinking every move towards its consumers lets two
moves that undo each other meet, and `cancel_transposes` then removes both: a 3-D conv
lowered frames-major (graph/onnx/conv3d.py) ends in reshape + transpose back to
[N, C, D, H, W], the next one starts with the inverse, and the bias, ReLU and residual adds
in between run on the frames-major (and then channel-blocked) tensor instead of converting
twice per conv. A move that meets no inverse ends up after the elementwise chain, where
fusion reads it as before.
"""
from __future__ import annotations

import math

import numpy as np

from ...ir import FrozenDict, Graph, Node, OpClass, Value
from ...ops.core import op_class
from ..dce import eliminate_dead_code
from ..rewrite import Namer

# elementwise or broadcast by class, but not pointwise along every axis
_NOT_POINTWISE = frozenset({"batch_norm", "quantize_linear", "dequantize_linear", "requantize",
                            "lowbit_quantize", "lowbit_dequantize", "lowbit_decode",
                            "lowbit_encode", "bitcast"})
# concat lowers to a chain of selects that loads every input for every element; along the
# innermost (vector) axis that chain costs more than along channels of NCHW: 1 thread, float,
# inputs [1, 32, 28, 28] vs [1, 28, 28, 32] (a throwaway script): 2 inputs 0.16 ms NCHW,
# 0.08 NHWC; 8 inputs 0.56 vs 1.16; 32 inputs 17 vs 34. So only narrow concats move.
MAX_CONCAT_SINK = 4
_REDUCES = frozenset({"reduce_mean", "reduce_sum", "reduce_max", "reduce_min"})
# a broadcast constant is expanded (to the extent a reshape's groups need) up to this size
MAX_CONSTANT_ELEMENTS = 1 << 20


# per-tensor (de)quantization is pointwise: with `quantized`, moves sink through them
_PER_TENSOR = frozenset({"quantize_linear", "dequantize_linear"})


def _pointwise(node: Node, quantized: bool = False) -> bool:
    if (quantized and node.op in _PER_TENSOR and len(node.outputs) == 1
            and all(v is None or v.shape == () for v in node.inputs[1:])):
        return True
    return (op_class(node.op) in (OpClass.ELEMWISE, OpClass.BROADCAST)
            and node.op not in _NOT_POINTWISE and "axis" not in node.attrs
            and len(node.outputs) == 1)


def _same_move(a: Node, b: Node) -> bool:
    """Whether `a` and `b` move their inputs the same way (op, attrs and input shape)."""
    return a.op == b.op and a.attrs == b.attrs and a.inputs[0].shape == b.inputs[0].shape


def _reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]):
    """Contiguous (src axes, dst axes) ranges of a reshape whose sizes match; None when the
    shapes have no such split (one is empty)."""
    groups, i, j = [], 0, 0
    while i < len(src) or j < len(dst):
        a0, b0 = i, j
        pa = src[i] if i < len(src) else 1
        pb = dst[j] if j < len(dst) else 1
        i, j = min(i + 1, len(src)), min(j + 1, len(dst))
        while pa != pb:
            if pa < pb and i < len(src):
                pa, i = pa * src[i], i + 1
            elif pb < pa and j < len(dst):
                pb, j = pb * dst[j], j + 1
            else:
                return None
        groups.append((range(a0, i), range(b0, j)))
    return groups


def _constant_through(move: Node, array: np.ndarray) -> np.ndarray | None:
    """`array` (broadcasting against the move's output) as it must be to broadcast against
    the move's input instead; None when that would need a constant too big to expand."""
    src, dst = move.inputs[0].shape, move.outputs[0].shape
    if array.ndim > len(dst) or not all(isinstance(d, int) for d in src + dst):
        return None
    array = array.reshape((1,) * (len(dst) - array.ndim) + array.shape)
    if move.op == "transpose":
        return np.transpose(array, np.argsort(move.attrs["perm"]))
    groups = _reshape_groups(src, dst)
    if groups is None:
        return None
    full, shape = [], []
    for src_axes, dst_axes in groups:
        ones = all(array.shape[d] == 1 for d in dst_axes)
        full += [1 if ones else dst[d] for d in dst_axes]
        shape += [1 if ones else src[s] for s in src_axes]
    if math.prod(full) > MAX_CONSTANT_ELEMENTS:
        return None
    return np.ascontiguousarray(np.broadcast_to(array, tuple(full))).reshape(shape)


class _Sinker:
    def __init__(self, graph: Graph, quantized: bool = False):
        self.quantized = quantized
        self.constants = dict(graph.constants)
        self.namer = Namer(graph)
        self.producers: dict[str, Node] = {}
        self.changed = False

    def sink(self, node: Node) -> list[Node]:
        """`node`, or the same op on the unmoved operands followed by the move."""
        if self.quantized and node.op in _REDUCES and node.attrs.get("keepdims"):
            return self._sink_reduce(node)
        if self.quantized and node.op == "concat":
            return self._sink_concat(node)
        if self.quantized and node.op in ("max_pool2d", "avg_pool2d"):
            return self._sink_pool(node)
        if not _pointwise(node, self.quantized):
            return [node]
        out = node.outputs[0]
        moves = [self.producers.get(v.name) for v in node.inputs
                 if v is not None and v.name not in self.constants and v.shape != ()]
        if not moves or any(m is None or m.op not in ("transpose", "reshape") for m in moves):
            return [node]
        move = next((m for m in moves if m.outputs[0].shape == out.shape), None)
        if move is None or any(not ((_same_move(m, move) and m.outputs[0].shape == out.shape)
                                    or self._broadcast_transpose(m, move)) for m in moves):
            return [node]
        inputs = []
        for v in node.inputs:
            if v is None or v.shape == ():      # a scalar broadcasts alike either way
                inputs.append(v)
            elif v.name in self.constants:
                array = _constant_through(move, self.constants[v.name])
                if array is None:
                    return [node]
                inputs.append(self._constant(v, array))
            else:
                inputs.append(self.producers[v.name].inputs[0])
        moved = Value(self.namer(f"{out.name}/unmoved"), move.inputs[0].shape, out.dtype)
        inner = Node(node.op, tuple(inputs), (moved,), node.attrs, node.name)
        outer = Node(move.op, (moved,), (out,), move.attrs, self.namer(f"{node.name}/{move.op}"))
        self.changed = True
        self.producers[moved.name] = inner
        return self.sink(inner) + [outer]

    def _sink_reduce(self, node: Node) -> list[Node]:
        """reduce(T(x), axes, keepdims) == T(reduce(x, perm[axes], keepdims)): a global pool
        over a pixel-major activation reduces it in place."""
        move = self.producers.get(node.inputs[0].name)
        if move is None or move.op != "transpose" or len(node.inputs) != 1:
            return [node]
        perm = move.attrs["perm"]
        src = move.inputs[0]
        axes = tuple(sorted(perm[a] for a in node.attrs["axes"]))
        shape = tuple(1 if k in axes else d for k, d in enumerate(src.shape))
        out = node.outputs[0]
        moved = Value(self.namer(f"{out.name}/unmoved"), shape, out.dtype)
        inner = Node(node.op, (src,), (moved,), node.attrs.replace(axes=axes), node.name)
        outer = Node("transpose", (moved,), (out,), move.attrs,
                     self.namer(f"{node.name}/transpose"))
        self.changed = True
        self.producers[moved.name] = inner
        return [inner, outer]

    def _sink_concat(self, node: Node) -> list[Node]:
        """concat(T(a), T(b), ..., axis) == T(concat(a, b, ..., perm[axis])) when every input
        is transposed by the same permutation (SqueezeNet's, GoogLeNet's and Inception's
        channel concats of pixel-major conv outputs; at most MAX_CONCAT_SINK inputs)."""
        if len(node.inputs) > MAX_CONCAT_SINK:
            return [node]
        moves = [self.producers.get(v.name) for v in node.inputs]
        first = moves[0]
        if any(m is None or m.op != "transpose" or m.attrs != first.attrs for m in moves):
            return [node]
        perm = first.attrs["perm"]
        axis = perm[node.attrs["axis"] % len(perm)]
        srcs = tuple(m.inputs[0] for m in moves)
        shape = list(srcs[0].shape)
        shape[axis] = sum(v.shape[axis] for v in srcs)
        return self._moved(node, srcs, tuple(shape), node.attrs.replace(axis=axis), first)

    def _sink_pool(self, node: Node) -> list[Node]:
        """pool(T(x)) for x pixel-major [N, H, W, C] and T to NCHW: the pool over x viewed as
        the channel-blocked [N, 1, H, W, C] (one block of all channels), then T."""
        move = self.producers.get(node.inputs[0].name)
        out = node.outputs[0]
        if move is None or move.op != "transpose" or tuple(move.attrs["perm"]) != (0, 3, 1, 2) \
                or len(out.shape) != 4:
            return [node]
        src = move.inputs[0]
        n, h, w, c = src.shape
        _, _, oh, ow = out.shape
        blocked = Value(self.namer(f"{src.name}/blocked"), (n, 1, h, w, c), src.dtype)
        pooled = Value(self.namer(f"{out.name}/blocked"), (n, 1, oh, ow, c), out.dtype)
        flat = Value(self.namer(f"{out.name}/unmoved"), (n, oh, ow, c), out.dtype)
        nodes = [Node("reshape", (src,), (blocked,), FrozenDict(shape=blocked.shape),
                      self.namer(f"{node.name}/view")),
                 Node(node.op, (blocked,), (pooled,), node.attrs, node.name),
                 Node("reshape", (pooled,), (flat,), FrozenDict(shape=flat.shape),
                      self.namer(f"{node.name}/unview")),
                 Node("transpose", (flat,), (out,), move.attrs,
                      self.namer(f"{node.name}/transpose"))]
        self.changed = True
        for new in nodes[:3]:
            self.producers[new.outputs[0].name] = new
        return nodes

    def _moved(self, node: Node, srcs, shape, attrs, move: Node) -> list[Node]:
        """`node` over `srcs` (shape `shape`), then `move` of its result."""
        out = node.outputs[0]
        moved = Value(self.namer(f"{out.name}/unmoved"), shape, out.dtype)
        inner = Node(node.op, tuple(srcs), (moved,), attrs, node.name)
        outer = Node("transpose", (moved,), (out,), move.attrs,
                     self.namer(f"{node.name}/transpose"))
        self.changed = True
        self.producers[moved.name] = inner
        return [inner, outer]

    def _broadcast_transpose(self, m: Node, move: Node) -> bool:
        """With `quantized`: `m` transposes a smaller operand by `move`'s permutation, so
        op(T(a), T(b)) == T(op(a, b)) under numpy broadcasting (equal ranks)."""
        return (self.quantized and m.op == move.op == "transpose"
                and m.attrs == move.attrs and m.outputs[0].shape != move.outputs[0].shape
                and len(m.inputs[0].shape) == len(move.inputs[0].shape))

    def _constant(self, value: Value, array: np.ndarray) -> Value:
        name = self.namer(f"{value.name}/moved")
        self.constants[name] = array
        return Value(name, tuple(array.shape), value.dtype)

    def run(self, graph: Graph) -> Graph:
        nodes = []
        for node in graph.nodes:
            for new in self.sink(node):
                nodes.append(new)
                for o in new.outputs:
                    self.producers[o.name] = new
        if not self.changed:
            return graph
        used = {v.name for n in nodes for v in n.inputs if v is not None} \
            | {v.name for v in graph.outputs}
        constants = {k: a for k, a in self.constants.items() if k in used}
        # the moves left behind (each sunk one step at a time) are dead unless read elsewhere
        return eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=constants))


def sink_layout_moves(graph: Graph, quantized: bool = False) -> Graph:
    """Move every transpose and reshape past the pointwise ops that read it (module doc).
    `quantized` (the int8 passes): also past per-tensor QuantizeLinear/DequantizeLinear
    (scalar scale and zero point) and into broadcasting ops whose smaller operands are
    transposed by the same permutation, so an int8 chain's NCHW float detour (DQ -> SiLU ->
    Q between two pixel-major convs) runs pixel-major and its transposes cancel."""
    return _Sinker(graph, quantized).run(graph)
