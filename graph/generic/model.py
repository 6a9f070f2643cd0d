"""GenericModel: a graph planned onto generic kernels (lowering.py), run as one native call
sequence on buffers allocated once."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ...codegen.generic.library import library
from ...codegen.generic.runner import CallTable
from ...codegen.target import Target
from ...te.errors import KernelArgumentError
from ..ir import Graph
from ..ops.index_bounds import RunChecks
from ..passes.index_checks import split_outputs
from ..runtime.executor import given_inputs, median_run_seconds
from .lowering import LOWERINGS, Context, Unsupported, aligned_empty, register_all

TIER = "generic"


@dataclass
class GenericPlan:
    """What a TieredModel and the reports read of a plan: names and meta."""

    name: str
    inputs: list[str]
    outputs: list[str]
    meta: dict = field(default_factory=dict)
    steps: tuple = ()


def unsupported_nodes(graph: Graph) -> list[str]:
    """The ops of `graph` with no generic lowering (a quick check before planning)."""
    register_all()
    return sorted({n.op for n in graph.nodes if n.op not in LOWERINGS})


class GenericModel:
    """`run(inputs)` like a CompiledModel's. Not thread-safe (one run at a time; a
    TieredModel serialises runs)."""

    def __init__(self, graph: Graph, target: Target, threads: int):
        start = time.perf_counter()
        register_all()
        if graph.pinned or graph.io_formats:
            raise Unsupported(f"model '{graph.name}': inputs that decide shapes or low-bit "
                              "inputs are not planned onto generic kernels")
        missing = unsupported_nodes(graph)
        if missing:
            raise Unsupported(f"model '{graph.name}': no generic kernel for "
                              f"{', '.join(missing)}")
        outputs, index_checks = split_outputs(graph)
        ctx = Context(graph)
        self._inputs = []
        for v in graph.inputs:
            ctx.arrays[v.name] = ctx.allocate(v)
            self._inputs.append((v.name, ctx.arrays[v.name]))
        for name, value in graph.constants.items():
            arr = aligned_empty(np.shape(value), np.asarray(value).dtype)
            arr[...] = value
            ctx.arrays[name] = arr
        for node in graph.nodes:
            ctx.node = node
            LOWERINGS[node.op](node, ctx)
        self.graph_name = graph.name
        self.calls = ctx.calls
        self._arrays = ctx.arrays
        self._outputs = [ctx.arrays[name] for name in outputs]
        self._checks = RunChecks(index_checks, ctx.arrays)
        self._threads = threads
        lib = library(target, threads)
        self.kernels = {c.kernel: lib.kernel(c.kernel) for c in self.calls}
        self._sequence = CallTable(
            [(self.kernels[c.kernel].address,
              [a.ctypes.data for a in c.arrays] + [c.dims.ctypes.data, c.fparams.ctypes.data])
             for c in self.calls], target, name=graph.name) if self.calls else None
        self.plan = GenericPlan(graph.name, [v.name for v in graph.inputs], outputs, {
            "target": str(target), "threads": threads,
            "compile": {"seconds": round(time.perf_counter() - start, 3), "tier": TIER,
                        "calls": len(self.calls)}})

    # ------------------------------------------------------------------ running
    @property
    def input_names(self) -> list[str]:
        return list(self.plan.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    def run(self, inputs) -> list[np.ndarray]:
        given = given_inputs(self.plan.name, self.plan.inputs, {}, inputs)
        for name, buf in self._inputs:
            if name not in given:
                raise KernelArgumentError(f"model '{self.plan.name}': input '{name}' "
                                          f"({buf.dtype}{list(buf.shape)}) was not given")
            arr = np.asarray(given[name])
            if arr.dtype != buf.dtype or arr.shape != buf.shape:
                raise KernelArgumentError(
                    f"input '{name}' of model '{self.plan.name}': expected {buf.dtype}"
                    f"{list(buf.shape)}, got {arr.dtype}{list(arr.shape)}. Pass an array of "
                    f"that shape (cast with .astype(np.{buf.dtype})).")
            np.copyto(buf, arr)
        if self._sequence is not None:
            self._sequence()
        if self._checks:
            self._checks()
        return [out.copy() for out in self._outputs]

    __call__ = run

    def set_num_threads(self, n: int, choice: bool = True) -> None:
        for kernel in self.kernels.values():
            kernel.set_num_threads(n)

    def benchmark(self, inputs=None, repeat: int = 20, number: int = 1) -> float:
        if inputs is None:
            rng = np.random.default_rng(0)
            inputs = [rng.standard_normal(b.shape).astype(b.dtype) if b.dtype.kind == "f"
                      else np.zeros(b.shape, b.dtype) for _, b in self._inputs]
        self.run(inputs)
        return median_run_seconds(lambda: self.run(inputs), repeat, number)

    def optimized(self, timeout: float | None = None) -> "GenericModel":
        return self

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for c in self.calls:
            counts[c.kernel] = counts.get(c.kernel, 0) + 1
        lines = [f"model '{self.plan.name}' on generic kernels: {len(self.calls)} calls"]
        lines += [f"  {n:4d} x {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<GenericModel {self.plan.name}: {len(self.calls)} calls>"
