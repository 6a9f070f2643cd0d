"""Loading object code compiled earlier (the kernel and model caches, the generic library, the
pool and call-sequence objects) into this process: relocation only, no LLVM passes.

One ORC LLJIT per process holds every load as a library of its own, freed when the last
Python reference to it goes. MCJIT, used before, generates code for an empty module on every
engine it finalizes: 3.7 ms for the first engine of a process and 0.3-0.9 ms for each later
one, a third of a small model's warm load. Where a load cannot be linked by LLJIT (a symbol
defined twice), it falls back to an MCJIT engine, which binds one of the definitions, as
every load did before."""
from __future__ import annotations

import itertools
import logging
import threading
from typing import Iterable

import llvmlite.binding as llvm

from ..te.errors import CodegenError
from .target import Target, init_llvm

log = logging.getLogger(__name__)

_lock = threading.Lock()
_jit: llvm.LLJIT | None = None
_names = itertools.count()


class LoadedCode:
    """Object files loaded as one unit. `address(symbol)` for the symbols named at load time;
    the code stays mapped while this object (a Kernel's keepalive) lives."""

    def __init__(self, holder, addresses: dict[str, int], codes: list[bytes]):
        self._holder = holder            # the LLJIT library's tracker, or an MCJIT engine
        self._codes = codes              # the images, should the JIT read them again
        self._addresses = addresses

    def address(self, symbol: str) -> int:
        return self._addresses[symbol]


def _process_jit() -> llvm.LLJIT:
    global _jit
    if _jit is None:
        init_llvm()
        # its target machine would compile IR, which this JIT is never given: opt 0 is cheapest
        _jit = llvm.create_lljit_compiler(Target.native().create_target_machine(opt=0),
                                          suppress_errors=True)
        _jit._owned = True       # never disposed: libraries may outlive the module's globals
    return _jit


def load_code(target: Target, codes: Iterable[bytes], symbols: Iterable[str],
              name: str = "code") -> LoadedCode:
    """Link the object files `codes` (machine code for `target`, which runs here) and
    resolve `symbols`, each of which one of them must define; undefined references resolve
    to this process's symbols (libm, libgomp). Raises CodegenError naming a missing symbol."""
    codes, symbols = list(codes), list(dict.fromkeys(symbols))
    with _lock:
        jit = _process_jit()
        library = f"kiln-{name}-{next(_names)}"
    builder = llvm.JITLibraryBuilder()
    for code in codes:
        builder.add_object_img(bytes(code))
    builder.add_current_process()
    for sym in symbols:
        builder.export_symbol(sym)
    try:
        tracker = builder.link(jit, library)
    except RuntimeError as exc:
        log.debug("LLJIT could not link %s (%s); loading it with MCJIT", library, exc)
        return _load_with_mcjit(target, codes, symbols, name)
    return LoadedCode(tracker, {sym: tracker[sym] for sym in symbols}, codes)


def _load_with_mcjit(target: Target, codes: list[bytes], symbols: list[str],
                     name: str) -> LoadedCode:
    init_llvm()
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""),
                                        target.create_target_machine(opt=0))
    for code in codes:
        engine.add_object_file(llvm.ObjectFileRef.from_data(code))
    engine.finalize_object()
    addresses = {sym: engine.get_global_value_address(sym) for sym in symbols}
    missing = [sym for sym, address in addresses.items() if not address]
    if missing:
        raise CodegenError(f"object code of {name!r} lacks the symbol(s) "
                           f"{', '.join(missing)}; remove it from the cache to rebuild it")
    return LoadedCode(engine, addresses, codes)

