"""A deployed model as a C library: lib<prefix>.so, lib<prefix>.a and <prefix>.h.

The object holds the kernels (their optimized IR, as compiled for the model), the ABI glue
(glue.py), Kiln's thread pool with its shutdown (codegen/runtime.py) and the weights, and
needs only libc, libm and pthreads at run time.
"""
from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ...te.errors import CodegenError
from ..kernel import Kernel
from ..runtime import _futex_number, build_runtime_module
from ..target import Target
from . import toolchain
from .glue import glue_module
from .header import header_text
from .link import code_bytes, combine, emit_object
from .plan import DeployPlan, check_prefix
from .weights import weights_ir

# weights="auto" embeds a blob up to this size and writes a side file above it
EMBED_LIMIT = 256 << 20
WEIGHTS_MODES = ("auto", "embed", "file")


@dataclass
class CLibrary:
    """What export_c_library wrote, and the bytes of each part of the object."""

    shared: Path
    static: Path | None
    header: Path
    weights_file: Path | None
    prefix: str
    sizes: dict = field(default_factory=dict)


def api_symbols(prefix: str, external_weights: bool) -> set[str]:
    names = {"abi_version", "workspace_bytes", "run", "run_checked", "error_message",
             "set_num_threads", "get_num_threads", "shutdown"}
    if external_weights:
        names.add("set_weights")
    return {f"{prefix}_{n}" for n in names}


def kernel_ir(kernel: Kernel) -> str:
    try:
        return kernel.llvm_ir()
    except CodegenError as exc:
        raise CodegenError(f"kernel '{kernel.name}' carries no LLVM IR to deploy (it was "
                           "loaded from a shared library); compile the model again (kiln."
                           "compile) and export that") from exc


def _uses_gomp(text: str) -> bool:
    return "@GOMP_parallel" in text


def prefix_from_path(path: Path) -> str:
    stem = path.name.split(".")[0]
    stem = stem[3:] if stem.startswith("lib") and len(stem) > 3 else stem
    return re.sub(r"[^A-Za-z0-9_]", "_", stem) or "model"


def export_c_library(plan: DeployPlan, kernels: dict[str, Kernel], path, *,
                     prefix: str | None = None, weights: str = "auto",
                     embed_limit: int = EMBED_LIMIT, static: bool = True) -> CLibrary:
    """Write `path` (a shared library), lib<prefix>.a beside it (static=True) and <prefix>.h.

    kernels: symbol -> Kernel for every symbol plan.calls names. weights: "embed" (a
    constant section of the library), "file" (<path stem>.weights beside it; the caller
    passes its contents to <prefix>_set_weights) or "auto" (embed up to embed_limit bytes).
    """
    path = Path(path)
    prefix = check_prefix(prefix or prefix_from_path(path))
    if weights not in WEIGHTS_MODES:
        raise CodegenError(f"weights={weights!r}: expected one of {', '.join(WEIGHTS_MODES)}")
    plan.validate()
    missing = sorted({c.symbol for c in plan.calls} - set(kernels))
    if missing:
        raise CodegenError(f"model '{plan.name}': no kernel for {missing}")
    targets = {str(k.target) for k in kernels.values()}
    if len(targets) > 1:
        raise CodegenError(f"kernels of one model must share a target; got {sorted(targets)}")
    target = next(iter(kernels.values())).target if kernels else Target.from_string("native")
    texts = {sym: kernel_ir(kernels[sym]) for sym in sorted({c.symbol for c in plan.calls})}
    gomp = sorted(s for s, t in texts.items() if _uses_gomp(t))
    if gomp:
        raise CodegenError(f"kernels {gomp[:3]} run their parallel loops on libgomp "
                           "(KILN_PARALLEL_RUNTIME=gomp); compile the model with Kiln's own "
                           "pool (unset KILN_PARALLEL_RUNTIME) to deploy it")
    pooled = frozenset(s for s, t in texts.items() if f"@{s}__parallel_for" in t)
    external = bool(plan.weights) and (weights == "file" or (
        weights == "auto" and len(plan.weights) > embed_limit))
    weights_symbol = None if external or not plan.weights else f"{prefix}__weights"
    futex = _futex_number()
    if pooled and futex is None:
        raise CodegenError("the deployed thread pool needs Linux futexes on x86_64 or "
                           "aarch64")
    glue = glue_module(plan, prefix, target.triple, pooled=pooled, pool=True,
                       weights_symbol=weights_symbol)
    parts = [("the ABI functions", str(glue))]
    if pooled:
        parts.append(("the thread pool",
                      str(build_runtime_module(target.triple, futex, shutdown=True))))
    parts += [(f"kernel {sym}", text) for sym, text in texts.items()]
    if weights_symbol:
        parts.append(("the weights", weights_ir(plan.weights, weights_symbol, target.triple)))
    public = api_symbols(prefix, external)
    obj = emit_object(combine(parts, target, public), target)

    path.parent.mkdir(parents=True, exist_ok=True)
    header = path.parent / f"{prefix}.h"
    weights_file = path.parent / f"{prefix}.weights" if external else None
    archive = path.parent / f"lib{prefix}.a" if static else None
    with tempfile.TemporaryDirectory(prefix="kiln-deploy-") as tmp:
        obj_path = Path(tmp) / f"{prefix}.o"
        obj_path.write_bytes(obj)
        toolchain.run([*toolchain.c_compiler(), "-shared", "-o", str(path), str(obj_path),
                       "-lm", "-lpthread", "-Wl,-s"], f"linking {path}")
        if archive is not None:
            if archive.exists():
                archive.unlink()
            toolchain.run([*toolchain.archiver(), "rcs", str(archive), str(obj_path)],
                          f"writing {archive}")
    if weights_file is not None:
        weights_file.write_bytes(plan.weights)
    header.write_text(header_text(plan, prefix, library=path.name,
                                  weights_file=weights_file.name if weights_file else None))
    sizes = {"object": len(obj), "code_and_data": code_bytes(obj),
             "weights": len(plan.weights), "shared_library": path.stat().st_size}
    return CLibrary(path, archive, header, weights_file, prefix, sizes)


def part_sizes(plan: DeployPlan, kernels: dict[str, Kernel], prefix: str = "model") -> dict:
    """Bytes of code and data of the runtime part (ABI glue + thread pool), of the kernels
    and of the weights, each emitted as its own object (for the size benchmark)."""
    target = next(iter(kernels.values())).target
    texts = {sym: kernel_ir(kernels[sym]) for sym in sorted({c.symbol for c in plan.calls})}
    pooled = frozenset(s for s, t in texts.items() if f"@{s}__parallel_for" in t)
    glue = glue_module(plan, prefix, target.triple, pooled=pooled, pool=True,
                       weights_symbol=f"{prefix}__weights" if plan.weights else None)
    runtime = [("glue", str(glue))]
    if pooled:
        runtime.append(("pool", str(build_runtime_module(target.triple, _futex_number(),
                                                         shutdown=True))))
    public = api_symbols(prefix, False)
    out = {"runtime": code_bytes(emit_object(combine(runtime, target, public), target))}
    kernel_parts = list(texts.items())
    out["kernels"] = code_bytes(emit_object(combine(kernel_parts, target, set(texts)), target))
    out["weights"] = len(plan.weights)
    return out
