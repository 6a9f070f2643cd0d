"""Algebraic simplification of the graph.

- `remove_identities`: identity nodes (ONNX Identity, inference Dropout) disappear.
- `fold_batch_norm`: batch_norm after conv2d (optionally + bias add) or after a 2-D matmul
  with a constant weight is folded into the weights and a bias add; any other batch_norm is
  decomposed into mul + add with per-channel constants.
- `cancel_transposes`: transpose(transpose(x)) becomes one transpose or nothing (an
  identity copy for a graph output); reshape(reshape(x)) becomes one reshape.
Graph outputs keep their names: a rewrite that would rename a graph output is skipped.
"""
from __future__ import annotations

import numpy as np

from ..ir import Graph, Node, Value
from .dce import eliminate_dead_code
from .rewrite import Namer, replace_uses, resolve


def remove_identities(graph: Graph) -> Graph:
    outputs = {v.name for v in graph.outputs}
    mapping: dict[str, Value] = {}
    kept = []
    for n in graph.nodes:
        if n.op == "identity" and n.outputs[0].name not in outputs:
            mapping[n.outputs[0].name] = n.inputs[0]
        else:
            kept.append(n)
    if not mapping:
        return graph
    return graph.replace(nodes=tuple(replace_uses(kept, resolve(mapping))))


def _compose(inner: Node, outer: Node) -> Node | None:
    """The single node equal to outer(inner(x)), or None if it is the identity."""
    x = inner.inputs[0]
    if outer.op == "transpose":
        p1, p2 = inner.attrs["perm"], outer.attrs["perm"]
        perm = tuple(p1[i] for i in p2)
        if perm == tuple(range(len(perm))):
            return None
        return Node("transpose", (x,), outer.outputs, {"perm": perm}, outer.name)
    if tuple(outer.attrs["shape"]) == x.shape:
        return None
    return Node("reshape", (x,), outer.outputs, outer.attrs, outer.name)


def cancel_transposes(graph: Graph) -> Graph:
    producers = graph.producers()
    outputs = {v.name for v in graph.outputs}
    mapping: dict[str, Value] = {}
    nodes, changed = [], False
    for n in graph.nodes:
        n = replace_uses([n], mapping)[0]
        inner = producers.get(n.inputs[0].name) if n.op in ("transpose", "reshape") and \
            n.inputs[0] is not None else None
        if inner is None or inner.op != n.op:
            nodes.append(n)
            for v in n.outputs:     # its inputs may have been renamed above
                producers[v.name] = n
            continue
        new = _compose(inner, n)
        if new is None and n.outputs[0].name in outputs:
            # a graph output keeps its name: one copy instead of two moves
            new = Node("identity", (inner.inputs[0],), n.outputs, {}, n.name)
        changed = True
        if new is None:
            mapping[n.outputs[0].name] = inner.inputs[0]
        else:
            nodes.append(new)
            producers[n.outputs[0].name] = new
    if not changed:
        return graph
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes)))


# -- batch norm --------------------------------------------------------------------------------

def _bn_scale_shift(node: Node, consts, inverse_first: bool = False
                    ) -> tuple[np.ndarray, np.ndarray] | None:
    """Per-channel (s, shift) with batch_norm(x) = x * s + shift. `inverse_first`: s =
    (1 / sqrt(var + eps)) * scale, the order onnxruntime's BatchNormalization kernel rounds
    in (a mul + add that stays in the graph: quantized models re-quantize its output, where a
    last-bit difference can move a value across a rounding step); otherwise scale / sqrt(...),
    as onnxruntime folds a batch norm into conv weights."""
    if not all(v.name in consts for v in node.inputs[1:]):
        return None
    scale, bias, mean, var = (consts[v.name] for v in node.inputs[1:])
    root = np.sqrt(var + np.asarray(node.attrs["epsilon"], dtype=var.dtype))
    s = (np.reciprocal(root) * scale).astype(root.dtype) if inverse_first else scale / root
    return s, bias - mean * s


def _single_use(value: Value, consumers, outputs) -> bool:
    return len(consumers.get(value.name, ())) == 1 and value.name not in outputs


