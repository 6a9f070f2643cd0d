"""The graph op of graph/passes/int8/perm.py: `matmul_int8x4_perm(a4, sel, w)`, attr n: int32
[..., M, n] of the packed uint8 activation words a4[..., M, 4 G] and a weight chosen so that
AVX2's saturating vpmaddubsw is exact (te/ops/int8/perm.py: selectors sel[P, G, 4] and
weight words w[P, G, 4, block]). Fusion class, shape inference, numpy reference, TE
lowering."""
from __future__ import annotations

import numpy as np

from ....te.ops.int8 import perm as tqm
from ....te.reference import dot4_u8s8perm_reference
from ...ir import OpClass
from ...lower_te import LOWERINGS
from ..core import OPS, OpDef
from ...reference import IMPLS


def _infer_matmul_int8x4_perm(ins, attrs):
    a, sel, w = ins
    if (len(sel.shape) != 3 or len(w.shape) != 4 or sel.shape[2] != 4
            or tuple(w.shape[:3]) != tuple(sel.shape) or a.shape[-1] != 4 * sel.shape[1]
            or {a.dtype, sel.dtype, w.dtype} != {"int32"} or "n" not in attrs):
        raise ValueError(f"expects int32 activation words a[..., M, 4 G], selectors sel[P, G, 4] "
                         f"and weight words w[P, G, 4, block] with attr n, got "
                         f"{a.dtype}{list(a.shape)}, {sel.dtype}{list(sel.shape)} and "
                         f"{w.dtype}{list(w.shape)}")
    return [(tuple(a.shape[:-1]) + (int(attrs["n"]),), "int32")]


def matmul_int8x4_perm_reference(node, a, sel, w):
    """Straight from dot4_u8s8perm's definition, summed over groups and slots."""
    p, g, _, block = w.shape
    a = np.asarray(a, np.int32)
    rows = a.reshape(a.shape[:-1] + (g, 4))                        # [..., M, G, 4]
    out = np.zeros(a.shape[:-1] + (p * block,), np.int64)
    for panel in range(p):
        for t in range(4):
            # [..., M, G, 1] words and [G, block] selectors / weights
            words = [rows[..., u][..., None] for u in range(4)]
            val = dot4_u8s8perm_reference(*words, sel[panel, :, t][:, None],
                                          w[panel, :, t, :])      # [..., M, G, block]
            out[..., panel * block:(panel + 1) * block] += val.sum(axis=-2, dtype=np.int64)
    return out[..., :node.attrs["n"]].astype(np.int32)


OPS["matmul_int8x4_perm"] = OpDef("matmul_int8x4_perm", OpClass.OUT_ELEMWISE_FUSABLE,
                                  _infer_matmul_int8x4_perm)
IMPLS["matmul_int8x4_perm"] = matmul_int8x4_perm_reference
LOWERINGS["matmul_int8x4_perm"] = lambda node, args: [tqm.matmul_int8x4_perm(
    args[0], args[1], args[2], n=int(node.attrs["n"]))]
