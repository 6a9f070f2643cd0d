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
from .target import Target, _init_llvm

I64 = ir.IntType(64)
PTR = ir.PointerType()


class CallSequence:
    """`sequence()` runs every call in order. Keeps the JIT engine that holds the code; the
    caller keeps the kernels and buffers the addresses point at alive."""

    def __init__(self, calls: Sequence[tuple[int, Sequence[int]]], name: str = "sequence"):
        if not calls:
            raise CodegenError("a call sequence needs at least one call")
        for k, (address, args) in enumerate(calls):
            if not address or any(not a for a in args):
                raise CodegenError(f"call {k} of sequence '{name}' has a null function or "
                                   "buffer address")
        _init_llvm()
        module = ir.Module(name=name)
        target = Target.from_string("native")
        module.triple = target.triple
        fn = ir.Function(module, ir.FunctionType(ir.VoidType(), []), "kiln_sequence")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        for address, args in calls:
            fnty = ir.FunctionType(ir.VoidType(), [PTR] * len(args))
            callee = b.inttoptr(ir.Constant(I64, address), fnty.as_pointer())
            b.call(callee, [b.inttoptr(ir.Constant(I64, a), PTR) for a in args])
        b.ret_void()
        parsed = llvm.parse_assembly(str(module))
        parsed.verify()
        tm = target.create_target_machine()
        parsed.data_layout = str(tm.target_data)
        self._engine = llvm.create_mcjit_compiler(parsed, tm)
        self._engine.finalize_object()
        self._fn = ctypes.CFUNCTYPE(None)(self._engine.get_function_address("kiln_sequence"))
        self.calls = len(calls)

    def __call__(self) -> None:
        self._fn()
