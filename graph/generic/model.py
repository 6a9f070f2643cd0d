"""GenericModel: a graph planned onto generic kernels (lowering.py), run as one native call
sequence on buffers allocated once."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from ...codegen.generic.library import library, missing_units
from ...codegen.generic.registry import MAX_ELEMENTS
from ...codegen.generic.runner import CallTable
from ...codegen.target import Target
from ...te.errors import InternalError, KernelArgumentError
from ..ir import Graph
from ..ops.index_bounds import RunChecks
from ..passes.fusion import FusedGroup, fuse_operators
from ..passes.index_checks import split_outputs
from ..runtime.executor import bind_input, given_inputs, median_run_seconds
from .lowering import (LOWERINGS, Call, Context, LibraryNotBuilt, Unsupported, aligned_empty,
                       register_all)

TIER = "generic"
# A call touching fewer bytes than this runs on one thread: a fork and join of the pool costs
# 5-10 us, about what one core takes to stream this much from cache, and on a busy machine a
# woken worker can wait far longer for its core. onnxruntime decides per op in the same way.
SERIAL_BYTES = 128 * 1024


def _call_bytes(call: Call) -> int:
    return sum(a.nbytes for a in call.arrays)


@dataclass
class GenericPlan:
    """What a TieredModel and the reports read of a plan: names and meta."""

    name: str
    inputs: list[str]
    outputs: list[str]
    meta: dict = field(default_factory=dict)
    steps: tuple = ()


def _check_args(model: str, group: str, kernel, names, args) -> None:
    """A compiled group's arrays fit its kernel's parameters (shapes, dtypes)."""
    if len(args) != len(kernel.params):
        raise InternalError(f"model '{model}': group '{group}' passes {len(args)} arrays to "
                            f"kernel '{kernel.name}', which takes {len(kernel.params)}")
    for name, arr, p in zip(names, args, kernel.params):
        if arr.dtype != np.dtype(p.dtype) or arr.shape != tuple(p.shape) or \
                not arr.flags.c_contiguous:
            raise InternalError(f"model '{model}': value '{name}' ({arr.dtype}"
                                f"{list(arr.shape)}) does not fit parameter '{p.name}' "
                                f"({p.describe()}) of kernel '{kernel.name}'")


def _last_reads(groups: list[FusedGroup], outputs) -> dict[str, int]:
    """Value name -> index of the last group that reads it (or makes it, if none reads it);
    the graph's outputs (index checks included) are read after every group."""
    last: dict[str, int] = {}
    for at, group in enumerate(groups):
        for node in group.nodes:
            for v in (*node.inputs, *node.outputs):
                if v is not None:
                    last[v.name] = at
    for name in outputs:
        last[name] = len(groups)
    return last


def unsupported_nodes(graph: Graph) -> list[str]:
    """The ops of `graph` with no generic lowering (a quick check before planning)."""
    register_all()
    return sorted({n.op for n in graph.nodes if n.op not in LOWERINGS})


# A model with more groups than this share left uncovered is better built as a whole fast
# tier (in the compile workers) than as generic calls plus kernels built here one by one.
FALLBACK_SHARE = 0.25
FALLBACK_MIN = 4

# compile_groups(graph, groups) -> {group name: (Kernel, argument value names)}: kernels for
# the fused groups the generic kernels do not cover (graph/compile/model.py builds them)
CompileGroups = Callable[[Graph, list[FusedGroup]], Mapping[str, tuple]]


