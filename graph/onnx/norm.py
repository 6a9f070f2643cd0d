"""ONNX normalisation and loss operators composed from graph ops (reductions, elementwise,
gathers): Layer/RMS/Instance/Group/MeanVariance/Lp normalization, LRN, the NLL and softmax
cross-entropy losses. Registered into onnx_ops.CONVERTERS."""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ir import Value
from .core import checked_axis, unsupported_error, convert_layer_norm
from .registry import converter

# -- normalisation -----------------------------------------------------------------------------

def _normalize(ctx, x: Value, axes: tuple[int, ...], eps: float, final: bool = False,
               center: bool = True):
    """(x - mean) / sqrt(var + eps) over `axes` (mean and 1/std kept as size-1 dims); also
    returns the mean and the inverse standard deviation."""
    keep = {"axes": axes, "keepdims": 1}
    mean = ctx.emit("reduce_mean", [x], keep) if center else None
    d = ctx.emit("sub", [x, mean]) if center else x
    var = ctx.emit("reduce_mean", [ctx.emit("mul", [d, d])], keep)
    eps_c = ctx.const(np.array(eps, dtype=x.dtype))
    inv = ctx.emit("div", [ctx.const(np.array(1.0, dtype=x.dtype)),
                           ctx.emit("sqrt", [ctx.emit("add", [var, eps_c])])])
    return ctx.emit("mul", [d, inv], final=final), mean, inv


def _stash(ctx, x: Value, stash_type: int) -> Value:
    """Compute in float32 when stash_type asks it (1) and x is a narrower float."""
    if stash_type == 1 and x.dtype in ("float16", "bfloat16"):
        return ctx.emit("cast", [x], {"to": "float32"})
    return x


_LAYER_NORM = convert_layer_norm


@converter("LayerNormalization")
def _layer_norm(ctx, x, scale, bias=None, axis=-1, epsilon=1e-5, stash_type=1):
    if sum(1 for n in ctx.output_names if n) == 1 and x.dtype not in ("float16", "bfloat16"):
        return _LAYER_NORM(ctx, x, scale, bias, axis=axis, epsilon=epsilon,
                           stash_type=stash_type)
    a = checked_axis(ctx, axis, len(x.shape))
    xs = _stash(ctx, x, int(stash_type))
    y, mean, inv = _normalize(ctx, xs, tuple(range(a, len(x.shape))), float(epsilon))
    y = _affine(ctx, ctx.emit("cast", [y], {"to": x.dtype}) if xs is not x else y, scale, bias,
                final=True)
    return y, mean, inv


def _affine(ctx, y: Value, scale: Value | None, bias: Value | None, final: bool) -> Value:
    if scale is not None:
        y = ctx.emit("mul", [y, scale], final=final and bias is None)
    if bias is not None:
        y = ctx.emit("add", [y, bias], final=final)
    return y


@converter("RMSNormalization")
def _rms_norm(ctx, x, scale, axis=-1, epsilon=1e-5, stash_type=1):
    a = checked_axis(ctx, axis, len(x.shape))
    xs = _stash(ctx, x, int(stash_type))
    y, _, _ = _normalize(ctx, xs, tuple(range(a, len(x.shape))), float(epsilon), center=False)
    if xs is not x:
        y = ctx.emit("cast", [y], {"to": x.dtype})
    return ctx.emit("mul", [y, scale], final=True)


@converter("InstanceNormalization")
def _instance_norm(ctx, x, scale, bias, epsilon=1e-5):
    rank = len(x.shape)
    if rank < 3:
        raise ModelFormatError(f"node '{ctx.node_name}' (InstanceNormalization): input "
                               f"{list(x.shape)} must be [N, C, spatial...]")
    y, _, _ = _normalize(ctx, x, tuple(range(2, rank)), float(epsilon))
    per_channel = (x.shape[1],) + (1,) * (rank - 2)
    s = ctx.emit("reshape", [scale], {"shape": per_channel})
    b = ctx.emit("reshape", [bias], {"shape": per_channel})
    return _affine(ctx, y, s, b, final=True)


