"""Quantized (int8/uint8) operators: quantize, dequantize, requantize and the integer GEMM and
conv that accumulate u8/s8 products in int32.

The float arithmetic is spelled out here once, in this order, and the graph reference
(graph/ops/int8/core.py) follows the same order so the two agree bit for bit:

- quantize:   q = clamp(round_half_even(x / scale) + zero_point, lo, hi)   (float32 division,
  as the ONNX spec writes it and onnxruntime's MLAS computes it; the zero point is added in
  float32, exact for |value| < 2^24; the clamp happens in float before the cast, so a value
  out of range saturates instead of wrapping)
- dequantize: y = float32(int32(q) - int32(zero_point)) * scale   (the subtraction is exact
  in int32, one rounding in the multiply)
- requantize: q = clamp(round_half_even(float32(acc) * multiplier) + zero_point, lo, hi)
  where acc is the int32 accumulator with the zero-point compensation and the int32 bias
  already added, and multiplier = in_scale * w_scale / out_scale is folded at compile time
  (graph/passes/int8/quantize.py computes it in float64 and rounds once to float32). float32(acc)
  is exact below 2^24 in magnitude; above it the accumulator loses low bits, as in
  onnxruntime.
"""
from __future__ import annotations

import numpy as np

from ... import dtype as dt
from ... import expr as E
from ...errors import TEError
from ...tensor import Tensor, compute, reduce_axis
from ...tensor import sum as te_sum
from .._common import broadcast_shape, check_tensor, read_broadcast
from ..conv import padded_window, conv2d_nchw
from ..linalg import pack_matmul_weight
from ..tags import BATCH_MATMUL, BROADCAST, CONV2D_NCHW, ELEMWISE, MATMUL, PAD

QUANT_DTYPES = ("uint8", "int8")


def _check_qdtype(op: str, dtype: str) -> None:
    if dtype not in QUANT_DTYPES:
        raise TEError(f"{op}(): quantized dtype must be one of {', '.join(QUANT_DTYPES)}, got "
                      f"{dtype!r}")


def _saturate(value: E.Expr, dtype: str, lo: int | None, hi: int | None) -> E.Expr:
    """Clamp a float to [lo, hi] (default: the range of `dtype`) and cast: never wraps."""
    lo = dt.min_value(dtype) if lo is None else lo
    hi = dt.max_value(dtype) if hi is None else hi
    clamped = E.minimum(E.maximum(value, E.const(float(lo), value.dtype)),
                        E.const(float(hi), value.dtype))
    return E.cast(clamped, dtype)


def _tag(shape, *values) -> str:
    tensors = [v for v in values if isinstance(v, Tensor)]
    return ELEMWISE if all(t.shape == shape for t in tensors) else BROADCAST


def quantize(x: Tensor, scale, zero_point, out_dtype: str = "uint8",
             name: str | None = None) -> Tensor:
    """ONNX QuantizeLinear with numpy broadcasting of `scale` and `zero_point` (Tensors or
    Python numbers); per-axis scales are given reshaped to broadcast along their axis."""
    check_tensor("quantize", x)
    _check_qdtype("quantize", out_dtype)
    if not dt.is_float(x.dtype):
        raise TEError(f"quantize(): input '{x.name}' must be float, got {x.dtype}")
    shape = broadcast_shape("quantize", x, scale, zero_point)

    def body(*i):
        value = E.round(read_broadcast(x, i) / E.cast(read_broadcast(scale, i), x.dtype))
        zp = read_broadcast(zero_point, i)
        value = value + (E.cast(zp, x.dtype) if isinstance(zp, E.Expr) else float(zp))
        return _saturate(value, out_dtype, None, None)

    return compute(shape, body, name=name or "quantize", tag=_tag(shape, x, scale, zero_point))


