"""Kernels -> a shared library (+ JSON sidecar) and back, without recompiling.

`export_library(kernels, "lib.so")` emits one PIC object per kernel and links them with the
system `cc -shared` (libm; libgomp when it runs the parallel loops); `load_library("lib.so")` dlopens it and returns Kernels
with the same argument checking.
"""
from __future__ import annotations

import ctypes
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..te.errors import CodegenError
from .emit_module import pool_symbol, threads_symbol
from .jit import object_code
from .kernel import Kernel, ParamSpec
from .pyentry import AVAILABLE as PYENTRY, entry_symbol, table_symbol
from .runtime import link_flags
from .target import Target

FORMAT = "kiln-library"
VERSION = 1


class LibraryError(CodegenError):
    """A kernel library could not be written or read."""


def _linker() -> str:
    for name in (os.environ.get("CC"), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    raise LibraryError("cannot link a shared library: no C compiler driver (cc, gcc or clang) "
                       "on PATH. Install one (apt-get install gcc) or set CC.")


def export_library(kernels, path: str | os.PathLike) -> Path:
    """Write `kernels` (a Kernel, list or dict of Kernels) to shared library `path` plus
    `path + ".json"` metadata. All kernels must share one target and have distinct names."""
    if isinstance(kernels, Kernel):
        kernels = [kernels]
    elif isinstance(kernels, dict):
        kernels = list(kernels.values())
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


def export_kernel(kernel: Kernel, path: str | os.PathLike) -> Path:
    return export_library([kernel], path)


def load_library(path: str | os.PathLike) -> dict[str, Kernel]:
    """Load a library written by export_library: {kernel name: Kernel}."""
    path = Path(path)
    meta_path = Path(str(path) + ".json")
    for p in (path, meta_path):
        if not p.exists():
            raise LibraryError(f"cannot load kernel library: {p} does not exist (export_library "
                               "writes both the .so and its .json sidecar)")
    try:
        meta = json.loads(meta_path.read_text())
    except json.JSONDecodeError as exc:
        raise LibraryError(f"{meta_path} is not valid JSON: {exc}") from exc
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise LibraryError(f"{meta_path}: unsupported metadata format "
                           f"{meta.get('format')!r} v{meta.get('version')!r}; expected "
                           f"{FORMAT!r} v{VERSION}. Re-export the library.")
    target = Target.from_string(meta["target"])
    if not target.can_run_on_host():
        raise LibraryError(f"{path} was compiled for '{target}', which this CPU cannot run")
    lib = ctypes.CDLL(str(path.resolve()))
    out: dict[str, Kernel] = {}
    for entry in meta["kernels"]:
        sym = entry["symbol"]
        try:
            address = ctypes.cast(getattr(lib, sym), ctypes.c_void_p).value
            threads = ctypes.addressof(ctypes.c_int32.in_dll(lib, threads_symbol(sym)))
            pyentry = None
            if PYENTRY:
                pyentry = (ctypes.cast(getattr(lib, entry_symbol(sym)), ctypes.c_void_p).value,
                           ctypes.addressof(ctypes.c_uint64.in_dll(lib, table_symbol(sym))))
        except (AttributeError, ValueError) as exc:
            raise LibraryError(f"{path} lacks symbol of kernel '{entry['name']}': {exc}") from exc
        try:       # absent from kernels without a pool pointer (libgomp or serial builds)
            pool = ctypes.addressof(ctypes.c_void_p.in_dll(lib, pool_symbol(sym)))
        except ValueError:
            pool = None
        params = tuple(ParamSpec.from_json(p) for p in entry["params"])
        out[entry["name"]] = Kernel(entry["name"], sym, params, target, address, threads,
                                    entry=pyentry, keepalive=lib, pool_slot=pool)
    return out
