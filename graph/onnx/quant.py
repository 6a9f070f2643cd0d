"""ONNX converters of the quantized operators (QDQ, QOperator and dynamic quantization),
registered into `onnx_ops.CONVERTERS`; com.microsoft ops under "com.microsoft.<Op>".

Integer kernels compute raw sums of u8/s8 products in int32 (`matmul_integer`,
`conv2d_integer`); zero points are compensated with int32 graph ops around them, which
constant folding precomputes for constant weights (the weight row sums times the activation
zero point):

    sum_k (a - za)(b - zb) = sum_k a*b - za * sum_k b - zb * sum_k a + K * za * zb

The convs pad with the activation zero point, so a padded tap contributes (za - za) = 0 and
the compensation stays exact at the borders. QLinearConv/QLinearMatMul then add the int32
bias and requantize with multiplier = (in_scale * w_scale) / out_scale, evaluated in float32
in that order (a constant, folded at compile time). QLinearAdd/Mul/GlobalAveragePool/Concat
dequantize, compute in float32 and quantize, as onnxruntime does.
"""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ops.int8 import core as quant_ops  # noqa: F401 - registers the quantized graph ops
from ..ir import Value
from .core import explicit_pads, require_2d, unsupported_error
from .registry import converter, register

MS = "com.microsoft."


