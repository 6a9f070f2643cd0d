"""Recognise numpy compositions that Kiln has one graph op for, in a traced graph.

A user writes softmax as exp(x - max) / sum(exp(x - max)) and layer norm as
(x - mean) / sqrt(var + eps) * gamma + beta; traced op by op these become four or five
kernels that each pass over memory, where Kiln's `softmax` and `layer_norm` ops are one
(benchmarks/RESULTS.md: 2.6x and 3.2x faster on 32768 x 256). `fuse_compositions` replaces a
composition by the op when its intermediates are used nowhere else, so the result is the same
values (up to rounding) and the rest of the graph does not change.
"""
from __future__ import annotations

from ..graph.ir import Graph, Node, Value
from ..graph.passes.cse import eliminate_common_subexpressions
from ..graph.passes.dce import eliminate_dead_code


class _Uses:
    def __init__(self, graph: Graph):
        self.producer = graph.producers()
        self.consumers = graph.consumers()
        self.readers = {k: len(v) for k, v in self.consumers.items()}
        self.outputs = {v.name for v in graph.outputs}
        self.constants = graph.constants

    def node(self, v: Value | None, op: str) -> Node | None:
        n = self.producer.get(v.name) if v is not None else None
        return n if n is not None and n.op == op else None

    def private(self, v: Value, readers: int = 1) -> bool:
        """`v` is read by exactly `readers` nodes and is no graph output."""
        return self.readers.get(v.name, 0) == readers and v.name not in self.outputs

    def scalar(self, v: Value) -> float | None:
        arr = self.constants.get(v.name)
        return float(arr) if arr is not None and arr.size == 1 else None


def _keep_axis(node: Node, rank: int) -> int | None:
    """The one axis a keepdims reduction reduces, else None."""
    axes = tuple(node.attrs["axes"])
    return axes[0] if len(axes) == 1 and node.attrs["keepdims"] and rank else None


def _softmax(uses: _Uses, div: Node):
    """div(e, sum(e, a)) with e = exp(x - max(x, a)) -> softmax(x, axis=a)."""
    e, s = div.inputs
    total, expo = uses.node(s, "reduce_sum"), uses.node(e, "exp")
    if total is None or expo is None or total.inputs[0] != e:
        return None
    sub = uses.node(expo.inputs[0], "sub")
    if sub is None or not (uses.private(e, 2) and uses.private(s) and
                           uses.private(expo.inputs[0])):
        return None
    x, m = sub.inputs
    peak = uses.node(m, "reduce_max")
    axis = _keep_axis(total, len(x.shape))
    if peak is None or peak.inputs[0] != x or not uses.private(m) or axis is None \
            or _keep_axis(peak, len(x.shape)) != axis or x.shape != div.outputs[0].shape \
            or not x.dtype.startswith("float"):
        return None
    return Node("softmax", (x,), div.outputs, {"axis": axis}, div.name)


def _layer_norm(uses: _Uses, div: Node):
    """div(c, sqrt(mean(c*c, a) + eps)) with c = x - mean(x, a), a the last axis, then an
    optional * gamma and + beta -> layer_norm(x, gamma, beta)."""
    c, sd = div.inputs
    sub, root = uses.node(c, "sub"), uses.node(sd, "sqrt")
    if sub is None or root is None or not uses.private(sd):
        return None
    x, mu = sub.inputs
    rank = len(x.shape)
    mean = uses.node(mu, "reduce_mean")
    plus = uses.node(root.inputs[0], "add")
    if mean is None or mean.inputs[0] != x or _keep_axis(mean, rank) != rank - 1 \
            or plus is None or not x.dtype.startswith("float") or x.shape != c.shape:
        return None
    var, eps = plus.inputs
    epsilon = uses.scalar(eps)
    var_node = uses.node(var, "reduce_mean")
    if epsilon is None or var_node is None or _keep_axis(var_node, rank) != rank - 1:
        return None
    square = var_node.inputs[0]
    sq = uses.producer.get(square.name)
    squared = sq is not None and (
        (sq.op == "mul" and sq.inputs == (c, c)) or
        (sq.op == "pow" and sq.inputs[0] == c and uses.scalar(sq.inputs[1]) == 2.0))
    if not (squared and uses.private(c, 2) and uses.private(mu) and uses.private(var)
            and uses.private(square) and uses.private(root.inputs[0])):
        return None
    return x, epsilon


def _affine(uses: _Uses, y: Value, op: str, n: int):
    """The `op` (mul/add) node that alone reads `y`, with a parameter of shape [n]:
    (node, parameter), else None."""
    readers = uses.consumers.get(y.name, [])
    if len(readers) != 1 or readers[0].op != op or not uses.private(y):
        return None
    node = readers[0]
    other = node.inputs[1] if node.inputs[0] == y else node.inputs[0]
    if other.dtype != y.dtype or other.shape != (n,) or node.outputs[0].shape != y.shape:
        return None
    return node, other


def fuse_compositions(graph: Graph) -> Graph:
    """`graph` with softmax and layer-norm compositions as single ops (or itself)."""
    graph = eliminate_common_subexpressions(graph)
    uses = _Uses(graph)
    replace: dict[str, Node] = {}        # name of the node that gets replaced -> new node
    for node in graph.nodes:
        if node.op != "div":
            continue
        if (new := _softmax(uses, node)) is not None:
            replace[node.name] = new
            continue
        found = _layer_norm(uses, node)
        if found is None:
            continue
        x, epsilon = found
        n, last, params = x.shape[-1], node, []
        for op in ("mul", "add"):
            step = _affine(uses, last.outputs[0], op, n)
            if step is None:
                break
            last = step[0]
            params.append(step[1])
        if not params:
            continue                       # the op takes a scale: keep the composition
        scale, bias = params[0], (params[1] if len(params) > 1 else None)
        new = Node("layer_norm", (x, scale, bias), last.outputs,
                   {"axis": len(x.shape) - 1, "epsilon": epsilon, "stash_type": 1}, last.name)
        replace[last.name] = new
    if not replace:
        return graph
    nodes = [replace.get(n.name, n) for n in graph.nodes]
    # the intermediates the new ops replace are now unread: dead code elimination drops them
    return eliminate_dead_code(graph.replace(nodes=tuple(nodes)))
