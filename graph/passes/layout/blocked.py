"""Channel-blocked activations (NCHWc) between convolutions.

In NCHW a conv vectorises over output width, which is short or strided in late CNN layers,
and a conv that vectorises over a block of output channels instead has to unpack its result
with a strided scatter. This pass keeps activations in the blocked layout x[N, C/b, H, W, b]
from conv to conv, so each conv, depthwise conv, epilogue and pooling reads and writes whole
channel blocks as contiguous vectors; only the edges of a blocked region convert (the first
conv reads NCHW directly, a `from_blocked` node feeds whatever needs NCHW).

Runs blocked: dense, depthwise and grouped convs with constant fp32 weights (weights re-laid
out here, once), unary elementwise ops, the depth taps of 3-D convs (frame_taps), binary
arithmetic whose other operand is blocked alike or a per-channel constant, max and average pooling, reductions over H and W that keep their
dims (global pooling), and concats and splits along channels in whole blocks. A grouped conv
runs blocked when its groups line up with the block (te.ops.grouped_conv_blocking: whole blocks per
group, or whole groups per block). The block is 16 channels when they divide by 16, else 8
(layout.conv_weight_block), so two values with the same channel count always share a block;
more than 8 channels that 8 does not divide take blocks of 8, the last one padded
(channel_block; from 512 channels on, blocks of 16, the last one padded): convs read and
write zeros there, only ops that keep a finite lane finite run on a padded value, and
`from_blocked` crops.

A grouped conv whose groups do not line up with its channels' block but do with blocks of 8
(RegNet's 24-wide groups over 912 or 336 channels, in blocks of 16) reads its input re-blocked
to 8 and writes blocks of 8 (`reblock`: an NCHW round trip, once per value and block), so a
value's block is not always channel_block's: every rule reads the block of the twin it has,
and an operand blocked otherwise is re-blocked to match (binary ops, depthwise convs).
"""
from __future__ import annotations

import numpy as np

from ....te.ops import (grouped_conv_blocking, pack_conv_weight, pack_conv_weight_blocked,
                        pack_depthwise_weight, pack_grouped_conv_weight)
from ...ir import FrozenDict, Graph, Node, OpClass, Value
from ...ops.core import op_class
from .conv_weights import conv_weight_block

_BINARY = frozenset({"add", "sub", "mul", "div", "max", "min", "pow"})
_SPATIAL_REDUCTIONS = frozenset({"reduce_mean", "reduce_max", "reduce_sum", "reduce_min"})


def _is_per_channel(shape: tuple[int, ...], out: tuple[int, ...]) -> bool:
    """(N, C, 1, 1) against an (N, C, H, W) output: its blocked twin broadcasts too."""
    return len(shape) == 4 and shape[0] == out[0] and shape[1] == out[1] and shape[2:] == (1, 1)


