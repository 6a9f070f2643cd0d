"""kiln.export_c: a compiled model as a C library + header that runs without Python.

This module turns a CompiledModel's plan (graph/executor.py) into the plain DeployPlan of
codegen/deploy: every buffer a kernel touches becomes the caller's input or output, an offset
into the weights blob, or an offset into the caller's workspace (the static memory plan's
arena); outputs that are views of other buffers are copied at the end.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from .codegen.deploy import CLibrary, DeployPlan, export_c_library
from .codegen.deploy.plan import WORKSPACE_ALIGNMENT, Call, Copy, IndexCheck, Ref, Tensor
from .codegen.deploy.weights import pack_constants
from .graph.runtime.executor import CompiledModel, pinned_arrays
from .te.errors import KilnError


def deploy_plan(compiled: CompiledModel) -> tuple[DeployPlan, dict]:
    """(the DeployPlan of `compiled`, its kernels by symbol)."""
    plan = compiled.plan
    specs = {b.name: b for b in plan.buffers}
    input_index = {name: k for k, name in enumerate(plan.inputs)}
    first_output: dict[str, int] = {}
    for j, name in enumerate(plan.outputs):
        first_output.setdefault(name, j)
    constants = [(b.name, compiled.buffers[b.name]) for b in plan.buffers
                 if b.kind == "constant"]
    blob, offsets = pack_constants(constants)
    # the index checks' (~min, max) pairs: run-time values of no caller's, after the arena
    arena_bytes, checks, check_offset = plan.arena_bytes, [], {}
    for check in plan.meta.get("index_checks", ()):
        arena_bytes = -(-arena_bytes // WORKSPACE_ALIGNMENT) * WORKSPACE_ALIGNMENT
        check_offset[check["value"]] = arena_bytes
        checks.append(IndexCheck(arena_bytes, tuple(tuple(b) for b in check["bounds"])))
        arena_bytes += 16 * len(check["bounds"])

    def ref(name: str) -> Ref:
        spec = specs[name]
        while spec.kind == "alias":
            spec = specs[spec.of]
        if spec.name in check_offset:
            return Ref("arena", offset=check_offset[spec.name])
        if spec.kind == "input":
            return Ref("input", input_index[spec.name])
        if spec.kind == "output":
            return Ref("output", first_output[spec.name])
        if spec.kind == "constant":
            return Ref("weight", offset=offsets[spec.name])
        if spec.kind == "arena":
            return Ref("arena", offset=spec.offset)
        raise KilnError(f"model '{plan.name}': buffer '{name}' has kind {spec.kind!r}, which "
                        "the C export does not know")

    calls = []
    kernels = {}
    for step in plan.steps:
        kernel = compiled.kernels[step.kernel]
        kernels[kernel.symbol] = kernel
        calls.append(Call(kernel.symbol, tuple(ref(a) for a in step.args)))
    tensors_in = tuple(Tensor(n, specs[n].dtype, tuple(specs[n].shape)) for n in plan.inputs)
    tensors_out = tuple(Tensor(n, specs[n].dtype, tuple(specs[n].shape)) for n in plan.outputs)
    copies = []
    for j, name in enumerate(plan.outputs):
        source = ref(name)
        if source != Ref("output", j):
            copies.append(Copy(j, source, tensors_out[j].nbytes))
    pinned = {input_index[name]: np.ascontiguousarray(arr, dtype=specs[name].dtype).tobytes()
              for name, arr in pinned_arrays(plan.meta.get("pinned", {})).items()
              if name in input_index}
    serial = frozenset(compiled.kernels[name].symbol for name in compiled.serial_kernels
                       if name in compiled.kernels)
    return DeployPlan(plan.name, tensors_in, tensors_out, tuple(calls), tuple(copies), blob,
                      arena_bytes, int(plan.meta.get("threads", 1) or 1), pinned,
                      tuple(checks), serial), kernels


def _compiled(model, input_shapes, constants, target, db, threads, layout,
              winograd) -> CompiledModel:
    if isinstance(model, CompiledModel):
        return model.optimized()    # a tiered model's optimised kernels (waits for them)
    from .graph.compile.model import compile_model
    try:
        return compile_model(model, target=target, db=db, input_shapes=input_shapes,
                             threads=threads, layout=layout, winograd=winograd,
                             constants=constants)
    except KilnError as exc:
        raise KilnError(f"{exc}\n(a C library is compiled for fixed shapes: give every "
                        "symbolic input dimension with input_shapes= / --input-shape, and "
                        "shape-deciding input values with constants=)") from exc


def export_c(model, path: str | os.PathLike, *, prefix: str | None = None,
             weights: str = "auto", input_shapes: Mapping[str, Sequence[int]] | None = None,
             constants: Mapping[str, np.ndarray] | None = None, target: str = "native",
             db="default", threads: int | None = None, layout: str = "nchwc",
             winograd: bool = True, static: bool = True) -> CLibrary:
    """Write `path` (e.g. libmodel.so), libmodel.a and model.h: the model as a C library that
    needs only libc, libm and pthreads (see the header for the API).

    model: a CompiledModel, or an ONNX path/ModelProto compiled here for `input_shapes`
    (a model with dynamic shapes is specialised to them; constants= pins shape-deciding
    input values, which run then checks). prefix: of every C name (default: from the file
    name, libmodel.so -> model). weights: "embed", "file" (a side file passed to
    <prefix>_set_weights) or "auto" (embedded up to 256 MiB).
    """
    compiled = _compiled(model, input_shapes, constants, target, db, threads, layout,
                         winograd)
    plan, kernels = deploy_plan(compiled)
    return export_c_library(plan, kernels, Path(path), prefix=prefix, weights=weights,
                            static=static)
