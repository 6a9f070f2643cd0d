"""Runs a compiled traced function's kernels on the caller's arrays.

CompiledModel.run copies every input into its own buffer and every output out of one: two
extra passes over memory that, for a fused elementwise chain on arrays beyond the cache, cost
as much as the kernel. Here the inputs go to the kernels as they are (C-contiguous, of the
traced dtype) and each output is a fresh array the kernel writes; intermediates live in the
model's arena as in CompiledModel.
"""
from __future__ import annotations

import numpy as np

from ..graph.runtime.executor import CompiledModel, _fast_entry
from ..graph.ops.index_bounds import RunChecks


class DirectRunner:
    """`runner(arrays)` -> output arrays, for the CompiledModel of one traced signature.
    Like CompiledModel, not thread-safe (the arena is shared between calls)."""

    def __init__(self, model: CompiledModel):
        plan = model.plan
        self.model = model
        self.inputs = tuple(plan.inputs)
        self.outputs = tuple(plan.outputs)
        self.fixed: dict[str, np.ndarray] = {}
        self.fresh: list[tuple[str, tuple, np.dtype]] = []
        self.aliases: list[tuple[str, str, tuple, np.dtype]] = []
        for spec in plan.buffers:
            if spec.kind in ("constant", "arena"):
                self.fixed[spec.name] = model.buffers[spec.name]
            elif spec.kind == "output":
                self.fresh.append((spec.name, spec.shape, np.dtype(spec.dtype)))
            elif spec.kind == "alias":
                self.aliases.append((spec.name, spec.of, spec.shape, np.dtype(spec.dtype)))
        fresh = {name for name, _, _ in self.fresh}
        self._copied = [name not in fresh for name in self.outputs]
        self.steps = [(_fast_entry(model.kernels[step.kernel]), model.kernels[step.kernel],
                       step.args) for step in plan.steps]
        # the (min, max) of run-time indices (knp.take, integer-array indexing), written to
        # this call's buffers and checked after the kernels, as CompiledModel.run does
        self.index_checks = tuple(plan.meta.get("index_checks", ()))

    def __call__(self, arrays) -> list[np.ndarray]:
        buffers = dict(self.fixed)
        buffers.update(zip(self.inputs, arrays))
        for name, shape, dtype in self.fresh:
            buffers[name] = np.empty(shape, dtype)
        for name, of, shape, dtype in self.aliases:
            buffers[name] = buffers[of].view(dtype).reshape(shape)
        for fn, kernel, args in self.steps:
            arrays = [buffers[a] for a in args]
            if fn(*arrays) and fn is not kernel:
                kernel(*arrays)      # the checked entry refused them: raise its precise error
        if self.index_checks:
            RunChecks(self.index_checks, buffers)()
        out, seen = [], set()
        for name, copy in zip(self.outputs, self._copied):
            arr = buffers[name]
            # inputs, constants, arena slices and views are not the caller's to keep
            out.append(arr.copy() if copy or name in seen else arr)
            seen.add(name)
        return out
