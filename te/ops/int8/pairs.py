"""int8 GEMMs over activations widened to int16 pairs ahead of the GEMM (AVX2 without VNNI).

The int16-pair GEMM of before (dot4_u8s16: weights widened at compile time) split each
broadcast activation word into its even and odd bytes inside the inner loop, a vpand and a
vpsrlw per row and k word, shared only by the one or two weight vectors of the register tile:
per k word of a 4 x 16 tile 40 vector ALU instructions for 256 multiply-adds, 8 of them the
split. Here the split is done once per activation word by the kernel that makes the words
(an im2col, a quantize + pack): the GEMM's A holds int16 pairs, and its inner loop is a
broadcast, the weight loads, one vpmaddwd and one add per accumulator (dot2_s16).

Layout: packed words x[..., K4] with K4 = G * block become pairs [..., G, 2, block]: pair
(g, p, b) is the word g * block + b's even bytes (p = 0: bytes 0 and 2) or odd bytes (p = 1:
bytes 1 and 3), each zero-extended to int16 (low half first). `block` is the run of words
the producer writes contiguously (an im2col's C4 per tap), so the split vectorises over it.
The weight pairs (te/ops/int8/core.py widen_weight_words: [K4, 2, N], even bytes' weights
then odd) take the same row order (`pair_weight_rows`) at compile time.
"""
from __future__ import annotations

import numpy as np

from ... import expr as E
from ...errors import TEError
from ...tensor import Tensor, compute, reduce_axis
from ...tensor import sum as te_sum
from .._common import check_tensor
from .core import check_panel_columns
from ..tags import BATCH_MATMUL, INJECTIVE, MATMUL

BYTE_PAIR_MASK = 0x00FF00FF


def pair_of_word(word: E.Expr, parity) -> E.Expr:
    """The int16 pair of a packed uint8 word: its even bytes (parity 0) or odd bytes (1),
    zero-extended (an arithmetic shift's sign bits are masked off)."""
    mask = E.const(BYTE_PAIR_MASK, "int32")
    even = E.call("bit_and", word, mask)
    odd = E.call("bit_and", E.call("shr", word, E.const(8, "int32")), mask)
    if isinstance(parity, int):
        return odd if parity else even
    return E.select(E._as_expr(parity).eq(0), even, odd)


def widen_words_int16x2(x: Tensor, block: int, name: str | None = None) -> Tensor:
    """Packed uint8 words x[..., K4] (K4 a multiple of `block`) -> their int16 pairs
    [..., 2 * K4], pair (g * 2 + p) * block + b from word g * block + b (module
    docstring)."""
    check_tensor("widen_words_int16x2", x)
    if x.dtype != "int32" or x.ndim < 1 or block < 1 or x.shape[-1] % block:
        raise TEError(f"widen_words_int16x2(): expects int32 words x[..., K4] with K4 a "
                      f"multiple of block={block}, got '{x.name}' {x.dtype}{list(x.shape)}")
    k4 = x.shape[-1]

    def body(*idx):
        *lead, k2 = idx
        if block == k4:                       # one group: the halves of the row
            return pair_of_word(x(*lead, k2 % k4), k2 // k4)
        rest = k2 % (2 * block)
        return pair_of_word(x(*lead, (k2 // (2 * block)) * block + rest % block),
                            rest // block)

    return compute(x.shape[:-1] + (2 * k4,), body, name=name or "widen_words_int16x2",
                   tag=INJECTIVE)


def pair_weight_rows(pairs: np.ndarray, block: int) -> np.ndarray:
    """Weight pairs [K4, 2, N] (widen_weight_words(words, 1)) -> [K2, N] with row
    (g * 2 + p) * block + b holding pair p of word g * block + b: the rows of the widened
    activations' columns (widen_words_int16x2 with the same block)."""
    w = np.asarray(pairs)
    if w.ndim != 3 or w.shape[1] != 2 or block < 1 or w.shape[0] % block:
        raise TEError(f"pair_weight_rows(): expects pairs[K4, 2, N] with K4 a multiple of "
                      f"block={block}, got shape {list(w.shape)}")
    k4, _, n = w.shape
    return np.ascontiguousarray(w.reshape(k4 // block, block, 2, n).transpose(0, 2, 1, 3)
                                .reshape(2 * k4, n))


def narrow_weight_pairs(pairs: np.ndarray) -> np.ndarray:
    """int16 weight pairs of int8 values (int32 words) -> int16 words of the two as int8
    (low byte first): what dot2_s16s8 reads, half the bytes."""
    halves = np.ascontiguousarray(pairs, np.int32)[..., None].view(np.int16)   # [..., 2]
    if halves.min(initial=0) < -128 or halves.max(initial=0) > 127:
        raise TEError("narrow_weight_pairs(): the pairs hold values outside int8")
    return np.ascontiguousarray(halves.astype(np.int8)).view(np.int16)[..., 0]


def matmul_int16x2(a: Tensor, b: Tensor, n: int | None = None,
                   name: str | None = None) -> Tensor:
    """int32 out[..., i, j] = sum_k dot2(a[..., i, k], b[k, j]): a the activation pairs
    [..., M, K2], b the weight pairs [K2, N] or their column panels [P, K2, block] (`n`
    columns; tagged matmul_prepacked for the search space): int32 words of two int16
    (dot2_s16) or int16 words of two int8 (narrow_weight_pairs: dot2_s16s8)."""
    for t, dtypes in ((a, ("int32",)), (b, ("int32", "int16"))):
        check_tensor("matmul_int16x2", t)
        if t.dtype not in dtypes:
            raise TEError(f"matmul_int16x2(): '{t.name}' must hold int32 words of 2 int16"
                          f"{'' if t is a else ' or int16 words of 2 int8'}, got {t.dtype}")
    dot = E.dot2_s16s8 if b.dtype == "int16" else E.dot2_s16
    panels = b.ndim == 3
    k_extent = b.shape[1] if panels else b.shape[0]
    if a.ndim < 2 or b.ndim not in (2, 3) or a.shape[-1] != k_extent:
        raise TEError(f"matmul_int16x2(): expects a[..., M, K2] and b[K2, N] (or panels "
                      f"[P, K2, block]), got '{a.name}'{list(a.shape)} and "
                      f"'{b.name}'{list(b.shape)}")
    if panels:
        block = b.shape[2]
        check_panel_columns("matmul_int16x2", b, block, n)
    k = reduce_axis(k_extent, "k")

    def body(*idx):
        j = idx[-1]
        w = b(j // block, k.var, j % block) if panels else b(k.var, j)
        return te_sum(dot(a(*idx[:-1], k.var), w), axis=k)

    shape = a.shape[:-1] + ((n,) if panels else (b.shape[-1],))
    tag = MATMUL if len(shape) == 2 else BATCH_MATMUL
    return compute(shape, body, name=name or "matmul_int16x2",
                   tag=f"{MATMUL},prepacked" if panels else tag)
