"""ONNX operator converters: one function per ONNX op type, registered in `CONVERTERS`.

A converter receives the conversion context, the node's inputs as graph `Value`s (None for an
omitted optional input) and the ONNX attributes as keyword arguments whose defaults are the
ONNX defaults. Opset differences (attributes that became inputs) are handled inside, using
`ctx.opset` and `ctx.static(value)` for inputs that must be known at compile time. It returns
the Values for the node's outputs, in order; the last op it emits is named after the ONNX
outputs via `ctx.emit(..., final=True)`.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np

from ...te.errors import ModelFormatError, UnsupportedOperatorError
from .conv_taps import trimmed_window
from ..ir import Value
from .registry import CONVERTERS, converter, register  # noqa: F401 - CONVERTERS: read by the others
from ...te.ops import phase_weight_block

if TYPE_CHECKING:
    from .load import ConvertContext

Converter = Callable[..., "Value | tuple[Value, ...]"]


def checked_axis(ctx: ConvertContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): axis {axis} is out "
                               f"of range for rank {rank}")
    return axis % rank if rank else 0


def _insert_axis(ctx: ConvertContext, axis: int, rank: int) -> int:
    """A position between dims (Flatten's split point), in [-rank, rank]: a negative one
    counts from the end of the input's `rank` dims, not of rank + 1 positions."""
    if not -rank <= axis <= rank:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): axis {axis} is out "
                               f"of range [-{rank}, {rank}] for rank {rank}")
    return axis + rank if axis < 0 else axis


def unsupported_error(ctx: ConvertContext, what: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(
        f"node '{ctx.node_name}' ({ctx.op_type}, opset {ctx.opset}): {what} is not supported by "
        "Kiln; re-export the model without it.")


# -- elementwise -------------------------------------------------------------------------------

_UNARY = {"Relu": "relu", "Neg": "neg", "Exp": "exp", "Log": "log", "Abs": "abs",
          "Sqrt": "sqrt", "Reciprocal": "reciprocal", "Erf": "erf", "Tanh": "tanh",
          "Sigmoid": "sigmoid", "HardSwish": "hard_swish", "Not": "logical_not",
          "Identity": "identity"}
_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Pow": "pow",
           "Equal": "equal", "Less": "less", "Greater": "greater", "And": "logical_and",
           "Or": "logical_or"}


def make_unary(op: str) -> Converter:
    return lambda ctx, x: ctx.emit(op, [x], final=True)


def _make_binary(op: str) -> Converter:
    def conv(ctx, a, b, broadcast=None, axis=None):
        if broadcast and axis is not None:
            raise unsupported_error(ctx, "legacy broadcast with axis (opset < 7)")
        return ctx.emit(op, [a, b], final=True)
    return conv


for _t, _op in _UNARY.items():
    register(_t, make_unary(_op), __name__)
for _t, _op in _BINARY.items():
    register(_t, _make_binary(_op), __name__)


@converter("Where")
def _where(ctx, cond, a, b):
    return ctx.emit("where", [cond, a, b], final=True)


@converter("LeakyRelu")
def _leaky_relu(ctx, x, alpha=0.01):
    return ctx.emit("leaky_relu", [x], {"alpha": float(alpha)}, final=True)


@converter("HardSigmoid")
def _hard_sigmoid(ctx, x, alpha=0.2, beta=0.5):
    return ctx.emit("hard_sigmoid", [x], {"alpha": float(alpha), "beta": float(beta)},
                    final=True)


