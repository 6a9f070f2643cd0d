"""ONNX RNN, GRU and LSTM, unrolled over the (static) sequence length into graph ops.

The input projection of every time step is one matmul ([T * batch, input] x W^T); each step
then adds the recurrent matmul (h x R^T) and applies the gate activations elementwise, so the
fusion pass groups every step into a matmul with its elementwise epilogue. Both directions,
the activations of the spec (with their alpha/beta), clip, initial states, peepholes,
layout=1 and sequence_lens (a run-time input: past a sequence's length its state stays and
its Y rows are 0) are supported.
"""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ir import Value
from .core import unsupported_error, converter
from .control import name_outputs, stack, take_index

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "GRU": ("Sigmoid", "Tanh"),
                        "LSTM": ("Sigmoid", "Tanh", "Tanh")}
# activation -> (its attributes in the order alpha, beta, with the ONNX defaults)
_ACTIVATION_PARAMS = {"Relu": (), "Tanh": (), "Sigmoid": (), "Softsign": (), "Softplus": (),
                      "Affine": (1.0, 0.0), "LeakyRelu": (0.01,), "ThresholdedRelu": (1.0,),
                      "ScaledTanh": (1.0, 1.0), "HardSigmoid": (0.2, 0.5), "Elu": (1.0,)}


def _activations(ctx, kind: str, names, alphas, betas, dirs: int) -> list[list]:
    """Per direction, the activation functions as (name, params) pairs; alpha and beta
    values are consumed in order by the activations that take them."""
    n = len(_DEFAULT_ACTIVATIONS[kind])
    names = list(names) if names else list(_DEFAULT_ACTIVATIONS[kind]) * dirs
    if len(names) != n * dirs:
        raise ModelFormatError(f"node '{ctx.node_name}' ({kind}): {len(names)} activations; "
                               f"expected {n * dirs}")
    alphas, betas = list(alphas or ()), list(betas or ())
    resolved = []
    for name in names:
        key = next((k for k in _ACTIVATION_PARAMS if k.lower() == str(name).lower()), None)
        if key is None:
            raise unsupported_error(ctx, f"the activation {name!r}")
        params = list(_ACTIVATION_PARAMS[key])
        if params:
            params[0] = alphas.pop(0) if alphas else params[0]
        if len(params) > 1:
            params[1] = betas.pop(0) if betas else params[1]
        resolved.append((key, tuple(float(p) for p in params)))
    return [resolved[d * n:(d + 1) * n] for d in range(dirs)]


def _apply(ctx, act, x: Value) -> Value:
    name, params = act
    simple = {"Relu": "relu", "Tanh": "tanh", "Sigmoid": "sigmoid", "Softsign": "softsign",
              "Softplus": "softplus"}
    if name in simple:
        return ctx.emit(simple[name], [x])
    if name == "LeakyRelu":
        return ctx.emit("leaky_relu", [x], {"alpha": params[0]})
    if name == "ThresholdedRelu":
        return ctx.emit("thresholded_relu", [x], {"alpha": params[0]})
    if name == "Elu":
        return ctx.emit("elu", [x], {"alpha": params[0]})
    if name == "HardSigmoid":
        return ctx.emit("hard_sigmoid", [x], {"alpha": params[0], "beta": params[1]})
    alpha, beta = (_scalar(ctx, p, x.dtype) for p in params)
    if name == "Affine":
        return ctx.emit("add", [ctx.emit("mul", [x, alpha]), beta])
    # ScaledTanh: alpha * tanh(beta * x)
    return ctx.emit("mul", [ctx.emit("tanh", [ctx.emit("mul", [x, beta])]), alpha])


def _scalar(ctx, value: float, dtype: str) -> Value:
    return ctx.const(np.array(value, dtype=dtype))


def _cols(ctx, x: Value, start: int, stop: int) -> Value:
    """x[:, start:stop] of a 2-D value."""
    return ctx.emit("slice", [x], {"starts": (0, start), "ends": (x.shape[0], stop),
                                   "steps": (1, 1)})