def dequantize(x: Tensor, scale, zero_point, out_dtype: str = "float32",
               name: str | None = None) -> Tensor:
    """ONNX DequantizeLinear: float32(int32(x) - int32(zero_point)) * scale, broadcasting."""
    check_tensor("dequantize", x)
    if not dt.is_int(x.dtype):
        raise TEError(f"dequantize(): input '{x.name}' must be an integer tensor, got "
                      f"{x.dtype}")
    shape = broadcast_shape("dequantize", x, scale, zero_point)

    def body(*i):
        zp = read_broadcast(zero_point, i)
        centred = E.cast(read_broadcast(x, i), "int32") - (
            E.cast(zp, "int32") if isinstance(zp, E.Expr) else int(zp))
        s = read_broadcast(scale, i)
        return E.cast(centred, out_dtype) * (E.cast(s, out_dtype) if isinstance(s, E.Expr)
                                             else float(s))

    return compute(shape, body, name=name or "dequantize",
                   tag=_tag(shape, x, scale, zero_point))


def requantize(acc: Tensor, multiplier, zero_point, out_dtype: str = "uint8",
               lo: int | None = None, hi: int | None = None, name: str | None = None) -> Tensor:
    """int32 accumulator -> int8/uint8: clamp(round_half_even(float32(acc) * multiplier) +
    zero_point, lo, hi). `lo`/`hi` narrow the saturation range (a fused Relu or Clip)."""
    check_tensor("requantize", acc)
    _check_qdtype("requantize", out_dtype)
    shape = broadcast_shape("requantize", acc, multiplier, zero_point)

    def body(*i):
        m = read_broadcast(multiplier, i)
        m = E.cast(m, "float32") if isinstance(m, E.Expr) else float(m)
        value = E.round(E.cast(read_broadcast(acc, i), "float32") * m)
        zp = read_broadcast(zero_point, i)
        value = value + (E.cast(zp, "float32") if isinstance(zp, E.Expr) else float(zp))
        return _saturate(value, out_dtype, lo, hi)

    return compute(shape, body, name=name or "requantize",
                   tag=_tag(shape, acc, multiplier, zero_point))


def _check_int_operand(op: str, t: Tensor, what: str) -> None:
    check_tensor(op, t, what)
    if t.dtype not in QUANT_DTYPES:
        raise TEError(f"{op}(): {what} '{t.name}' must be uint8 or int8, got {t.dtype}")


