"""Which inputs of which graph ops hold indices, the values they may take, and the error an
index outside them raises.

Kiln's kernels clamp every data-dependent index, so nothing is read or written out of bounds;
but a clamped index gives a wrong answer where onnxruntime raises "indices element out of data
bounds". This table is what both checks read: the reference implementations call
`check_node_indices` on the arrays they get, and compiled models check the (min, max) per
index column that graph/index_checks.py computes next to each such node (`RunChecks`).
Negative indices count from the end wherever ONNX says so (bounds [-n, n-1]).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

import numpy as np

from ...te.errors import IndexOutOfRangeError
from ..ir import Node


@dataclass(frozen=True)
class IndexInput:
    """Input `position` of a node holds indices into axes `axes` of input `of`; column j of
    them (the last axis of the indices when `columns`, else every element) must lie in
    `bounds[j]` = (lowest, highest). `flat`: the indices are flat positions in the node's
    output (MaxUnpool), not along axes of an input."""

    position: int
    of: int
    axes: tuple[int, ...]
    bounds: tuple[tuple[int, int], ...]
    columns: bool = False
    flat: bool = False


def _either_end(n: int) -> tuple[int, int]:
    return (-n, n - 1)


def _axis_input(node: Node) -> list[IndexInput]:
    """Gather, GatherElements, ScatterElements: indices along attrs["axis"] of input 0."""
    axis = node.attrs["axis"]
    return [IndexInput(1, 0, (axis,), (_either_end(node.inputs[0].shape[axis]),))]


def _gather_nd(node: Node) -> list[IndexInput]:
    data, idx = node.inputs[:2]
    first = int(node.attr("batch_dims", 0))
    axes = tuple(range(first, first + idx.shape[-1]))
    return [IndexInput(1, 0, axes, tuple(_either_end(data.shape[a]) for a in axes), True)]


def _scatter_nd(node: Node) -> list[IndexInput]:
    data, idx = node.inputs[:2]
    axes = tuple(range(idx.shape[-1])) if idx.shape else ()
    return [IndexInput(1, 0, axes, tuple(_either_end(data.shape[a]) for a in axes), True)]


def _tensor_scatter(node: Node) -> list[IndexInput]:
    """TensorScatter "linear": the update must fit in the cache from the write index on
    (circular mode wraps any index)."""
    if node.attrs["circular"] or len(node.inputs) < 3 or node.inputs[2] is None:
        return []
    axis = node.attrs["axis"]
    room = node.inputs[0].shape[axis] - node.inputs[1].shape[axis]
    return [IndexInput(2, 0, (axis,), ((0, room),))]


def _max_unpool(node: Node) -> list[IndexInput]:
    """MaxUnpool's indices are flat positions in the whole output (as MaxPool's Indices)."""
    size = 1
    for d in node.attrs["out_shape"]:
        size *= int(d)
    return [IndexInput(1, 0, (), ((0, size - 1),), flat=True)]


def _roi_align(node: Node) -> list[IndexInput]:
    """RoiAlign's batch_indices pick an image of X (no counting from the end)."""
    return [IndexInput(2, 0, (0,), ((0, node.inputs[0].shape[0] - 1),))]


INDEX_INPUTS: dict[str, Callable[[Node], list[IndexInput]]] = {
    "gather": _axis_input,
    "gather_elements": _axis_input,
    "scatter_elements": _axis_input,
    "gather_nd": _gather_nd,
    "scatter_nd": _scatter_nd,
    "tensor_scatter": _tensor_scatter,
    "roi_align": _roi_align,
    "max_unpool": _max_unpool,
}


def index_inputs(node: Node) -> list[IndexInput]:
    """The index inputs of `node` (none for an op that takes no indices)."""
    rule = INDEX_INPUTS.get(node.op)
    return rule(node) if rule is not None else []


def describe(node: Node, spec: IndexInput) -> dict:
    """The plain facts an error names (JSON-able: compiled models carry it in their plan)."""
    flat = f"the output {list(node.outputs[0].shape)}" if spec.flat else ""
    return {"node": node.name.rsplit(":", 1)[0] if ":" in node.name else node.name,
            "op": node.op, "input": node.inputs[spec.position].name,
            "data": node.inputs[spec.of].name,
            "extents": ([node.outputs[0].size] if spec.flat else
                        [node.inputs[spec.of].shape[a] for a in spec.axes]),
            "axes": list(spec.axes), "bounds": [list(b) for b in spec.bounds],
            "columns": spec.columns, "flat": flat}


def out_of_range(check: Mapping, column: int, low: int, high: int) -> IndexOutOfRangeError:
    """The error for index column `column` of `check` (a `describe` dict) holding values in
    [low, high]."""
    lo, hi = check["bounds"][column]
    extent = check["extents"][column]
    indexed = check.get("flat") or f"axis {check['axes'][column]} of '{check['data']}'"
    where = f"column {column} of input" if check["columns"] else "input"
    return IndexOutOfRangeError(
        f"node '{check['node']}' ({check['op']}): {where} '{check['input']}' holds indices in "
        f"[{low}, {high}]; {indexed} has {extent} entries, so they must lie in [{lo}, {hi}] "
        "(indices element out of data bounds)")


def value_ranges(indices: np.ndarray, columns: bool) -> list[tuple[int, int]]:
    """(min, max) of each index column of `indices` (what the index_range kernel computes)."""
    flat = indices.reshape(-1, indices.shape[-1]) if columns else indices.reshape(-1, 1)
    if flat.shape[0] == 0:
        return []
    return [(int(lo), int(hi)) for lo, hi in zip(flat.min(axis=0), flat.max(axis=0))]


def check_ranges(check: Mapping, ranges: Sequence[tuple[int, int]]) -> None:
    """Raise the error of the first column whose (min, max) leaves its bounds."""
    for column, ((low, high), (lo, hi)) in enumerate(zip(ranges, check["bounds"])):
        if low < lo or high > hi:
            raise out_of_range(check, column, low, high)


def check_node_indices(node: Node, args: Sequence) -> None:
    """For the reference implementations: raise if an index input of `node` (its arrays
    `args`, in input order) holds an index out of bounds."""
    for spec in index_inputs(node):
        if spec.position < len(args) and args[spec.position] is not None:
            check_ranges(describe(node, spec),
                         value_ranges(np.asarray(args[spec.position]), spec.columns))


class RunChecks:
    """A compiled model's checks after each run: each buffer holds (~min, max) per index
    column (as index_range writes it); a few scalar compares per checked node."""

    def __init__(self, checks: Sequence[Mapping], buffers: Mapping[str, np.ndarray]):
        self._checks = [(buffers[c["value"]], [tuple(b) for b in c["bounds"]], c)
                        for c in checks]

    def __bool__(self) -> bool:
        return bool(self._checks)

    def __call__(self) -> None:
        for buf, bounds, check in self._checks:
            for column, ((low, high), (lo, hi)) in enumerate(zip(buf.tolist(), bounds)):
                if ~low < lo or high > hi:
                    raise out_of_range(check, column, ~low, high)
