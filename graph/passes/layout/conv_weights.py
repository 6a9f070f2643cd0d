"""Layout rewrite of constant conv weights: conv2d -> conv2d_kpacked.

A dense conv2d whose weight is a constant gets that weight re-laid out once, at compile time,
as [F / block, C, KH, KW, block] (te.ops.pack_conv_weight). The packed conv then vectorises
over a block of output channels, which stays efficient for the small and strided spatial
extents of late CNN layers, where vectorising over the output width cannot. Grouped and
depthwise convs, runtime weights and filter counts with no block divisor are left alone.
"""
from __future__ import annotations

from ....te.ops import pack_conv_weight
from ...ir import Graph, Node, Value

BLOCKS = (16, 8)   # 16 = two AVX2 vectors or one AVX-512 vector of float32


def conv_weight_block(filters: int) -> int | None:
    """The output-channel block for `filters` filters, or None when none divides it."""
    return next((b for b in BLOCKS if filters % b == 0), None)


def pack_conv_weights(graph: Graph) -> Graph:
    """Rewrite every eligible conv2d into conv2d_kpacked with a packed constant weight."""
    constants = dict(graph.constants)
    taken = set(constants) | {v.name for n in graph.nodes for v in n.outputs} \
        | {v.name for v in graph.inputs}
    packed: dict[str, Value] = {}
    nodes, changed = [], False
    for node in graph.nodes:
        w = node.inputs[1] if node.op == "conv2d" else None
        block = conv_weight_block(w.shape[0]) if w is not None else None
        if (w is None or node.attrs["groups"] != 1 or w.name not in graph.constants
                or block is None or str(graph.constants[w.name].dtype) != "float32"):
            nodes.append(node)
            continue
        if w.name not in packed:
            name = f"{w.name}/kpacked{block}"
            while name in taken:
                name += "_"
            taken.add(name)
            constants[name] = pack_conv_weight(graph.constants[w.name], block)
            packed[w.name] = Value(name, constants[name].shape, w.dtype)
        attrs = node.attrs.replace(block=block)
        nodes.append(Node("conv2d_kpacked", (node.inputs[0], packed[w.name]), node.outputs,
                          attrs, node.name))
        changed = True
    if not changed:
        return graph
    used = {v.name for n in nodes for v in n.inputs if v is not None} \
        | {v.name for v in graph.outputs}
    constants = {k: v for k, v in constants.items() if k in used}
    return graph.replace(nodes=tuple(nodes), constants=constants)