def converter_key(domain: str, op_type: str) -> str:
    """The CONVERTERS key of an ONNX node: the op type in the default domain, else
    "<domain>.<op type>" (com.microsoft.QLinearAdd)."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def per_axis(ctx, v: Value | None, axis: int, rank: int, what: str) -> Value | None:
    """A scalar/1-element scale or zero point as it is; a 1-D per-axis one reshaped to
    broadcast along `axis` of a rank-`rank` tensor."""
    if v is None or v.size == 1 and len(v.shape) <= 1:
        return v if v is None or v.shape == () else ctx.emit("reshape", [v], {"shape": ()})
    if len(v.shape) != 1:
        raise unsupported_error(ctx, f"a {len(v.shape)}-D {what} {list(v.shape)} (blocked "
                                "quantization)")
    axis = axis % rank
    shape = [1] * (rank - axis)
    shape[0] = v.shape[0]
    return ctx.emit("reshape", [v], {"shape": tuple(shape)})


def check_axis_len(ctx, x: Value, v: Value | None, axis: int, what: str) -> None:
    if v is not None and v.size > 1 and (len(x.shape) == 0 or v.size != x.shape[axis %
                                                                              len(x.shape)]):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): {what} has "
                               f"{v.size} entries but axis {axis} of input {list(x.shape)} "
                               "does not have that length")


def convert_quantize_linear(ctx, x, scale, zero_point=None, axis=1, saturate=1, block_size=0,
                     output_dtype=0, precision=0):
    if block_size:
        raise unsupported_error(ctx, "blocked quantization (block_size)")
    dtype = zero_point.dtype if zero_point is not None else (
        ctx.onnx_dtype(output_dtype) if output_dtype else "uint8")
    if dtype not in quant_ops.QUANT_DTYPES:
        raise unsupported_error(ctx, f"quantization to {dtype} (only uint8 and int8)")
    check_axis_len(ctx, x, scale, axis, "the scale")
    rank = max(len(x.shape), 1)
    s = per_axis(ctx, scale, axis, rank, "scale")
    zp = per_axis(ctx, zero_point, axis, rank, "zero point")
    return ctx.emit("quantize_linear", [x, s, zp], {"dtype": dtype}, final=True)


def convert_dequantize_linear(ctx, x, scale, zero_point=None, axis=1, block_size=0,
                       output_dtype=0):
    if block_size:
        raise unsupported_error(ctx, "blocked quantization (block_size)")
    if x.dtype not in quant_ops.QUANT_DTYPES + ("int32",):
        raise unsupported_error(ctx, f"dequantizing {x.dtype} (only uint8, int8 and int32)")
    check_axis_len(ctx, x, scale, axis, "the scale")
    rank = max(len(x.shape), 1)
    s = per_axis(ctx, scale, axis, rank, "scale")
    zp = per_axis(ctx, zero_point, axis, rank, "zero point")
    return ctx.emit("dequantize_linear", [x, s, zp], final=True)




# -- integer accumulation with zero-point compensation -----------------------------------------

def i32(ctx, v: Value) -> Value:
    return v if v.dtype == "int32" else ctx.emit("cast", [v], {"to": "int32"})


def _is_zero(ctx, v: Value | None) -> bool:
    """An omitted zero point, or a constant one that is all zeros."""
    if v is None:
        return True
    if v.name in ctx.constants:
        return not np.any(ctx.constants[v.name])
    return False


def integer_matmul(ctx, a: Value, b: Value, a_zp: Value | None, b_zp: Value | None,
                    final: bool) -> Value:
    """int32 sum_k (a - a_zp)(b - b_zp): a_zp scalar or per row (M), b_zp scalar or per
    column (N)."""
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise unsupported_error(ctx, f"an integer matmul of rank {len(a.shape)} x {len(b.shape)} "
                                "(rank >= 2 only)")
    k = a.shape[-1]
    acc = ctx.emit("matmul_integer", [a, b], final=final and _is_zero(ctx, a_zp) and
                   _is_zero(ctx, b_zp))
    if _is_zero(ctx, a_zp) and _is_zero(ctx, b_zp):
        return acc
    za = None if _is_zero(ctx, a_zp) else i32(ctx, per_axis(ctx, a_zp, -2, 2, "a zero "
                                                              "point"))
    zb = None if _is_zero(ctx, b_zp) else i32(ctx, per_axis(ctx, b_zp, -1, 1, "b zero "
                                                              "point"))
    terms = []
    if za is not None:                                 # za * sum_k b: [..., 1, N]
        col = ctx.emit("reduce_sum", [i32(ctx, b)], {"axes": (len(b.shape) - 2,),
                                                      "keepdims": 1})
        terms.append(ctx.emit("mul", [col, za]))
    if zb is not None:                                 # zb * sum_k a: [..., M, 1]
        row = ctx.emit("reduce_sum", [i32(ctx, a)], {"axes": (len(a.shape) - 1,),
                                                      "keepdims": 1})
        terms.append(ctx.emit("mul", [row, zb]))
    for term in terms:
        acc = ctx.emit("sub", [acc, term])
    if za is not None and zb is not None:              # + K * za * zb
        kz = ctx.emit("mul", [ctx.emit("mul", [za, zb]), ctx.const(np.array(k, np.int32))])
        acc = ctx.emit("add", [acc, kz])
    return ctx.emit("identity", [acc], final=True) if final else acc


def _integer_conv(ctx, x, w, x_zp, w_zp, auto_pad, dilations, group, pads, strides,
                  final: bool) -> Value:
    """int32 sum over taps of (x - x_zp)(w - w_zp[f]); x_zp per tensor, w_zp per tensor or
    per output channel."""
    require_2d(ctx, x)
    if x_zp is not None and x_zp.size != 1:
        raise unsupported_error(ctx, f"a per-channel activation zero point {list(x_zp.shape)}")
    kernel = tuple(w.shape[2:])
    strides = tuple(strides or (1, 1))
    dilations = tuple(dilations or (1, 1))
    p = explicit_pads(ctx, auto_pad, pads, x.shape[2:], kernel, strides, dilations)
    attrs = {"strides": strides, "dilations": dilations, "pads": p, "groups": int(group)}
    zx = None if _is_zero(ctx, x_zp) else per_axis(ctx, x_zp, 0, 1, "x zero point")
    zw = None if _is_zero(ctx, w_zp) else i32(ctx, per_axis(ctx, w_zp, 0, 3,
                                                              "w zero point"))
    plain = zx is None and zw is None
    acc = ctx.emit("conv2d_integer", [x, w] + ([zx] if zx is not None else []), attrs,
                   final=final and plain)
    if plain:
        return acc
    if zx is not None:                                 # zx * sum_{c,ky,kx} w[f]: [F, 1, 1]
        wsum = ctx.emit("reduce_sum", [i32(ctx, w)], {"axes": (1, 2, 3), "keepdims": 0})
        wsum = ctx.emit("reshape", [wsum], {"shape": (w.shape[0], 1, 1)})
        acc = ctx.emit("sub", [acc, ctx.emit("mul", [wsum, i32(ctx, zx)])])
    if zw is not None:                                 # zw[f] * sum_window (x - zx)
        acc = ctx.emit("sub", [acc, ctx.emit("mul", [_window_sums(ctx, x, w, zx, attrs),
                                                     zw])])
    return ctx.emit("identity", [acc], final=True) if final else acc


def _window_sums(ctx, x, w, zx, attrs) -> Value:
    """int32 [N, F, OH, OW]: each filter's sum of (x - zx) over its window and its group's
    channels, as an integer conv with all-ones weights (zx pads, so padding adds 0)."""
    groups = attrs["groups"]
    f, cg, kh, kw = w.shape
    ones = ctx.const(np.ones((groups, cg, kh, kw), np.uint8))
    sums = ctx.emit("conv2d_integer", [x, ones] + ([zx] if zx is not None else []), attrs)
    if zx is not None:                                 # - zx * taps per window
        taps = ctx.const(np.array(cg * kh * kw, np.int32))
        sums = ctx.emit("sub", [sums, ctx.emit("mul", [i32(ctx, zx), taps])])
    n, _, oh, ow = sums.shape
    per_group = ctx.emit("reshape", [sums], {"shape": (n, groups, 1, oh, ow)})
    wide = ctx.emit("broadcast_to", [per_group], {"shape": (n, groups, f // groups, oh, ow)})
    return ctx.emit("reshape", [wide], {"shape": (n, f, oh, ow)})


@converter("MatMulInteger")
def _matmul_integer(ctx, a, b, a_zero_point=None, b_zero_point=None):
    return integer_matmul(ctx, a, b, a_zero_point, b_zero_point, final=True)


def _conv_integer(ctx, x, w, x_zero_point=None, w_zero_point=None, auto_pad="NOTSET",
                  dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    return _integer_conv(ctx, x, w, x_zero_point, w_zero_point, auto_pad, dilations, group,
                         pads, strides, final=True)


def _multiplier(ctx, in_scale: Value, w_scale: Value, out_scale: Value, w_axis: int,
                rank: int) -> Value:
    """(in_scale * w_scale) / out_scale in float32, in that order, broadcasting along the
    weight's output-channel axis."""
    ws = per_axis(ctx, w_scale, w_axis, rank, "weight scale")
    prod = ctx.emit("mul", [per_axis(ctx, in_scale, 0, 1, "scale"), ws])
    return ctx.emit("div", [prod, per_axis(ctx, out_scale, 0, 1, "output scale")])


