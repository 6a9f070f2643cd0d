"""The 256-entry byte table lookup (te.expr.lookup8) as LLVM IR.

A quantized elementwise chain (DQ -> SiLU -> Q, graph/passes/int8/tables.py) becomes one
lookup per byte. With AVX-512 VBMI, 64 bytes are looked up at once: two `vpermi2b` each pick
from 128 of the entries (index bits 0-6) and the index's sign bit selects between them, the
four 64-byte table quarters being constant vectors the loop keeps in registers. Fewer lanes
ride in the low lanes of one 64-lane lookup; more take one per 64. Without VBMI (and for
scalars) each lane loads from a constant global array.
"""
from __future__ import annotations

import hashlib

import llvmlite.ir as ir

from . import llvm_types as T
from .dot4 import target_features

_VPERMI2B = "llvm.x86.avx512.vpermi2var.qi.512"
_V64 = ir.VectorType(T.I8, 64)


def _entries(call) -> list[int]:
    """The table as 256 unsigned bytes."""
    return [int(a.value) & 255 for a in call.args[1:]]


def _global_table(module: ir.Module, entries: list[int]) -> ir.GlobalVariable:
    name = "lookup8_" + hashlib.sha1(bytes(entries)).hexdigest()[:16]
    if name in module.globals:
        return module.globals[name]
    ty = ir.ArrayType(T.I8, 256)
    table = ir.GlobalVariable(module, ty, name)
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = ir.Constant(ty, entries)
    table.align = 64
    return table


def _scalar(bld: ir.IRBuilder, table: ir.GlobalVariable, x: ir.Value) -> ir.Value:
    idx = bld.zext(x, T.I64)
    return bld.load(bld.gep(table, [ir.Constant(T.I64, 0), idx], inbounds=True))


def _vbmi64(bld: ir.IRBuilder, entries: list[int], idx: ir.Value) -> ir.Value:
    fn = _declare(bld.module)
    quarters = [ir.Constant(_V64, entries[64 * q:64 * (q + 1)]) for q in range(4)]
    low = bld.call(fn, [quarters[0], idx, quarters[1]])
    high = bld.call(fn, [quarters[2], idx, quarters[3]])
    upper = bld.icmp_signed("<", idx, ir.Constant(_V64, [0] * 64))
    return bld.select(upper, high, low)


def _declare(module: ir.Module) -> ir.Function:
    if _VPERMI2B in module.globals:
        return module.globals[_VPERMI2B]
    return ir.Function(module, ir.FunctionType(_V64, [_V64, _V64, _V64]), _VPERMI2B)


def emit_lookup8(em, call, x: ir.Value) -> ir.Value:
    """table[x] for an emitted i8 scalar or vector `x` (the Call's first argument)."""
    bld = em.builder
    entries = _entries(call)
    if not T.is_vector(x):
        return _scalar(bld, _global_table(bld.module, entries), x)
    lanes = x.type.count
    if "avx512vbmi" not in target_features(getattr(em.mod, "target", None)):
        table = _global_table(bld.module, entries)
        out = ir.Constant(x.type, ir.Undefined)
        for lane in range(lanes):
            at = ir.Constant(T.I32, lane)
            out = bld.insert_element(out, _scalar(bld, table, bld.extract_element(x, at)), at)
        return out
    pieces = []
    for start in range(0, lanes, 64):
        count = min(64, lanes - start)
        mask = [start + k for k in range(count)] + [start] * (64 - count) if count < 64 \
            else list(range(start, start + 64))
        idx = x if lanes == 64 else bld.shuffle_vector(
            x, ir.Constant(x.type, ir.Undefined),
            ir.Constant(ir.VectorType(T.I32, 64), mask))
        got = _vbmi64(bld, entries, idx)
        if count < 64 or lanes != 64:
            got = bld.shuffle_vector(got, ir.Constant(_V64, ir.Undefined),
                                     ir.Constant(ir.VectorType(T.I32, count), list(range(count))))
        pieces.append((got, count))
    out, total = pieces[0]
    for got, count in pieces[1:]:      # concatenate the 64-lane pieces back to `lanes`
        a, b = _widen(bld, out, total, total + count), _widen(bld, got, count, total + count)
        out = bld.shuffle_vector(a, b, ir.Constant(ir.VectorType(T.I32, total + count),
                                                   list(range(total)) + [total + count + k
                                                                         for k in range(count)]))
        total += count
    return out


def _widen(bld: ir.IRBuilder, v: ir.Value, have: int, want: int) -> ir.Value:
    """`v` (have lanes) as `want` lanes, the extra ones undefined."""
    if have == want:
        return v
    mask = list(range(have)) + [0] * (want - have)
    return bld.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                              ir.Constant(ir.VectorType(T.I32, want), mask))
