"""The numpy reference executor: one plain numpy function per graph op.

This is the "numpy baseline" Kiln is compared against and the oracle of the graph tests; it
must agree with onnxruntime. Each implementation takes the node (for its attrs) and the input
arrays and returns one array or a tuple of arrays. Clarity beats speed here, except that
conv2d uses an im2col view plus a BLAS contraction so whole models run in seconds.
"""
from __future__ import annotations

import logging
from typing import Callable, Mapping, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided
from scipy import special

from ..te.errors import KernelArgumentError
from ..te.ops import (pack_conv_transpose_weight, unpack_conv_transpose_weight,
                      unpack_conv_weight, unpack_conv_weight_blocked, unpack_depthwise_weight,
                      unpack_grouped_conv_weight,
                      unpack_matmul_weight)
from ..te.ops.winograd import winograd_matrices_f64
from .ops.index_bounds import INDEX_INPUTS, check_node_indices
from .ir import Graph, Node

log = logging.getLogger(__name__)

Impl = Callable[..., "np.ndarray | tuple[np.ndarray, ...]"]
IMPLS: dict[str, Impl] = {}


def _impl(*names: str):
    def deco(fn: Impl) -> Impl:
        for n in names:
            IMPLS[n] = fn
        return fn
    return deco


def _unary(name: str, fn: Callable[[np.ndarray], np.ndarray]) -> None:
    IMPLS[name] = lambda node, x: fn(x).astype(x.dtype, copy=False)


for _name, _fn in {
    "relu": lambda x: np.maximum(x, 0), "neg": np.negative, "exp": np.exp, "log": np.log,
    "abs": np.abs, "sqrt": np.sqrt, "reciprocal": lambda x: 1 / x, "erf": special.erf,
    "tanh": np.tanh, "sigmoid": special.expit, "identity": lambda x: x.copy(),
    "hard_swish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
}.items():
    _unary(_name, _fn)

_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum,
           "min": np.minimum, "equal": np.equal, "less": np.less, "greater": np.greater,
           "logical_and": np.logical_and, "logical_or": np.logical_or}
for _name, _fn in _BINARY.items():
    IMPLS[_name] = (lambda f: lambda node, a, b: np.asarray(f(a, b)))(_fn)


@_impl("div")
def _div(node, a, b):
    if np.issubdtype(a.dtype, np.integer):
        return np.trunc(a / b).astype(a.dtype)  # ONNX integer Div truncates toward zero
    return np.divide(a, b)


@_impl("pow")
def _pow(node, a, b):
    return np.power(a, b.astype(a.dtype)).astype(a.dtype, copy=False)


@_impl("logical_not")
def _not(node, x):
    return np.logical_not(x)


@_impl("cast")
def _cast(node, x):
    return x.astype(node.attrs["to"])


@_impl("where")
def _where(node, c, a, b):
    return np.where(c, a, b)


@_impl("leaky_relu")
def _leaky_relu(node, x):
    return np.where(x >= 0, x, x * x.dtype.type(node.attrs["alpha"]))


@_impl("clip")
def _clip(node, x):
    lo, hi = node.attrs["min"], node.attrs["max"]
    out = x
    if lo is not None:
        out = np.maximum(out, x.dtype.type(lo))
    if hi is not None:
        out = np.minimum(out, x.dtype.type(hi))
    return out.astype(x.dtype, copy=False)


@_impl("hard_sigmoid")
def _hard_sigmoid(node, x):
    t = x.dtype.type
    return np.clip(t(node.attrs["alpha"]) * x + t(node.attrs["beta"]), 0, 1).astype(x.dtype)


@_impl("gelu")
def _gelu(node, x):
    if node.attrs["approximate"] == "tanh":
        inner = np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)
        return (0.5 * x * (1 + np.tanh(inner))).astype(x.dtype)
    return (0.5 * x * (1 + special.erf(x / np.sqrt(2)))).astype(x.dtype)


