"""ONNX Attention (opset 23/24) composed from graph ops: head split, KV cache concat, grouped
KV heads, scaled Q @ K^T, softcap, the additive bias (attention mask, causal and sliding-window
masks), softmax and P @ V. The matmuls are anchors that absorb their epilogues like any other.

The causal and window masks depend only on shapes, so they are constants; a runtime attention
mask stays a kernel argument, and so does nonpad_kv_seqlen (an external KV cache's valid length
per batch): the padding mask and the causal/window masks aligned to it are computed from it at
run time. Rows that every bias entry masks give 0, as the spec asks.
"""
from __future__ import annotations

import numpy as np

from ...te.errors import ModelFormatError
from ..ir import Value
from .core import unsupported_error, converter


def _heads(ctx, x: Value, heads: int | None, what: str) -> Value:
    """[B, S, heads * d] -> [B, heads, S, d]; a 4-D input is already split."""
    if len(x.shape) == 4:
        return x
    if len(x.shape) != 3 or not heads or x.shape[2] % heads:
        raise ModelFormatError(f"node '{ctx.node_name}' (Attention): {what} {list(x.shape)} "
                               f"must be [B, S, heads * head_size] with {heads} heads, or "
                               "4-D [B, heads, S, head_size]")
    b, s, hidden = x.shape
    y = ctx.emit("reshape", [x], {"shape": (b, s, heads, hidden // heads)})
    return ctx.emit("transpose", [y], {"perm": (0, 2, 1, 3)})


def _repeat_heads(ctx, x: Value, groups: int) -> Value:
    """[B, H, L, d] -> [B, H * groups, L, d], each head repeated `groups` times in a row."""
    if groups == 1:
        return x
    b, h, n, d = x.shape
    y = ctx.emit("reshape", [x], {"shape": (b, h, 1, n, d)})
    y = ctx.emit("broadcast_to", [y], {"shape": (b, h, groups, n, d)})
    return ctx.emit("reshape", [y], {"shape": (b, h * groups, n, d)})


def _static_mask(s: int, n: int, offset: int, causal: bool, left: int, right: int):
    """Allowed (query i, key j) pairs of the causal / sliding-window masks, or None."""
    if not causal and left < 0 and right < 0:
        return None
    i = np.arange(s)[:, None] + offset
    j = np.arange(n)[None, :]
    allowed = np.ones((s, n), bool)
    if causal:
        allowed &= j <= i
    if left >= 0:
        allowed &= i - j <= left
    if right >= 0:
        allowed &= j - i <= right
    return allowed


def _runtime_allowed(ctx, nonpad: Value, b: int, s: int, n: int, causal: bool, left: int,
                     right: int) -> Value:
    """Allowed (batch, 1, query i, key j) for an external KV cache whose valid length per batch,
    nonpad_kv_seqlen[b], arrives at run time: keys j < length, and the causal / sliding-window
    masks aligned to the end of the valid keys (query i sits at i + length - s)."""
    lens = nonpad if nonpad.dtype == "int64" else ctx.emit("cast", [nonpad], {"to": "int64"})
    lens = ctx.emit("reshape", [lens], {"shape": (b, 1, 1, 1)})
    keys = ctx.const(np.arange(n, dtype=np.int64).reshape(1, 1, 1, n))
    allowed = ctx.emit("less", [keys, lens])

    def both(more: Value):
        return ctx.emit("logical_and", [allowed, more])

    def not_greater(a: Value, c: Value) -> Value:
        return ctx.emit("logical_not", [ctx.emit("greater", [a, c])])

    if causal or left >= 0 or right >= 0:
        offset = ctx.emit("sub", [lens, ctx.const(np.array(s, dtype=np.int64))])
        j_minus_i = (np.arange(n)[None, :] - np.arange(s)[:, None]).astype(np.int64)
        if causal:       # j <= i + offset
            allowed = both(not_greater(ctx.const(j_minus_i.reshape(1, 1, s, n)), offset))
        if left >= 0:    # i + offset - j <= left
            allowed = both(not_greater(offset, ctx.const((j_minus_i + left).reshape(
                1, 1, s, n))))
        if right >= 0:   # j - (i + offset) <= right
            allowed = both(not_greater(ctx.const((j_minus_i - right).reshape(1, 1, s, n)),
                                       offset))
    return allowed


def _bias(ctx, mask: Value | None, allowed, dtype: str, n: int,
          runtime_allowed: Value | None = None) -> Value | None:
    """The additive bias (0 or -inf where masked, plus a float mask) of shape [..., S, n]."""
    neg = ctx.const(np.array(-np.inf, dtype=dtype))
    zero = ctx.const(np.array(0.0, dtype=dtype))
    bias = None
    if mask is not None:
        if mask.shape[-1] < n:   # a short mask is padded with masked-out keys
            pads = [0] * (2 * len(mask.shape))
            pads[2 * len(mask.shape) - 1] = n - mask.shape[-1]
            fill = 0.0 if mask.dtype == "bool" else -np.inf
            mask = ctx.emit("pad", [mask], {"pads": tuple(pads), "mode": "constant",
                                            "value": fill})
        bias = ctx.emit("where", [mask, zero, neg]) if mask.dtype == "bool" else (
            mask if mask.dtype == dtype else ctx.emit("cast", [mask], {"to": dtype}))
    if allowed is not None:
        static = ctx.emit("where", [ctx.const(allowed), zero, neg])
        bias = static if bias is None else ctx.emit("add", [bias, static])
    if runtime_allowed is not None:
        dynamic = ctx.emit("where", [runtime_allowed, zero, neg])
        bias = dynamic if bias is None else ctx.emit("add", [bias, dynamic])
    return bias


@converter("Attention")
def _attention(ctx, q, k, v, attn_mask=None, past_key=None, past_value=None,
               nonpad_kv_seqlen=None, is_causal=0, kv_num_heads=None, q_num_heads=None,
               qk_matmul_output_mode=0, scale=None, softcap=0.0, softmax_precision=None,
               left_window_size=-1, right_window_size=-1):
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise ModelFormatError(f"node '{ctx.node_name}' (Attention): nonpad_kv_seqlen (an "
                               "external KV cache) cannot be combined with past_key/past_value")
    if (past_key is None) != (past_value is None):
        raise ModelFormatError(f"node '{ctx.node_name}' (Attention): past_key and past_value "
                               "must be given together")
    three_d = len(q.shape) == 3
    q4 = _heads(ctx, q, q_num_heads, "Q")
    k4 = _heads(ctx, k, kv_num_heads, "K")
    v4 = _heads(ctx, v, kv_num_heads, "V")
    past = 0
    if past_key is not None:
        past = past_key.shape[2]
        k4 = ctx.emit("concat", [past_key, k4], {"axis": 2})
        v4 = ctx.emit("concat", [past_value, v4], {"axis": 2})
    present_k, present_v = k4, v4
    b, qh, s, d = q4.shape
    kvh, n = k4.shape[1], k4.shape[2]
    if qh % kvh or v4.shape[1] != kvh:
        raise ModelFormatError(f"node '{ctx.node_name}' (Attention): {qh} query heads do not "
                               f"group over {kvh} key/value heads")
    k4, v4 = _repeat_heads(ctx, k4, qh // kvh), _repeat_heads(ctx, v4, qh // kvh)
    dtype = q.dtype
    factor = float(scale) if scale is not None else 1.0 / np.sqrt(d)
    # as the spec's function body: sqrt(scale), in the input's dtype, scales Q and K each
    root = ctx.const(np.array(np.sqrt(factor), dtype=dtype))
    qs = ctx.emit("mul", [q4, root])
    kt = ctx.emit("transpose", [ctx.emit("mul", [k4, root])], {"perm": (0, 1, 3, 2)})
    scores = ctx.emit("matmul", [qs, kt])
    if softcap and softcap > 0:
        cap = ctx.const(np.array(softcap, dtype=dtype))
        scores = ctx.emit("mul", [ctx.emit("tanh", [ctx.emit("div", [scores, cap])]), cap])
    capped = scores
    window = (bool(is_causal), int(left_window_size), int(right_window_size))
    if nonpad_kv_seqlen is None:
        bias = _bias(ctx, attn_mask, _static_mask(s, n, past, *window), dtype, n)
    else:
        bias = _bias(ctx, attn_mask, None, dtype, n,
                     _runtime_allowed(ctx, nonpad_kv_seqlen, b, s, n, *window))
    if bias is not None:
        scores = ctx.emit("add", [scores, bias])
    probs = ctx.emit("softmax", [scores], {"axis": 3})
    if bias is not None:   # rows the bias masks entirely attend nothing: 0, not NaN
        top = ctx.emit("reduce_max", [bias], {"axes": (len(bias.shape) - 1,), "keepdims": 1})
        dead = ctx.emit("equal", [top, ctx.const(np.array(-np.inf, dtype=dtype))])
        probs = ctx.emit("where", [dead, ctx.const(np.array(0.0, dtype=dtype)), probs])
    out = ctx.emit("matmul", [probs, v4], final=not three_d)
    if three_d:
        out = ctx.emit("transpose", [out], {"perm": (0, 2, 1, 3)})
        out = ctx.emit("reshape", [out], {"shape": (b, s, qh * v4.shape[3])}, final=True)
    # modes 0 and 1 both give the (softcapped) scores before the bias, as onnx's reference does
    qk_out = {0: capped, 1: capped, 2: scores, 3: probs}.get(int(qk_matmul_output_mode))
    if qk_out is None:
        raise ModelFormatError(f"node '{ctx.node_name}' (Attention): qk_matmul_output_mode "
                               f"{qk_matmul_output_mode}; expected 0, 1, 2 or 3")
    return out, present_k, present_v, qk_out


def _slice_last(ctx, x: Value, start: int, stop: int, step: int = 1) -> Value:
    rank = len(x.shape)
    starts, ends, steps = [0] * rank, list(x.shape), [1] * rank
    starts[-1], ends[-1], steps[-1] = start, stop, step
    return ctx.emit("slice", [x], {"starts": tuple(starts), "ends": tuple(ends),
                                   "steps": tuple(steps)})


@converter("RotaryEmbedding")
def _rotary(ctx, x, cos_cache, sin_cache, position_ids=None, interleaved=0, num_heads=0,
            rotary_embedding_dim=0):
    """Rotate pairs of the first rotary_embedding_dim features of every head by the angle
    whose cos/sin the caches hold (at position_ids, or per batch and position)."""
    four_d = len(x.shape) == 4
    if four_d:
        b, h, s, d = x.shape
        xs = ctx.emit("transpose", [x], {"perm": (0, 2, 1, 3)})          # [B, S, H, D]
    elif len(x.shape) == 3 and num_heads and x.shape[2] % num_heads == 0:
        b, s, hidden = x.shape
        h, d = num_heads, hidden // num_heads
        xs = ctx.emit("reshape", [x], {"shape": (b, s, h, d)})
    else:
        raise ModelFormatError(f"node '{ctx.node_name}' (RotaryEmbedding): input "
                               f"{list(x.shape)} must be [B, H, S, D], or [B, S, H * D] with "
                               f"num_heads (got {num_heads})")
    rd = int(rotary_embedding_dim) or d
    half = rd // 2
    cos, sin = cos_cache, sin_cache
    if position_ids is not None:
        cos = ctx.emit("gather", [cos, position_ids], {"axis": 0})      # [B, S, rd / 2]
        sin = ctx.emit("gather", [sin, position_ids], {"axis": 0})
    if tuple(cos.shape) != (b, s, half):
        raise ModelFormatError(f"node '{ctx.node_name}' (RotaryEmbedding): the cos/sin "
                               f"caches give {list(cos.shape)}, expected {[b, s, half]}")
    cos = ctx.emit("reshape", [cos], {"shape": (b, s, 1, half)})
    sin = ctx.emit("reshape", [sin], {"shape": (b, s, 1, half)})
    rot = _slice_last(ctx, xs, 0, rd) if rd < d else xs
    if interleaved:
        x1, x2 = _slice_last(ctx, rot, 0, rd, 2), _slice_last(ctx, rot, 1, rd, 2)
    else:
        x1, x2 = _slice_last(ctx, rot, 0, half), _slice_last(ctx, rot, half, rd)
    real = ctx.emit("sub", [ctx.emit("mul", [cos, x1]), ctx.emit("mul", [sin, x2])])
    imag = ctx.emit("add", [ctx.emit("mul", [sin, x1]), ctx.emit("mul", [cos, x2])])
    if interleaved:
        pair = (b, s, h, half, 1)
        y = ctx.emit("concat", [ctx.emit("reshape", [real], {"shape": pair}),
                                ctx.emit("reshape", [imag], {"shape": pair})], {"axis": 4})
        y = ctx.emit("reshape", [y], {"shape": (b, s, h, rd)})
    else:
        y = ctx.emit("concat", [real, imag], {"axis": 3})
    if rd < d:
        y = ctx.emit("concat", [y, _slice_last(ctx, xs, rd, d)], {"axis": 3})
    if four_d:
        return ctx.emit("transpose", [y], {"perm": (0, 2, 1, 3)}, final=True)
    return ctx.emit("reshape", [y], {"shape": x.shape}, final=True)