def matmul_integer(a: Tensor, b: Tensor, name: str | None = None) -> Tensor:
    """int32 out[..., i, j] = sum_k int32(a[..., i, k]) * int32(b[..., k, j]) (numpy matmul
    batching: b's batch dims broadcast against a's); no zero points (see the graph op)."""
    _check_int_operand("matmul_integer", a, "a")
    _check_int_operand("matmul_integer", b, "b")
    if a.ndim < 2 or b.ndim < 2 or a.shape[-1] != b.shape[-2]:
        raise TEError(f"matmul_integer(): expects a[..., M, K] and b[..., K, N], got "
                      f"'{a.name}'{list(a.shape)} and '{b.name}'{list(b.shape)}")
    try:
        batch = tuple(int(d) for d in np.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise TEError(f"matmul_integer(): batch dims of '{a.name}'{list(a.shape)} and "
                      f"'{b.name}'{list(b.shape)} do not broadcast") from None
    k = reduce_axis(a.shape[-1], "k")

    def read(t: Tensor, bidx, row, col):
        own = t.shape[:-2]
        lead = len(bidx) - len(own)
        idx = [0 if d == 1 else bidx[lead + p] for p, d in enumerate(own)]
        return E.cast(t(*idx, row, col), "int32")

    def body(*idx):
        bidx, i, j = idx[:-2], idx[-2], idx[-1]
        return te_sum(read(a, bidx, i, k.var) * read(b, bidx, k.var, j), axis=k)

    shape = tuple(batch) + (a.shape[-2], b.shape[-1])
    return compute(shape, body, name=name or "matmul_integer",
                   tag=MATMUL if len(shape) == 2 else BATCH_MATMUL)


def pad_with_zero_point(x: Tensor, pads: tuple[int, int, int, int], zero_point,
                        name: str | None = None) -> Tensor:
    """x[N, C, H, W] padded by (top, left, bottom, right) with the activation zero point
    (a Python int or a 0-d/1-element Tensor read at run time): a padded pixel then means
    the real value 0, so the zero-point compensation of the conv stays exact at borders."""
    top, left, bottom, right = pads
    n, c, h, w = x.shape
    fill = (E.const(int(zero_point), x.dtype) if not isinstance(zero_point, Tensor)
            else zero_point(*([0] * zero_point.ndim)))
    if isinstance(fill, E.Expr) and fill.dtype != x.dtype:
        fill = E.cast(fill, x.dtype)

    def body(b, ch, y, xx):
        inside = (y >= top) & (y < top + h) & (xx >= left) & (xx < left + w)
        yy = E.minimum(E.maximum(y - top, 0), h - 1)
        xc = E.minimum(E.maximum(xx - left, 0), w - 1)
        return E.select(inside, x(b, ch, yy, xc), fill)

    return compute((n, c, h + top + bottom, w + left + right), body,
                   name=name or "conv2d_integer_pad", tag=PAD)


def conv2d_integer(x: Tensor, weight: Tensor, zero_point=0, stride=1,
                   padding=(0, 0, 0, 0), dilation=1, groups: int = 1,
                   name: str | None = None) -> Tensor:
    """int32 out[n, f, y, x] = sum int32(padded[n, c, ...]) * int32(weight[f, c, ry, rx]),
    NCHW, where the padding holds the activation `zero_point` (see pad_with_zero_point)."""
    _check_int_operand("conv2d_integer", x, "x")
    _check_int_operand("conv2d_integer", weight, "weight")
    if x.ndim != 4 or len(tuple(padding)) != 4:
        raise TEError(f"conv2d_integer(): expects x[N, C, H, W] and 4 pads, got "
                      f"'{x.name}'{list(x.shape)} and pads {padding}")
    padded = x
    if any(padding):
        padded = pad_with_zero_point(x, tuple(padding), zero_point)
    return conv2d_nchw(padded, weight, stride, 0, dilation, groups, out_dtype="int32",
                       name=name or "conv2d_integer")


# -- packed int8 kernels: the reduction axis split by 4 into int32 words -----------------------

def pack_int8x4(x: Tensor, axis: int, flip_sign: bool = False,
                name: str | None = None) -> Tensor:
    """uint8/int8 x -> int32 words of 4 consecutive elements along `axis` (extent
    ceil(K / 4); byte t of word k is x[4k + t], 0 past the end). With `flip_sign` an int8 x
    is stored as the uint8 x + 128 (the dot4 intrinsics read activations as uint8; the
    caller compensates with 128 * the weight sums)."""
    _check_int_operand("pack_int8x4", x, "x")
    if flip_sign and x.dtype != "int8":
        raise TEError(f"pack_int8x4(): flip_sign is for int8 activations, '{x.name}' is "
                      f"{x.dtype}")
    axis = axis % x.ndim
    k = x.shape[axis]
    shape = x.shape[:axis] + ((k + 3) // 4,) + x.shape[axis + 1:]

    def byte(idx, t):
        src = idx[axis] * 4 + t
        read = list(idx)
        read[axis] = E.minimum(src, k - 1)
        value = x(*read)
        if flip_sign:
            value = E.cast(value, "int32") + 128
        else:
            value = E.cast(E.cast(value, "uint8"), "int32") if x.dtype == "int8" \
                else E.cast(value, "int32")
        return E.select(src < k, value, 0) if k % 4 else value

    def body(*idx):
        # int32 arithmetic wraps: byte 3 lands in the sign bit, as a bit pattern should
        return (byte(idx, 0) + byte(idx, 1) * 256 + byte(idx, 2) * 65536
                + byte(idx, 3) * 16777216)

    return compute(shape, body, name=name or "pack_int8x4", tag="injective")


def pack_weight_int8x4(weight: np.ndarray, axis: int) -> np.ndarray:
    """The compile-time twin of pack_int8x4 for a constant int8 weight: int32 words of 4
    consecutive elements along `axis`, that axis moved innermost before packing."""
    w = np.asarray(weight)
    if w.dtype != np.int8:
        raise TEError(f"pack_weight_int8x4(): expects an int8 weight, got {w.dtype}")
    axis = axis % w.ndim
    k = w.shape[axis]
    pad = [(0, 0)] * w.ndim
    pad[axis] = (0, -k % 4)
    w = np.pad(w, pad)
    w = np.moveaxis(w, axis, -1)
    w = w.reshape(w.shape[:-1] + ((k + 3) // 4, 4))
    w = np.moveaxis(w, -2, axis)                 # [..., K4 (at axis), ..., 4]
    return np.ascontiguousarray(w).view(np.int32)[..., 0]


def widen_weight_words(words: np.ndarray, pair_axis: int) -> np.ndarray:
    """Packed int8 weight words (pack_weight_int8x4) -> the int16 pairs dot4_u8s16 reads: a
    new axis of 2 at `pair_axis`, index 0 the word's even bytes (b_0, b_2) and 1 its odd bytes
    (b_1, b_3), each an int32 of two sign-extended int16 (low half first). Done at compile
    time, so the kernel's inner loop only splits the activation bytes."""
    w = np.ascontiguousarray(words)
    if w.dtype != np.int32:
        raise TEError(f"widen_weight_words(): expects int32 words of 4 packed int8, got "
                      f"{w.dtype}")
    b = w[..., None].view(np.int8).astype(np.int16)             # [..., 4]
    even = np.ascontiguousarray(b[..., 0::2]).view(np.int32)[..., 0]
    odd = np.ascontiguousarray(b[..., 1::2]).view(np.int32)[..., 0]
    return np.ascontiguousarray(np.stack([even, odd], axis=pair_axis % (w.ndim + 1)))


def panel_weight_pairs(pairs: np.ndarray, block: int) -> np.ndarray:
    """A matmul's int16 weight pairs [K4, 2, N] (widen_weight_words(words, 1)) as column
    panels [ceil(N / block), K4, 2, block]: a register tile of `block` columns reads one
    contiguous run per k (the even and the odd pairs back to back) instead of two rows
    N words apart, which for N a multiple of 1024 all fall in the same L1 sets. A tail
    panel is zero-padded."""
    w = np.asarray(pairs)
    if w.ndim != 3 or w.shape[1] != 2 or block < 1:
        raise TEError(f"panel_weight_pairs(): expects pairs[K4, 2, N] and block >= 1, got "
                      f"shape {list(w.shape)} and block={block}")
    k4, _, n = w.shape
    panels = -(-n // block)
    padded = np.zeros((k4, 2, panels * block), w.dtype)
    padded[..., :n] = w
    return np.ascontiguousarray(padded.reshape(k4, 2, panels, block).transpose(2, 0, 1, 3))


def panel_weight_words(words: np.ndarray, block: int) -> np.ndarray:
    """A matmul's packed byte words [K4, N] (pack_weight_int8x4 along K) as column panels
    [ceil(N / block), K4, 1, block], the tail panel zero-padded: what matmul_int8x4 reads on
    a VNNI target (graph/passes/int8/panels.py), one contiguous run of a register tile's
    columns per k, as panel_weight_pairs gives the int16 pairs ([..., 2, block]: the unit
    axis tells the two apart)."""
    w = np.asarray(words)
    if w.ndim != 2 or w.dtype != np.int32 or block < 1:
        raise TEError(f"panel_weight_words(): expects int32 words[K4, N] and block >= 1, got "
                      f"{w.dtype}{list(w.shape)} and block={block}")
    return pack_matmul_weight(w, block)[:, :, None, :]


def _dot4(seven_bit: bool, symmetric: bool = False):
    """The cheapest exact intrinsic the weight range allows: 7-bit weights, then symmetric
    ones (no byte -128), then any."""
    return E.dot4_u8s7 if seven_bit else E.dot4_u8s8sym if symmetric else E.dot4_u8s8


def check_panel_columns(op: str, panels: Tensor, block: int, n: int | None) -> None:
    """Weight panels [P, ..., block] hold n columns: ceil(n / block) = P."""
    count = panels.shape[0]
    if n is None or not (count - 1) * block < n <= count * block:
        raise TEError(f"{op}(): panels '{panels.name}'{list(panels.shape)} need the column "
                      f"count n with ceil(n / {block}) = {count}, got n={n}")


def _check_words(op: str, *tensors: Tensor) -> None:
    for t in tensors:
        check_tensor(op, t)
        if t.dtype != "int32":
            raise TEError(f"{op}(): '{t.name}' must hold int32 words of 4 packed bytes, got "
                          f"{t.dtype}")


def matmul_int8x4(a: Tensor, b: Tensor, seven_bit: bool = False,
                  name: str | None = None, symmetric: bool = False,
                  n: int | None = None) -> Tensor:
    """int32 out[..., i, j] = sum_k dot4(a[..., i, k], b[k, j]): a the packed uint8
    activations [..., M, K4], b the packed int8 weight [K4, N] (pack_weight_int8x4 along
    K), those words as column panels [P, K4, 1, block] (panel_weight_words), its int16
    pairs [K4, 2, N] (widen_weight_words(words, 1): dot4_u8s16), or those pairs as column
    panels [P, K4, 2, block] (panel_weight_pairs). Panels hold `n` columns and are tagged
    matmul_prepacked for the search space. `seven_bit` promises weight bytes in [-64, 63],
    `symmetric` in [-127, 127] (cheaper AVX2 lowerings of the byte form)."""
    _check_words("matmul_int8x4", a, b)
    pairs = b.ndim == 3 and b.shape[1] == 2
    word_panels = b.ndim == 4 and b.shape[2] == 1
    panels = b.ndim == 4 and b.shape[2] == 2
    k_extent = b.shape[1] if panels or word_panels else b.shape[0]
    if a.ndim < 2 or (b.ndim != 2 and not pairs and not panels and not word_panels) \
            or a.shape[-1] != k_extent:
        raise TEError(f"matmul_int8x4(): expects a[..., M, K4] and b[K4, N] (or its panels "
                      f"[P, K4, 1, block], int16 pairs [K4, 2, N] or their panels "
                      f"[P, K4, 2, block]), got '{a.name}'{list(a.shape)} and "
                      f"'{b.name}'{list(b.shape)}")
    if panels or word_panels:
        block = b.shape[3]
        check_panel_columns("matmul_int8x4", b, block, n)
    k = reduce_axis(k_extent, "k")
    dot = _dot4(seven_bit, symmetric)

    def body(*idx):
        j = idx[-1]
        if word_panels:
            return te_sum(dot(a(*idx[:-1], k.var), b(j // block, k.var, 0, j % block)),
                          axis=k)
        if panels:
            return te_sum(E.dot4_u8s16(a(*idx[:-1], k.var), b(j // block, k.var, 0, j % block),
                                       b(j // block, k.var, 1, j % block)), axis=k)
        if pairs:
            return te_sum(E.dot4_u8s16(a(*idx[:-1], k.var), b(k.var, 0, j),
                                       b(k.var, 1, j)), axis=k)
        return te_sum(dot(a(*idx[:-1], k.var), b(k.var, j)), axis=k)

    shape = a.shape[:-1] + ((n,) if panels or word_panels else (b.shape[-1],))
    tag = MATMUL if len(shape) == 2 else BATCH_MATMUL
    return compute(shape, body, name=name or "matmul_int8x4",
                   tag=f"{MATMUL},prepacked" if panels or word_panels else tag)


def conv2d_int8x4(x: Tensor, weight: Tensor, pad_word: int = 0, stride=1,
                  padding=(0, 0, 0, 0), dilation=1, seven_bit: bool = False,
                  name: str | None = None, symmetric: bool = False) -> Tensor:
    """int32 out[n, f, y, x] = sum over (c4, ry, rx) of dot4(padded[n, c4, ...],
    weight[f, c4, ry, rx]): x the packed uint8 activations [N, C4, H, W] (4 channels per
    word), weight [F, C4, KH, KW] (pack_weight_int8x4 along C) or its int16 pairs
    [F, C4, KH, KW, 2] (widen_weight_words(words, 4): dot4_u8s16); the padding holds
    `pad_word` (the zero point in all 4 bytes, so padded taps cancel in the zero-point
    compensation)."""
    _check_words("conv2d_int8x4", x, weight)
    pairs = weight.ndim == 5 and weight.shape[4] == 2
    if x.ndim != 4 or (weight.ndim != 4 and not pairs) or x.shape[1] != weight.shape[1]:
        raise TEError(f"conv2d_int8x4(): expects x[N, C4, H, W] and weight[F, C4, KH, KW] "
                      f"(or int16 pairs [F, C4, KH, KW, 2]), got '{x.name}'{list(x.shape)} "
                      f"and '{weight.name}'{list(weight.shape)}")
    n = x.shape[0]
    f, c4, kh, kw = weight.shape[:4]
    padded = x
    if any(padding):
        padded = pad_with_zero_point(x, tuple(padding), pad_word, name="conv2d_int8x4_pad")
    _, (sh, sw), (dh, dw), (oh, ow) = padded_window("conv2d_int8x4", padded, kh, kw, stride,
                                                     (0, 0, 0, 0), dilation)
    rc, ry, rx = reduce_axis(c4, "rc"), reduce_axis(kh, "ry"), reduce_axis(kw, "rx")
    dot = _dot4(seven_bit, symmetric)

    def body(b, k, y, xx):
        word = padded(b, rc.var, y * sh + ry.var * dh, xx * sw + rx.var * dw)
        if pairs:
            return te_sum(E.dot4_u8s16(word, weight(k, rc.var, ry.var, rx.var, 0),
                                       weight(k, rc.var, ry.var, rx.var, 1)),
                          axis=[rc, ry, rx])
        return te_sum(dot(word, weight(k, rc.var, ry.var, rx.var)), axis=[rc, ry, rx])

    return compute((n, f, oh, ow), body, name=name or "conv2d_int8x4", tag=CONV2D_NCHW)


def im2col_int8x4(x: Tensor, kh: int, kw: int, pad_word: int = 0, stride=1,
                  padding=(0, 0, 0, 0), dilation=1, name: str | None = None) -> Tensor:
    """The packed windows of a kh x kw conv as columns: x the packed activations
    [N, C4, H, W] -> [N, KH * KW * C4, OH, OW], row (ry * KW + rx) * C4 + c4 holding
    padded[n, c4, y * sh + ry * dh, x * sw + rx * dw] (the padding holds `pad_word`). A
    conv2d_int8x4 with the weight reordered to [F, KH * KW * C4, 1, 1]
    (`im2col_weight_int8x4`) over these columns is the original conv, as a 1x1 conv: a
    GEMM over the output pixels."""
    _check_words("im2col_int8x4", x)
    if x.ndim != 4:
        raise TEError(f"im2col_int8x4(): expects x[N, C4, H, W], got '{x.name}'"
                      f"{list(x.shape)}")
    n, c4 = x.shape[0], x.shape[1]
    padded = x
    if any(padding):
        padded = pad_with_zero_point(x, tuple(padding), pad_word, name="im2col_int8x4_pad")
    _, (sh, sw), (dh, dw), (oh, ow) = padded_window("im2col_int8x4", padded, kh, kw, stride,
                                                     (0, 0, 0, 0), dilation)

    def body(b, k, y, xx):
        tap, ch = k // c4, k % c4
        return padded(b, ch, y * sh + (tap // kw) * dh, xx * sw + (tap % kw) * dw)

    return compute((n, kh * kw * c4, oh, ow), body, name=name or "im2col_int8x4",
                   tag="injective")


def im2col_weight_int8x4(words: np.ndarray) -> np.ndarray:
    """A packed conv weight [F, C4, KH, KW] reordered for im2col_int8x4's columns:
    [F, KH * KW * C4, 1, 1], row (ry * KW + rx) * C4 + c4."""
    f, c4, kh, kw = words.shape
    return np.ascontiguousarray(words.transpose(0, 2, 3, 1).reshape(f, kh * kw * c4, 1, 1))


def lookup_table(x: Tensor, table, out_dtype: str, name: str | None = None) -> Tensor:
    """out[i] = table[byte of x[i]] (E.lookup8: x's uint8 bit pattern indexes 256 entries of
    out_dtype); x is uint8 or int8. The integer form of a quantized elementwise function."""
    _check_int_operand("lookup_table", x, "x")
    _check_qdtype("lookup_table", out_dtype)
    return compute(x.shape, lambda *i: E.lookup8(x(*i), table, out_dtype),
                   name=name or "lookup_table", tag=ELEMWISE)