@converter("Gelu")
def _gelu(ctx, x, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise ModelFormatError(f"node '{ctx.node_name}' (Gelu): approximate={approximate!r}; "
                               "expected 'none' or 'tanh'")
    return ctx.emit("gelu", [x], {"approximate": approximate}, final=True)


@converter("Clip")
def _clip(ctx, x, lo=None, hi=None, min=None, max=None):  # noqa: A002 (ONNX names)
    if ctx.opset >= 11:  # bounds became optional inputs
        runtime = [b for b in (lo, hi) if b is not None and ctx.try_static(b) is None]
        if runtime:
            return _clip_runtime(ctx, x, lo, hi)
        min = None if lo is None else float(ctx.try_static(lo))
        max = None if hi is None else float(ctx.try_static(hi))
    attrs = {"min": None if min is None else float(min), "max": None if max is None
             else float(max)}
    return ctx.emit("clip", [x], attrs, final=True)


def _clip_runtime(ctx, x, lo, hi):
    """Clip whose bounds (or one of them) are only known at run time (a graph input): `max`
    with the lower bound, then `min` with the upper one, each bound a 0-d kernel argument
    (min > max gives max, as ONNX specifies)."""
    y = x
    for bound, op in ((lo, "max"), (hi, "min")):
        if bound is None:
            continue
        last = op == "min" or hi is None
        if bound.shape != ():
            bound = ctx.emit("reshape", [bound], {"shape": ()})
        y = ctx.emit(op, [y, bound], final=last)
    return y


def convert_cast(ctx, x, to, saturate=1, round_mode="up"):
    return ctx.emit("cast", [x], {"to": ctx.onnx_dtype(to)}, final=True)


@converter("Dropout")
def _dropout(ctx, x, ratio=None, training_mode=None, seed=None, is_test=None):
    if training_mode is not None and bool(ctx.static(training_mode, "training_mode")):
        # training with ratio 0 drops nothing: the inference form; else the output is random
        if ratio is None or float(ctx.static(ratio, "ratio")) != 0.0:
            raise unsupported_error(ctx, "Dropout in training mode with a ratio other than 0 (a "
                                    "random mask)")
    y = ctx.emit("identity", [x], final=True)
    if len(ctx.output_names) > 1 and ctx.output_names[1]:
        mask = ctx.const(np.ones(x.shape, dtype=bool), name=ctx.output_names[1])
        return y, mask
    return y


# -- anchors -----------------------------------------------------------------------------------

def explicit_pads(ctx, auto_pad: str, pads, in_hw, kernel, strides, dilations):
    """(top, left, bottom, right) from ONNX pads or auto_pad."""
    if auto_pad in ("NOTSET", ""):
        p = tuple(pads) if pads else (0,) * 4
        if len(p) != 4:
            raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): pads {p} must "
                                   "have 4 entries for a 2-D window")
        return p
    if auto_pad == "VALID":
        return (0, 0, 0, 0)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ModelFormatError(f"node '{ctx.node_name}': unknown auto_pad {auto_pad!r}; "
                               "expected NOTSET, VALID, SAME_UPPER or SAME_LOWER")
    begin, end = [], []
    for size, k, s, d in zip(in_hw, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, big = total // 2, total - total // 2
        begin.append(small if auto_pad == "SAME_UPPER" else big)
        end.append(big if auto_pad == "SAME_UPPER" else small)
    return (begin[0], begin[1], end[0], end[1])


def require_2d(ctx, x: Value) -> None:
    if len(x.shape) != 4:
        raise unsupported_error(ctx, f"a {len(x.shape) - 2}-D window (input {list(x.shape)})")


def convert_conv(ctx, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
          pads=None, strides=None):
    require_2d(ctx, x)
    kernel = tuple(w.shape[2:])
    strides = tuple(strides or (1, 1))
    dilations = tuple(dilations or (1, 1))
    p = explicit_pads(ctx, auto_pad, pads, x.shape[2:], kernel, strides, dilations)
    # taps that read only padding: a smaller window, same result (a constant weight only:
    # a quantized model's DequantizeLinear -> Conv stays whole for the int8 passes)
    trim = trimmed_window(x.shape[2:], kernel, strides, dilations, p) \
        if w.name in ctx.constants else None
    if trim is not None:
        (r0, c0), (kh, kw), p = trim
        w = ctx.emit("slice", [w], {"starts": (0, 0, r0, c0),
                                    "ends": (w.shape[0], w.shape[1], r0 + kh, c0 + kw),
                                    "steps": (1, 1, 1, 1)})
    attrs = {"strides": strides, "dilations": dilations, "pads": p, "groups": int(group)}
    y = ctx.emit("conv2d", [x, w], attrs, final=b is None)
    if b is None:
        return y
    bias = ctx.emit("reshape", [b], {"shape": (b.shape[0], 1, 1)})
    return ctx.emit("add", [y, bias], final=True)


def _window_ints(ctx, name: str, value, default: tuple[int, int], least: int
                 ) -> tuple[int, int]:
    """A 2-D window attribute (strides, dilations, output_padding): two ints >= `least`."""
    items = tuple(default if value is None else value)
    if len(items) != 2 or any(int(v) < least for v in items):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): {name} {list(items)} "
                               f"must be 2 ints >= {least} (one per spatial axis)")
    return int(items[0]), int(items[1])