@_impl("batch_norm")
def _batch_norm(node, x, scale, bias, mean, var):
    shape = (1, -1) + (1,) * (x.ndim - 2)
    inv = scale / np.sqrt(var + x.dtype.type(node.attrs["epsilon"]))
    return (x - mean.reshape(shape)) * inv.reshape(shape) + bias.reshape(shape)


# -- injective ---------------------------------------------------------------------------------

@_impl("reshape")
def _reshape(node, x):
    return x.reshape(node.attrs["shape"]).copy()


@_impl("transpose")
def _transpose(node, x):
    return np.transpose(x, node.attrs["perm"]).copy()


@_impl("broadcast_to")
def _broadcast_to(node, x):
    return np.array(np.broadcast_to(x, node.outputs[0].shape))


@_impl("concat")
def _concat(node, *xs):
    return np.concatenate(xs, axis=node.attrs["axis"])


@_impl("split")
def _split(node, x):
    edges = np.cumsum(node.attrs["sizes"])[:-1]
    return tuple(p.copy() for p in np.split(x, edges, axis=node.attrs["axis"]))


@_impl("slice")
def _slice(node, x):
    a = node.attrs
    idx = tuple(slice(b, None if e < 0 else e, s)
                for b, e, s in zip(a["starts"], a["ends"], a["steps"]))
    return x[idx].copy()


@_impl("gather")
def _gather(node, data, idx):
    axis = node.attrs["axis"]
    idx = np.where(idx < 0, idx + data.shape[axis], idx)
    return np.take(data, idx, axis=axis)


@_impl("gather_nd")
def _gather_nd(node, data, idx):
    b = node.attrs["batch_dims"]
    batch = data.shape[:b]
    last = idx.shape[-1]
    flat_data = data.reshape((-1,) + data.shape[b:])
    flat_idx = idx.reshape((-1,) + idx.shape[b:])
    out = []
    for i in range(flat_data.shape[0] if b else 1):
        d = flat_data[i] if b else data
        ix = flat_idx[i] if b else idx
        ix = np.where(ix < 0, ix + np.array(d.shape[:last]), ix)
        out.append(d[tuple(np.moveaxis(ix, -1, 0))])
    res = np.stack(out) if b else out[0]
    return res.reshape(batch + idx.shape[b:-1] + data.shape[b + last:])


@_impl("pad")
def _pad(node, x, value=None):
    pads, mode = node.attrs["pads"], node.attrs["mode"]
    r = x.ndim
    begin, end = pads[:r], pads[r:]
    crop = tuple(slice(max(-b, 0), x.shape[k] - max(-e, 0))
                 for k, (b, e) in enumerate(zip(begin, end)))
    x = x[crop]  # negative pads crop
    width = [(max(b, 0), max(e, 0)) for b, e in zip(begin, end)]
    if mode == "constant":
        fill = node.attrs["value"] if value is None else value.item()
        return np.pad(x, width, mode="constant", constant_values=fill)
    return np.pad(x, width, mode={"reflect": "reflect", "edge": "edge"}[mode])


# -- reductions --------------------------------------------------------------------------------

def _reducer(fn):
    return lambda node, x: np.asarray(
        fn(x, axis=node.attrs["axes"], keepdims=bool(node.attrs["keepdims"]))).astype(x.dtype)


IMPLS["reduce_sum"] = _reducer(np.sum)
IMPLS["reduce_mean"] = _reducer(np.mean)
IMPLS["reduce_max"] = _reducer(np.max)
IMPLS["reduce_min"] = _reducer(np.min)
IMPLS["reduce_l2"] = _reducer(lambda x, axis, keepdims: np.sqrt(
    np.sum(np.square(x), axis=axis, keepdims=keepdims)))


@_impl("softmax")
def _softmax(node, x):
    e = np.exp(x - np.max(x, axis=node.attrs["axis"], keepdims=True))
    return e / np.sum(e, axis=node.attrs["axis"], keepdims=True)


