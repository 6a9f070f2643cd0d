"""A call table: one native function, compiled once per machine, that runs a model's list of
generic-kernel calls read from a table.

Why not codegen.sequence.CallSequence: its code is a straight line of the model's calls,
compiled per call-count pattern (88 ms for 300 calls, 0.34 s for 1,000 on a cold cache), which
a model's first generic run cannot afford. This loop over the table is the same code for every
model: [function, argument count, arguments...] per call, dispatched on the count.
"""
from __future__ import annotations

import ctypes
import threading
from typing import Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir

from ...te.errors import CodegenError
from .. import cache_store
from ..object_loader import load_code
from ..target import Target, init_llvm
from .library import _store

I64 = ir.IntType(64)
PTR = ir.PointerType()
MAX_ARGS = 16
SYMBOL = "kiln_generic_run"


def _module_text(target: Target) -> str:
    """kiln_generic_run(table, calls): for each call, its function, its argument count n
    (0..MAX_ARGS) and n pointers, read from `table` one after another."""
    module = ir.Module(name="generic_runner")
    module.triple = target.triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, I64]), SYMBOL)
    table, count = fn.args
    entry, head, body, done = (fn.append_basic_block(n) for n in
                               ("entry", "head", "body", "done"))
    b = ir.IRBuilder(entry)
    b.branch(head)
    b.position_at_end(head)
    k = b.phi(I64, "k")
    at = b.phi(I64, "at")
    k.add_incoming(ir.Constant(I64, 0), entry)
    at.add_incoming(ir.Constant(I64, 0), entry)
    b.cbranch(b.icmp_signed("<", k, count), body, done)
    b.position_at_end(body)

    def word(offset, typ=PTR):
        return b.load(b.gep(table, [b.add(at, ir.Constant(I64, offset))], source_etype=PTR),
                      typ=typ)
    n = word(1, I64)
    latch = fn.append_basic_block("latch")
    switch = b.switch(n, latch)
    for arity in range(MAX_ARGS + 1):
        case = fn.append_basic_block(f"arity{arity}")
        switch.add_case(ir.Constant(I64, arity), case)
        b.position_at_end(case)
        callee = word(0, ir.FunctionType(ir.VoidType(), [PTR] * arity).as_pointer())
        b.call(callee, [word(2 + j) for j in range(arity)])
        b.branch(latch)
    b.position_at_end(latch)
    k_next = b.add(k, ir.Constant(I64, 1))
    at_next = b.add(at, b.add(n, ir.Constant(I64, 2)))
    k.add_incoming(k_next, latch)
    at.add_incoming(at_next, latch)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return str(module)


_ENGINES: dict[str, tuple] = {}
_LOCK = threading.Lock()


def runner_address(target: Target) -> int:
    """The runner's address in this process (its object from the generic library's folder,
    else compiled and stored)."""
    with _LOCK:
        if str(target) not in _ENGINES:
            init_llvm()
            store = _store()
            key = cache_store.make_key("generic-runner", target=str(target))
            found = store.read(key) if store is not None else None
            if found is not None:
                mm, at = found
                code = mm[at:]
                mm.close()
            else:
                parsed = llvm.parse_assembly(_module_text(target))
                parsed.verify()
                tm = target.create_target_machine(for_object=True)
                parsed.data_layout = str(tm.target_data)
                code = tm.emit_object(parsed)
                if store is not None:
                    store.write(key, [code])
            loaded = load_code(target, [code], [SYMBOL], "generic-runner")
            _ENGINES[str(target)] = (loaded, loaded.address(SYMBOL))
        return _ENGINES[str(target)][1]


class CallTable:
    """`table()` runs every call in order: [(function address, [argument addresses])]. The
    caller keeps the kernels and buffers the addresses point at alive."""

    def __init__(self, calls: Sequence[tuple[int, Sequence[int]]], target: Target,
                 name: str = "model"):
        flat = []
        for k, (address, args) in enumerate(calls):
            if not address or any(not a for a in args):
                raise CodegenError(f"call {k} of model '{name}' has a null function or buffer "
                                   "address")
            if len(args) > MAX_ARGS:
                raise CodegenError(f"call {k} of model '{name}' passes {len(args)} arguments; "
                                   f"the generic runner takes at most {MAX_ARGS}")
            flat += [address, len(args), *args]
        self._table = (ctypes.c_uint64 * max(len(flat), 1))(*flat)
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
            runner_address(target))
        self._arg = ctypes.addressof(self._table)
        self.calls = len(calls)

    def __call__(self) -> None:
        self._fn(self._arg, self.calls)
