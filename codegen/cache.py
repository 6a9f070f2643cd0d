"""The persistent cache of compiled kernels and models: KILN_CACHE_DIR (default
$XDG_CACHE_HOME/kiln, else ~/.cache/kiln; "off" or "0" disables it).

An entry is one file named by its key, written to a temporary file in the same folder and
moved into place with os.replace, so concurrent processes see either no entry or a whole one.
Every entry starts with a header (magic, format version, the key it was stored under, the
payload's length and CRC-32); an entry whose header, key, length or checksum does not match
(truncated, bit-flipped, another program's file, an older format) is reported as a miss,
never loaded, and the rebuilt entry replaces it.

Keys are sha256 over everything that decides the generated code, plus `environment_key()`:
Kiln's own source files (any edit to Kiln invalidates every entry), the LLVM and llvmlite
versions, numpy's version (the checked entry reads numpy's object layout) and Python's. The
kernel key (codegen.build) is over the kernel's unoptimized LLVM IR text, which holds the
loop IR, the fast-math flags, the parallel runtime and the Python entry, and the target
string; the compiled kernel is stored as a position-independent object file that the
process's JIT loads (codegen/object_loader.py) without running LLVM's passes or code
generation, plus its optimized IR (compressed, read only when asked for) and what Kernel needs
(symbol, parameter specs).
"""
from __future__ import annotations

import hashlib
import json
import logging
import struct
import time
import zlib
from dataclasses import dataclass

from ..te.errors import CodegenError
from .cache_store import Store, cache_dir, make_key, open_store
from .kernel import Kernel, ParamSpec
from .loaded_kernel import kernel_symbols, loaded_kernel
from .object_loader import load_code
from .pyentry import AVAILABLE as PYENTRY
from .target import Target

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class CachedObject:
    """A compiled kernel as stored: position-independent object code plus metadata."""

    name: str
    symbol: str
    params: tuple[ParamSpec, ...]
    object_code: bytes
    optimized_ir: bytes          # zlib-compressed text
    compile_seconds: float       # what building it cost when it was stored

    def ir_text(self) -> str:
        return zlib.decompress(self.optimized_ir).decode()


def kernel_key(llvm_ir: str, target: Target, params=()) -> str:
    """Keyed on the IR text and the parameters' specs: uint8 and int8 are both i8 in the IR,
    so two kernels differing only in a parameter's signedness share their text (a byte
    table lookup from uint8 or int8) and must not share the checked signature."""
    specs = json.dumps([p.to_json() for p in params], sort_keys=True)
    return make_key("kernel", target=str(target),
                    ir=hashlib.sha256((llvm_ir + specs).encode()).hexdigest())


def kernel_store(environ=None) -> Store | None:
    return open_store("kernels", "kobj", environ)


def store_object(store: Store, key: str, obj: CachedObject) -> None:
    meta = json.dumps({"name": obj.name, "symbol": obj.symbol,
                       "params": [p.to_json() for p in obj.params],
                       "object_bytes": len(obj.object_code), "ir_bytes": len(obj.optimized_ir),
                       "compile_seconds": obj.compile_seconds}).encode()
    store.write(key, [struct.pack("<I", len(meta)), meta, obj.object_code, obj.optimized_ir])


def read_object(store: Store, key: str) -> CachedObject | None:
    found = store.read(key)
    if found is None:
        return None
    mm, start = found
    try:
        (n,) = struct.unpack_from("<I", mm, start)
        meta = json.loads(mm[start + 4:start + 4 + n])
        at = start + 4 + n
        obj_end = at + meta["object_bytes"]
        if obj_end + meta["ir_bytes"] != len(mm):
            raise ValueError("section sizes do not add up")
        return CachedObject(meta["name"], meta["symbol"],
                            tuple(ParamSpec.from_json(p) for p in meta["params"]),
                            mm[at:obj_end], mm[obj_end:], float(meta["compile_seconds"]))
    except (ValueError, KeyError, TypeError, struct.error) as exc:  # checksum ok, bad layout
        Store._invalid(store.path(key), f"malformed payload: {exc}")
        return None
    finally:
        mm.close()


def load_objects(objects: list[CachedObject], target: Target,
                 keys: list[str | None] | None = None, *, num_threads: int) -> list[Kernel]:
    """Kernels of `objects` (object code of `target`) set to run at `num_threads`, loaded
    together (codegen/object_loader.py): relocation only, no LLVM passes or code generation.
    Raises ValueError when an object lacks a symbol its kernel needs."""
    start = time.perf_counter()
    symbols = [s for obj in objects for s in kernel_symbols(obj.symbol, PYENTRY)]
    try:    # (a batch's kernels share an object)
        code = load_code(target, dict.fromkeys(obj.object_code for obj in objects), symbols,
                         objects[0].name if objects else "kernels")
    except CodegenError as exc:
        raise ValueError(f"cached kernel objects: {exc}") from exc
    each = (time.perf_counter() - start) / max(len(objects), 1)
    kernels = []
    for k, obj in enumerate(objects):
        kernel = loaded_kernel(code, obj.name, obj.symbol, obj.params, target, PYENTRY,
                               optimized_ir=obj.ir_text, compile_seconds=each,
                               num_threads=num_threads)
        kernel.cache_key = keys[k] if keys else None
        kernels.append(kernel)
    return kernels


def entry_count(environ=None) -> dict[str, int]:
    """How many entries of each kind the cache folder holds (for reports)."""
    root = cache_dir(environ)
    if root is None or not root.is_dir():
        return {}
    return {d.name: sum(1 for _ in d.rglob("*") if _.is_file() and not
                        _.name.startswith(".tmp-")) for d in root.iterdir() if d.is_dir()}


__all__ = ["CachedObject", "Store", "cache_dir", "kernel_key", "kernel_store", "load_objects",
           "make_key", "open_store", "read_object", "store_object"]