class _Cell:
    """What one step needs: the activations, clip, and the sizes."""

    def __init__(self, ctx, acts, clip, hidden: int, dtype: str):
        self.ctx, self.acts, self.hidden, self.dtype = ctx, acts, hidden, dtype
        self.clip = None if clip is None else float(clip)

    def act(self, k: int, x: Value) -> Value:
        if self.clip is not None:
            x = self.ctx.emit("clip", [x], {"min": -self.clip, "max": self.clip})
        return _apply(self.ctx, self.acts[k], x)

    def gate(self, x: Value, k: int) -> Value:
        return _cols(self.ctx, x, k * self.hidden, (k + 1) * self.hidden)


def _step(kind: str, cell: _Cell, xt, h, c, rt, rb, peep, lbr: int, input_forget: int):
    """One time step: (new h, new c) from the projected input xt (with both biases, except
    GRU's recurrent one, `rb`), the previous h and c, and R^T."""
    ctx = cell.ctx
    hr = ctx.emit("matmul", [h, rt])
    if kind == "RNN":
        return cell.act(0, ctx.emit("add", [xt, hr])), None
    if kind == "GRU":
        pre_z = ctx.emit("add", [cell.gate(xt, 0), cell.gate(hr, 0)])
        pre_r = ctx.emit("add", [cell.gate(xt, 1), cell.gate(hr, 1)])
        if rb is not None:
            pre_z = ctx.emit("add", [pre_z, cell.gate(rb, 0)])
            pre_r = ctx.emit("add", [pre_r, cell.gate(rb, 1)])
        z, r = cell.act(0, pre_z), cell.act(0, pre_r)
        if lbr:
            rec = cell.gate(hr, 2) if rb is None else ctx.emit("add", [cell.gate(hr, 2),
                                                                      cell.gate(rb, 2)])
            rec = ctx.emit("mul", [r, rec])
        else:
            rh_t = _cols(ctx, rt, 2 * cell.hidden, 3 * cell.hidden)
            rec = ctx.emit("matmul", [ctx.emit("mul", [r, h]), rh_t])
            if rb is not None:
                rec = ctx.emit("add", [rec, cell.gate(rb, 2)])
        cand = cell.act(1, ctx.emit("add", [cell.gate(xt, 2), rec]))
        one = _scalar(ctx, 1.0, cell.dtype)
        keep = ctx.emit("mul", [z, h])
        return ctx.emit("add", [ctx.emit("mul", [ctx.emit("sub", [one, z]), cand]), keep]), None
    # LSTM, gates in the order i, o, f, c; peepholes in the order i, o, f
    pre = ctx.emit("add", [xt, hr])
    pre_i, pre_o, pre_f, pre_c = (cell.gate(pre, k) for k in range(4))
    if peep is not None:
        pre_i = ctx.emit("add", [pre_i, ctx.emit("mul", [cell.gate(peep, 0), c])])
        pre_f = ctx.emit("add", [pre_f, ctx.emit("mul", [cell.gate(peep, 2), c])])
    i = cell.act(0, pre_i)
    f = (ctx.emit("sub", [_scalar(ctx, 1.0, cell.dtype), i]) if input_forget
         else cell.act(0, pre_f))
    c_new = ctx.emit("add", [ctx.emit("mul", [f, c]),
                             ctx.emit("mul", [i, cell.act(1, pre_c)])])
    if peep is not None:
        pre_o = ctx.emit("add", [pre_o, ctx.emit("mul", [cell.gate(peep, 1), c_new])])
    o = cell.act(0, pre_o)
    return ctx.emit("mul", [o, _apply(ctx, cell.acts[2], c_new)]), c_new


