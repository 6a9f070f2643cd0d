"""Kiln's graph op set: fusion class and shape/dtype inference for every op.

The op set is a normalised subset of ONNX, chosen so each op maps onto one TE operator:

- Gemm becomes `transpose` (if transA/transB) + `matmul` + `mul` (alpha) + `add` (beta * C).
- Conv becomes `conv2d` (NCHW, explicit pads (top, left, bottom, right)) + `add` of the bias
  reshaped to (C, 1, 1). auto_pad is resolved to explicit pads.
- ConvTranspose becomes `conv_transpose_weight` (the ONNX weight re-laid out into stride-phase
  sub-kernels; constant folding does it at compile time for a constant weight) +
  `conv2d_transpose` (explicit pads and output_padding; auto_pad and output_shape resolved)
  + the bias `add`.
- Flatten, Squeeze, Unsqueeze become `reshape`; Expand becomes `broadcast_to`.
- GlobalAveragePool/GlobalMaxPool become `reduce_mean`/`reduce_max` over (2, 3), keepdims.
- Relu stays `relu` (an elementwise max with 0); Clip carries its bounds as attrs, or, when a
  bound is only known at run time (a graph input), becomes `max`/`min` with 0-d operands.
  Pad's runtime constant value is likewise a 0-d second input of `pad`.
- BatchNormalization stays `batch_norm` until the simplify pass folds it into the preceding
  conv2d/matmul or decomposes it into `mul` + `add` with per-channel constants.
- Dropout (inference) and Identity become `identity`, removed by the simplify pass.
- Shape, Constant, ConstantOfShape and Range are folded to constants by the frontend.
All axes in attrs are normalised to non-negative ints; all shape-like attrs are tuples.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...te.errors import InternalError, ModelFormatError, TEError
from ...te.ops.conv_transpose import transpose_geometry
from ..ir import FrozenDict, OpClass, Value

Shape = tuple[int, ...]
InferFn = Callable[[tuple, FrozenDict], list[tuple[Shape, str]]]


@dataclass(frozen=True)
class OpDef:
    name: str
    opclass: OpClass
    infer: InferFn


OPS: dict[str, OpDef] = {}


def _register(names: str, opclass: OpClass):
    def deco(fn: InferFn) -> InferFn:
        for name in names.split():
            OPS[name] = OpDef(name, opclass, fn)
        return fn
    return deco


def op_class(op: str) -> OpClass:
    if op not in OPS:
        raise InternalError(f"graph op '{op}' is not in Kiln's op table; this is a bug in Kiln")
    return OPS[op].opclass


def infer(op: str, inputs, attrs, node_name: str = "?") -> list[tuple[Shape, str]]:
    """Output (shape, dtype) pairs of `op` on `inputs`; ModelFormatError if they don't fit."""
    try:
        return OPS[op].infer(tuple(inputs), FrozenDict(attrs))
    except ModelFormatError:
        raise
    except (ValueError, IndexError) as exc:
        shapes = ", ".join("_" if v is None else f"{v.dtype}{list(v.shape)}" for v in inputs)
        raise ModelFormatError(f"node '{node_name}' ({op}): inputs {shapes} do not fit: {exc}. "
                               "Check the model's shapes (or the input shapes given).") from exc


def broadcast_shapes(*shapes: Shape) -> Shape:
    return tuple(int(d) for d in np.broadcast_shapes(*shapes))


# -- elementwise / broadcast -------------------------------------------------------------------

@_register("relu neg exp log abs sqrt reciprocal erf tanh sigmoid leaky_relu clip hard_sigmoid "
           "hard_swish gelu identity", OpClass.ELEMWISE)
def _unary(ins, attrs):
    return [(ins[0].shape, ins[0].dtype)]


@_register("logical_not", OpClass.ELEMWISE)
def _not(ins, attrs):
    return [(ins[0].shape, "bool")]


@_register("cast", OpClass.ELEMWISE)
def _cast(ins, attrs):
    return [(ins[0].shape, attrs["to"])]


