"""The graph op of graph/passes/int8/implicit.py: `conv_int8x4_perm(x4, sel, w)`, attrs n,
kernel (KH, KW), strides, dilations, out_hw (OH, OW): int32 [N * OH * OW, n], the conv of
padded packed uint8 words x4[N, Hp, Wp, C4] (C4 a multiple of 4) with matmul_int8x4_perm's
weight over the im2col K order (te/ops/int8/perm_conv.py). Fusion class, shape
inference, numpy reference (im2col, then matmul_int8x4_perm's), TE lowering."""
from __future__ import annotations

import numpy as np

from ....te.ops.int8 import perm_conv as tqc
from ...ir import OpClass
from ...lower_te import LOWERINGS
from ..core import OPS, OpDef
from .nhwc import window_taps
from .perm import matmul_int8x4_perm_reference
from ...reference import IMPLS

_ATTRS = ("n", "kernel", "strides", "dilations", "out_hw")


def _infer_conv_int8x4_perm(ins, attrs):
    x, sel, w = ins
    missing = [a for a in _ATTRS if a not in attrs]
    if (missing or len(x.shape) != 4 or x.shape[3] % 4 or len(sel.shape) != 3
            or len(w.shape) != 4 or tuple(w.shape[:3]) != tuple(sel.shape)
            or {x.dtype, sel.dtype, w.dtype} != {"int32"}
            or 4 * sel.shape[1] != attrs["kernel"][0] * attrs["kernel"][1] * x.shape[3]):
        raise ValueError(f"expects int32 words x[N, Hp, Wp, C4] (C4 a multiple of 4), selectors "
                         f"sel[P, KH * KW * C4 / 4, 4], weight words w[P, G, 4, block] and attrs "
                         f"{', '.join(_ATTRS)}, got {x.dtype}{list(x.shape)}, "
                         f"{sel.dtype}{list(sel.shape)}, {w.dtype}{list(w.shape)}"
                         + (f" (missing {', '.join(missing)})" if missing else ""))
    oh, ow = attrs["out_hw"]
    return [((x.shape[0] * oh * ow, int(attrs["n"])), "int32")]


def _conv_int8x4_perm_reference(node, x, sel, w):
    """The im2col columns of x (no padding: x holds it), then matmul_int8x4_perm's
    reference."""
    a = node.attrs
    taps = [t for _, _, t in window_taps(np.asarray(x), a["kernel"], a, a["out_hw"])]
    cols = np.stack(taps, axis=3).reshape(node.outputs[0].shape[0], -1)
    return matmul_int8x4_perm_reference(node, np.ascontiguousarray(cols, np.int32), sel, w)


OPS["conv_int8x4_perm"] = OpDef("conv_int8x4_perm", OpClass.OUT_ELEMWISE_FUSABLE,
                                _infer_conv_int8x4_perm)
IMPLS["conv_int8x4_perm"] = _conv_int8x4_perm_reference
LOWERINGS["conv_int8x4_perm"] = lambda node, args: [tqc.conv_int8x4_perm(
    args[0], args[1], args[2], n=int(node.attrs["n"]), kernel=tuple(node.attrs["kernel"]),
    out_hw=tuple(node.attrs["out_hw"]), stride=tuple(node.attrs["strides"]),
    dilation=tuple(node.attrs["dilations"]))]
