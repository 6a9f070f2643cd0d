"""Kernels in object code loaded by codegen/object_loader.py (the kernel and model caches, the
generic library): which symbols a kernel's object defines, and the Kernel over them. Apart
from object_loader, which the pool runtime also uses and so must not import Kernel."""
from __future__ import annotations

from .emit_module import pool_symbol, threads_symbol
from .kernel import Kernel, ParamSpec
from .object_loader import LoadedCode
from .pyentry import entry_symbol, table_symbol
from .runtime import backend
from .target import Target


def kernel_symbols(sym: str, python_entry: bool) -> list[str]:
    """What the object of kernel `sym` defines (codegen/emit_module.py): the function, its
    thread count, the Python entry and its table (when built with one: codegen/pyentry.py)
    and the pool's slot (Kiln's pool runtime only; which runtime is in every cache key)."""
    names = [sym, threads_symbol(sym)]
    if python_entry:
        names += [entry_symbol(sym), table_symbol(sym)]
    if backend() == "kiln":
        names.append(pool_symbol(sym))
    return names


def loaded_kernel(code: LoadedCode, name: str, sym: str, params: tuple[ParamSpec, ...],
                  target: Target, python_entry: bool, **kwargs) -> Kernel:
    """The Kernel `name` (symbol `sym`) of `code`, loaded with kernel_symbols(sym, ...)."""
    entry = ((code.address(entry_symbol(sym)), code.address(table_symbol(sym)))
             if python_entry else None)
    pool = code.address(pool_symbol(sym)) if backend() == "kiln" else None
    return Kernel(name, sym, params, target, code.address(sym),
                  code.address(threads_symbol(sym)), entry=entry, keepalive=code,
                  pool_slot=pool, **kwargs)
