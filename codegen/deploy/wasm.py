"""A deployed model as WebAssembly: <name>.wasm exporting the same C API as the native
library (run, run_checked, workspace_bytes, ...) plus memory, malloc and free, and <name>.js,
a small loader that runs it from JavaScript.

The kernels are emitted again from their loop IR (the schedules the model was compiled with)
for wasm32-unknown-unknown with simd128, serial (threads in a browser need a
cross-origin-isolated page and SharedArrayBuffer: see wasm_threads_note). The glue is the
native one with a 32-bit size_t. Linking goes through the `ziglang` package's `zig cc` for
wasm32-wasi as a reactor (wasm-ld underneath), whose wasi-libc provides the math functions,
memcpy and malloc; nothing in it makes a WASI call, so the module imports nothing.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import llvmlite.binding as llvm

from ...te.errors import CodegenError
from ..build import DEFAULT_FASTMATH
from ..emit_module import emit_module, fastmath_flags
from ..jit import optimize
from ..kernel import Kernel
from ..target import Target, init_llvm
from . import toolchain
from .glue import glue_module
from .link import code_bytes, combine, emit_object
from .native import api_symbols
from .plan import DTYPE_CODE, DeployPlan, check_prefix
from .weights import weights_ir

WASM_TRIPLE = "wasm32-unknown-unknown"
LOADER = Path(__file__).with_name("loader.js")
PAGE = Path(__file__).with_name("page.html")
STACK_BYTES = 4 << 20        # kernels keep large temporaries on the heap (aligned_alloc)


@cache
def _init_wasm() -> None:
    init_llvm()
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


def wasm_target(simd: bool = True) -> Target:
    _init_wasm()
    return Target(cpu="generic", features="+simd128" if simd else "", triple=WASM_TRIPLE)


@dataclass
class WasmModule:
    wasm: Path
    loader: Path
    page: Path
    meta: dict
    sizes: dict = field(default_factory=dict)


def wasm_kernel_ir(kernel: Kernel, target: Target) -> str:
    """The kernel's loop IR emitted and optimized for `target` (serial parallel loops)."""
    if kernel.func is None:
        raise CodegenError(f"kernel '{kernel.name}' carries no loop IR to emit for wasm32 (it "
                           "was loaded from a library or the model cache); compile the model "
                           "with cache_model=False and export that")
    module = emit_module(kernel.func, target, fastmath_flags(DEFAULT_FASTMATH),
                         parallel="serial")
    return str(optimize(module, target))


def model_meta(plan: DeployPlan, prefix: str) -> dict:
    """What the JavaScript loader needs: the API prefix and the tensor tables."""
    def tensors(ts):
        return [{"name": t.name, "dtype": t.dtype, "dtype_code": DTYPE_CODE[t.dtype],
                 "shape": list(t.shape), "bytes": t.nbytes} for t in ts]
    return {"name": plan.name, "prefix": prefix, "inputs": tensors(plan.inputs),
            "outputs": tensors(plan.outputs), "workspace_bytes": plan.workspace_bytes(),
            "weights_bytes": len(plan.weights)}


def wasm_objects(plan: DeployPlan, kernels: dict[str, Kernel], prefix: str, target: Target,
                 sizes: bool = False) -> tuple[bytes, dict]:
    """(one object with everything, and with `sizes` the bytes of the runtime part, of the
    kernels and of the weights, each emitted on its own: that costs a second code generation
    of the kernels, so only the size benchmark asks)."""
    texts = {sym: wasm_kernel_ir(kernels[sym], target)
             for sym in sorted({c.symbol for c in plan.calls})}
    weights_symbol = f"{prefix}__weights" if plan.weights else None
    glue = str(glue_module(plan, prefix, target.triple, size_bits=32, pool=False,
                           weights_symbol=weights_symbol))
    parts = [("the ABI functions", glue)] + [(f"kernel {s}", t) for s, t in texts.items()]
    if weights_symbol:
        parts.append(("the weights", weights_ir(plan.weights, weights_symbol, target.triple)))
    public = api_symbols(prefix, False)
    obj = emit_object(combine(parts, target, public), target)
    if not sizes:
        return obj, {"weights": len(plan.weights)}
    return obj, {"runtime": code_bytes(emit_object(combine([("glue", glue)], target, public),
                                                   target)),
                 "kernels": code_bytes(emit_object(combine(list(texts.items()), target,
                                                           set(texts)), target)),
                 "weights": len(plan.weights)}


def export_wasm_module(plan: DeployPlan, kernels: dict[str, Kernel], path, *,
                       prefix: str = "model", simd: bool = True,
                       sizes: bool = False) -> WasmModule:
    """Write `path` (.wasm), the loader (same stem, .js) and a page that runs it (.html)
    beside it. sizes: also measure
    the parts (wasm_objects)."""
    path = Path(path)
    prefix = check_prefix(prefix)
    plan.validate()
    target = wasm_target(simd)
    obj, sizes = wasm_objects(plan, kernels, prefix, target, sizes)
    exports = sorted(api_symbols(prefix, False)) + ["malloc", "free"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kiln-wasm-") as tmp:
        obj_path = Path(tmp) / f"{prefix}.o"
        obj_path.write_bytes(obj)
        cmd = [*toolchain.zig_cc(), "-target", "wasm32-wasi", "-mexec-model=reactor", "-O2",
               str(obj_path), "-o", str(path), "-s", "-Wl,--gc-sections",
               f"-Wl,-z,stack-size={STACK_BYTES}",
               *[f"-Wl,--export={name}" for name in exports]]
        toolchain.run(cmd, f"linking {path}")
    meta = model_meta(plan, prefix)
    loader = path.with_suffix(".js")
    loader.write_text(f"// Generated by Kiln for model '{plan.name}'.\n"
                      f"export const META = {json.dumps(meta, indent=1)};\n\n"
                      + LOADER.read_text())
    page = path.with_suffix(".html")
    page.write_text(PAGE.read_text().replace("__STEM__", path.stem))
    sizes["wasm"] = path.stat().st_size
    return WasmModule(path, loader, page, meta, sizes)


def wasm_threads_note() -> str:
    return ("threads: the wasm32 export is single-threaded. Threads would need the atomics "
            "and bulk-memory features, a shared memory, workers started by the loader, and a "
            "page served cross-origin isolated (COOP/COEP headers) for SharedArrayBuffer; "
            "Safari/iOS limit this further.")
