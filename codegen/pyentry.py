"""A generated fast entry point `<kernel>__pyentry(PyObject*...) -> i32` for calls from Python.

It checks each argument in machine code (is an ndarray, dtype, shape, C-contiguous, writeable
when written, no two written/read arguments share a data pointer), then calls the kernel with
the data pointers and returns 0; any failed check returns 1 and Python re-checks to produce
the error message. `ndarray.ctypes.data` alone costs microseconds per argument, this does not.
The numpy object layout is probed at import; when it is not the expected one, the entry is not
used. Addresses of the ndarray type and dtype objects live in a table the Kernel fills at load.
"""
from __future__ import annotations

import ctypes

import llvmlite.ir as ir
import numpy as np

from . import llvm_types as T

_PTR = ctypes.sizeof(ctypes.c_void_p)
# PyArrayObject_fields: PyObject_HEAD, data, nd, dimensions, strides, base, descr, flags
LAYOUT = {"type": _PTR, "data": 2 * _PTR, "nd": 3 * _PTR, "dims": 4 * _PTR,
          "descr": 7 * _PTR, "flags": 8 * _PTR}
C_CONTIGUOUS, WRITEABLE = 0x1, 0x400


def _read(addr: int, ctype):
    return ctype.from_address(addr).value


def _probe() -> bool:
    """Whether numpy arrays in this process have the layout above."""
    try:
        for a in (np.arange(3.0), np.zeros((2, 5), np.uint8)[1:], np.ones((2, 3), bool).T):
            base = id(a)
            dims = _read(base + LAYOUT["dims"], ctypes.c_void_p)
            ok = (_read(base + LAYOUT["type"], ctypes.c_void_p) == id(np.ndarray)
                  and _read(base + LAYOUT["data"], ctypes.c_void_p) == a.ctypes.data
                  and _read(base + LAYOUT["nd"], ctypes.c_int32) == a.ndim
                  and all(_read(dims + 8 * k, ctypes.c_int64) == a.shape[k]
                          for k in range(a.ndim))
                  and _read(base + LAYOUT["descr"], ctypes.c_void_p) == id(a.dtype)
                  and bool(_read(base + LAYOUT["flags"], ctypes.c_int32) & C_CONTIGUOUS)
                  == a.flags.c_contiguous
                  and bool(_read(base + LAYOUT["flags"], ctypes.c_int32) & WRITEABLE)
                  == a.flags.writeable)
            if not ok:
                return False
    except (ValueError, OverflowError):
        return False
    return True


AVAILABLE = _probe()


def entry_symbol(symbol: str) -> str:
    return f"{symbol}__pyentry"


def table_symbol(symbol: str) -> str:
    return f"{symbol}__pytypes"


def add_python_entry(module: ir.Module, symbol: str, specs) -> None:
    """Define the checked entry for kernel `symbol` with parameters `specs` (ParamSpec)."""
    n = len(specs)
    table_ty = ir.ArrayType(T.I64, n + 1)
    table = ir.GlobalVariable(module, table_ty, table_symbol(symbol))
    table.initializer = ir.Constant(table_ty, [0] * (n + 1))
    fn = ir.Function(module, ir.FunctionType(T.I32, [T.PTR] * n), entry_symbol(symbol))
    check = fn.append_basic_block("check")
    fail = fn.append_basic_block("fail")
    ir.IRBuilder(fail).ret(ir.Constant(T.I32, 1))
    bld = ir.IRBuilder(check)

    def field(obj, name, ty):
        return bld.load(bld.gep(obj, [ir.Constant(T.I64, LAYOUT[name])], source_etype=T.I8),
                        typ=ty)

    def require(cond):
        nxt = fn.append_basic_block("ok")
        bld.cbranch(cond, nxt, fail)
        bld.position_at_end(nxt)

    def table_entry(k):
        slot = bld.gep(table, [ir.Constant(T.I32, 0), ir.Constant(T.I32, k)],
                       source_etype=table_ty)
        return bld.load(slot, typ=T.I64)

    data = []
    for k, (obj, spec) in enumerate(zip(fn.args, specs)):
        require(bld.icmp_unsigned("==", bld.ptrtoint(field(obj, "type", T.PTR), T.I64),
                                  table_entry(0)))
        require(bld.icmp_signed("==", field(obj, "nd", T.I32), ir.Constant(T.I32,
                                                                          len(spec.shape))))
        dims = field(obj, "dims", T.PTR)
        for d, size in enumerate(spec.shape):
            dim = bld.load(bld.gep(dims, [ir.Constant(T.I64, d)], source_etype=T.I64), typ=T.I64)
            require(bld.icmp_signed("==", dim, ir.Constant(T.I64, size)))
        require(bld.icmp_unsigned("==", bld.ptrtoint(field(obj, "descr", T.PTR), T.I64),
                                  table_entry(k + 1)))
        need = C_CONTIGUOUS | (WRITEABLE if spec.written else 0)
        flags = bld.and_(field(obj, "flags", T.I32), ir.Constant(T.I32, need))
        require(bld.icmp_signed("==", flags, ir.Constant(T.I32, need)))
        data.append(field(obj, "data", T.PTR))
    for k, spec in enumerate(specs):  # a written buffer may not share memory with another
        if spec.written and spec.shape and min(spec.shape) > 0:
            for j in range(n):
                if j != k:
                    require(bld.icmp_unsigned("!=", data[k], data[j]))
    bld.call(module.globals[symbol], data)
    bld.ret(ir.Constant(T.I32, 0))


def fill_table(address: int, specs) -> None:
    """Store the addresses of np.ndarray and each parameter's dtype object in the table."""
    values = [id(np.ndarray)] + [id(np.dtype(s.dtype)) for s in specs]
    (ctypes.c_uint64 * len(values)).from_address(address)[:] = values