class _BatchNormFolder:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.consts = dict(graph.constants)
        self.producers = graph.producers()
        self.consumers = graph.consumers()
        self.outputs = {v.name for v in graph.outputs}
        self.namer = Namer(graph)
        self.replaced: dict[str, Node] = {}  # node name -> its rewritten form

    def const(self, arr: np.ndarray, hint: str) -> Value:
        name = self.namer(hint)
        self.consts[name] = arr
        return Value(name, arr.shape, arr.dtype.name)

    def _producer(self, v: Value, op: str) -> Node | None:
        p = self.producers.get(v.name)
        p = self.replaced.get(p.name, p) if p is not None else None
        return p if p is not None and p.op == op and _single_use(v, self.consumers,
                                                                 self.outputs) else None

    def fold(self, bn: Node) -> list[Node]:
        """Nodes that replace `bn` (and possibly rewrite its producer via self.replaced)."""
        ss = _bn_scale_shift(bn, self.consts)
        x, y = bn.inputs[0], bn.outputs[0]
        if ss is None:
            return [bn]
        s, shift = ss
        ch = (-1,) + (1,) * (len(x.shape) - 2)
        add = self._producer(x, "add")
        anchor_in = add.inputs[0] if add is not None else x
        old_bias = None
        if add is not None and add.inputs[1].name in self.consts and \
                add.inputs[1].shape == (len(s), 1, 1):
            old_bias = self.consts[add.inputs[1].name].reshape(-1)
        conv = self._producer(anchor_in, "conv2d") if add is None or old_bias is not None \
            else None
        mm = self._producer(x, "matmul") if len(x.shape) == 2 else None
        if conv is not None and conv.inputs[1].name in self.consts:
            w = self.consts[conv.inputs[1].name]
            w2 = self.const((w * s.reshape(-1, 1, 1, 1)).astype(w.dtype), conv.inputs[1].name)
            self.replaced[conv.name] = Node("conv2d", (conv.inputs[0], w2), conv.outputs,
                                            conv.attrs, conv.name)
            b = shift if old_bias is None else old_bias * s + shift
            if add is not None:
                self.replaced[add.name] = None  # the bias add is re-created below
            bias = self.const(b.reshape(ch).astype(y.dtype), f"{bn.name}/bias")
            return [Node("add", (conv.outputs[0], bias), (y,), {}, bn.name)]
        if mm is not None and mm.inputs[1].name in self.consts and \
                len(mm.inputs[1].shape) == 2:
            w = self.consts[mm.inputs[1].name]
            w2 = self.const((w * s.reshape(1, -1)).astype(w.dtype), mm.inputs[1].name)
            self.replaced[mm.name] = Node("matmul", (mm.inputs[0], w2), mm.outputs, {},
                                          mm.name)
            bias = self.const(shift.astype(y.dtype), f"{bn.name}/bias")
            return [Node("add", (mm.outputs[0], bias), (y,), {}, bn.name)]
        s, shift = _bn_scale_shift(bn, self.consts, inverse_first=True)
        mid = Value(self.namer(f"{bn.name}/scaled"), x.shape, x.dtype)
        scale = self.const(s.reshape(ch).astype(y.dtype), f"{bn.name}/scale")
        bias = self.const(shift.reshape(ch).astype(y.dtype), f"{bn.name}/shift")
        return [Node("mul", (x, scale), (mid,), {}, f"{bn.name}/mul"),
                Node("add", (mid, bias), (y,), {}, bn.name)]


def fold_batch_norm(graph: Graph) -> Graph:
    if not any(n.op == "batch_norm" for n in graph.nodes):
        return graph
    folder = _BatchNormFolder(graph)
    emitted: list[Node] = []
    for n in graph.nodes:
        emitted.extend(folder.fold(n) if n.op == "batch_norm" else [n])
    nodes = []
    for n in emitted:
        n = folder.replaced.get(n.name, n) if n.op != "batch_norm" and \
            n.name in folder.replaced else n
        if n is not None:
            nodes.append(n)
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes), constants=folder.consts))


def simplify(graph: Graph) -> Graph:
    """All simplifications, in an order where each enables the next."""
    return cancel_transposes(fold_batch_norm(remove_identities(graph)))
