"""The generic kernel library: codegen/generic's kernels compiled by units (a few kernels
each) into object files per target, stored in their own folder, loaded into one engine per
process as models need them.

A unit is a family's kernels that share the first two parts of their name
(`elementwise.binary.add` holds add's dtypes; `conv.dense` one kernel): a model needs a few
dozen kernels of the library's ~170, and building only the units it needs keeps a first
compile on a fresh machine to seconds.

The folder is KILN_GENERIC_DIR (default: `kiln-generic` next to the kernel cache's folder;
"off" builds in memory, every process; codegen/cache_store.generic_dir). It is apart from
KILN_CACHE_DIR on purpose: the library is part of the install, like onnxruntime's prebuilt
kernels, and a model's cold compile (an empty model and kernel cache) still finds it.
`kiln warmup` builds every unit ahead of time; otherwise a unit is built the first time a
model needs it, once per machine and Kiln version (the key covers Kiln's sources, LLVM and
the target).
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
from typing import Callable

import llvmlite.binding as llvm

from ...te.errors import CodegenError
from .. import cache_store
from ..build import DEFAULT_FASTMATH, gc_paused, param_specs
from ..emit_module import emit_module, fastmath_flags, release, symbol_name
from ..jit import machine, optimize, slow_compile_watch
from ..kernel import Kernel, ParamSpec
from ..loaded_kernel import kernel_symbols, loaded_kernel
from ..object_loader import load_code
from ..runtime import backend
from ..target import Target, init_llvm
from .registry import FAMILIES

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
    return cache_store.generic_dir(environ)


def _store(environ=None) -> cache_store.Store | None:
    return cache_store.open_generic_store("units", "obj", environ)


def unit_of(qualified: str) -> str:
    """The build unit of kernel `family.name`: the family and the name's first two parts."""
    family, _, name = qualified.partition(".")
    return family + "." + ".".join(name.split(".")[:2])


def unit_kernels(unit: str) -> dict[str, Callable]:
    """{kernel name within its family: builder} of `unit`."""
    register_all()
    family = unit.partition(".")[0]
    if family not in FAMILIES:
        raise CodegenError(f"no generic kernel family {family!r}; the families are "
                           f"{', '.join(sorted(FAMILIES))}")
    return {name: builder for name, builder in sorted(FAMILIES[family].items())
            if unit_of(f"{family}.{name}") == unit}


def units(families=None) -> list[str]:
    """Every build unit (of `families`, default all)."""
    register_all()
    return sorted({unit_of(f"{family}.{name}") for family in (families or FAMILIES)
                   for name in FAMILIES[family]})


def _build(builder: Callable, target: Target):
    # a builder that takes `target` sizes its register tiles to the target
    return builder(target) if "target" in inspect.signature(builder).parameters else builder()


def unit_object(unit: str, target: Target) -> tuple[bytes, dict[str, tuple], float]:
    """(object code, {kernel name: (symbol, params)}, seconds it took) of `unit` for
    `target`: from the library's folder, else compiled (one module) and stored. The key
    needs no IR: the builders are functions of Kiln's sources, which make_key covers, and
    of the target."""
    kernels = unit_kernels(unit)
    if not kernels:
        raise CodegenError(f"no generic kernel unit {unit!r}")
    start = time.perf_counter()
    store = _store()
    key = _unit_key(unit, target)
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
        for name, builder in kernels.items():
            func = _build(builder, target)
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


def built(unit: str, target: Target) -> bool:
    """`unit`'s object is in the library's folder for `target`."""
    store = _store()
    if store is None:
        return False
    return store.path(_unit_key(unit, target)).is_file()


def _unit_key(unit: str, target: Target) -> str:
    # the pool runtime decides how PARALLEL loops are emitted (and the symbols they define)
    return cache_store.make_key("generic-unit", unit=unit, target=str(target),
                                runtime=backend())


class GenericLibrary:
    """The generic kernels of one target at one thread count, loaded by units on first use
    into one engine."""

    def __init__(self, target: Target, threads: int):
        self.target, self.threads = target, threads
        self._kernels: dict[str, Kernel] = {}
        self._loaded: set[str] = set()
        self._lock = threading.Lock()
        self.load_seconds = 0.0

    def kernel(self, qualified: str) -> Kernel:
        """Kernel `family.name` (its unit loaded, or built, on first use)."""
        with self._lock:
            if qualified not in self._kernels:
                unit = unit_of(qualified)
                if unit not in self._loaded and unit_kernels(unit):
                    self._load(unit)
                if qualified not in self._kernels:
                    family = qualified.partition(".")[0]
                    raise CodegenError(f"no generic kernel {qualified!r}; family {family!r} "
                                       f"has {', '.join(sorted(FAMILIES.get(family, ())))}")
            return self._kernels[qualified]

    def _load(self, unit: str) -> None:
        start = time.perf_counter()
        code, symbols, _ = unit_object(unit, self.target)
        try:
            loaded = load_code(self.target, [code], [
                s for sym, _ in symbols.values() for s in kernel_symbols(sym, False)], unit)
        except CodegenError as exc:
            raise CodegenError(f"generic unit {unit!r}: {exc}; remove {library_dir()} to "
                               "rebuild it") from exc
        family = unit.partition(".")[0]
        for name, (sym, params) in symbols.items():
            self._kernels[f"{family}.{name}"] = loaded_kernel(
                loaded, f"{family}.{name}", sym, params, self.target, False,
                num_threads=self.threads)
        self._loaded.add(unit)
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


def missing_units(kernels, target: Target) -> list[str]:
    """The units of `kernels` (qualified names) not yet in the library's folder."""
    return sorted({u for u in map(unit_of, kernels) if not built(u, target)})


# a warm-up started by another process this recently is taken to be still running
WARMUP_LOCK_SECONDS = 900


def start_background_warmup(target: Target) -> bool:
    """Start `kiln warmup` for `target` in a detached, low-priority process (once per
    machine: a lock file in the library's folder keeps a second one from starting while
    one runs); True if one was started. What it builds serves the next compiles."""
    root = library_dir()
    if root is None:
        return False
    root.mkdir(parents=True, exist_ok=True)
    lock = root / "warmup.lock"
    try:
        if time.time() - lock.stat().st_mtime < WARMUP_LOCK_SECONDS:
            return False
        lock.unlink()
    except FileNotFoundError:
        pass
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    import subprocess
    import sys
    subprocess.Popen([sys.executable, "-m", "kiln", "warmup", "--target", str(target),
                      "--lock", str(lock)], stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True, preexec_fn=lambda: os.nice(10))
    return True


def warm_up(target: Target, families=None) -> dict[str, float]:
    """Build (or find) every unit's object (of `families`): {family: seconds}."""
    seconds: dict[str, float] = {}
    for unit in units(families):
        family = unit.partition(".")[0]
        seconds[family] = seconds.get(family, 0.0) + unit_object(unit, target)[2]
    return seconds