class GenericModel:
    """`run(inputs)` like a CompiledModel's. Not thread-safe (one run at a time; a
    TieredModel serialises runs).

    The graph's fused groups (graph/passes/fusion.py) run op by op on generic kernels; a
    group with a node they do not cover (no lowering, or its lowering raises Unsupported)
    runs as one kernel compiled for it by `compile_groups`, if given and if few groups need
    it (FALLBACK_SHARE, FALLBACK_MIN); otherwise planning raises Unsupported. Without
    `build_missing`, kernels whose units are not in the library's folder yet raise
    LibraryNotBuilt instead of being built now."""

    def __init__(self, graph: Graph, target: Target, threads: int,
                 compile_groups: CompileGroups | None = None, build_missing: bool = True):
        start = time.perf_counter()
        register_all()
        if graph.io_formats:
            raise Unsupported(f"model '{graph.name}': low-bit inputs or outputs are not "
                              "planned onto generic kernels")
        # inputs whose values decided shapes: run checks them (and fills them in when left out)
        self._pinned = {name: np.asarray(value) for name, value in graph.pinned.items()}
        if compile_groups is None:
            missing = unsupported_nodes(graph)
            if missing:
                raise Unsupported(f"model '{graph.name}': no generic kernel for "
                                  f"{', '.join(missing)}")
        outputs, index_checks = split_outputs(graph)
        ctx = Context(graph)
        self._inputs = []
        for v in graph.inputs:      # (not from the pool: an input's array is never reused)
            if v.size > MAX_ELEMENTS:
                raise Unsupported(f"model '{graph.name}': input '{v.name}' has {v.size} "
                                  f"elements, more than the generic kernels index")
            ctx.arrays[v.name] = aligned_empty(v.shape, np.dtype(v.dtype))
            self._inputs.append((v.name, ctx.arrays[v.name]))
        groups = fuse_operators(graph)
        last_read = _last_reads(groups, [*outputs, *(c["value"] for c in index_checks)])
        entries: list = []          # Call, or the FusedGroup a compiled kernel runs
        uncovered: dict[str, str] = {}
        for at, group in enumerate(groups):
            mark = len(ctx.calls)
            try:
                for node in group.nodes:
                    ctx.node = node
                    if node.op not in LOWERINGS:
                        raise Unsupported(ctx.describe("no generic kernel"))
                    LOWERINGS[node.op](node, ctx)
            except Unsupported as exc:
                if compile_groups is None:
                    raise
                del ctx.calls[mark:]
                for node in group.nodes:        # no view of another array may stay: the
                    for v in node.outputs:      # group's kernel writes its outputs
                        ctx.arrays.pop(v.name, None)
                for v in group.outputs:
                    ctx.arrays[v.name] = ctx.allocate(v)
                uncovered[group.name] = str(exc)
                entries.append(group)
            else:
                entries.extend(ctx.calls[mark:])
            made = [v.name for v in group.outputs] if group.name in uncovered else \
                [v.name for node in group.nodes for v in node.outputs]
            for name in made:
                ctx.holds(name)
            for name in made + [v.name for v in group.inputs]:
                if last_read.get(name, -1) <= at:
                    ctx.release(name)
        if uncovered and not any(isinstance(e, Call) for e in entries):
            raise Unsupported(f"model '{graph.name}': no group runs on generic kernels; e.g. "
                              f"{next(iter(uncovered.values()))}")
        limit = max(FALLBACK_MIN, int(FALLBACK_SHARE * len(groups)))
        if len(uncovered) > limit:
            raise Unsupported(f"model '{graph.name}': {len(uncovered)} of {len(groups)} fused "
                              f"groups have no generic kernels (more than {limit}); e.g. "
                              f"{next(iter(uncovered.values()))}")
        compiled = dict(compile_groups(graph, [e for e in entries
                                               if isinstance(e, FusedGroup)])
                        ) if uncovered else {}
        self.graph_name = graph.name
        self.calls = [e for e in entries if isinstance(e, Call)]
        self.uncovered = uncovered
        self._arrays = ctx.arrays
        self._outputs = [ctx.array(name) for name in outputs]
        self._checks = RunChecks(index_checks, {c["value"]: ctx.array(c["value"])
                                                for c in index_checks})
        self._threads = threads
        lib = library(target, threads)
        serial = library(target, 1)
        if not build_missing:
            missing = missing_units({c.kernel for c in self.calls}, target)
            if missing:
                raise LibraryNotBuilt(f"model '{graph.name}': {len(missing)} units of the "
                                      f"generic kernel library are not built yet (e.g. "
                                      f"{missing[0]}); `kiln warmup` builds them", missing)
        small = {id(c) for c in self.calls if _call_bytes(c) < SERIAL_BYTES}
        pooled = {name: lib.kernel(name) for name in dict.fromkeys(
            c.kernel for c in self.calls if id(c) not in small)}
        # the small calls' kernels: the same code loaded again, its thread count held at 1
        self.serial_kernels = {name: serial.kernel(name) for name in dict.fromkeys(
            c.kernel for c in self.calls if id(c) in small)}
        self.kernels = {**self.serial_kernels, **pooled}   # a name on both: the pool's
        self._compiled_kernels: set[str] = set()
        table = []
        for e in entries:
            if isinstance(e, Call):
                kernels = self.serial_kernels if id(e) in small else pooled
                table.append((kernels[e.kernel].address,
                              [a.ctypes.data for a in e.arrays]
                              + [e.dims.ctypes.data, e.fparams.ctypes.data]))
                continue
            if e.name not in compiled:      # an alias group: its outputs are views
                continue
            kernel, names = compiled[e.name]
            args = [ctx.array(n) for n in names]
            _check_args(graph.name, e.name, kernel, names, args)
            self.kernels[kernel.name] = kernel
            self._compiled_kernels.add(kernel.name)
            table.append((kernel.address, [a.ctypes.data for a in args]))
        self._sequence = CallTable(table, target, name=graph.name) if table else None
        self.plan = GenericPlan(graph.name, [v.name for v in graph.inputs], outputs, {
            "target": str(target), "threads": threads,
            "compile": {"seconds": round(time.perf_counter() - start, 3), "tier": TIER,
                        "calls": len(table), "compiled_groups": sorted(uncovered)}})

    # ------------------------------------------------------------------ running
    @property
    def input_names(self) -> list[str]:
        return list(self.plan.inputs)

    @property
    def output_names(self) -> list[str]:
        return list(self.plan.outputs)

    def run(self, inputs) -> list[np.ndarray]:
        given = given_inputs(self.plan.name, self.plan.inputs, self._pinned, inputs)
        for name, buf in self._inputs:
            if name not in given and name in self._pinned:
                given[name] = self._pinned[name]
            if name not in given:
                raise KernelArgumentError(f"model '{self.plan.name}': input '{name}' "
                                          f"({buf.dtype}{list(buf.shape)}) was not given")
            bind_input(self.plan.name, name, buf, given[name], self._pinned)
        if self._sequence is not None:
            self._sequence()
        if self._checks:
            self._checks()
        return [out.copy() for out in self._outputs]

    __call__ = run

    def set_num_threads(self, n: int, choice: bool = True) -> None:
        """The large calls' thread count (the small ones stay on one: SERIAL_BYTES)."""
        for name, kernel in self.kernels.items():
            if self.serial_kernels.get(name) is not kernel:
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

    def kernel_tiers(self) -> dict[str, str]:
        """Each kernel's tier: "generic", or "fast" for a group's kernel compiled for it."""
        return {name: "fast" if name in self._compiled_kernels else TIER
                for name in self.kernels}

    def summary(self) -> str:
        counts: dict[str, int] = {}
        for c in self.calls:
            counts[c.kernel] = counts.get(c.kernel, 0) + 1
        lines = [f"model '{self.plan.name}' on generic kernels: {len(self.calls)} calls"
                 + (f", and {len(self.uncovered)} fused groups on kernels compiled for them"
                    if self.uncovered else "")]
        lines += [f"  {n:4d} x {k}" for k, n in sorted(counts.items(), key=lambda kv: -kv[1])]
        lines += [f"  compiled: {group} ({why})" for group, why in self.uncovered.items()]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<GenericModel {self.plan.name}: {len(self.calls)} calls>"