def _transpose_pads(ctx, auto_pad: str, pads, output_shape, in_hw, full_hw, strides,
                    out_pad) -> tuple[tuple[int, int, int, int], tuple[int, int]]:
    """(top, left, bottom, right) and extra zero rows/columns at the end of a ConvTranspose.

    Explicit `pads` crop the full output (`full_hw`: stride * (in - 1) + output_padding +
    dilated kernel). With output_shape, or SAME_* (target in * stride), the total padding is
    full - target, split as onnxruntime does: the odd pixel at the end for SAME_UPPER, at the
    beginning otherwise. An output_shape past the full output is reached with zero rows at
    the end, up to stride - 1 - output_padding of them (onnxruntime's limit: the input size
    it implies must be the real one); a SAME_* target past it (a kernel shorter than the
    stride) gives the full output, as in onnxruntime."""
    where = f"node '{ctx.node_name}' ({ctx.op_type})"
    if auto_pad not in ("NOTSET", "", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise ModelFormatError(f"{where}: unknown auto_pad {auto_pad!r}; expected NOTSET, "
                               "VALID, SAME_UPPER or SAME_LOWER")
    if pads is not None and any(pads) and auto_pad not in ("NOTSET", ""):
        raise ModelFormatError(f"{where}: pads {list(pads)} cannot be used with auto_pad="
                               f"{auto_pad}; give one or the other")
    if output_shape is None and auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        p = tuple(int(v) for v in pads) if pads is not None and auto_pad != "VALID" else (0,) * 4
        if len(p) != 4 or min(p) < 0:
            raise ModelFormatError(f"{where}: pads {list(p)} must be 4 non-negative ints "
                                   "(top, left, bottom, right) for a 2-D window")
        return p, (0, 0)
    if output_shape is not None and len(output_shape) != 2:
        raise ModelFormatError(f"{where}: output_shape {list(output_shape)} must give the 2 "
                               "spatial extents (H, W) of the output")
    targets = (tuple(int(v) for v in output_shape) if output_shape is not None
               else tuple(i * s for i, s in zip(in_hw, strides)))
    splits = []
    for target, full, most in zip(targets, full_hw, (s - 1 - o for s, o in zip(strides,
                                                                                out_pad))):
        total = full - target if output_shape is not None else max(full - target, 0)
        if -total > most or target < 1:
            raise ModelFormatError(f"{where}: output_shape {list(targets)} does not fit the "
                                   f"input {list(in_hw)}: the transposed conv gives {full} "
                                   f"along an axis where {target} was asked (at most "
                                   f"{full + max(most, 0)}); fix output_shape")
        splits.append(split_pad(max(total, 0), auto_pad == "SAME_UPPER") + (max(-total, 0),))
    (top, bottom, extra_h), (left, right, extra_w) = splits
    return (top, left, bottom, right), (extra_h, extra_w)


def split_pad(total: int, odd_at_end: bool) -> tuple[int, int]:
    """(begin, end) halves of `total` padding, the odd pixel at the end or the beginning."""
    small, big = total // 2, total - total // 2
    return (small, big) if odd_at_end else (big, small)


def transpose_kernel(ctx, x: Value, w: Value, group: int, kernel_shape) -> tuple[int, ...]:
    """The window of a ConvTranspose weight [C, M/group, k...] that fits input `x` and
    `kernel_shape`; ModelFormatError naming the node otherwise."""
    c, spatial = x.shape[1], ("kD", "kH", "kW")[5 - len(x.shape):]
    if len(w.shape) != len(x.shape) or w.shape[0] != c or group < 1 or c % group:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): weight "
                               f"{list(w.shape)} must be [C={c}, M/group, {', '.join(spatial)}]"
                               f" with C divisible by group={group}")
    kernel = tuple(w.shape[2:])
    if kernel_shape is not None and tuple(kernel_shape) != kernel:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): kernel_shape "
                               f"{list(kernel_shape)} disagrees with the weight's "
                               f"{list(kernel)}")
    return kernel


def convert_conv_transpose(ctx, x, w, b=None, auto_pad="NOTSET", dilations=None, group=1,
                    kernel_shape=None, output_padding=None, output_shape=None, pads=None,
                    strides=None):
    """conv_transpose_weight (the ONNX weight as stride-phase sub-kernels, folded at compile
    time when it is a constant) + conv2d_transpose + the bias add."""
    require_2d(ctx, x)
    kernel = transpose_kernel(ctx, x, w, group, kernel_shape)
    strides = _window_ints(ctx, "strides", strides, (1, 1), 1)
    dilations = _window_ints(ctx, "dilations", dilations, (1, 1), 1)
    out_pad = _window_ints(ctx, "output_padding", output_padding, (0, 0), 0)
    full = tuple(s * (i - 1) + o + (k - 1) * d + 1 for i, s, o, k, d in
                 zip(x.shape[2:], strides, out_pad, kernel, dilations))
    p, extra = _transpose_pads(ctx, auto_pad, pads, output_shape, x.shape[2:], full, strides,
                               out_pad)
    filters = w.shape[1] * group
    block = phase_weight_block(strides[0] * strides[1] * filters, group)
    packed = ctx.emit("conv_transpose_weight", [w], {
        "strides": strides, "dilations": dilations, "groups": int(group), "block": block or 0})
    attrs = {"strides": strides, "dilations": dilations, "pads": p, "groups": int(group),
             "output_padding": tuple(o + e for o, e in zip(out_pad, extra)), "kernel": kernel}
    y = ctx.emit("conv2d_transpose", [x, packed], attrs, final=b is None)
    if b is None:
        return y
    bias = ctx.emit("reshape", [b], {"shape": (b.shape[0], 1, 1)})
    return ctx.emit("add", [y, bias], final=True)


@converter("MatMul")
def _matmul(ctx, a, b):
    return ctx.emit("matmul", [a, b], final=True)


@converter("Gemm")
def _gemm(ctx, a, b, c=None, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=None):
    if transA:
        a = ctx.emit("transpose", [a], {"perm": (1, 0)})
    if transB:
        b = ctx.emit("transpose", [b], {"perm": (1, 0)})
    has_c = c is not None and beta != 0
    y = ctx.emit("matmul", [a, b], final=not has_c and alpha == 1.0)
    if alpha != 1.0:
        y = ctx.emit("mul", [y, ctx.const(np.array(alpha, dtype=y.dtype))], final=not has_c)
    if not has_c:
        return y
    if beta != 1.0:
        c = ctx.emit("mul", [c, ctx.const(np.array(beta, dtype=c.dtype))])
    return ctx.emit("add", [y, c], final=True)


# -- normalisation -----------------------------------------------------------------------------

def convert_batch_norm(ctx, x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9, training_mode=0,
                spatial=1, is_test=None, consumed_inputs=None):
    if training_mode or sum(1 for n in ctx.output_names if n) > 1:
        raise unsupported_error(ctx, "BatchNormalization in training mode (running statistics)")
    if not spatial:
        raise unsupported_error(ctx, "BatchNormalization with spatial=0")
    return ctx.emit("batch_norm", [x, scale, bias, mean, var], {"epsilon": float(epsilon)},
                    final=True)


def convert_layer_norm(ctx, x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=1):
    if sum(1 for n in ctx.output_names if n) > 1:
        raise unsupported_error(ctx, "LayerNormalization's Mean/InvStdDev outputs")
    attrs = {"axis": checked_axis(ctx, axis, len(x.shape)), "epsilon": float(epsilon),
             "stash_type": int(stash_type)}
    return ctx.emit("layer_norm", [x, scale, bias], attrs, final=True)