def blocked_shape(shape: tuple[int, ...], block: int) -> tuple[int, ...]:
    n, c, h, w = shape
    return (n, -(-c // block), h, w, block)


def channel_block(channels: int) -> int | None:
    """The block of a value with `channels` channels: layout.conv_weight_block's when it
    divides them, else PAD_BLOCK for more than PAD_BLOCK channels (the last block padded,
    ReXNet's 27, 38, 61, ... or DenseNet's growth of 12), else None. From WIDE_PAD_CHANNELS
    on, channels that 16 does not divide take padded blocks of 16 instead (at most 15
    padded lanes, under 3% more work): a conv's register tile is then two vectors wide, not
    one (SqueezeNet's 512 -> 1000 classifier conv at 7 x 7, alone: 0.65-0.86 ms as 1008
    channels in blocks of 16, 1.02-1.05 ms in blocks of 8)."""
    block = conv_weight_block(channels)
    if block is None and channels > PAD_BLOCK:
        block = PAD_BLOCK
    if block == PAD_BLOCK and channels >= WIDE_PAD_CHANNELS:
        block = 2 * PAD_BLOCK
    return block


PAD_BLOCK = 8
REBLOCK = 8     # the block a grouped conv takes when its groups miss its channels' block
WIDE_PAD_CHANNELS = 512
# unary ops whose result is finite wherever their input is: a padded lane (0 after a conv)
# stays finite through them, and a finite lane times the next conv's zero weight is zero
_PAD_SAFE_UNARY = frozenset({"relu", "neg", "abs", "erf", "tanh", "sigmoid", "leaky_relu",
                             "clip", "hard_sigmoid", "hard_swish", "gelu", "identity"})
# binary ops that keep padded lanes finite given a finite other operand (div and pow: only
# by a constant, whose padding is 1)
_PAD_SAFE_BINARY = frozenset({"add", "sub", "mul", "max", "min"})


class _Rewriter:
    """Walks the nodes in order, keeping for every value its blocked twin (if one exists) and
    whether its plain NCHW form is available."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.constants = dict(graph.constants)
        self.taken = set(self.constants) | {v.name for v in graph.inputs} \
            | {v.name for n in graph.nodes for v in n.outputs}
        self.blocked: dict[str, Value] = {}     # plain name -> blocked twin
        self.reblocked: dict[tuple[str, int], Value] = {}   # (plain name, block) -> twin
        self.plain: set[str] = {v.name for v in graph.inputs} | set(self.constants)
        self.nodes: list[Node] = []
        self.changed = False

    def fresh(self, base: str) -> str:
        name = base
        while name in self.taken:
            name += "_"
        self.taken.add(name)
        return name

    def constant(self, base: str, array: np.ndarray, dtype: str) -> Value:
        name = self.fresh(base)
        self.constants[name] = array
        return Value(name, tuple(array.shape), dtype)

    # -- conversions ----------------------------------------------------------------------
    def as_plain(self, value: Value | None) -> Value | None:
        """`value` in NCHW, converting its blocked twin back (once) when needed."""
        if value is None or value.name in self.plain:
            return value
        twin = self.blocked[value.name]
        if value.shape[2] * value.shape[3] == 1 and not _padded(twin, value):
            # one pixel (global pooling): a view
            node = Node("reshape", (twin,), (value,), FrozenDict(shape=value.shape),
                        self.fresh(f"{value.name}/unblock_view"))
        else:
            node = Node("from_blocked", (twin,), (value,), FrozenDict(channels=value.shape[1]),
                        self.fresh(f"{value.name}/from_blocked"))
        self.nodes.append(node)
        self.plain.add(value.name)
        return value

    def as_blocked(self, value: Value, block: int) -> Value:
        """The twin of `value` in blocks of `block`, converting it (once) when it has none:
        from NCHW, or from its twin in another block through NCHW (`reblock`)."""
        twin = self.blocked.get(value.name)
        if twin is not None and twin.shape[-1] == block:
            return twin
        other = self.reblocked.get((value.name, block))
        if other is not None:
            return other
        source = self.as_plain(value) if twin is not None else value
        new = Value(self.fresh(f"{value.name}/nchwc{block}"), blocked_shape(value.shape, block),
                    value.dtype)
        self.nodes.append(Node("to_blocked", (source,), (new,), FrozenDict(block=block),
                               self.fresh(f"{value.name}/to_blocked")))
        if twin is None:
            self.blocked[value.name] = new
        else:
            self.reblocked[(value.name, block)] = new
        return new

    def block_of(self, value: Value) -> int | None:
        """The block of `value`'s twin if it has one, else the block its channels take."""
        twin = self.blocked.get(value.name)
        return twin.shape[-1] if twin is not None else channel_block(value.shape[1])

    def emit_blocked(self, node: Node, op: str, inputs, attrs, block: int) -> None:
        """`node` rewritten as `op` on `inputs`; its output becomes a blocked twin."""
        out = node.outputs[0]
        twin = Value(self.fresh(f"{out.name}/nchwc{block}"), blocked_shape(out.shape, block),
                     out.dtype)
        self.nodes.append(Node(op, tuple(inputs), (twin,), FrozenDict(attrs), node.name))
        self.blocked[out.name] = twin
        self.changed = True

    def emit_plain(self, node: Node) -> None:
        inputs = tuple(self.as_plain(v) for v in node.inputs)
        self.nodes.append(node if inputs == node.inputs else
                          Node(node.op, inputs, node.outputs, node.attrs, node.name))
        self.plain.update(v.name for v in node.outputs)

    # -- rules ----------------------------------------------------------------------------
    def const_f32(self, value: Value) -> np.ndarray | None:
        array = self.constants.get(value.name) if value is not None else None
        return array if array is not None and str(array.dtype) == "float32" else None

    def conv(self, node: Node) -> bool:
        x, w = node.inputs[0], node.inputs[1]
        weight = self.const_f32(w)
        if weight is None or len(x.shape) != 4 or (len(node.inputs) > 2 and node.inputs[2]):
            return False
        f, cg = weight.shape[0], weight.shape[1]
        groups = node.attrs["groups"]
        attrs = {k: node.attrs[k] for k in ("strides", "pads", "dilations")}
        if groups == 1:
            out_block = channel_block(f)
            if out_block is None:
                return False
            in_block = (self.blocked[x.name].shape[-1] if x.name in self.blocked
                        else 0)
            # zero filters and input channels for the padding of partial blocks
            weight = _pad_axis(weight, 0, out_block)
            if in_block:
                weight = _pad_axis(weight, 1, in_block)
                packed = pack_conv_weight_blocked(weight, in_block, out_block)
                wv = self.constant(f"{w.name}/nchwc{in_block}x{out_block}", packed, w.dtype)
                xin = self.blocked[x.name]
            else:
                packed = pack_conv_weight(weight, out_block)
                wv = self.constant(f"{w.name}/kpacked{out_block}", packed, w.dtype)
                xin = x
            self.emit_blocked(node, "conv2d_nchwc", (xin, wv),
                              dict(attrs, block=out_block, in_block=in_block), out_block)
            return True
        if groups != x.shape[1] or f != groups or cg != 1:
            return self.grouped_conv(node, weight, attrs)
        block = self.block_of(x)
        if block is None:
            return False
        packed = pack_depthwise_weight(_pad_axis(weight, 0, block), block)
        wv = self.constant(f"{w.name}/dw{block}", packed, w.dtype)
        self.emit_blocked(node, "depthwise_conv2d_nchwc", (self.as_blocked(x, block), wv),
                          attrs, block)
        return True

    def grouped_conv(self, node: Node, weight: np.ndarray, attrs: dict) -> bool:
        """groups > 1, not depthwise: blocked when its groups line up with the block of its
        input (te.ops.grouped_conv_blocking) and the filters take the same block, else with
        blocks of REBLOCK (the input re-blocked, the output in blocks of REBLOCK)."""
        x, w = node.inputs[0], node.inputs[1]
        groups, f = node.attrs["groups"], weight.shape[0]
        block = self.block_of(x)
        if block is None or channel_block(f) != block or \
                grouped_conv_blocking(x.shape[1], f, groups, block) is None:
            block = REBLOCK
            if grouped_conv_blocking(x.shape[1], f, groups, block) is None:
                return False
        packed, per_group = pack_grouped_conv_weight(weight, groups, block)
        wv = self.constant(f"{w.name}/grouped{block}", packed, w.dtype)
        self.emit_blocked(node, "grouped_conv2d_nchwc", (self.as_blocked(x, block), wv),
                          dict(attrs, groups=groups, per_group=per_group), block)
        return True

    def per_channel(self, value: Value, channels: int, block: int,
                    fill: float = 0.0) -> Value | None:
        """A constant operand that broadcasts per channel (or is one number), in a form that
        broadcasts against the blocked layout (a partial last block padded with `fill`); None
        when it varies over H or W or N."""
        array = self.constants.get(value.name)
        if array is None or array.ndim > 4:
            return None
        shape = (1,) * (4 - array.ndim) + tuple(array.shape)
        if shape[0] != 1 or shape[2] != 1 or shape[3] != 1 or shape[1] not in (1, channels):
            return None
        if shape[1] == 1:
            return value
        array = array.reshape(channels)
        blocks = -(-channels // block)
        if blocks * block != channels:
            array = np.concatenate([array, np.full(blocks * block - channels, fill,
                                                   array.dtype)])
        twin = np.ascontiguousarray(array.reshape(1, blocks, 1, 1, block))
        return self.constant(f"{value.name}/nchwc{block}", twin, value.dtype)

    def binary(self, node: Node) -> bool:
        out = node.outputs[0]
        if len(out.shape) != 4 or not any(v.name in self.blocked for v in node.inputs):
            return False
        # the block of a full-size blocked operand (a per-channel one re-blocks cheaply)
        blocked = [v for v in node.inputs if v.name in self.blocked]
        block = self.blocked[next((v for v in blocked if v.shape == out.shape),
                                  blocked[0]).name].shape[-1]
        padded = out.shape[1] % block != 0
        if padded and node.op not in _PAD_SAFE_BINARY and not (
                node.op in ("div", "pow") and node.inputs[1].name in self.constants):
            return False
        # decide every operand before emitting anything: a conversion emitted for one
        # operand of a node that then stays in NCHW would be left without a reader
        plan = []
        for v in node.inputs:
            twin = self.blocked.get(v.name)
            if twin is not None and (v.shape == out.shape
                                     or _is_per_channel(v.shape, out.shape)):
                # same shape, or (N, C, 1, 1): broadcasts; re-blocked below if need be
                plan.append(twin if twin.shape[-1] == block else None)
            elif v.name in self.constants:
                fill = 1.0 if node.op in ("div", "pow") else 0.0
                twin = self.per_channel(v, out.shape[1], block, fill)
                if twin is None:
                    return False
                plan.append(twin)
            elif v.shape == out.shape:
                plan.append(None)            # converted below
            elif v.shape == ():     # one runtime number (Clip's bound from a graph input)
                plan.append(v)
            else:
                return False
        inputs = [self.as_blocked(v, block) if twin is None else twin
                  for v, twin in zip(node.inputs, plan)]
        self.emit_blocked(node, node.op, inputs, dict(node.attrs), block)
        return True

    def concat(self, node: Node) -> bool:
        """Along channels, of values whose channels fill whole blocks of one block (DenseNet's
        64 + 32k channels): a concat of the blocked twins along their block axis, so the
        layout carries on through the dense block instead of converting twice. The block is
        the output's own when its parts fill it, else the one their twins share (GhostNet's
        8 + 8 or 40 + 40 halves, in blocks of 8: the output then keeps blocks of 8, which
        its readers take as they take any twin's block)."""
        out = node.outputs[0]
        if len(out.shape) != 4 or node.attrs["axis"] not in (1, -3):
            return False
        parts = [v for v in node.inputs if v is not None]
        if not any(v.name in self.blocked for v in parts):
            return False
        shared = {self.blocked[v.name].shape[-1] for v in parts if v.name in self.blocked}
        block = next((b for b in (channel_block(out.shape[1]), *sorted(shared, reverse=True))
                      if b is not None and self._fills_blocks(parts, b)), None)
        if block is None:
            return False
        self.emit_blocked(node, "concat", [self.as_blocked(v, block) for v in parts],
                          dict(node.attrs, axis=1), block)
        return True

    def _fills_blocks(self, parts: list[Value], block: int) -> bool:
        """Whether every part is whole blocks of `block` in the layout it has or would take."""
        for v in parts:
            twin = self.blocked.get(v.name)
            if v.shape[1] % block or (twin.shape[-1] if twin is not None
                                      else channel_block(v.shape[1])) != block:
                return False
        return True

    def split(self, node: Node) -> bool:
        """Along channels, of a blocked value into parts of whole blocks (MixNet's 480 ->
        240 + 240 in blocks of 16): a split of the twin along its block axis, each part a
        blocked twin, instead of an NCHW round trip."""
        x = node.inputs[0]
        twin = self.blocked.get(x.name)
        if (twin is None or len(x.shape) != 4 or node.attrs["axis"] not in (1, -3)
                or _padded(twin, x)):
            return False
        block = twin.shape[-1]
        if any(v.shape[1] % block for v in node.outputs):
            return False
        twins = tuple(Value(self.fresh(f"{v.name}/nchwc{block}"),
                            blocked_shape(v.shape, block), v.dtype) for v in node.outputs)
        sizes = tuple(v.shape[1] // block for v in node.outputs)
        self.nodes.append(Node("split", (twin,), twins,
                               FrozenDict(dict(node.attrs, axis=1, sizes=sizes)), node.name))
        self.blocked.update((v.name, t) for v, t in zip(node.outputs, twins))
        self.changed = True
        return True

    def frame_taps(self, node: Node, twin: Value, padded: bool) -> bool:
        """A 3-D conv's depth taps (graph/onnx/conv3d.py) on whole blocks: when each
        group's channels fill whole blocks, a tap is a copy of blocks, so the op runs on the
        blocked twin unchanged (axis 1 then counts blocks)."""
        block = twin.shape[-1]
        if padded or (node.inputs[0].shape[1] // node.attrs["groups"]) % block:
            return False
        self.emit_blocked(node, "frame_taps", (twin,), dict(node.attrs), block)
        return True

    def rewrite(self, node: Node) -> bool:
        op, first = node.op, node.inputs[0] if node.inputs else None
        if op == "conv2d":
            return self.conv(node)
        if op == "concat":
            return self.concat(node)
        if op in _BINARY:
            return self.binary(node)
        if op == "split":
            return self.split(node)
        if first is None or first.name not in self.blocked or len(node.outputs) != 1:
            return False
        twin = self.blocked[first.name]
        padded = _padded(twin, first)
        if op == "reshape" and first.shape[2] * first.shape[3] == 1 and not padded:
            # one pixel per channel (after global pooling): the same bytes as NCHW
            self.nodes.append(Node(op, (twin,), node.outputs, node.attrs, node.name))
            self.plain.update(v.name for v in node.outputs)
            return True
        if op == "frame_taps":
            return self.frame_taps(node, twin, padded)
        same_layout = ((op_class(op) is OpClass.ELEMWISE and len(node.inputs) == 1
                        and (not padded or op in _PAD_SAFE_UNARY))
                       or op in ("max_pool2d", "avg_pool2d")
                       or (op in _SPATIAL_REDUCTIONS and tuple(node.attrs["axes"]) == (2, 3)
                           and node.attrs["keepdims"]))
        if same_layout:
            self.emit_blocked(node, op, (twin,), dict(node.attrs), twin.shape[-1])
        return same_layout

    def run(self) -> Graph:
        for node in self.graph.nodes:
            if not self.rewrite(node):
                self.emit_plain(node)
        if not self.changed:
            return self.graph
        for v in self.graph.outputs:
            self.as_plain(v)
        used = {v.name for n in self.nodes for v in n.inputs if v is not None} \
            | {v.name for v in self.graph.outputs}
        constants = {k: a for k, a in self.constants.items() if k in used}
        return self.graph.replace(nodes=tuple(self.nodes), constants=constants)


def _padded(twin: Value, value: Value) -> bool:
    """Whether `twin`, the blocked form of `value`, has a padded last block."""
    return twin.shape[1] * twin.shape[4] != value.shape[1]


def _pad_axis(array: np.ndarray, axis: int, block: int) -> np.ndarray:
    """`array` with zeros appended along `axis` up to a multiple of `block`."""
    extra = -array.shape[axis] % block
    if not extra:
        return array
    pads = [(0, 0)] * array.ndim
    pads[axis] = (0, extra)
    return np.pad(array, pads)


def to_blocked_layout(graph: Graph) -> Graph:
    """Rewrite the graph's conv regions into the channel-blocked layout (see module doc)."""
    return _Rewriter(graph).run()