def _recurrent(ctx, x, w, r, b=None, seq_lens=None, init_h=None, init_c=None, peep=None,
               activation_alpha=None, activation_beta=None, activations=None, clip=None,
               direction="forward", hidden_size=None, layout=0, linear_before_reset=0,
               input_forget=0):
    kind = ctx.op_type
    gates = _GATES[kind]
    if direction not in ("forward", "reverse", "bidirectional"):
        raise ModelFormatError(f"node '{ctx.node_name}' ({kind}): direction {direction!r}; "
                               "expected forward, reverse or bidirectional")
    dirs = 2 if direction == "bidirectional" else 1
    hidden = int(hidden_size) if hidden_size is not None else r.shape[-1]
    if len(x.shape) != 3 or w.shape != (dirs, gates * hidden, x.shape[-1]) or \
            r.shape != (dirs, gates * hidden, hidden):
        raise ModelFormatError(f"node '{ctx.node_name}' ({kind}): X {list(x.shape)}, W "
                               f"{list(w.shape)}, R {list(r.shape)} do not fit hidden_size="
                               f"{hidden} and {dirs} direction(s)")
    if layout:
        x = ctx.emit("transpose", [x], {"perm": (1, 0, 2)})
        init_h, init_c = (None if s is None else ctx.emit("transpose", [s], {"perm": (1, 0, 2)})
                          for s in (init_h, init_c))
    steps, batch, size = x.shape
    acts = _activations(ctx, kind, activations, activation_alpha, activation_beta, dirs)
    flat_x = ctx.emit("reshape", [x], {"shape": (steps * batch, size)})
    masks = None
    if seq_lens is not None:
        lens = ctx.emit("reshape", [seq_lens], {"shape": (batch, 1)})
        masks = [ctx.emit("less", [ctx.const(np.array(t, dtype=seq_lens.dtype)), lens])
                 for t in range(steps)]
    ys, hs, cs = [], [], []
    for d in range(dirs):
        reverse = direction == "reverse" or d == 1
        cell = _Cell(ctx, acts[d], clip, hidden, x.dtype)
        wt = ctx.emit("transpose", [take_index(ctx, w, 0, d)], {"perm": (1, 0)})
        rt = ctx.emit("transpose", [take_index(ctx, r, 0, d)], {"perm": (1, 0)})
        proj = ctx.emit("matmul", [flat_x, wt])
        rb = None
        if b is not None:
            bd = ctx.emit("reshape", [take_index(ctx, b, 0, d)], {"shape": (1, 2 * gates * hidden)})
            wb, rb = _cols(ctx, bd, 0, gates * hidden), _cols(ctx, bd, gates * hidden,
                                                                2 * gates * hidden)
            proj = ctx.emit("add", [proj, wb])
            if kind != "GRU":   # GRU's recurrent bias of the candidate sits inside r * (...)
                proj, rb = ctx.emit("add", [proj, rb]), None
        proj = ctx.emit("reshape", [proj], {"shape": (steps, batch, gates * hidden)})
        zeros = ctx.const(np.zeros((batch, hidden), dtype=x.dtype))
        h = zeros if init_h is None else take_index(ctx, init_h, 0, d)
        c = zeros if init_c is None else take_index(ctx, init_c, 0, d)
        peep_d = None if peep is None else ctx.emit("reshape", [take_index(ctx, peep, 0, d)],
                                                    {"shape": (1, 3 * hidden)})
        out = [None] * steps
        for t in (reversed(range(steps)) if reverse else range(steps)):
            h_new, c_new = _step(kind, cell, take_index(ctx, proj, 0, t), h, c, rt, rb, peep_d,
                                 int(linear_before_reset), int(input_forget))
            if masks is None:
                h, c, out[t] = h_new, c_new, h_new
            else:
                h = ctx.emit("where", [masks[t], h_new, h])
                if c_new is not None:
                    c = ctx.emit("where", [masks[t], c_new, c])
                out[t] = ctx.emit("where", [masks[t], h_new, zeros])
        ys.append(stack(ctx, out, 0))
        hs.append(h)
        cs.append(c)
    y = stack(ctx, ys, 1)
    states = [stack(ctx, hs, 0)] + ([stack(ctx, cs, 0)] if kind == "LSTM" else [])
    if layout:
        y = ctx.emit("transpose", [y], {"perm": (2, 0, 1, 3)})
        states = [ctx.emit("transpose", [s], {"perm": (1, 0, 2)}) for s in states]
    results = [y] + states
    return name_outputs(ctx, results[:len(ctx.output_names)])


converter("RNN", "GRU", "LSTM")(_recurrent)