@_register("add sub mul div pow max min", OpClass.BROADCAST)
def _binary(ins, attrs):
    a, b = ins  # ONNX requires equal dtypes (Pow: the result has the base's dtype)
    return [(broadcast_shapes(a.shape, b.shape), a.dtype)]


@_register("equal less greater logical_and logical_or", OpClass.BROADCAST)
def _compare(ins, attrs):
    return [(broadcast_shapes(ins[0].shape, ins[1].shape), "bool")]


@_register("where", OpClass.BROADCAST)
def _where(ins, attrs):
    c, a, b = ins
    return [(broadcast_shapes(c.shape, a.shape, b.shape), a.dtype)]


@_register("batch_norm", OpClass.BROADCAST)
def _batch_norm(ins, attrs):
    x = ins[0]
    if len(x.shape) < 2 or any(v.shape != (x.shape[1],) for v in ins[1:]):
        raise ValueError(f"batch_norm parameters must have shape ({x.shape[1]},)")
    return [(x.shape, x.dtype)]


# -- injective ---------------------------------------------------------------------------------

@_register("reshape", OpClass.INJECTIVE)
def _reshape(ins, attrs):
    shape = tuple(attrs["shape"])
    if int(np.prod(shape)) != ins[0].size:
        raise ValueError(f"cannot reshape {list(ins[0].shape)} to {list(shape)}")
    return [(shape, ins[0].dtype)]


@_register("transpose", OpClass.INJECTIVE)
def _transpose(ins, attrs):
    perm = attrs["perm"]
    if sorted(perm) != list(range(len(ins[0].shape))):
        raise ValueError(f"perm {perm} is not a permutation of the input axes")
    return [(tuple(ins[0].shape[p] for p in perm), ins[0].dtype)]


@_register("broadcast_to", OpClass.INJECTIVE)
def _broadcast_to(ins, attrs):
    return [(broadcast_shapes(ins[0].shape, tuple(attrs["shape"])), ins[0].dtype)]


@_register("concat", OpClass.INJECTIVE)
def _concat(ins, attrs):
    axis = attrs["axis"]
    first = ins[0].shape
    for v in ins[1:]:
        if len(v.shape) != len(first) or any(
                d != e for k, (d, e) in enumerate(zip(v.shape, first)) if k != axis):
            raise ValueError(f"concat along axis {axis} needs equal other dims")
    shape = list(first)
    shape[axis] = sum(v.shape[axis] for v in ins)
    return [(tuple(shape), ins[0].dtype)]


@_register("split", OpClass.INJECTIVE)
def _split(ins, attrs):
    axis, sizes = attrs["axis"], attrs["sizes"]
    if sum(sizes) != ins[0].shape[axis]:
        raise ValueError(f"split sizes {sizes} do not add up to dim {ins[0].shape[axis]}")
    out = []
    for s in sizes:
        shape = list(ins[0].shape)
        shape[axis] = s
        out.append((tuple(shape), ins[0].dtype))
    return out


@_register("slice", OpClass.INJECTIVE)
def _slice(ins, attrs):
    shape = tuple(len(range(b, e, s)) for b, e, s in
                  zip(attrs["starts"], attrs["ends"], attrs["steps"]))
    return [(shape, ins[0].dtype)]


@_register("gather", OpClass.INJECTIVE)
def _gather(ins, attrs):
    data, idx = ins
    axis = attrs["axis"]
    return [(data.shape[:axis] + idx.shape + data.shape[axis + 1:], data.dtype)]


@_register("gather_nd", OpClass.OPAQUE)
def _gather_nd(ins, attrs):
    data, idx = ins
    b = attrs["batch_dims"]
    last = idx.shape[-1]
    return [(idx.shape[:-1] + data.shape[b + last:], data.dtype)]


