"""Tracing: abstract values (`Tracer`) that record the operations done on them into a graph.

A `Trace` is the graph under construction. It reuses the ONNX frontend's conversion context
(`graph.frontend.ConvertContext`) for what it shares with ONNX import (constants, value names,
the Einsum converter), but names nodes by op and runs Kiln's shape/dtype inference on each.
A `Tracer` carries a graph `Value` (static shape and dtype); numpy's operators and functions
on it go to kiln.numpy (the methods are bound in jit/methods.py).
"""
from __future__ import annotations

import numpy as np

from ..graph.ops import core as graph_ops
from ..graph.onnx.load import ConvertContext
from ..graph.ir import Graph, Node, Value
from ..te.errors import ModelFormatError
from .errors import JitError, TracerBoolError, TracerConversionError, shape_error, user_line

ONNX_OPSET = 17     # the opset whose converters (Einsum) the trace borrows


class Trace(ConvertContext):
    """The graph of one traced call: inputs, nodes in program order, constants."""

    def __init__(self, name: str):
        super().__init__(ONNX_OPSET)
        self.name = name
        self.inputs: list[Value] = []
        self.node_name = self.op_type = name

    def input(self, name: str, shape, dtype: str, weak: bool = False) -> Tracer:
        value = Value(self._fresh(name), tuple(shape), dtype)
        self.inputs.append(value)
        return Tracer(self, value, weak)

    def emit(self, op: str, inputs, attrs=None, n_out: int = 1, final: bool = False):
        """Append `op` on `inputs` (Values); its outputs are named after the op."""
        attrs = dict(attrs or {})
        names = [self._fresh(op) for _ in range(n_out)]
        try:
            outs = graph_ops.make_outputs(op, inputs, attrs, names, op)
        except ModelFormatError as exc:
            raise shape_error(op, str(exc)) from None
        node = Node(op, tuple(inputs), outs, attrs, self._fresh(f"{op}_node"))
        self.nodes.append(node)
        for o in outs:
            self._producer[o.name] = node
        return outs if n_out > 1 else outs[0]

    def const(self, array, final: bool = False, name: str | None = None) -> Value:
        arr = np.array(array, order="C")
        if arr.dtype == np.float16:
            arr = arr.astype(np.float32)
        # an explicit name keeps float64 constants float64 (the frontend narrows its own)
        return super().const(arr, name=name or self._fresh("const"))

    def tracer(self, value: Value, weak: bool = False) -> Tracer:
        return Tracer(self, value, weak)

    def graph(self, outputs: list[Value]) -> Graph:
        return Graph(tuple(self.inputs), tuple(self.nodes), tuple(outputs),
                     dict(self.constants), self.name)


class Tracer:
    """An abstract array inside a traced function: a static shape and dtype, no data.

    `weak`: a Python scalar argument (0-d), typed like a Python scalar in numpy's promotion
    (float32_array * weak_float stays float32)."""

    __slots__ = ("trace", "value", "weak")
    __array_priority__ = 1000      # numpy operators defer to ours
    __hash__ = None                # like a numpy array: == is elementwise, no hash

    def __init__(self, trace: Trace, value: Value, weak: bool = False):
        self.trace, self.value, self.weak = trace, value, weak

    @property
    def shape(self) -> tuple[int, ...]:
        return self.value.shape

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.value.dtype)

    @property
    def ndim(self) -> int:
        return len(self.value.shape)

    @property
    def size(self) -> int:
        return self.value.size

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d traced array")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Traced<{self.value.dtype}{list(self.shape)}>"

    def __bool__(self):
        raise TracerBoolError(
            f"the truth value of a traced array ({self.value.dtype}{list(self.shape)}) is not "
            f"known while tracing, at {user_line()}. Python control flow (if, while, and/or, "
            "bool()) on an argument's values cannot be compiled: make that argument static "
            "(kiln.jit(f, static_argnames=[...])) or select with knp.where(cond, a, b).")

    def _concrete(self, kind: str):
        raise TracerConversionError(
            f"cannot convert a traced array ({self.value.dtype}{list(self.shape)}) to {kind} "
            f"while tracing, at {user_line()}: its value is only known when the compiled "
            "code runs. Keep it an array (use kiln.numpy functions), or make the argument it "
            "comes from static (static_argnames=[...]).")

    def __float__(self):
        self._concrete("a Python float")

    def __int__(self):
        self._concrete("a Python int")

    def __index__(self):
        self._concrete("an index")

    def __complex__(self):
        self._concrete("a Python complex")

    def __array__(self, dtype=None, copy=None):
        self._concrete("a numpy array (numpy called np.asarray on it)")

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced array")
        return (self[k] for k in range(self.shape[0]))

    def __setitem__(self, key, value):
        raise JitError(
            f"traced arrays are immutable: item assignment at {user_line()} cannot be "
            "compiled. Build the result instead (knp.where(mask, new, x), knp.concatenate).")


def is_tracer(x) -> bool:
    return isinstance(x, Tracer)


def find_trace(args) -> Trace | None:
    """The trace of the first Tracer among `args` (sequences are searched one level)."""
    for a in args:
        if isinstance(a, Tracer):
            return a.trace
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, Tracer):
                    return b.trace
    return None


def check_same_trace(trace: Trace, x: Tracer) -> None:
    if x.trace is not trace:
        raise JitError(
            f"a traced value from another call of a jitted function was used at {user_line()}"
            " (kept in a global or a closure between calls?). Pass it as an argument instead.")
