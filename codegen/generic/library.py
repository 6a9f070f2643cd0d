"""The generic kernel library: each family of codegen/generic's kernels compiled into one
object file per target, stored in its own cache folder, loaded once per process.

The folder is KILN_GENERIC_DIR (default: `kiln-generic` next to the kernel cache's folder;
"off" builds in memory, every process). It is apart from KILN_CACHE_DIR on purpose: the
library is part of the install, like onnxruntime's prebuilt kernels, and a model's cold
compile (an empty model and kernel cache) still finds it. `kiln warmup` builds every family
ahead of time; otherwise a family is built the first time a model needs it (a few seconds,
once per machine and Kiln version: the key covers Kiln's sources, LLVM and the target).
"""
from __future__ import annotations

import importlib
import inspect
import json
import os
import struct
import threading
import time
from pathlib import Path

import llvmlite.binding as llvm

from ...te.errors import CodegenError
from .. import cache_store
from ..build import DEFAULT_FASTMATH, gc_paused, param_specs
from ..emit_module import (emit_module, fastmath_flags, pool_symbol, release, symbol_name,
                           threads_symbol)
from ..jit import machine, optimize, slow_compile_watch
from ..kernel import Kernel, ParamSpec
from ..target import Target, init_llvm
from .registry import FAMILIES

ENV = "KILN_GENERIC_DIR"
# the modules whose import registers each family's kernels
FAMILY_MODULES = ("elementwise", "conv", "matmul", "reduce", "data")


def register_all() -> None:
    """Import every family module (each registers its kernels); a module not written yet
    is skipped."""
    for name in FAMILY_MODULES:
        try:
            importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.{name}":
                raise


def library_dir(environ=None) -> Path | None:
    environ = os.environ if environ is None else environ
    raw = environ.get(ENV, "").strip()
    if raw:
        return None if raw.lower() in cache_store.OFF_VALUES else Path(raw).expanduser()
    root = cache_store.cache_dir({k: v for k, v in environ.items() if k != "KILN_CACHE_DIR"})
    return None if root is None else root.parent / "kiln-generic"


def _store(environ=None) -> cache_store.Store | None:
    root = library_dir(environ)
    return None if root is None else cache_store.Store(root, "families", "obj")


def family_object(family: str, target: Target) -> tuple[bytes, dict[str, tuple], float]:
    """(object code, {kernel name: (symbol, params)}, seconds it took) of `family` for
    `target`: from the library's folder, else compiled (all kernels in one module) and
    stored. The key needs no IR: the builders are functions of Kiln's sources, which
    make_key covers, and of the target."""
    register_all()
    if family not in FAMILIES:
        raise CodegenError(f"no generic kernel family {family!r}; the families are "
                           f"{', '.join(sorted(FAMILIES))}")
    start = time.perf_counter()
    store = _store()
    key = cache_store.make_key("generic-family", family=family, target=str(target))
    found = store.read(key) if store is not None else None
    if found is not None:
        mm, at = found
        try:
            (n,) = struct.unpack_from("<I", mm, at)
            meta = json.loads(mm[at + 4:at + 4 + n])
            code = mm[at + 4 + n:]
        finally:
            mm.close()
        symbols = {name: (sym, tuple(ParamSpec.from_json(p) for p in params))
                   for name, (sym, params) in meta.items()}
        return code, symbols, time.perf_counter() - start
    texts, symbols = [], {}
    with gc_paused():
        for name, builder in sorted(FAMILIES[family].items()):
            # a builder that takes `target` sizes its register tiles to the target
            func = (builder(target) if "target" in inspect.signature(builder).parameters
                    else builder())
            module = emit_module(func, target, fastmath_flags(DEFAULT_FASTMATH))
            texts.append(str(module))
            release(module)
            symbols[name] = (symbol_name(func.name), param_specs(func))
    init_llvm()
    with slow_compile_watch(texts[0]):
        mod = llvm.parse_assembly(texts[0])
        for text in texts[1:]:
            mod.link_in(llvm.parse_assembly(text))
        mod = optimize(mod, target)
        code = machine(target, for_object=True).emit_object(mod)
    if store is not None:
        meta = json.dumps({name: (sym, [p.to_json() for p in params])
                           for name, (sym, params) in symbols.items()}).encode()
        store.write(key, [struct.pack("<I", len(meta)), meta, code])
    return code, symbols, time.perf_counter() - start


class GenericLibrary:
    """The generic kernels of one target at one thread count, loaded on first use."""

    def __init__(self, target: Target, threads: int):
        self.target, self.threads = target, threads
        self._kernels: dict[str, Kernel] = {}
        self._engines: list = []
        self._lock = threading.Lock()
        self.load_seconds = 0.0

    def kernel(self, qualified: str) -> Kernel:
        """Kernel `family.name` (its family loaded, or built, on first use)."""
        with self._lock:
            if qualified not in self._kernels:
                family = qualified.split(".", 1)[0]
                self._load(family)
                if qualified not in self._kernels:
                    raise CodegenError(f"no generic kernel {qualified!r}; family {family!r} "
                                       f"has {', '.join(sorted(FAMILIES.get(family, ())))}")
            return self._kernels[qualified]

    def _load(self, family: str) -> None:
        start = time.perf_counter()
        code, symbols, _ = family_object(family, self.target)
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""),
                                            self.target.create_target_machine())
        engine.add_object_file(llvm.ObjectFileRef.from_data(code))
        engine.finalize_object()
        self._engines.append(engine)
        for name, (sym, params) in symbols.items():
            address = engine.get_function_address(sym)
            threads = engine.get_global_value_address(threads_symbol(sym))
            if not address or not threads:
                raise CodegenError(f"generic family {family!r}: its object lacks {sym!r}; "
                                   f"remove {library_dir()} to rebuild it")
            self._kernels[f"{family}.{name}"] = Kernel(
                f"{family}.{name}", sym, params, self.target, address, threads,
                keepalive=engine, num_threads=self.threads,
                pool_slot=engine.get_global_value_address(pool_symbol(sym)) or None)
        self.load_seconds += time.perf_counter() - start


_LIBRARIES: dict[tuple[str, int], GenericLibrary] = {}
_LIBRARIES_LOCK = threading.Lock()


def library(target: Target, threads: int) -> GenericLibrary:
    """This process's generic library for `target` at `threads` (one per pair: a kernel's
    thread count is a global of its object)."""
    with _LIBRARIES_LOCK:
        key = (str(target), threads)
        if key not in _LIBRARIES:
            _LIBRARIES[key] = GenericLibrary(target, threads)
        return _LIBRARIES[key]


def warm_up(target: Target, families=None) -> dict[str, float]:
    """Build (or find) every family's object: {family: seconds}."""
    register_all()
    return {family: family_object(family, target)[2]
            for family in (families or sorted(FAMILIES))}