@_impl("log_softmax")
def _log_softmax(node, x):
    axis = node.attrs["axis"]
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


@_impl("layer_norm")
def _layer_norm(node, x, scale, bias=None):
    axes = tuple(range(node.attrs["axis"], x.ndim))
    xs = x.astype(np.float32) if node.attrs["stash_type"] == 1 else x
    mean = xs.mean(axis=axes, keepdims=True)
    var = np.square(xs - mean).mean(axis=axes, keepdims=True)
    y = ((xs - mean) / np.sqrt(var + node.attrs["epsilon"])).astype(x.dtype)
    y = y * scale
    return y if bias is None else y + bias


def _windows(x: np.ndarray, kernel, strides, dilations, out_hw) -> np.ndarray:
    """View of shape (N, C, OH, OW, KH, KW) over an already padded NCHW array."""
    n, c, _, _ = x.shape
    sn, sc, sh, sw = x.strides
    shape = (n, c, out_hw[0], out_hw[1], kernel[0], kernel[1])
    st = (sn, sc, sh * strides[0], sw * strides[1], sh * dilations[0], sw * dilations[1])
    return as_strided(x, shape, st, writeable=False)


def pad_hw(x: np.ndarray, pads, fill, extra=(0, 0)) -> np.ndarray:
    t, l, b, r = pads
    return np.pad(x, ((0, 0), (0, 0), (t, b + extra[0]), (l, r + extra[1])),
                  constant_values=fill)


def _ceil_extra(node, x) -> tuple[int, int]:
    """Padding beyond `pads` that ceil_mode windows reach (never counted as input)."""
    a, oh, ow = node.attrs, node.outputs[0].shape[2], node.outputs[0].shape[3]
    k, s, d, p = a["kernel"], a["strides"], a["dilations"], a["pads"]
    need = [(o - 1) * st + (kk - 1) * dd + 1 for o, st, kk, dd in zip((oh, ow), s, k, d)]
    have = [x.shape[2] + p[0] + p[2], x.shape[3] + p[1] + p[3]]
    return max(need[0] - have[0], 0), max(need[1] - have[1], 0)


@_impl("max_pool2d")
def _max_pool(node, x):
    if x.ndim == 5:                                   # channel-blocked: pool as NCHW
        return _blocked(_max_pool(node, _unblocked(x)), x.shape[4])
    a = node.attrs
    fill = -np.inf if np.issubdtype(x.dtype, np.floating) else np.iinfo(x.dtype).min
    xp = pad_hw(x, a["pads"], fill, _ceil_extra(node, x))
    win = _windows(xp, a["kernel"], a["strides"], a["dilations"], node.outputs[0].shape[2:4])
    return win.max(axis=(4, 5))


@_impl("avg_pool2d")
def _avg_pool(node, x):
    if x.ndim == 5:                                   # channel-blocked: pool as NCHW
        return _blocked(_avg_pool(node, _unblocked(x)), x.shape[4])
    a = node.attrs
    extra = _ceil_extra(node, x)
    out_hw = node.outputs[0].shape[2:]
    xp = pad_hw(x, a["pads"], 0, extra)
    total = _windows(xp, a["kernel"], a["strides"], a["dilations"], out_hw).sum(axis=(4, 5))
    ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
    if a["count_include_pad"]:
        ones = pad_hw(ones, a["pads"], 1)
        ones = pad_hw(ones, (0, 0, 0, 0), 0, extra)
    else:
        ones = pad_hw(ones, a["pads"], 0, extra)
    count = _windows(ones, a["kernel"], a["strides"], a["dilations"], out_hw).sum(axis=(4, 5))
    return (total / count).astype(x.dtype)


@_impl("conv2d")
def _conv2d(node, x, w):
    return conv_nchw(x, w, node.attrs, node.outputs[0].shape[2:4])