def emit_requantize(ctx, acc: Value, mult: Value, y_zp: Value | None, dtype: str) -> Value:
    zp = None if y_zp is None else per_axis(ctx, y_zp, 0, 1, "output zero point")
    return ctx.emit("requantize", [acc, mult, zp], {"dtype": dtype, "lo": None, "hi": None},
                    final=True)


def _qlinear_conv(ctx, x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp, b=None,
                  auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
                  strides=None):
    acc = _integer_conv(ctx, x, w, x_zp, w_zp, auto_pad, dilations, group, pads, strides,
                        final=False)
    if b is not None:
        acc = ctx.emit("add", [acc, ctx.emit("reshape", [i32(ctx, b)],
                                             {"shape": (b.shape[0], 1, 1)})])
    mult = _multiplier(ctx, x_scale, w_scale, y_scale, 0, 3)
    return emit_requantize(ctx, acc, mult, y_zp, y_zp.dtype if y_zp is not None else x.dtype)


@converter("QLinearMatMul")
def _qlinear_matmul(ctx, a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp):
    acc = integer_matmul(ctx, a, b, a_zp, b_zp, final=False)
    mult = _multiplier(ctx, a_scale, b_scale, y_scale, 0, 1)   # b_scale per column (N)
    return emit_requantize(ctx, acc, mult, y_zp, y_zp.dtype if y_zp is not None else a.dtype)


def dq(ctx, x: Value, scale: Value, zp: Value | None) -> Value:
    return ctx.emit("dequantize_linear", [x, per_axis(ctx, scale, 0, 1, "scale"),
                                          per_axis(ctx, zp, 0, 1, "zero point")])


def q(ctx, y: Value, scale: Value, zp: Value | None, dtype: str) -> Value:
    return ctx.emit("quantize_linear", [y, per_axis(ctx, scale, 0, 1, "scale"),
                                        per_axis(ctx, zp, 0, 1, "zero point")],
                    {"dtype": dtype}, final=True)


def _qlinear_binary(op: str):
    def conv(ctx, a, a_scale, a_zp, b, b_scale, b_zp, c_scale, c_zp=None):
        y = ctx.emit(op, [dq(ctx, a, a_scale, a_zp), dq(ctx, b, b_scale, b_zp)])
        return q(ctx, y, c_scale, c_zp, a.dtype)
    return conv


register(MS + "QLinearAdd", _qlinear_binary("add"), __name__)
register(MS + "QLinearMul", _qlinear_binary("mul"), __name__)


@converter(MS + "QLinearGlobalAveragePool")
def _qlinear_global_average_pool(ctx, x, x_scale, x_zp, y_scale, y_zp=None, channels_last=0):
    axes = tuple(range(1, len(x.shape) - 1)) if channels_last else tuple(
        range(2, len(x.shape)))
    mean = ctx.emit("reduce_mean", [dq(ctx, x, x_scale, x_zp)], {"axes": axes,
                                                                  "keepdims": 1})
    return q(ctx, mean, y_scale, y_zp, x.dtype)


@converter(MS + "QLinearConcat")
def _qlinear_concat(ctx, y_scale, y_zp, *triples, axis):
    if len(triples) % 3 or not triples:
        raise ModelFormatError(f"node '{ctx.node_name}' (QLinearConcat): inputs after "
                               "Y_scale, Y_zero_point must be (X, X_scale, X_zero_point) "
                               f"triples, got {len(triples)} inputs")
    xs = [dq(ctx, *triples[k:k + 3]) for k in range(0, len(triples), 3)]
    rank = len(xs[0].shape)
    if not -rank <= axis < rank:
        raise ModelFormatError(f"node '{ctx.node_name}' (QLinearConcat): axis {axis} is out "
                               f"of range for rank {rank}")
    y = ctx.emit("concat", xs, {"axis": axis % rank})
    return q(ctx, y, y_scale, y_zp, triples[0].dtype)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx, x):
    """y_scale = (max(x, 0) - min(x, 0)) / 255 and y_zero_point = saturate(round(-min / y_scale))
    (the spec's qmin - min / scale with qmin 0), then y = QuantizeLinear(x) as uint8; an
    all-zero x gives scale 0 and NaN, as the spec's formula does."""
    zero = ctx.const(np.array(0, np.float32))
    lo = ctx.emit("min", [_whole_reduce(ctx, "reduce_min", x), zero])
    hi = ctx.emit("max", [_whole_reduce(ctx, "reduce_max", x), zero])
    names = list(ctx.output_names) + ["", "", ""]
    scale = ctx.emit("div", [ctx.emit("sub", [hi, lo]), ctx.const(np.array(255, np.float32))])
    zp = ctx.emit("quantize_linear", [ctx.emit("neg", [lo]), scale, None], {"dtype": "uint8"})
    y = ctx.emit("quantize_linear", [x, scale, zp], {"dtype": "uint8"}, final=True)
    outs = [y]
    for value, name in ((scale, names[1]), (zp, names[2])):
        outs.append(ctx.emit("identity", [value], final=False) if not name else
                    _renamed(ctx, value, name))
    return tuple(outs)


def _whole_reduce(ctx, op: str, x: Value) -> Value:
    """reduce_min / reduce_max of every element of `x` as two reductions: over every axis
    but the last (the contiguous one, which stays the vector axis: whole-vector loads), then
    over the last. min and max are exact in any order, so the value is the same. One
    reduction over every axis ran as a serial scalar chain (BERT-like encoder, hidden 256:
    32 us a DynamicQuantizeLinear for 32K floats, 21% of the int8 model at 1 thread), and
    a row reduction first (the last axis) as gathers across rows (twice slower still)."""
    rank = len(x.shape)
    if rank < 2:
        return ctx.emit(op, [x], {"axes": tuple(range(rank)), "keepdims": 0})
    columns = ctx.emit(op, [x], {"axes": tuple(range(rank - 1)), "keepdims": 0})
    return ctx.emit(op, [columns], {"axes": (0,), "keepdims": 0})


def _renamed(ctx, value: Value, name: str) -> Value:
    """An identity of `value` whose output carries the ONNX output name `name`."""
    saved = ctx.output_names
    ctx.output_names = [name]
    try:
        return ctx.emit("identity", [value], final=True)
    finally:
        ctx.output_names = saved


def _integer_conv_1d(original, w_index: int):
    """Wrap an integer conv converter (ConvInteger, QLinearConv): a rank-3 input [N, C, L]
    and weight [F, Cg, K] run as [N, C, 1, L] and [F, Cg, 1, K] with the window attributes
    lifted (onnx_ops_spatial.lift_1d), the result viewed back as [N, F, L'] (Whisper's and
    wav2vec2's audio convs under quantize_dynamic)."""
    from .spatial import lift_1d

    def conv(ctx, *args, **attrs):
        x, w = args[0], args[w_index]
        if len(x.shape) != 3 or w is None or len(w.shape) != 3:
            return original(ctx, *args, **attrs)
        args = list(args)
        args[0] = ctx.emit("reshape", [x], {"shape": (x.shape[0], x.shape[1], 1, x.shape[2])})
        args[w_index] = ctx.emit("reshape", [w], {"shape": w.shape[:2] + (1, w.shape[2])})
        names = ctx.output_names
        ctx.output_names = [""] * len(names)   # the 4-D result is not the node's output
        try:
            y4 = original(ctx, *args, **lift_1d(attrs))
        finally:
            ctx.output_names = names
        n, f, _, length = y4.shape
        return ctx.emit("reshape", [y4], {"shape": (n, f, length)}, final=True)
    return conv


# 1-D inputs as 2-D ones, else the 2-D converters above
register("ConvInteger", _integer_conv_1d(_conv_integer, 1), __name__)
register("QLinearConv", _integer_conv_1d(_qlinear_conv, 3), __name__)
