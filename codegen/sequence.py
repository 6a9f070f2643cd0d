"""A call sequence: one native function that calls compiled kernels in order on fixed buffers.

A compiled model runs the same kernels on the same buffers every time (inputs are copied into
preallocated arrays, intermediates live in one arena), so the whole plan can be a straight
line of calls with constant arguments. Calling kernels one by one from Python costs 2-6 us per
kernel (argument conversion and the interpreter loop): about 2.5% of MobileNetV2's latency and
15% of a small MLP's. The sequence is built once per model (a few ms of JIT) and called once
per run.
"""
from __future__ import annotations

import ctypes
from typing import Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ..te.errors import CodegenError
from .cache_store import make_key, open_store
from .object_loader import load_code
from .target import Target, init_llvm

I64 = ir.IntType(64)
PTR = ir.PointerType()


class CallSequence:
    """`sequence()` runs every call in order. The function and argument addresses live in a
    table the generated code reads, so the code depends only on how many arguments each
    call takes: it comes from the persistent cache (codegen/cache_store.py) when a model of
    the same shape was compiled before. Keeps the JIT engine that holds the code; the caller
    keeps the kernels and buffers the addresses point at alive."""

    def __init__(self, calls: Sequence[tuple[int, Sequence[int]]], name: str = "sequence"):
        if not calls:
            raise CodegenError("a call sequence needs at least one call")
        for k, (address, args) in enumerate(calls):
            if not address or any(not a for a in args):
                raise CodegenError(f"call {k} of sequence '{name}' has a null function or "
                                   "buffer address")
        init_llvm()
        target = Target.from_string("native")
        arities = [len(args) for _, args in calls]
        store = open_store("sequences", "obj")
        # the code is a function of the arities alone (and of this file: the key covers
        # Kiln's sources), so the module need not be built to look it up
        key = make_key("sequence", target=str(target), arities=arities)
        found = store.read(key) if store is not None else None
        if found is None:
            parsed = llvm.parse_assembly(_module_text(arities, target))
            parsed.verify()
            tm = target.create_target_machine()
            parsed.data_layout = str(tm.target_data)
            code = tm.emit_object(parsed)
            if store is not None:
                store.write(key, [code])
        else:
            mm, start = found
            code = mm[start:]
            mm.close()
        self._code = load_code(target, [code], ["kiln_sequence"], name)
        flat = [v for address, args in calls for v in (address, *args)]
        self._table = (ctypes.c_void_p * len(flat))(*flat)
        fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(
            self._code.address("kiln_sequence"))
        self._fn, self._arg = fn, ctypes.addressof(self._table)
        self.calls = len(calls)

    def __call__(self) -> None:
        self._fn(self._arg)


def _module_text(arities: Sequence[int], target: Target) -> str:
    """kiln_sequence(table): for each call, load its function and arguments from the table
    (function, then its arguments, call after call) and call it."""
    module = ir.Module(name="sequence")
    module.triple = target.triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR]), "kiln_sequence")
    fn.args[0].add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    at = 0

    def load(k: int, typ=PTR):
        return b.load(b.gep(fn.args[0], [ir.Constant(I64, k)], source_etype=PTR), typ=typ)
    for n in arities:
        callee = load(at, ir.FunctionType(ir.VoidType(), [PTR] * n).as_pointer())
        b.call(callee, [load(at + 1 + j) for j in range(n)])
        at += 1 + n
    b.ret_void()
    return str(module)
