"""`lookup_table(x)`, attrs table (256 ints), dtype: out[i] = table[byte of x[i]] for uint8/int8
x (its uint8 bit pattern indexes the table), the integer form of a quantized elementwise
function (graph/passes/int8/tables.py). ELEMWISE: it fuses into an integer conv's epilogue
like the float chain it replaces, and the layout passes move it like any unary op."""
from __future__ import annotations

import numpy as np

from ....te.ops.int8 import core as tq
from ...ir import OpClass
from ...lower_te import LOWERINGS
from ..core import OPS, OpDef
from ...reference import IMPLS


def _infer(ins, attrs):
    x = ins[0]
    dtype = attrs["dtype"]
    if len(ins) != 1 or x.dtype not in tq.QUANT_DTYPES or dtype not in tq.QUANT_DTYPES:
        raise ValueError(f"lookup_table maps one uint8/int8 tensor to uint8/int8, got "
                         f"{[v.dtype for v in ins]} -> {dtype}")
    info = np.iinfo(dtype)
    table = attrs["table"]
    if len(table) != 256 or min(table) < info.min or max(table) > info.max:
        raise ValueError(f"lookup_table needs 256 {dtype} entries, got {len(table)} in "
                         f"[{min(table, default=0)}, {max(table, default=0)}]")
    return [(tuple(x.shape), dtype)]


def lookup_reference(x: np.ndarray, table, dtype: str) -> np.ndarray:
    return np.asarray(table, dtype=dtype)[np.ascontiguousarray(x).view(np.uint8)]


OPS["lookup_table"] = OpDef("lookup_table", OpClass.ELEMWISE, _infer)
IMPLS["lookup_table"] = lambda node, x: lookup_reference(x, node.attrs["table"],
                                                         node.attrs["dtype"])
LOWERINGS["lookup_table"] = lambda node, args: [tq.lookup_table(args[0], node.attrs["table"],
                                                                node.attrs["dtype"])]