@_register("pad", OpClass.INJECTIVE)
def _pad(ins, attrs):
    """An optional second input is the constant fill as a 0-d tensor (a runtime value; the
    `value` attr otherwise)."""
    if len(ins) > 1 and (ins[1].shape != () or ins[1].dtype != ins[0].dtype):
        raise ValueError(f"the pad value must be a 0-d {ins[0].dtype} tensor, got "
                         f"{ins[1].dtype}{list(ins[1].shape)}")
    pads = attrs["pads"]
    rank = len(ins[0].shape)
    shape = tuple(d + pads[k] + pads[k + rank] for k, d in enumerate(ins[0].shape))
    if min(shape, default=1) < 0:
        raise ValueError(f"pads {pads} make a negative dimension")
    return [(shape, ins[0].dtype)]


# -- reductions --------------------------------------------------------------------------------

@_register("reduce_sum reduce_mean reduce_max reduce_min reduce_l2", OpClass.REDUCTION)
def _reduce(ins, attrs):
    axes, keep = attrs["axes"], attrs["keepdims"]
    shape = ins[0].shape
    if keep:
        out = tuple(1 if k in axes else d for k, d in enumerate(shape))
    else:
        out = tuple(d for k, d in enumerate(shape) if k not in axes)
    return [(out, ins[0].dtype)]


@_register("softmax log_softmax layer_norm", OpClass.REDUCTION)
def _same_shape(ins, attrs):
    return [(ins[0].shape, ins[0].dtype)]


