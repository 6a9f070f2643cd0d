"""kiln.export_wasm: a compiled model as WebAssembly (model.wasm + model.js loader); see
codegen/deploy/wasm.py. The model is compiled for this CPU first (its plan and schedules),
then every kernel is emitted again from its loop IR for wasm32 with simd128."""
from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from .codegen.deploy.native import prefix_from_path
from .codegen.deploy.wasm import WasmModule, export_wasm_module
from .deploy import deploy_plan
from .graph.runtime.executor import CompiledModel
from .te.errors import KilnError


def export_wasm(model, path: str | os.PathLike, *, prefix: str | None = None,
                simd: bool = True, input_shapes: Mapping[str, Sequence[int]] | None = None,
                constants: Mapping[str, np.ndarray] | None = None, db="default",
                layout: str = "nchwc", winograd: bool = True, sizes: bool = False
                ) -> WasmModule:
    """Write `path` (model.wasm) and model.js. model: an ONNX path/ModelProto (compiled here
    with input_shapes/constants, as kiln.export_c does) or a CompiledModel whose kernels
    carry their loop IR (compiled in this process without the model cache)."""
    from pathlib import Path
    if isinstance(model, CompiledModel):
        compiled = model
    else:
        from .graph.compile.model import compile_model
        try:
            compiled = compile_model(model, db=db, input_shapes=input_shapes, threads=1,
                                     layout=layout, winograd=winograd, constants=constants,
                                     cache_model=False)
        except KilnError as exc:
            raise KilnError(f"{exc}\n(a wasm module is compiled for fixed shapes: give "
                            "input_shapes= / --input-shape)") from exc
    plan, kernels = deploy_plan(compiled)
    plan.threads = 1
    return export_wasm_module(plan, kernels, path, simd=simd, sizes=sizes,
                              prefix=prefix or prefix_from_path(Path(path)))
