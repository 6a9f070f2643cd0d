"""Run-time index checks for compiled models: an `index_range` node next to every node that
takes indices (graph/index_bounds.INDEX_INPUTS) computes the (min, max) of each index column;
its value becomes an extra graph output that the compiled model checks after each run
(index_bounds.RunChecks) and does not return.

Why a node of its own and not a flag inside the gather's kernel: the gather's loop stays
branch-free (its clamp is a min/max), the check reads the indices once (for an embedding
lookup, a token id per row of hundreds of values gathered) and the kernel for it is a plain
reduction that any group's schedule leaves alone. A check of constant indices folds at
compile time (its reference raises there), so only run-time indices cost anything.
"""
from __future__ import annotations

import numpy as np

from ...te import expr as E
from ...te.ops import tags
from ...te.tensor import compute, reduce_axis
from ...te.tensor import max as te_max
from ..ops import index_bounds
from ..ops.index_bounds import check_ranges, value_ranges
from ..ir import Graph, Node, OpClass, Value
from ..ops.more import define

CHECK_OP = "index_range"


def _infer(ins, attrs):
    return [((len(attrs["bounds"]), 2), "int64")]


def _lower(node, args):
    """out[j] = (~min, max) of index column j, as max(~v) and max(v) (~ has no overflow
    where -v has: ~min(v) = max(~v)); index_bounds.RunChecks decodes it. With two or more
    index axes, first a partial reduction that keeps the last one (vectorisable along it),
    then one over that: the check of a large GatherElements ran serially otherwise."""
    idx, columns = args[0], node.attrs["columns"]
    lead = idx.shape[:-1] if columns else idx.shape
    k = len(node.attrs["bounds"])

    def pick(c, v):
        v = E.cast(v, "int64")
        return E.select(c.eq(0), E.call("bit_not", v), v)

    def read(pos, j):
        return idx(*pos, j) if columns else idx(*pos)

    if len(lead) >= 2:
        rs = [reduce_axis(n, f"r{d}") for d, n in enumerate(lead[:-1])]
        part = compute((k, 2, lead[-1]), lambda j, c, t: te_max(
            pick(c, read(rs + [t], j)), axis=rs), name="index_range_rows", tag=tags.REDUCTION)
        r = reduce_axis(lead[-1], "r")
        return [compute((k, 2), lambda j, c: te_max(part(j, c, r), axis=r),
                        name="index_range", tag=tags.REDUCTION)]
    rs = [reduce_axis(n, f"r{d}") for d, n in enumerate(lead)]
    return [compute((k, 2), lambda j, c: te_max(pick(c, read(rs, j)), axis=rs) if rs
                    else pick(c, read([], j)), name="index_range",
                    tag=tags.REDUCTION if rs else tags.INJECTIVE)]


def _reference(node, idx):
    """(~min, max) per column as the kernel writes it, and the error at once when they leave
    the bounds (constant folding of constant indices: the error comes at compile time)."""
    ranges = value_ranges(idx, node.attrs["columns"])
    check_ranges(node.attrs, ranges)
    return np.array([(~lo, hi) for lo, hi in ranges], dtype=np.int64).reshape(
        len(node.attrs["bounds"]), 2)


define(CHECK_OP, OpClass.OPAQUE, _infer, _lower, _reference)


def _freeze(value):
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    return value


def add_index_checks(graph: Graph) -> tuple[Graph, frozenset[str]]:
    """`graph` with an index_range node before every node with non-constant, non-empty
    index inputs, its value appended to the graph outputs; and the names of those values.
    Constant indices are checked here (IndexOutOfRangeError at compile time)."""
    nodes, extra = [], []
    taken = {v.name for n in graph.nodes for v in n.outputs} | set(graph.constants) | {
        v.name for v in graph.inputs}
    for node in graph.nodes:
        for k, spec in enumerate(index_bounds.index_inputs(node)):
            idx = node.inputs[spec.position]
            if idx is None or idx.size == 0 or not spec.bounds:
                continue
            facts = index_bounds.describe(node, spec)
            if idx.name in graph.constants:     # checked now, at compile time
                check_ranges(facts, value_ranges(graph.constants[idx.name], spec.columns))
                continue
            name = f"{node.name}/index_range{k or ''}"
            while name in taken:
                name += "_"
            taken.add(name)
            out = Value(name, (len(spec.bounds), 2), "int64")
            attrs = {key: _freeze(value) for key, value in facts.items()}
            nodes.append(Node(CHECK_OP, (idx,), (out,), attrs, f"{node.name}:{CHECK_OP}"))
            extra.append(out)
        nodes.append(node)
    if not extra:
        return graph, frozenset()
    return (graph.replace(nodes=tuple(nodes), outputs=graph.outputs + tuple(extra)),
            frozenset(v.name for v in extra))


def settle_index_checks(graph: Graph, checks: frozenset[str]) -> Graph:
    """Drop the check outputs (named in `checks`) that constant folding settled: their
    indices were constants, checked when folded."""
    producers = graph.producers()
    keep = tuple(v for v in graph.outputs if v.name not in checks or (
        v.name not in graph.constants and v.name in producers))
    return graph if len(keep) == len(graph.outputs) else graph.replace(outputs=keep)


def split_outputs(graph: Graph) -> tuple[list[str], list[dict]]:
    """The model's own output names, and a plan entry per run-time check (the facts its
    error names, with the value holding its (min, max) as "value")."""
    producers = graph.producers()
    names, checks = [], []
    for v in graph.outputs:
        node = producers.get(v.name)
        if node is not None and node.op == CHECK_OP:
            checks.append({"value": v.name, **{k: _thaw(x) for k, x in node.attrs.items()}})
        else:
            names.append(v.name)
    return names, checks


def _thaw(value):
    if isinstance(value, tuple):
        return [_thaw(v) for v in value]
    return value
