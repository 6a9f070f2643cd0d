"""A matmul_int8x4's constant byte words [K4, N] as column panels [P, K4, 1, block] on a VNNI
target (te/ops/int8/core.py panel_weight_words), built once at compile time.

Without panels the kernel copied its weight into panels on every call (the default schedule
packs a large vector operand), and a register tile read its columns from rows N words apart
(a 1024-column weight: every k in the same L1 sets). With the panels in the constant, the
anchor is a matmul_prepacked: the search space's panel defaults (space_defaults.py
_panel_defaults) give it a register tile one panel wide, over as many rows as the
accumulator budget holds, and the few-rows / big-weight tiles the float GEMMs take.

Targets without VNNI take the int16 pairs instead (int8_widen.py), in panels of their own.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ....codegen.dot4 import dot4_strategies, target_features
from ....codegen.target import Target
from ....te.ops.int8.core import panel_weight_words
from ...ir import FrozenDict, Graph, Node, Value
from ..dce import eliminate_dead_code
from ..rewrite import Namer

# panel widths in int32 columns, preferred first; only one that divides the columns is
# taken (else the weight keeps [K4, N]): a zero-padded tail panel put the register tile's
# vector loop past the columns and ran 5-30x slower (3136 x 144 words -> 24 with 32-wide
# panels: 0.97 ms vs 0.055 ms with [K4, N], 1 thread), and a 48-wide vector (3 zmm) is no
# LLVM vector type the x86 backend handles well (128 x 256 -> 768: 1.3 ms vs 0.13 ms 32-wide)
PANELS = (32, 16)
# outputs this narrow or narrower keep [K4, N] (one panel would not change the layout)
MIN_COLUMNS = 16


def panel_width(n: int) -> int | None:
    """The first of PANELS that divides the `n` columns, else None (no panels)."""
    return next((block for block in PANELS if n % block == 0), None)


def panels_int8(target) -> bool:
    """Whether `target` (a Target or a target string; None: no) lowers byte dot products
    with VNNI, where matmul_int8x4 keeps its byte words and takes them as panels."""
    if target is None:
        return False
    tgt = Target.from_string(target)
    strategies = dot4_strategies(target_features(tgt))
    return bool(strategies) and strategies[0][1] == "vnni"


def panel_int8_weights(graph: Graph, target=None) -> Graph:
    """Give every matmul_int8x4 with a constant byte-word weight [K4, N] (N > MIN_COLUMNS)
    that weight as column panels (module docstring), when `target` has VNNI."""
    nodes = [n for n in graph.nodes if n.op == "matmul_int8x4"
             and n.inputs[1].name in graph.constants
             and len(n.inputs[1].shape) == 2 and n.inputs[1].shape[1] > MIN_COLUMNS
             and panel_width(n.inputs[1].shape[1]) is not None]
    if not nodes or not panels_int8(target):
        return graph
    namer = Namer(graph)
    constants = dict(graph.constants)
    swap: dict[str, Node] = {}
    paneled: dict[str, Value] = {}        # a weight read by several kernels is laid out once
    for node in nodes:
        w = node.inputs[1]
        if w.name not in paneled:
            words = np.asarray(graph.constants[w.name])
            block = panel_width(words.shape[1])
            panels = panel_weight_words(words, block)
            v = Value(namer(f"{w.name}/panels{block}"), panels.shape, "int32")
            constants[v.name] = panels
            paneled[w.name] = v
        swap[node.name] = dataclasses.replace(
            node, inputs=(node.inputs[0], paneled[w.name]) + tuple(node.inputs[2:]),
            attrs=node.attrs.replace(n=int(w.shape[1])))
    out = tuple(swap.get(n.name, n) for n in graph.nodes)
    return eliminate_dead_code(graph.replace(nodes=out, constants=constants))


def view_int8_rows(graph: Graph, target=None) -> Graph:
    """On a VNNI target, a pack_int8x4 of uint8 rows along their last axis (K a multiple of
    4) whose every reader is a matmul_int8x4 becomes bitcast_int8x4, a view: the words are
    the bytes as they lie in memory (byte t of word k is x[4k + t], little-endian), so the
    copy kernel goes (a MatMulInteger's uint8 input read in place, as int8_nhwc.py reads a
    conv's pixels)."""
    if not panels_int8(target):
        return graph
    readers: dict[str, set[str]] = {}
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None:
                readers.setdefault(v.name, set()).add(node.op)
    outputs = {v.name for v in graph.outputs}
    swap = {}
    for node in graph.nodes:
        if node.op != "pack_int8x4" or node.attrs["flip"]:
            continue
        x, out = node.inputs[0], node.outputs[0]
        if (x.dtype != "uint8" or not x.shape or x.shape[-1] % 4
                or node.attrs["axis"] % len(x.shape) != len(x.shape) - 1
                or out.name in outputs or readers.get(out.name, set()) != {"matmul_int8x4"}):
            continue
        swap[node.name] = Node("bitcast_int8x4", (x,), node.outputs, FrozenDict({}), node.name)
    if not swap:
        return graph
    return graph.replace(nodes=tuple(swap.get(n.name, n) for n in graph.nodes))
