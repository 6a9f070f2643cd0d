"""Graph node -> calls of generic kernels.

A lowering is `fn(node, ctx)`: it reads its inputs' arrays (`ctx.input(k)`), takes its
outputs' (`ctx.output(k)`, allocated by the planner; or `ctx.alias(k, view)` for a view of
an input, e.g. reshape) and appends calls (`ctx.call(kernel, arrays, dims, fparams)`); the
calls run in order every time the model runs, on the same arrays. A node it cannot run
(an attribute, dtype or size the generic kernels do not cover) raises Unsupported, and the
model takes another tier.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ...codegen.generic.registry import DIMS, FPARAMS, MAX_ELEMENTS
from ...te.errors import KilnError
from ..ir import Graph, Node, Value

ALIGNMENT = 64


class Unsupported(KilnError):
    """A node the generic kernels cannot run; the message names the node and why."""


class LibraryNotBuilt(Unsupported):
    """The generic kernels a model needs are not all in the library's folder yet."""

    def __init__(self, message: str, units: list[str]):
        super().__init__(message)
        self.units = units


LOWERINGS: dict[str, Callable[[Node, "Context"], None]] = {}


def lowers(*ops: str):
    """Register `fn(node, ctx)` as the lowering of graph ops `ops`."""
    def deco(fn):
        for op in ops:
            if op in LOWERINGS:
                raise KilnError(f"generic lowering of '{op}' is registered twice")
            LOWERINGS[op] = fn
        return fn
    return deco