@converter("GroupNormalization")
def _group_norm(ctx, x, scale, bias, num_groups, epsilon=1e-5, stash_type=1):
    n, c = x.shape[:2]
    g = int(num_groups)
    if g < 1 or c % g:
        raise ModelFormatError(f"node '{ctx.node_name}' (GroupNormalization): {c} channels "
                               f"do not divide into num_groups={g}")
    rest = int(np.prod(x.shape[2:], dtype=np.int64))
    xs = _stash(ctx, x, int(stash_type))
    grouped = ctx.emit("reshape", [xs], {"shape": (n, g, (c // g) * rest)})
    y, _, _ = _normalize(ctx, grouped, (2,), float(epsilon))
    y = ctx.emit("reshape", [y], {"shape": (n, c) + tuple(x.shape[2:])})
    if xs is not x:
        y = ctx.emit("cast", [y], {"to": x.dtype})
    rank = len(x.shape)
    if scale.shape == (g,) and g != c:   # opset 18: one scale/bias per group
        scale = ctx.emit("reshape", [ctx.emit("broadcast_to", [
            ctx.emit("reshape", [scale], {"shape": (g, 1)})], {"shape": (g, c // g)})],
            {"shape": (c,)})
        bias = ctx.emit("reshape", [ctx.emit("broadcast_to", [
            ctx.emit("reshape", [bias], {"shape": (g, 1)})], {"shape": (g, c // g)})],
            {"shape": (c,)})
    per_channel = (c,) + (1,) * (rank - 2)
    s = ctx.emit("reshape", [scale], {"shape": per_channel})
    b = ctx.emit("reshape", [bias], {"shape": per_channel})
    return _affine(ctx, y, s, b, final=True)


@converter("MeanVarianceNormalization")
def _mvn(ctx, x, axes=(0, 2, 3)):
    norm = tuple(sorted({checked_axis(ctx, int(a), len(x.shape)) for a in axes}))
    y, _, _ = _normalize(ctx, x, norm, 1e-9, final=True)
    return y


@converter("LpNormalization")
def _lp_norm(ctx, x, axis=-1, p=2):
    a = checked_axis(ctx, axis, len(x.shape))
    keep = {"axes": (a,), "keepdims": 1}
    if p == 1:
        norm = ctx.emit("reduce_sum", [ctx.emit("abs", [x])], keep)
    elif p == 2:
        norm = ctx.emit("sqrt", [ctx.emit("reduce_sum", [ctx.emit("mul", [x, x])], keep)])
    else:
        raise unsupported_error(ctx, f"LpNormalization with p={p} (ONNX allows 1 or 2)")
    zero = ctx.const(np.array(0, dtype=x.dtype))
    ratio = ctx.emit("div", [x, norm])   # an all-zero slice gives 0, not 0/0
    return ctx.emit("where", [ctx.emit("equal", [norm, zero]), zero, ratio], final=True)


# -- losses ------------------------------------------------------------------------------------

def _nll(ctx, logp: Value, target: Value, weight: Value | None, reduction: str,
         ignore_index) -> Value:
    """-logp[n, target[n, ...], ...] * weight[target], reduced ("none", "sum" or "mean":
    the sum over the sum of the weights of the targets that count)."""
    if reduction not in ("none", "sum", "mean"):
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): reduction "
                               f"{reduction!r}; expected none, sum or mean")
    n, c = logp.shape[:2]
    rest = tuple(logp.shape[2:])
    if tuple(target.shape) != (n,) + rest:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): target "
                               f"{list(target.shape)} must be {[n, *rest]} for input "
                               f"{list(logp.shape)}")
    dtype = logp.dtype
    keep, pick = None, target
    if ignore_index is not None:   # ignored targets (often out of [0, C)) read class 0
        keep = ctx.emit("logical_not", [ctx.emit("equal", [target, ctx.const(np.array(
            int(ignore_index), dtype=target.dtype))])])
        pick = ctx.emit("where", [keep, target, ctx.const(np.zeros((), target.dtype))])
    idx = ctx.emit("reshape", [pick], {"shape": (n, 1) + rest})
    picked = ctx.emit("gather_elements", [logp, idx], {"axis": 1})
    picked = ctx.emit("reshape", [picked], {"shape": (n,) + rest})
    w = None if weight is None else ctx.emit("gather", [weight, pick], {"axis": 0})
    if keep is not None:
        w = ctx.emit("cast", [keep], {"to": dtype}) if w is None else ctx.emit(
            "where", [keep, w, ctx.const(np.array(0.0, dtype=dtype))])
    loss = ctx.emit("neg", [picked])
    if w is not None:
        loss = ctx.emit("mul", [loss, w], final=reduction == "none")
    elif reduction == "none":
        loss = ctx.emit("identity", [loss], final=True)
    if reduction == "none":
        return loss
    every = {"axes": tuple(range(len(loss.shape))), "keepdims": 0}
    if reduction == "sum":
        return ctx.emit("reduce_sum", [loss], every, final=True)
    if w is None:
        return ctx.emit("reduce_mean", [loss], every, final=True)
    total = ctx.emit("reduce_sum", [loss], every)
    return ctx.emit("div", [total, ctx.emit("reduce_sum", [w], every)], final=True)


@converter("NegativeLogLikelihoodLoss")
def _nll_loss(ctx, x, target, weight=None, ignore_index=None, reduction="mean"):
    return _nll(ctx, x, target, weight, reduction, ignore_index)


@converter("SoftmaxCrossEntropyLoss")
def _softmax_ce(ctx, scores, labels, weights=None, ignore_index=None, reduction="mean"):
    logp = ctx.emit("log_softmax", [scores], {"axis": 1},
                    final=False)
    loss = _nll(ctx, logp, labels, weights, reduction, ignore_index)
    if len(ctx.output_names) > 1 and ctx.output_names[1]:
        return loss, logp
    return loss


@converter("LRN")
def _lrn(ctx, x, size, alpha=0.0001, beta=0.75, bias=1.0):
    """x / (bias + alpha / size * (sum of x^2 over `size` neighbouring channels))^beta; the
    channel window sum is an average pool over [N, 1, C, H * W] that counts the padding."""
    if len(x.shape) < 3:
        raise ModelFormatError(f"node '{ctx.node_name}' (LRN): input {list(x.shape)} must be "
                               "[N, C, ...]")
    n, c = x.shape[:2]
    rest = int(np.prod(x.shape[2:], dtype=np.int64))
    size = int(size)
    sq = ctx.emit("reshape", [ctx.emit("mul", [x, x])], {"shape": (n, 1, c, rest)})
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    pooled = ctx.emit("avg_pool2d", [sq], {"kernel": (size, 1), "strides": (1, 1),
                                           "dilations": (1, 1), "pads": (before, 0, after, 0),
                                           "ceil_mode": 0, "count_include_pad": 1})
    total = ctx.emit("reshape", [pooled], {"shape": x.shape})
    scale = ctx.const(np.array(alpha, dtype=x.dtype))   # the mean is sum / size already
    base = ctx.emit("add", [ctx.emit("mul", [total, scale]),
                            ctx.const(np.array(bias, dtype=x.dtype))])
    denom = ctx.emit("pow", [base, ctx.const(np.array(beta, dtype=x.dtype))])
    return ctx.emit("div", [x, denom], final=True)