def _softmax_like(op: str) -> Converter:
    def conv(ctx, x, axis=None):
        rank = len(x.shape)
        if ctx.opset >= 13:
            axis = checked_axis(ctx, -1 if axis is None else axis, rank)
            return ctx.emit(op, [x], {"axis": axis}, final=True)
        axis = checked_axis(ctx, 1 if axis is None else axis, rank)  # old: coerce to 2-D at axis
        if axis == rank - 1:
            return ctx.emit(op, [x], {"axis": axis}, final=True)
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        flat = ctx.emit("reshape", [x], {"shape": (rows, x.size // max(rows, 1))})
        y = ctx.emit(op, [flat], {"axis": 1})
        return ctx.emit("reshape", [y], {"shape": x.shape}, final=True)
    return conv


register("Softmax", _softmax_like("softmax"), __name__)
register("LogSoftmax", _softmax_like("log_softmax"), __name__)


# -- pooling -----------------------------------------------------------------------------------

def convert_max_pool(ctx, x, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None,
              pads=None, storage_order=0, strides=None):
    require_2d(ctx, x)
    if len(ctx.output_names) > 1 and ctx.output_names[1]:
        raise unsupported_error(ctx, "MaxPool's Indices output")
    return ctx.emit("max_pool2d", [x], _pool_attrs(ctx, x, auto_pad, ceil_mode, dilations,
                                                   kernel_shape, pads, strides), final=True)


def convert_average_pool(ctx, x, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
              kernel_shape=None, pads=None, strides=None):
    require_2d(ctx, x)
    attrs = _pool_attrs(ctx, x, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides)
    attrs["count_include_pad"] = int(count_include_pad)
    return ctx.emit("avg_pool2d", [x], attrs, final=True)


def _pool_attrs(ctx, x, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides) -> dict:
    if not kernel_shape:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}) has no kernel_shape")
    kernel = tuple(kernel_shape)
    strides = tuple(strides or (1, 1))
    dilations = tuple(dilations or (1, 1))
    p = explicit_pads(ctx, auto_pad, pads, x.shape[2:], kernel, strides, dilations)
    return {"kernel": kernel, "strides": strides, "dilations": dilations, "pads": p,
            "ceil_mode": int(ceil_mode)}


@converter("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, x):
    op = "reduce_mean" if ctx.op_type == "GlobalAveragePool" else "reduce_max"
    axes = tuple(range(2, len(x.shape)))
    return ctx.emit(op, [x], {"axes": axes, "keepdims": 1}, final=True)


# -- reductions --------------------------------------------------------------------------------

_REDUCE = {"ReduceMean": "reduce_mean", "ReduceSum": "reduce_sum", "ReduceMax": "reduce_max",
           "ReduceMin": "reduce_min", "ReduceL2": "reduce_l2"}
_AXES_INPUT_SINCE = {"ReduceSum": 13}  # the others moved axes to an input in opset 18


@converter(*_REDUCE)
def _reduce(ctx, x, axes_in=None, axes=None, keepdims=1, noop_with_empty_axes=0):
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.op_type, 18):
        axes = None if axes_in is None else ctx.static(axes_in, "axes").tolist()
    rank = len(x.shape)
    if not axes:
        if noop_with_empty_axes:
            return ctx.emit("identity", [x], final=True)
        axes = range(rank)
    norm = tuple(sorted({checked_axis(ctx, int(a), rank) for a in axes}))
    return ctx.emit(_REDUCE[ctx.op_type], [x], {"axes": norm, "keepdims": int(keepdims)},
                    final=True)


# -- shape manipulation ------------------------------------------------------------------------

def _reshape_to(ctx, x: Value, shape, final=True) -> Value:
    return ctx.emit("reshape", [x], {"shape": tuple(int(d) for d in shape)}, final=final)


@converter("Reshape")
def _reshape(ctx, x, shape, allowzero=0):
    target = [int(d) for d in ctx.static(shape, "shape")]
    out = []
    for k, d in enumerate(target):
        if d == 0 and not allowzero:
            if k >= len(x.shape):
                raise ModelFormatError(f"node '{ctx.node_name}' (Reshape): shape {target} "
                                       f"copies dim {k} of a rank-{len(x.shape)} input")
            d = x.shape[k]
        out.append(d)
    if out.count(-1) > 1:
        raise ModelFormatError(f"node '{ctx.node_name}' (Reshape): shape {target} has more "
                               "than one -1")
    if -1 in out:
        known = int(np.prod([d for d in out if d != -1], dtype=np.int64))
        if known == 0 or x.size % known:
            raise ModelFormatError(f"node '{ctx.node_name}' (Reshape): cannot reshape "
                                   f"{list(x.shape)} to {target}")
        out[out.index(-1)] = x.size // known
    return _reshape_to(ctx, x, out)


@converter("Flatten")
def _flatten(ctx, x, axis=1):
    axis = _insert_axis(ctx, axis, len(x.shape))
    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
    # (the column count from the dims, not size // rows: 0 rows still have their columns)
    return _reshape_to(ctx, x, (rows, int(np.prod(x.shape[axis:], dtype=np.int64))))


@converter("Squeeze")
def _squeeze(ctx, x, axes_in=None, axes=None):
    if ctx.opset >= 13:
        axes = None if axes_in is None else ctx.static(axes_in, "axes").tolist()
    rank = len(x.shape)
    drop = ({checked_axis(ctx, int(a), rank) for a in axes} if axes is not None
            else {k for k, d in enumerate(x.shape) if d == 1})
    bad = [k for k in drop if x.shape[k] != 1]
    if bad:
        raise ModelFormatError(f"node '{ctx.node_name}' (Squeeze): axis {bad[0]} of "
                               f"{list(x.shape)} has size {x.shape[bad[0]]}, not 1")
    return _reshape_to(ctx, x, [d for k, d in enumerate(x.shape) if k not in drop])


@converter("Unsqueeze")
def _unsqueeze(ctx, x, axes_in=None, axes=None):
    if ctx.opset >= 13:
        axes = ctx.static(axes_in, "axes").reshape(-1).tolist()   # a 0-d axes is one axis
    rank = len(x.shape) + len(axes)
    new = {checked_axis(ctx, int(a), rank) for a in axes}
    it = iter(x.shape)
    return _reshape_to(ctx, x, [1 if k in new else next(it) for k in range(rank)])


@converter("Transpose")
def _transpose(ctx, x, perm=None):
    perm = tuple(perm) if perm is not None else tuple(reversed(range(len(x.shape))))
    return ctx.emit("transpose", [x], {"perm": perm}, final=True)


@converter("Expand")
def _expand(ctx, x, shape):
    return ctx.emit("broadcast_to", [x], {"shape": tuple(int(d) for d in
                                                         ctx.static(shape, "shape"))},
                    final=True)


@converter("Concat")
def _concat(ctx, *xs, axis):
    given = [x for x in xs if x is not None]
    a = checked_axis(ctx, axis, len(given[0].shape))
    shape = tuple(sum(x.shape[a] for x in given) if d == a else n
                  for d, n in enumerate(given[0].shape))
    if 0 in shape:   # empty slices still add their length along the axis
        return ctx.const(np.zeros(shape, np.dtype(given[0].dtype)), name=ctx.output_names[0])
    xs = [x for x in given if x.size > 0] or [given[0]]
    axis = checked_axis(ctx, axis, len(xs[0].shape))
    if len(xs) == 1:
        return ctx.emit("identity", xs, final=True)
    return ctx.emit("concat", xs, {"axis": axis}, final=True)


@converter("Split")
def _split(ctx, x, split_in=None, axis=0, split=None, num_outputs=None):
    axis = checked_axis(ctx, axis, len(x.shape))
    if ctx.opset >= 13:
        split = None if split_in is None else ctx.static(split_in, "split").tolist()
    n = len(ctx.output_names)
    dim = x.shape[axis]
    if split is None:
        chunk = -(-dim // n)
        split = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
    outs = ctx.emit("split", [x], {"axis": axis, "sizes": tuple(int(s) for s in split)},
                    n_out=len(split), final=True)
    return outs


@converter("Slice")
def _slice(ctx, x, starts_in=None, ends_in=None, axes_in=None, steps_in=None, starts=None,
           ends=None, axes=None):
    if ctx.opset >= 10:
        starts = ctx.static(starts_in, "starts").tolist()
        ends = ctx.static(ends_in, "ends").tolist()
        axes = None if axes_in is None else ctx.static(axes_in, "axes").tolist()
        steps = None if steps_in is None else ctx.static(steps_in, "steps").tolist()
    else:
        steps = None
    rank = len(x.shape)
    axes = list(range(len(starts))) if axes is None else [checked_axis(ctx, a, rank) for a in axes]
    steps = steps or [1] * len(starts)
    b_all, e_all, s_all = [0] * rank, list(x.shape), [1] * rank
    for a, b, e, s in zip(axes, starts, ends, steps):
        dim = x.shape[a]
        if s == 0:
            raise ModelFormatError(f"node '{ctx.node_name}' (Slice): step 0 on axis {a}")
        b = b + dim if b < 0 else b
        e = e + dim if e < 0 else e
        if s > 0:
            b, e = min(max(b, 0), dim), min(max(e, 0), dim)
        else:
            b, e = min(max(b, 0), dim - 1), min(max(e, -1), dim - 1)
        b_all[a], e_all[a], s_all[a] = b, e, s
    return ctx.emit("slice", [x], {"starts": tuple(b_all), "ends": tuple(e_all),
                                   "steps": tuple(s_all)}, final=True)


@converter("Gather")
def _gather(ctx, data, indices, axis=0):
    return ctx.emit("gather", [data, indices], {"axis": checked_axis(ctx, axis, len(data.shape))},
                    final=True)


@converter("GatherND")
def _gather_nd(ctx, data, indices, batch_dims=0):
    return ctx.emit("gather_nd", [data, indices], {"batch_dims": int(batch_dims)}, final=True)


def convert_pad(ctx, x, pads_in=None, value_in=None, axes_in=None, mode="constant", pads=None,
         value=0.0):
    rank = len(x.shape)
    inputs = [x]
    if ctx.opset >= 11:
        pads = ctx.static(pads_in, "pads").tolist()
        known = None if value_in is None else ctx.try_static(value_in)
        value = 0.0 if known is None else known.item()
        if value_in is not None and known is None and mode == "constant":
            # a runtime value (a graph input): the pad op reads it as a 0-d kernel argument
            inputs.append(value_in if value_in.shape == () else
                          ctx.emit("reshape", [value_in], {"shape": ()}))
        if axes_in is not None:
            axes = [checked_axis(ctx, a, rank) for a in ctx.static(axes_in, "axes").tolist()]
            full = [0] * (2 * rank)
            for k, a in enumerate(axes):
                full[a], full[a + rank] = pads[k], pads[k + len(axes)]
            pads = full
    if mode not in ("constant", "reflect", "edge"):
        raise unsupported_error(ctx, f"Pad mode {mode!r}")
    if len(pads) != 2 * rank:
        raise ModelFormatError(f"node '{ctx.node_name}' (Pad): {len(pads)} pads for rank {rank}")
    return ctx.emit("pad", inputs, {"pads": tuple(int(p) for p in pads), "mode": mode,
                                    "value": float(value)}, final=True)


# -- folded at conversion time -----------------------------------------------------------------

@converter("Shape")
def _shape(ctx, x, start=0, end=None):
    dims = np.array(x.shape, dtype=np.int64)[slice(start, end)]
    return ctx.const(dims, final=True)


@converter("Constant")
def _constant(ctx, value=None, value_float=None, value_floats=None, value_int=None,
              value_ints=None, value_string=None, value_strings=None, sparse_value=None):
    if value is not None:
        return ctx.const(value, final=True)
    for v, dt in ((value_float, np.float32), (value_floats, np.float32),
                  (value_int, np.int64), (value_ints, np.int64)):
        if v is not None:
            return ctx.const(np.array(v, dtype=dt), final=True)
    raise unsupported_error(ctx, "a string or sparse Constant")


@converter("ConstantOfShape")
def _constant_of_shape(ctx, shape, value=None):
    fill = value if value is not None else np.zeros(1, dtype=np.float32)
    dims = tuple(int(d) for d in ctx.static(shape, "input"))
    return ctx.const(np.full(dims, fill.reshape(-1)[0], dtype=fill.dtype), final=True)


@converter("Range")
def _range(ctx, start, limit, delta):
    s, lim, d = (ctx.static(v, n) for v, n in ((start, "start"), (limit, "limit"),
                                               (delta, "delta")))
    n = max(int(math.ceil((lim.item() - s.item()) / d.item())), 0)
    return ctx.const((s + d * np.arange(n)).astype(s.dtype), final=True)

