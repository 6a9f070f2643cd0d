"""The graph op of graph/passes/int8/vnni_conv.py: `conv_int8x4_panels(x4, w)`, attrs n,
kernel (KH, KW), strides, dilations, out_hw (OH, OW), seven_bit, symmetric, groups (1 if
absent; graph/passes/int8/nhwc.py's grouped convs on VNNI): int32
[N * OH * OW, n], the conv of padded packed uint8 words x4[N, Hp, Wp, C4] with the packed int8
weight words as column panels w[P, KH * KW * C4, block] (te/ops/int8/vnni_conv.py).
Fusion class, shape inference, numpy reference, TE lowering."""
from __future__ import annotations

import numpy as np

from ....te.errors import TEError
from ....te.ops.int8 import vnni_conv as tvc
from ...ir import OpClass
from ...lower_te import LOWERINGS
from ..core import OPS, OpDef
from .nhwc import window_taps
from ...reference import IMPLS

_ATTRS = ("n", "kernel", "strides", "dilations", "out_hw")


def _tap_words(x, w, attrs) -> int | None:
    """Words a panel reads per tap (te group_words), None when the groups do not fit."""
    try:
        return tvc.group_words(x.shape[3], int(attrs["n"]), int(attrs.get("groups", 1)),
                               w.shape[2])
    except TEError:
        return None


def _infer_conv_int8x4_panels(ins, attrs):
    x, w = ins
    missing = [a for a in _ATTRS if a not in attrs]
    if (missing or len(x.shape) != 4 or len(w.shape) != 3 or {x.dtype, w.dtype} != {"int32"}
            or _tap_words(x, w, attrs) is None
            or w.shape[1] != attrs["kernel"][0] * attrs["kernel"][1] * _tap_words(x, w, attrs)
            or w.shape[0] != -(-int(attrs["n"]) // w.shape[2])):
        raise ValueError(f"expects int32 words x[N, Hp, Wp, C4], weight panels "
                         f"w[ceil(n / block), KH * KW * C4 (a group's words with groups), "
                         f"block] and attrs "
                         f"{', '.join(_ATTRS)}, got {x.dtype}{list(x.shape)}, "
                         f"{w.dtype}{list(w.shape)}"
                         + (f" (missing {', '.join(missing)})" if missing else ""))
    oh, ow = attrs["out_hw"]
    return [((x.shape[0] * oh * ow, int(attrs["n"])), "int32")]


def _conv_int8x4_panels_reference(node, x, w):
    """The im2col columns' bytes (no padding: x holds it) times the weight bytes, in int64."""
    a = node.attrs
    rows, n = node.outputs[0].shape
    taps = [t for _, _, t in window_taps(np.asarray(x), a["kernel"], a, a["out_hw"])]
    cols = np.ascontiguousarray(np.stack(taps, axis=3), np.int32).reshape(rows, -1)
    cols8 = cols.view(np.uint8).astype(np.int64)                       # [rows, 4 K4]
    p, k4, block = w.shape
    groups = int(a.get("groups", 1))
    if groups > 1:      # the panels as one block-diagonal [T * C4, P * block] weight
        c4, n_all = x.shape[3], int(a["n"])
        taps, kc4 = k4 // _tap_words(x, w, a), _tap_words(x, w, a)
        dense = np.zeros((taps, c4, p * block), np.int32)
        for q in range(p):
            start = (q * block // (n_all // groups)) * (c4 // groups)
            dense[:, start:start + kc4, q * block:(q + 1) * block] = \
                np.asarray(w[q], np.int32).reshape(taps, kc4, block)
        w = dense.reshape(taps * c4, p, block).transpose(1, 0, 2)
        k4 = taps * c4
    words = np.ascontiguousarray(w, np.int32).transpose(1, 0, 2).reshape(k4, p * block)
    w8 = np.ascontiguousarray(words)[..., None].view(np.int8)          # [K4, cols, 4]
    w8 = w8.transpose(0, 2, 1).reshape(4 * k4, p * block)[:, :n].astype(np.int64)
    return (cols8 @ w8).astype(np.int32)


OPS["conv_int8x4_panels"] = OpDef("conv_int8x4_panels", OpClass.OUT_ELEMWISE_FUSABLE,
                                  _infer_conv_int8x4_panels)
IMPLS["conv_int8x4_panels"] = _conv_int8x4_panels_reference
LOWERINGS["conv_int8x4_panels"] = lambda node, args: [tvc.conv_int8x4_panels(
    args[0], args[1], n=int(node.attrs["n"]), kernel=tuple(node.attrs["kernel"]),
    out_hw=tuple(node.attrs["out_hw"]), stride=tuple(node.attrs["strides"]),
    dilation=tuple(node.attrs["dilations"]), seven_bit=bool(node.attr("seven_bit")),
    symmetric=bool(node.attr("symmetric")), groups=int(node.attr("groups") or 1))]