def pool_output_dim(size: int, k: int, stride: int, dilation: int, pad_begin: int,
                    pad_end: int, ceil_mode: bool) -> int:
    """ONNX pooling/conv output length; with ceil_mode the last window must start in bounds."""
    span = (k - 1) * dilation + 1
    num = size + pad_begin + pad_end - span
    if num < 0:
        raise ValueError(f"window {span} is larger than the padded input {size}")
    out = (-(-num // stride) if ceil_mode else num // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out


@_register("max_pool2d avg_pool2d", OpClass.REDUCTION)
def _pool(ins, attrs):
    """Pooling windows over H and W; a channel-blocked x[N, C/b, H, W, b] keeps its block."""
    n, c, h, w = ins[0].shape[:4]
    k, s, d, p = attrs["kernel"], attrs["strides"], attrs["dilations"], attrs["pads"]
    cm = attrs["ceil_mode"]
    oh = pool_output_dim(h, k[0], s[0], d[0], p[0], p[2], cm)
    ow = pool_output_dim(w, k[1], s[1], d[1], p[1], p[3], cm)
    return [((n, c, oh, ow) + tuple(ins[0].shape[4:]), ins[0].dtype)]


# -- anchors -----------------------------------------------------------------------------------

@_register("conv2d conv2d_kpacked", OpClass.OUT_ELEMWISE_FUSABLE)
def _conv2d(ins, attrs):
    """conv2d_kpacked is conv2d with its weight laid out [F / block, C, KH, KW, block]."""
    x, w = ins
    if len(w.shape) == 5:
        fo, cg, kh, kw, block = w.shape
        if block != attrs.get("block"):
            raise ValueError(f"packed weight {list(w.shape)} does not match block="
                             f"{attrs.get('block')}")
        o = fo * block
    else:
        o, cg, kh, kw = w.shape
    return [(conv_output_shape(x.shape, w.shape, (o, cg, kh, kw), attrs), x.dtype)]


def conv_output_shape(x_shape, w_shape, ochw, attrs) -> tuple[int, ...]:
    """(N, O, OH, OW) of a grouped 2-D conv of x [N, C, H, W] with a weight whose output
    channels, channels per group and window are `ochw` (any weight layout, `w_shape` for
    the error); ValueError when the channels and groups disagree."""
    n, c, h, wd = x_shape
    o, cg, kh, kw = ochw
    g = attrs["groups"]
    if c != cg * g or o % g:
        raise ValueError(f"{c} input channels, weight {list(w_shape)} and groups={g} disagree")
    s, d, p = attrs["strides"], attrs["dilations"], attrs["pads"]
    oh = pool_output_dim(h, kh, s[0], d[0], p[0], p[2], False)
    ow = pool_output_dim(wd, kw, s[1], d[1], p[1], p[3], False)
    return (n, o, oh, ow)


@_register("conv2d_nchwc", OpClass.OUT_ELEMWISE_FUSABLE)
def _conv2d_nchwc(ins, attrs):
    """A dense conv with a channel-blocked output [N, F / block, OH, OW, block]; the input is
    blocked [N, C / in_block, H, W, in_block] (weight [F/b, C/bi, KH, KW, bi, b]) or, with
    in_block 0, plain NCHW (weight [F/b, C, KH, KW, b])."""
    x, w = ins
    bi, block = attrs["in_block"], attrs["block"]
    if bi:
        n, co, h, wd, xb = x.shape
        fo, cw, kh, kw, wb, ob = w.shape
        if xb != bi or wb != bi or co != cw:
            raise ValueError(f"blocked input {list(x.shape)} and weight {list(w.shape)} "
                             f"disagree with in_block={bi}")
    else:
        n, c, h, wd = x.shape
        fo, cw, kh, kw, ob = w.shape
        if c != cw:
            raise ValueError(f"{c} input channels but weight {list(w.shape)}")
    if ob != block:
        raise ValueError(f"packed weight {list(w.shape)} does not match block={block}")
    s, d, p = attrs["strides"], attrs["dilations"], attrs["pads"]
    oh = pool_output_dim(h, kh, s[0], d[0], p[0], p[2], False)
    ow = pool_output_dim(wd, kw, s[1], d[1], p[1], p[3], False)
    return [((n, fo, oh, ow, block), x.dtype)]


@_register("grouped_conv2d_nchwc", OpClass.OUT_ELEMWISE_FUSABLE)
def _grouped_conv2d_nchwc(ins, attrs):
    """A grouped conv (attrs: groups, per_group, strides, pads, dilations) of blocked
    x[N, C / b, H, W, b] with weight [F / b, in_blocks, KH, KW, b, b]
    (te.ops.pack_grouped_conv_weight); the output is [N, F / b, OH, OW, b]."""
    x, w = ins
    n, co, h, wd, b = x.shape
    if len(w.shape) != 6 or w.shape[4] != b or w.shape[5] != b \
            or (w.shape[0] // attrs["per_group"]) * w.shape[1] > co:
        raise ValueError(f"blocked input {list(x.shape)} and grouped weight {list(w.shape)} "
                         f"disagree (per_group={attrs['per_group']})")
    s, d, p = attrs["strides"], attrs["dilations"], attrs["pads"]
    oh = pool_output_dim(h, w.shape[2], s[0], d[0], p[0], p[2], False)
    ow = pool_output_dim(wd, w.shape[3], s[1], d[1], p[1], p[3], False)
    return [((n, w.shape[0], oh, ow, b), x.dtype)]


@_register("depthwise_conv2d_nchwc", OpClass.OUT_ELEMWISE_FUSABLE)
def _depthwise_nchwc(ins, attrs):
    """x[N, C / b, H, W, b] with weight [C / b, KH, KW, b]; the output is blocked like x."""
    x, w = ins
    n, co, h, wd, b = x.shape
    if w.shape[0] != co or w.shape[3] != b or len(w.shape) != 4:
        raise ValueError(f"blocked input {list(x.shape)} and depthwise weight "
                         f"{list(w.shape)} disagree")
    s, d, p = attrs["strides"], attrs["dilations"], attrs["pads"]
    oh = pool_output_dim(h, w.shape[1], s[0], d[0], p[0], p[2], False)
    ow = pool_output_dim(wd, w.shape[2], s[1], d[1], p[1], p[3], False)
    return [((n, co, oh, ow, b), x.dtype)]


def _winograd_tiles(extent: int, m: int) -> int:
    return -(-extent // m)


@_register("winograd_input_transform", OpClass.OPAQUE)
def _winograd_input(ins, attrs):
    """x[N, C/b, H, W, b] -> V[m+2, m+2, P, C]: the 3x3 stride-1 conv's (m+2)^2 transformed
    input tiles, P = N * tiles of m x m outputs (te.ops.winograd)."""
    n, co, h, wd, b = ins[0].shape
    m, (top, left, bottom, right) = attrs["m"], attrs["pads"]
    oh, ow = h + top + bottom - 2, wd + left + right - 2
    if oh < 1 or ow < 1:
        raise ValueError(f"a 3x3 window does not fit {list(ins[0].shape)} padded by "
                         f"{attrs['pads']}")
    p = n * _winograd_tiles(oh, m) * _winograd_tiles(ow, m)
    return [((m + 2, m + 2, p, co * b), ins[0].dtype)]


@_register("winograd_batch_matmul", OpClass.OPAQUE)
def _winograd_gemm(ins, attrs):
    """V[a, a, P, C] with U[a, a, F/b, C, b] -> M[a, a, F/b, P, b]."""
    v, u = ins
    if len(v.shape) != 4 or len(u.shape) != 5 or v.shape[:2] != u.shape[:2] \
            or v.shape[3] != u.shape[3]:
        raise ValueError(f"V {list(v.shape)} and transformed weight {list(u.shape)} disagree")
    a, _, p, _ = v.shape
    return [((a, a, u.shape[2], p, u.shape[4]), v.dtype)]


@_register("winograd_output_transform", OpClass.OUT_ELEMWISE_FUSABLE)
def _winograd_output(ins, attrs):
    """M[m+2, m+2, F/b, P, b] -> y[N, F/b, OH, OW, b] (attrs m, batch, out_hw): an anchor
    that absorbs the conv's elementwise epilogue."""
    a, _, fo, p, b = ins[0].shape
    m, n, (oh, ow) = attrs["m"], attrs["batch"], attrs["out_hw"]
    if a != m + 2 or p != n * _winograd_tiles(oh, m) * _winograd_tiles(ow, m):
        raise ValueError(f"M {list(ins[0].shape)} does not hold the m={m} tiles of {n} "
                         f"image(s) of {oh}x{ow} outputs")
    return [((n, fo, oh, ow, b), ins[0].dtype)]


@_register("to_blocked", OpClass.INJECTIVE)
def _to_blocked(ins, attrs):
    n, c, h, w = ins[0].shape
    b = attrs["block"]
    return [((n, -(-c // b), h, w, b), ins[0].dtype)]    # a partial last block is padded


@_register("from_blocked", OpClass.INJECTIVE)
def _from_blocked(ins, attrs):
    """attrs: channels (optional): the channels kept, when the last block is padded."""
    n, co, h, w, b = ins[0].shape
    c = attrs.get("channels") or co * b
    if not (co - 1) * b < c <= co * b:
        raise ValueError(f"{c} channels do not fit {co} blocks of {b}")
    return [((n, c, h, w), ins[0].dtype)]


def _transpose_geometry(x_shape, weight_shape, attrs, pads=0, output_padding=0):
    """te's validated transposed-conv geometry; its TEError as a shape error of the node."""
    try:
        return transpose_geometry("conv2d_transpose", x_shape, weight_shape,
                                  tuple(attrs["strides"]), pads, tuple(attrs["dilations"]),
                                  output_padding, attrs["groups"])
    except TEError as exc:
        raise ValueError(str(exc)) from None


@_register("conv_transpose_weight", OpClass.INJECTIVE)
def _conv_transpose_weight(ins, attrs):
    """ONNX weight [C, F / groups, KH, KW] -> [groups * s_h * s_w * F / groups, C / groups,
    taps_h, taps_w], or with `block` [s_h * s_w * F / block, C, taps_h, taps_w, block]."""
    (w,) = ins
    if len(w.shape) != 4:
        raise ValueError(f"weight {list(w.shape)} is not [C, F/groups, KH, KW]")
    filters, cg, th, tw = _transpose_geometry((1, w.shape[0], 1, 1), w.shape, attrs).packed_shape
    block = attrs.get("block", 0)
    if not block:
        return [((filters, cg, th, tw), w.dtype)]
    if attrs["groups"] != 1 or filters % block:
        raise ValueError(f"block={block} needs groups=1 and a block dividing {filters} filters")
    return [((filters // block, cg, th, tw, block), w.dtype)]


@_register("conv2d_transpose", OpClass.OUT_ELEMWISE_FUSABLE)
def _conv2d_transpose(ins, attrs):
    """x[N, C, H, W] and a conv_transpose_weight result for a kernel of attrs["kernel"]."""
    x, w = ins
    if len(x.shape) != 4 or len(w.shape) not in (4, 5):
        raise ValueError(f"expects x[N, C, H, W] and a packed weight, got {list(x.shape)} and "
                         f"{list(w.shape)}")
    phases = attrs["strides"][0] * attrs["strides"][1] * attrs["groups"]
    filters = w.shape[0] * (w.shape[4] if len(w.shape) == 5 else 1)
    if filters % phases:
        raise ValueError(f"packed weight {list(w.shape)} does not match strides "
                         f"{attrs['strides']} and groups={attrs['groups']}")
    onnx_shape = (x.shape[1], filters // phases) + tuple(attrs["kernel"])
    geo = _transpose_geometry(x.shape, onnx_shape, attrs, tuple(attrs["pads"]),
                              tuple(attrs["output_padding"]))
    if (filters,) + tuple(w.shape[1:4]) != geo.packed_shape:
        raise ValueError(f"packed weight {list(w.shape)} does not match x {list(x.shape)} and "
                         f"a kernel {attrs['kernel']}: expected {list(geo.packed_shape)}")
    return [((x.shape[0], geo.f, geo.h.out, geo.w.out), x.dtype)]


@_register("matmul", OpClass.OUT_ELEMWISE_FUSABLE)
def _matmul(ins, attrs):
    a, b = ins
    if len(a.shape) == 0 or len(b.shape) == 0:
        raise ValueError("matmul operands must have rank >= 1")
    sa = a.shape if len(a.shape) > 1 else (1,) + a.shape
    sb = b.shape if len(b.shape) > 1 else b.shape + (1,)
    if sa[-1] != sb[-2]:
        raise ValueError(f"contraction dims {sa[-1]} and {sb[-2]} differ")
    batch = broadcast_shapes(sa[:-2], sb[:-2])
    out = batch + (sa[-2], sb[-1])
    if len(a.shape) == 1:
        out = out[:-2] + out[-1:]
    if len(b.shape) == 1:
        out = out[:-1]
    return [(out, a.dtype)]


@_register("matmul_prepacked", OpClass.OUT_ELEMWISE_FUSABLE)
def _matmul_prepacked(ins, attrs):
    """x[..., M, K] @ W[K, n] with W as panels [ceil(n / block), K, block] (the constant
    weight pre-packed at compile time, graph/passes/layout/prepack.py)."""
    x, w = ins
    n = int(attrs["n"])
    if len(x.shape) < 2 or len(w.shape) != 3 or x.shape[-1] != w.shape[1]:
        raise ValueError(f"expects x[..., M, K] and panels [P, K, block], got {list(x.shape)} "
                         f"and {list(w.shape)}")
    if not (w.shape[0] - 1) * w.shape[2] < n <= w.shape[0] * w.shape[2]:
        raise ValueError(f"panels {list(w.shape)} do not hold n={n} columns")
    return [(tuple(x.shape[:-1]) + (n,), x.dtype)]


def make_outputs(op: str, inputs, attrs, names: list[str], node_name: str) -> tuple[Value, ...]:
    """Values for the outputs of `op`, named `names`, with inferred shapes and dtypes."""
    results = infer(op, inputs, attrs, node_name)
    if len(results) != len(names):
        raise InternalError(f"node '{node_name}' ({op}) has {len(results)} outputs, "
                            f"{len(names)} names given; this is a bug in Kiln")
    return tuple(Value(nm, shape, dtype) for nm, (shape, dtype) in zip(names, results))