def conv_nchw(x, w, attrs, out_hw):
    """NCHW conv of x with weight [O, C / groups, KH, KW] (attrs: pads, strides, dilations,
    groups) as a tensordot/einsum over strided windows."""
    g = attrs["groups"]
    o, cg, kh, kw = w.shape
    n = x.shape[0]
    win = _windows(pad_hw(x, attrs["pads"], 0), (kh, kw), attrs["strides"],
                   attrs["dilations"], out_hw)
    if g == 1:
        out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))  # N, OH, OW, O
        return np.ascontiguousarray(out.transpose(0, 3, 1, 2))
    win = win.reshape(n, g, cg, out_hw[0], out_hw[1], kh, kw)
    wg = w.reshape(g, o // g, cg, kh, kw)
    out = np.einsum("ngchwkl,gockl->ngohw", win, wg, optimize=True)
    return np.ascontiguousarray(out.reshape(n, o, out_hw[0], out_hw[1]))


@_impl("conv2d_kpacked")
def _conv2d_kpacked(node, x, w):
    return _conv2d(node, x, unpack_conv_weight(w, node.attrs["block"]))


def _unblocked(x: np.ndarray, channels: int | None = None) -> np.ndarray:
    """[N, C/b, H, W, b] -> [N, C, H, W] (the first `channels` of them when given)."""
    n, co, h, w, b = x.shape
    out = x.transpose(0, 1, 4, 2, 3).reshape(n, co * b, h, w)
    return np.ascontiguousarray(out if channels is None else out[:, :channels])


def _blocked(x: np.ndarray, block: int) -> np.ndarray:
    """[N, C, H, W] -> [N, ceil(C/block), H, W, block], a partial last block zero-padded."""
    n, c, h, w = x.shape
    blocks = -(-c // block)
    if blocks * block != c:
        x = np.concatenate([x, np.zeros((n, blocks * block - c, h, w), x.dtype)], axis=1)
    return np.ascontiguousarray(x.reshape(n, blocks, block, h, w).transpose(0, 1, 3, 4, 2))


@_impl("to_blocked")
def _to_blocked(node, x):
    return _blocked(x, node.attrs["block"])


@_impl("from_blocked")
def _from_blocked(node, x):
    return _unblocked(x, node.attrs.get("channels") or None)


@_impl("conv2d_nchwc")
def _conv2d_nchwc(node, x, w):
    """The plain conv on unblocked data, blocked again (the reference, not a fast path)."""
    if node.attrs["in_block"]:
        x, w = _unblocked(x), unpack_conv_weight_blocked(w)
    else:
        w = unpack_conv_weight(w, node.attrs["block"])
    out = conv_nchw(x, w, dict(node.attrs, groups=1), node.outputs[0].shape[2:4])
    return _blocked(out, node.attrs["block"])


@_impl("winograd_input_transform")
def _winograd_input(node, x):
    """V[e1, e2, p, c] = (B^T d B)[e1, e2] of every tile p, d the tile's (m+2)^2 window of
    the zero-padded input (zeros past the input: the last tiles' crop)."""
    m, (top, left, _, _) = node.attrs["m"], node.attrs["pads"]
    _, _, b_t = winograd_matrices_f64(m)
    alpha, _, _, c = node.outputs[0].shape
    n, _, h, w, _ = x.shape
    oh, ow = node.attrs["pads"][0] + node.attrs["pads"][2] + h - 2, \
        node.attrs["pads"][1] + node.attrs["pads"][3] + w - 2
    th, tw = -(-oh // m), -(-ow // m)
    padded = np.zeros((n, c, th * m + 2, tw * m + 2))
    rows, cols = min(h, th * m + 2 - top), min(w, tw * m + 2 - left)
    padded[:, :, top:top + rows, left:left + cols] = _unblocked(x)[:, :, :rows, :cols]
    win = np.lib.stride_tricks.sliding_window_view(padded, (alpha, alpha), axis=(2, 3))
    win = win[:, :, ::m, ::m]                                # N, C, th, tw, alpha, alpha
    v = np.einsum("ai,nctuij,bj->abntuc", b_t, win, b_t, optimize=True)
    return v.reshape(alpha, alpha, n * th * tw, c)


@_impl("winograd_batch_matmul")
def _winograd_gemm(node, v, u):
    return np.einsum("abpc,abfcj->abfpj", v, u, optimize=True)


@_impl("winograd_output_transform")
def _winograd_output(node, mm):
    """y = A^T M A per tile, the tiles laid back out and cropped to (OH, OW)."""
    m, n, (oh, ow) = node.attrs["m"], node.attrs["batch"], node.attrs["out_hw"]
    a_t, _, _ = winograd_matrices_f64(m)
    _, _, fo, _, b = mm.shape
    th, tw = -(-oh // m), -(-ow // m)
    y = np.einsum("ka,abfpc,lb->fpklc", a_t, mm, a_t, optimize=True)
    y = y.reshape(fo, n, th, tw, m, m, b).transpose(1, 0, 2, 4, 3, 5, 6)
    return y.reshape(n, fo, th * m, tw * m, b)[:, :, :oh, :ow]


@_impl("grouped_conv2d_nchwc")
def _grouped_conv2d_nchwc(node, x, w):
    groups = node.attrs["groups"]
    w = unpack_grouped_conv_weight(w, groups, x.shape[1] * x.shape[4], node.attrs["per_group"])
    out = conv_nchw(_unblocked(x), w, dict(node.attrs), node.outputs[0].shape[2:4])
    return _blocked(out, x.shape[4])


@_impl("depthwise_conv2d_nchwc")
def _depthwise_conv2d_nchwc(node, x, w):
    attrs = dict(node.attrs, groups=x.shape[1] * x.shape[4])
    out = conv_nchw(_unblocked(x), unpack_depthwise_weight(w), attrs,
                     node.outputs[0].shape[2:4])
    return _blocked(out, x.shape[4])


@_impl("conv_transpose_weight")
def _conv_transpose_weight(node, w):
    a = node.attrs
    return pack_conv_transpose_weight(w, tuple(a["strides"]), tuple(a["dilations"]),
                                      a["groups"], a.get("block") or None)


@_impl("conv2d_transpose")
def _conv2d_transpose(node, x, packed):
    a = node.attrs
    w = unpack_conv_transpose_weight(packed, a["kernel"], tuple(a["strides"]),
                                     tuple(a["dilations"]), a["groups"])
    return _conv_transpose_nchw(x, w, a, node.outputs[0].shape[2:4])


def _conv_transpose_nchw(x, w, attrs, out_hw):
    """ONNX ConvTranspose by scatter-add: each kernel tap (ky, kx) adds x[n, c] times
    w[c, m, ky, kx] to the output pixels (iy * s_h + ky * d_h, ix * s_w + kx * d_w) of the
    full (uncropped) output; the result is that canvas from (top, left) on, `out_hw` large
    (output_padding rows past the last contribution stay 0)."""
    n, c, h, wd = x.shape
    g = attrs["groups"]
    _, per_group, kh, kw = w.shape
    (sh, sw), (dh, dw) = attrs["strides"], attrs["dilations"]
    top, left = attrs["pads"][0], attrs["pads"][1]
    span_h, span_w = (h - 1) * sh + 1, (wd - 1) * sw + 1
    canvas = np.zeros((n, g, per_group, max(top + out_hw[0], span_h + (kh - 1) * dh),
                       max(left + out_hw[1], span_w + (kw - 1) * dw)), dtype=x.dtype)
    xg = x.reshape(n, g, c // g, h, wd)
    wg = w.reshape(g, c // g, per_group, kh, kw)
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dh, kx * dw
            canvas[:, :, :, y0:y0 + span_h:sh, x0:x0 + span_w:sw] += np.einsum(
                "ngchw,gcm->ngmhw", xg, wg[:, :, :, ky, kx])
    out = canvas[:, :, :, top:top + out_hw[0], left:left + out_hw[1]]
    return np.ascontiguousarray(out.reshape(n, g * per_group, out_hw[0], out_hw[1]))


@_impl("matmul")
def _matmul(node, a, b):
    return np.matmul(a, b)


@_impl("matmul_prepacked")
def _matmul_prepacked(node, a, packed):
    return np.matmul(a, unpack_matmul_weight(packed, node.attrs["n"]))


# -- the executor ------------------------------------------------------------------------------

def run_node(node: Node, args: Sequence[np.ndarray | None]) -> tuple[np.ndarray, ...]:
    """Evaluate one node; returns its outputs as arrays of the declared dtypes."""
    if node.op in INDEX_INPUTS:     # an index out of bounds is an error, as in onnxruntime
        check_node_indices(node, args)
    present = list(args)
    while present and present[-1] is None:
        present.pop()
    result = IMPLS[node.op](node, *present)
    results = result if isinstance(result, tuple) else (result,)
    return tuple(np.asarray(r).astype(v.dtype, copy=False).reshape(v.shape)
                 for r, v in zip(results, node.outputs))


def _check_inputs(graph: Graph, feeds) -> dict[str, np.ndarray]:
    if not isinstance(feeds, Mapping):
        feeds = list(feeds)
        if len(feeds) != len(graph.inputs):
            raise KernelArgumentError(
                f"graph '{graph.name}' takes {len(graph.inputs)} inputs "
                f"({', '.join(v.name for v in graph.inputs)}), got {len(feeds)}")
        feeds = {v.name: a for v, a in zip(graph.inputs, feeds)}
    out = {}
    for v in graph.inputs:
        if v.name not in feeds:
            raise KernelArgumentError(f"graph '{graph.name}': input '{v.name}' "
                                      f"({v.dtype}{list(v.shape)}) was not given")
        arr = np.asarray(feeds[v.name])
        if arr.dtype != np.dtype(v.dtype) or tuple(arr.shape) != v.shape:
            raise KernelArgumentError(
                f"input '{v.name}' of graph '{graph.name}': expected {v.dtype}{list(v.shape)}, "
                f"got {arr.dtype}{list(arr.shape)}. Pass an array of that shape, cast with "
                f".astype(np.{v.dtype}).")
        out[v.name] = arr
    unknown = set(feeds) - {v.name for v in graph.inputs}
    if unknown:
        raise KernelArgumentError(f"graph '{graph.name}' has no input named "
                                  f"{', '.join(sorted(map(repr, unknown)))}; its inputs are "
                                  f"{', '.join(v.name for v in graph.inputs)}")
    return out


def run_reference(graph: Graph, feeds) -> dict[str, np.ndarray]:
    """Run `graph` on `feeds` (dict by input name, or a list in input order) with numpy.

    Returns the graph outputs by name. Intermediates are freed after their last use.
    """
    env: dict[str, np.ndarray] = dict(graph.constants)
    env.update(_check_inputs(graph, feeds))
    last_use: dict[str, int] = {}
    for i, n in enumerate(graph.nodes):
        for v in n.inputs:
            if v is not None:
                last_use[v.name] = i
    keep = {v.name for v in graph.outputs} | set(graph.constants)
    for i, node in enumerate(graph.nodes):
        args = [None if v is None else env[v.name] for v in node.inputs]
        for v, arr in zip(node.outputs, run_node(node, args)):
            env[v.name] = arr
        for v in node.inputs:
            if v is not None and last_use.get(v.name) == i and v.name not in keep:
                env.pop(v.name, None)
    return {v.name: env[v.name] for v in graph.outputs}
