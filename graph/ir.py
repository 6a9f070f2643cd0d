"""The graph IR: a flat, JAX-like list of nodes over named, statically shaped values.

A `Graph` is a straight-line program. Every `Value` is defined exactly once: as a graph input,
as a constant (its array lives in `Graph.constants` under the value's name) or as an output of
exactly one `Node`. Nodes are stored in a valid execution order (producers first). Kiln's op
set is normalised from ONNX (see `graph/ops/core.py` for the list and `graph/onnx/core.py` for how
each ONNX operator maps onto it). Everything is frozen; passes build new graphs.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from ..te import dtype as _dt


class FrozenDict(Mapping):
    """An immutable, hashable mapping for node attributes (values must be hashable)."""

    __slots__ = ("_d", "_hash")

    def __init__(self, *args, **kwargs):
        self._d = dict(*args, **kwargs)
        self._hash = None

    def __getitem__(self, key):
        return self._d[key]

    def __iter__(self) -> Iterator:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(tuple(sorted(self._d.items())))
        return self._hash

    def __eq__(self, other) -> bool:
        return isinstance(other, Mapping) and dict(self._d) == dict(other)

    def __repr__(self) -> str:
        return f"FrozenDict({self._d!r})"

    def __reduce__(self):
        return (FrozenDict, (self._d,))

    def replace(self, **changes) -> "FrozenDict":
        return FrozenDict({**self._d, **changes})


class OpClass(enum.IntEnum):
    """Fusion classes, ordered like TVM's OpPatternKind (lower fuses more freely)."""

    ELEMWISE = 0              # out[i] = f(in0[i], ...), all shapes equal
    BROADCAST = 1             # elementwise with numpy broadcasting of some inputs
    INJECTIVE = 2             # each output element reads one input element (reshape, slice, ...)
    REDUCTION = 3             # reduces along axes (reduce_*, softmax, layer_norm, pooling)
    OUT_ELEMWISE_FUSABLE = 4  # conv2d, matmul: an anchor that absorbs an elementwise epilogue
    OPAQUE = 5                # never fused


@dataclass(frozen=True, slots=True)
class Value:
    """A named tensor with a static shape; names are unique within a graph."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(d) for d in self.shape))
        object.__setattr__(self, "dtype", _dt.canonical(self.dtype))

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * _dt.itemsize(self.dtype)

    def __str__(self) -> str:
        return f"%{self.name}: {self.dtype}{list(self.shape)}"


@dataclass(frozen=True, slots=True)
class Node:
    """One operation: `outputs = op(*inputs, **attrs)`. A `None` input is an omitted optional."""

    op: str
    inputs: tuple[Value | None, ...]
    outputs: tuple[Value, ...]
    attrs: FrozenDict = field(default_factory=FrozenDict)
    name: str = ""

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "outputs", tuple(self.outputs))
        if not isinstance(self.attrs, FrozenDict):
            object.__setattr__(self, "attrs", FrozenDict(self.attrs))

    def attr(self, key: str, default: Any = None) -> Any:
        return self.attrs.get(key, default)

    def __str__(self) -> str:
        outs = ", ".join(str(o) for o in self.outputs)
        ins = ", ".join("_" if v is None else f"%{v.name}" for v in self.inputs)
        attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in sorted(self.attrs.items()))
        body = f"{self.op}({ins}{', ' if ins and attrs else ''}{attrs})"
        return f"{outs} = {body}"


def _fmt_attr(v: Any) -> str:
    if isinstance(v, tuple):
        return "(" + ", ".join(_fmt_attr(x) for x in v) + ("," if len(v) == 1 else "") + ")"
    if isinstance(v, float):
        return repr(v)
    return str(v)


@dataclass(frozen=True)
class Graph:
    """Inputs, nodes in execution order, outputs, and the constant arrays by value name.

    `constants` is treated as immutable: passes copy it before changing it. `pinned` holds
    the values of graph inputs that decided a shape when the graph was built (a Reshape's
    shape, a Slice's starts, ...): they stay graph inputs, but the graph is only valid for
    these values.
    """

    inputs: tuple[Value, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[Value, ...]
    constants: Mapping[str, np.ndarray] = field(default_factory=dict)
    name: str = "graph"
    pinned: Mapping[str, np.ndarray] = field(default_factory=dict)
    # low-bit element formats (graph/ops/lowbit.py) of the inputs and outputs, by position
    # (None: an ordinary dtype), or None when there are none: the model boundary converts
    io_formats: tuple[tuple[str | None, ...], tuple[str | None, ...]] | None = None

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "nodes", tuple(self.nodes))
        object.__setattr__(self, "outputs", tuple(self.outputs))

    def producers(self) -> dict[str, Node]:
        """Value name -> the node defining it."""
        return {o.name: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """Value name -> nodes reading it (a node reading a value twice appears once)."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for name in dict.fromkeys(v.name for v in n.inputs if v is not None):
                out.setdefault(name, []).append(n)
        return out

    def is_constant(self, v: Value | None) -> bool:
        return v is not None and v.name in self.constants

    def replace(self, **changes) -> "Graph":
        fields_ = dict(inputs=self.inputs, nodes=self.nodes, outputs=self.outputs,
                       constants=self.constants, name=self.name, pinned=self.pinned,
                       io_formats=self.io_formats)
        fields_.update(changes)
        return Graph(**fields_)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.op] = counts.get(n.op, 0) + 1
        return counts

    def __str__(self) -> str:
        lines = [f"graph {self.name}(" + ", ".join(str(v) for v in self.inputs) + ") {"]
        for name, arr in self.constants.items():
            lines.append(f"  const %{name}: {_dt.canonical(arr.dtype)}{list(arr.shape)}")
        lines += [f"  {n}" for n in self.nodes]
        lines.append("  return " + ", ".join(f"%{v.name}" for v in self.outputs))
        lines.append("}")
        return "\n".join(lines)
