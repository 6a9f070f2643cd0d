"""ONNX's optimizer update rules (ai.onnx.preview.training Adagrad, Adam, Momentum) as
elementwise graph ops. They take the gradients as inputs, so no differentiation is involved:
each is a fused elementwise kernel per tensor; the learning rate R and step count T stay
run-time scalars (the first-step special cases are selects on T > 0). Also BatchNormalization
in training mode (batch statistics and the running-statistics update)."""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ir import Value
from .core import convert_batch_norm
from .registry import converter
from .control import name_outputs

_DOMAIN = "ai.onnx.preview.training."


class _Rule:
    """Emits the elementwise update of one tensor: constants in the tensor's dtype, R and T
    cast to it once."""

    def __init__(self, ctx, r: Value, t: Value, dtype: str):
        self.ctx, self.dtype = ctx, dtype
        self.r = self._scalar(r)
        self.t = self._scalar(t)
        self.first = ctx.emit("greater", [self.t, self.c(0.0)])   # T > 0

    def _scalar(self, v: Value) -> Value:
        if v.shape != ():
            v = self.ctx.emit("reshape", [v], {"shape": ()})
        return v if v.dtype == self.dtype else self.ctx.emit("cast", [v], {"to": self.dtype})

    def c(self, value: float) -> Value:
        return self.ctx.const(np.array(value, dtype=self.dtype))

    def __call__(self, op: str, *args) -> Value:
        return self.ctx.emit(op, list(args))

    def axpy(self, a: float, x: Value, y: Value) -> Value:   # a * x + y
        return self("add", self("mul", self.c(a), x), y)


def _groups(ctx, tensors, n_groups: int) -> list[list[Value]]:
    if not tensors or len(tensors) % n_groups:
        raise ModelFormatError(f"node '{ctx.node_name}' ({ctx.op_type}): {len(tensors)} tensor "
                               f"inputs after R and T; expected a multiple of {n_groups}")
    n = len(tensors) // n_groups
    return [list(tensors[k * n:(k + 1) * n]) for k in range(n_groups)]


@converter(_DOMAIN + "Adagrad")
def _adagrad(ctx, r, t, *tensors, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    xs, gs, hs = _groups(ctx, tensors, 3)
    rule = _Rule(ctx, r, t, xs[0].dtype)
    # r / (1 + t * decay)
    rate = rule("div", rule.r, rule.axpy(decay_factor, rule.t, rule.c(1.0)))
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        g = rule.axpy(norm_coefficient, x, g)
        h2 = rule("add", h, rule("mul", g, g))
        scale = rule("add", rule("sqrt", h2), rule.c(epsilon))
        new_x.append(rule("sub", x, rule("div", rule("mul", rate, g), scale)))
        new_h.append(h2)
    return name_outputs(ctx, new_x + new_h)


@converter(_DOMAIN + "Adam")
def _adam(ctx, r, t, *tensors, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0,
          norm_coefficient_post=0.0):
    xs, gs, vs, hs = _groups(ctx, tensors, 4)
    rule = _Rule(ctx, r, t, xs[0].dtype)
    # after the first step: r * sqrt(1 - beta^t) / (1 - alpha^t)
    def power(base: float) -> Value:   # base^t as exp(t * ln(base))
        with np.errstate(divide="ignore"):
            log = float(np.log(base))
        return rule("exp", rule("mul", rule.c(log), rule.t))

    corr = rule("div", rule("sqrt", rule("sub", rule.c(1.0), power(beta))),
                rule("sub", rule.c(1.0), power(alpha)))
    rate = rule("where", rule.first, rule("mul", rule.r, corr), rule.r)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g = rule.axpy(norm_coefficient, x, g)
        v2 = rule.axpy(alpha, v, rule("mul", rule.c(1.0 - alpha), g))
        h2 = rule.axpy(beta, h, rule("mul", rule.c(1.0 - beta), rule("mul", g, g)))
        scale = rule("add", rule("sqrt", h2), rule.c(epsilon))
        x2 = rule("sub", x, rule("mul", rate, rule("div", v2, scale)))
        new_x.append(rule("mul", rule.c(1.0 - norm_coefficient_post), x2))
        new_v.append(v2)
        new_h.append(h2)
    return name_outputs(ctx, new_x + new_v + new_h)


@converter(_DOMAIN + "Momentum")
def _momentum(ctx, r, t, *tensors, alpha, beta, mode, norm_coefficient):
    if mode not in ("standard", "nesterov"):
        raise ModelFormatError(f"node '{ctx.node_name}' (Momentum): mode {mode!r}; expected "
                               "'standard' or 'nesterov'")
    xs, gs, vs = _groups(ctx, tensors, 3)
    rule = _Rule(ctx, r, t, xs[0].dtype)
    beta_t = rule("where", rule.first, rule.c(beta), rule.c(1.0))   # 1 at the first step
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        g = rule.axpy(norm_coefficient, x, g)
        v2 = rule.axpy(alpha, v, rule("mul", beta_t, g))
        step = v2 if mode == "standard" else rule("add", g, rule("mul", rule.c(alpha), v2))
        new_x.append(rule("sub", x, rule("mul", rule.r, step)))
        new_v.append(v2)
    return name_outputs(ctx, new_x + new_v)


_batch_norm = convert_batch_norm


@converter("BatchNormalization")
def _batch_norm_training(ctx, x, scale, bias, mean, var, epsilon=1e-5, momentum=0.9,
                         training_mode=0, **legacy):
    """Training mode (opset 14+): normalised by the batch's statistics (the mean and the
    population variance over every axis but the channels), with the running statistics
    updated as input * momentum + batch * (1 - momentum)."""
    if not training_mode or ctx.opset < 14:
        return _batch_norm(ctx, x, scale, bias, mean, var, epsilon=epsilon,
                           momentum=momentum, training_mode=training_mode, **legacy)
    rank, channels = len(x.shape), x.shape[1]
    axes = tuple(a for a in range(rank) if a != 1)
    emit = ctx.emit

    def c(value):
        return ctx.const(np.array(value, dtype=x.dtype))

    def per_channel(v):   # [C] -> [C, 1, ...] against x
        return emit("reshape", [v], {"shape": (channels,) + (1,) * (rank - 2)})

    batch_mean = emit("reduce_mean", [x], {"axes": axes, "keepdims": 1})
    centred = emit("sub", [x, batch_mean])
    batch_var = emit("reduce_mean", [emit("mul", [centred, centred])],
                     {"axes": axes, "keepdims": 1})
    inv = emit("div", [c(1.0), emit("sqrt", [emit("add", [batch_var, c(float(epsilon))])])])
    y = emit("add", [emit("mul", [emit("mul", [centred, inv]), per_channel(scale)]),
                     per_channel(bias)])

    def running(old, batch):
        flat = emit("reshape", [batch], {"shape": (channels,)})
        return emit("add", [emit("mul", [old, c(float(momentum))]),
                            emit("mul", [flat, c(1.0 - float(momentum))])])

    results = [y, running(mean, batch_mean), running(var, batch_var)]
    return name_outputs(ctx, results[:max(len(ctx.output_names), 1)])