def aligned_empty(shape: Sequence[int], dtype) -> np.ndarray:
    """An uninitialised C-contiguous array at a 64-byte boundary (vector loads)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(max(n, 1) + ALIGNMENT, np.uint8)
    at = (-raw.ctypes.data) % ALIGNMENT
    return raw[at:at + n].view(dtype).reshape(shape)


class _BlockPool:
    """Blocks of values read by no later call, handed to later values (best fit, at most
    twice the size asked for), so a model's intermediates take about its peak working set
    instead of their sum (and the first run touches fewer fresh pages). A block returns to
    the pool when every live value in it (the value and its views) is released."""

    def __init__(self):
        self._free: list[np.ndarray] = []      # raw uint8 blocks, no live value in them
        self._live: dict[int, int] = {}        # id(raw block) -> live values in it
        self._raw: dict[int, np.ndarray] = {}  # id -> the raw block (pool-made only)

    def take(self, shape, dtype: np.dtype) -> np.ndarray:
        n = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        need = max(n, 1) + ALIGNMENT
        fits = [b for b in self._free if need <= b.size <= 2 * need]
        if fits:
            raw = min(fits, key=lambda b: b.size)
            self._free = [b for b in self._free if b is not raw]
        else:
            raw = np.empty(need, np.uint8)
            self._raw[id(raw)] = raw
        self._live[id(raw)] = 0
        at = (-raw.ctypes.data) % ALIGNMENT
        return raw[at:at + n].view(dtype).reshape(shape)

    def _block(self, arr: np.ndarray | None) -> np.ndarray | None:
        while arr is not None and id(arr) not in self._raw:
            arr = arr.base if isinstance(arr.base, np.ndarray) else None
        return arr

    def hold(self, arr) -> None:
        raw = self._block(arr)
        if raw is not None:
            self._live[id(raw)] += 1

    def drop(self, arr) -> None:
        raw = self._block(arr)
        if raw is not None:
            self._live[id(raw)] -= 1
            if self._live[id(raw)] == 0:
                self._free.append(raw)


@dataclass(frozen=True)
class Call:
    """One call: kernel `family.name` on `arrays` plus its dims and fparams arrays."""

    kernel: str
    arrays: tuple[np.ndarray, ...]
    dims: np.ndarray
    fparams: np.ndarray
    node: str


class Context:
    """What a lowering sees of the model being planned."""

    def __init__(self, graph: Graph):
        self.graph = graph
        self.arrays: dict[str, np.ndarray] = {}
        self.calls: list[Call] = []
        self.node: Node | None = None
        self._pool = _BlockPool()
        self._held: set[str] = set()

    # ---------------------------------------------------------------- values
    def input(self, k: int) -> np.ndarray:
        v = self.node.inputs[k]
        if v is None:
            raise Unsupported(self.describe(f"input {k} is omitted"))
        return self.array(v.name)

    def array(self, name: str) -> np.ndarray:
        """Value `name`'s array; a constant's aligned copy is made on first use (a weight
        only a lowering's packed copy reads is never copied as it is)."""
        if name not in self.arrays and name in self.graph.constants:
            value = np.asarray(self.graph.constants[name])
            arr = aligned_empty(value.shape, value.dtype)
            arr[...] = value
            self.arrays[name] = arr
        return self.arrays[name]

    def has_input(self, k: int) -> bool:
        return k < len(self.node.inputs) and self.node.inputs[k] is not None

    def constant(self, k: int) -> np.ndarray | None:
        """Input k's value when it is a constant of the graph, else None."""
        v = self.node.inputs[k] if k < len(self.node.inputs) else None
        return None if v is None else self.graph.constants.get(v.name)

    def output(self, k: int = 0) -> np.ndarray:
        v = self.node.outputs[k]
        if v.name not in self.arrays:
            self.arrays[v.name] = self.allocate(v)
        return self.arrays[v.name]

    def alias(self, k: int, view: np.ndarray) -> None:
        """Output k is `view` (of an input's array): no call, no copy."""
        v = self.node.outputs[k]
        self.arrays[v.name] = view.reshape(v.shape)

    def allocate(self, v: Value) -> np.ndarray:
        if v.size > MAX_ELEMENTS:
            raise Unsupported(self.describe(f"value '{v.name}' has {v.size} elements, more "
                                            f"than the generic kernels index ({MAX_ELEMENTS})"))
        return self._pool.take(v.shape, np.dtype(v.dtype))

    def holds(self, name: str) -> None:
        """Value `name` (made by a call or a view) is live: count it in its block."""
        if name in self.arrays and name not in self._held:
            self._held.add(name)
            self._pool.hold(self.arrays[name])

    def release(self, name: str) -> None:
        """Value `name` is read by no later call: its block may serve a later value once no
        live value views it. Only values `holds` counted are released (never a graph input
        or a constant, whose arrays are the model's own)."""
        if name in self._held:
            self._held.discard(name)
            self._pool.drop(self.arrays[name])

    def temp(self, shape: Sequence[int], dtype="float32") -> np.ndarray:
        return aligned_empty(tuple(shape), dtype)

    # ---------------------------------------------------------------- calls
    def call(self, kernel: str, arrays: Sequence[np.ndarray], dims: Sequence[int] = (),
             fparams: Sequence[float] = ()) -> None:
        if len(dims) > DIMS or len(fparams) > FPARAMS:
            raise Unsupported(self.describe(f"kernel {kernel} given {len(dims)} dims and "
                                            f"{len(fparams)} fparams (at most {DIMS}, "
                                            f"{FPARAMS})"))
        for d in dims:
            if not -2 ** 31 <= int(d) < 2 ** 31:
                raise Unsupported(self.describe(f"a size or stride ({d}) passes int32"))
        d = np.zeros(DIMS, np.int32)
        d[:len(dims)] = np.asarray(dims, np.int64)
        f = np.zeros(FPARAMS, np.float32)
        f[:len(fparams)] = fparams
        for a in arrays:
            if not a.flags.c_contiguous and a.size:
                raise Unsupported(self.describe("an argument is not contiguous"))
        self.calls.append(Call(kernel, tuple(arrays), d, f, self.node.name or self.node.op))

    def describe(self, why: str) -> str:
        n = self.node
        return f"node '{n.name or n.op}' ({n.op}): {why}"

    def require_dtype(self, *dtypes: str) -> None:
        """Unsupported unless every input and output has one of `dtypes`."""
        for v in (*self.node.inputs, *self.node.outputs):
            if v is not None and v.dtype not in dtypes:
                raise Unsupported(self.describe(f"value '{v.name}' is {v.dtype}; the generic "
                                                f"kernels take {', '.join(dtypes)}"))


def merge_dims(extents, istrides, ostrides):
    """(extent, stride, stride) per dim of a walk over two arrays: unit dims dropped,
    neighbours that step both sides evenly merged (outermost first)."""
    dims = [(int(n), int(i), int(o)) for n, i, o in zip(extents, istrides, ostrides) if n != 1]
    merged: list[tuple[int, int, int]] = []
    for n, i, o in dims:
        if merged:
            pn, pi, po = merged[-1]
            if pi == n * i and po == n * o:
                merged[-1] = (pn * n, i, o)
                continue
        merged.append((n, i, o))
    return merged


def register_all() -> None:
    """Import every module of lowerings (each registers its ops); one not written yet is
    skipped."""
    import importlib
    for name in ("ops_basic", "ops_elementwise", "ops_conv", "ops_matmul", "ops_reduce",
                 "ops_data"):
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise
