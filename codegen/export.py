"""Kernels -> a shared library (+ JSON sidecar) and back, without recompiling.

`export_library(kernels, "lib.so")` emits one PIC object per kernel and links them with the
system `cc -shared` (libm; libgomp when it runs the parallel loops); `load_library("lib.so")`
(library.py) dlopens it and returns Kernels with the same argument checking.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..te.errors import CodegenError
from .jit import object_code
from .runtime import link_flags
from .runtime_config import c_compiler_setting

FORMAT = "kiln-library"
VERSION = 1


class LibraryError(CodegenError):
    """A kernel library could not be written or read."""


def _linker() -> str:
    for name in (c_compiler_setting(), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise LibraryError("cannot link a shared library: no C compiler driver (cc, gcc or clang) "
                       "on PATH. Install one (apt-get install gcc) or set CC.")


def export_library(kernels, path: str | os.PathLike) -> Path:
    """Write `kernels` (a Kernel, list or dict of Kernels) to shared library `path` plus
    `path + ".json"` metadata. All kernels must share one target and have distinct names."""
    if isinstance(kernels, dict):
        kernels = list(kernels.values())
    elif hasattr(kernels, "symbol"):    # one Kernel
        kernels = [kernels]
    kernels = list(kernels)
    if not kernels:
        raise LibraryError(f"export_library({str(path)!r}) got no kernels to export")
    names = [k.symbol for k in kernels]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise LibraryError(f"kernel names must be unique in a library; duplicated: {dupes}. "
                           "Give the PrimFuncs distinct names before building.")
    targets = {str(k.target) for k in kernels}
    if len(targets) > 1:
        raise LibraryError(f"kernels of one library must share a target; got {sorted(targets)}")
    path = Path(path)
    cc = _linker()
    with tempfile.TemporaryDirectory(prefix="kiln-export-") as tmp:
        objects = []
        for k in kernels:
            obj = Path(tmp) / f"{k.symbol}.o"
            obj.write_bytes(object_code(k.llvm_ir(), k.target))
            objects.append(str(obj))
        cmd = [cc, "-shared", "-o", str(path), *objects, *link_flags()]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise LibraryError(f"linking {path} failed ({' '.join(cmd)}):\n{proc.stderr[-2000:]}")
    meta = {"format": FORMAT, "version": VERSION, "target": targets.pop(),
            "kernels": [{"name": k.name, "symbol": k.symbol,
                         "params": [p.to_json() for p in k.params]} for k in kernels]}
    Path(str(path) + ".json").write_text(json.dumps(meta, indent=1))
    return path


def export_kernel(kernel, path: str | os.PathLike) -> Path:
    return export_library([kernel], path)
