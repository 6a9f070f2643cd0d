"""Loading a kernel library written by export.export_library: dlopen the shared library and
wrap each kernel it holds in a Kernel, without recompiling."""
from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

from .emit_module import pool_symbol, threads_symbol
from .export import FORMAT, VERSION, LibraryError
from .kernel import Kernel, ParamSpec
from .pyentry import AVAILABLE as PYENTRY, entry_symbol, table_symbol
from .target import Target
from .runtime_config import resolve_threads


def load_library(path: str | os.PathLike, num_threads: int | None = None) -> dict[str, Kernel]:
    """Load a library written by export_library: {kernel name: Kernel}, set to run at
    `num_threads` (default: KILN_NUM_THREADS, else every core)."""
    num_threads = resolve_threads(num_threads)
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
                                    entry=pyentry, keepalive=lib, pool_slot=pool,
                                    num_threads=num_threads)
    return out
