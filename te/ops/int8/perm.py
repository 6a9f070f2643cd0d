"""int8 GEMMs whose weight pairs are chosen so that AVX2's saturating vpmaddubsw is exact.

`vpmaddubsw` multiplies uint8 activations by int8 weights and adds adjacent products into
int16 with signed saturation. For uint8 activations in [0, 255], the pair sum a_0 w_0 +
a_1 w_1 cannot saturate exactly when the weight pair is *pair-safe*: 255 * (the sum of its
positive weights) <= 32767 and 255 * (the sum of its negative weights) >= -32768. With
constant weights that is a compile-time property of each pair; it fails for a few percent of
the pairs of a per-channel quantized conv (two large weights of one sign side by side), and
for a different few in every output column, so no single order of K serves a whole weight.

Here the pairs are chosen per column panel (`block` output channels: one or two vectors of a
register tile) and per group of 4 activation words (16 bytes): `pair_weight_groups` finds,
for each (panel, group), a matching of the 16 bytes into 8 pairs that is pair-safe in every
column of the panel, and writes it as 4 selector words (byte t of selector s names the group
byte that slot t of the dot4 reads) and the weights in that order. The GEMM
(`matmul_int8x4_perm`) sums dot4_u8s8perm: per row and group, one vpshufb per selector word
(shared by the panel's weight vectors), then vpmaddubsw + vpmaddwd per accumulator: the
instruction count of onnxruntime's saturating step, exact. A weight with a (panel, group)
that has no safe matching is reported (None) and keeps the exact int16-pair kernels.
"""
from __future__ import annotations

import numpy as np

from ... import expr as E
from ...errors import TEError
from ...tensor import Tensor, compute, reduce_axis
from ...tensor import sum as te_sum
from .._common import check_tensor
from .core import check_panel_columns
from ..tags import MATMUL

GROUP_BYTES = 16            # one vpshufb source: 4 activation words
_POS_LIMIT, _NEG_LIMIT = 32767 // 255, -(32768 // 255)    # 128, -128


def pair_safe(w0, w1) -> np.ndarray:
    """Whether the int8 weight pairs (w0, w1) (arrays, broadcast) are pair-safe: no uint8
    activations can saturate vpmaddubsw's int16 sum of the two products."""
    w0, w1 = np.asarray(w0, np.int64), np.asarray(w1, np.int64)
    pos = np.maximum(w0, 0) + np.maximum(w1, 0)
    neg = np.minimum(w0, 0) + np.minimum(w1, 0)
    return (pos <= _POS_LIMIT) & (neg >= _NEG_LIMIT)


def _matching(adj: list[int]) -> list[tuple[int, int]] | None:
    """A perfect matching of the 16 nodes of a graph given as adjacency bitmasks (bit v of
    adj[u]: u and v may pair); None when none exists. Depth first over the lowest unmatched
    node, failed subsets remembered."""
    failed: set[int] = set()

    def search(mask: int) -> list[tuple[int, int]] | None:
        if not mask:
            return []
        if mask in failed:
            return None
        u = (mask & -mask).bit_length() - 1
        rest = mask & ~(1 << u)
        options = adj[u] & rest
        while options:
            v = (options & -options).bit_length() - 1
            found = search(rest & ~(1 << v))
            if found is not None:
                return [(u, v)] + found
            options &= options - 1
        failed.add(mask)
        return None

    return search((1 << len(adj)) - 1)


def pair_weight_groups(weight: np.ndarray, block: int
                       ) -> tuple[np.ndarray, np.ndarray] | None:
    """An int8 weight [K, N] (K bytes along the activation words: byte t of word k is row
    4k + t; K a multiple of 16) -> (selectors [P, G, 4] int32, words [P, G, 4, block] int32)
    for matmul_int8x4_perm, with P = ceil(N / block) column panels (the last zero-padded)
    and G = K / 16 groups; None when some (panel, group) has no pair-safe matching (module
    docstring). Slot t of group g reads the group's bytes named by selector byte 0..3 of
    sel[p, g, t] and multiplies them by the bytes of words[p, g, t, j]."""
    w = np.asarray(weight)
    if w.dtype != np.int8 or w.ndim != 2 or w.shape[0] % GROUP_BYTES or block < 1:
        raise TEError(f"pair_weight_groups(): expects an int8 weight [K, N] with K a multiple "
                      f"of {GROUP_BYTES}, got {w.dtype}{list(w.shape)} (block {block})")
    k, n = w.shape
    groups, panels = k // GROUP_BYTES, -(-n // block)
    padded = np.zeros((k, panels * block), np.int64)
    padded[:, :n] = w
    # [P, G, 16 bytes, block columns]
    tiles = padded.reshape(groups, GROUP_BYTES, panels, block).transpose(2, 0, 1, 3)
    # pair_safe of every two bytes of a group in every column of its panel, in int16
    pos = np.maximum(tiles, 0).astype(np.int16)
    neg = np.minimum(tiles, 0).astype(np.int16)
    safe = np.empty((panels, groups, GROUP_BYTES, GROUP_BYTES), bool)
    for u in range(GROUP_BYTES):
        safe[:, :, u] = (((pos[:, :, u:u + 1] + pos) <= _POS_LIMIT)
                         & ((neg[:, :, u:u + 1] + neg) >= _NEG_LIMIT)).all(axis=-1)
    # the identity pairs (0, 1), (2, 3), ... where they all qualify; a search elsewhere
    order = np.broadcast_to(np.arange(GROUP_BYTES), (panels, groups, GROUP_BYTES)).copy()
    identity = safe[:, :, 0::2, 1::2][:, :, np.arange(8), np.arange(8)].all(axis=-1)
    masks = (safe.astype(np.int64) << np.arange(GROUP_BYTES)).sum(axis=-1)  # [P, G, 16]
    lonely = (masks & ~(1 << np.arange(GROUP_BYTES))) == 0    # a byte no other pairs with
    if lonely.any():
        return None
    for p, g in zip(*np.nonzero(~identity)):
        pairs = _matching([int(m) for m in masks[p, g]])
        if pairs is None:
            return None
        order[p, g] = [b for pair in pairs for b in pair]
    sel_bytes = order.reshape(panels, groups, 4, 4).astype(np.uint8)
    selectors = np.ascontiguousarray(sel_bytes).view(np.int32)[..., 0]          # [P, G, 4]
    picked = np.take_along_axis(tiles, order[..., None], axis=2)   # [P, G, 16, block]
    words = np.ascontiguousarray(picked.reshape(panels, groups, 4, 4, block)
                                 .transpose(0, 1, 2, 4, 3).astype(np.int8)).view(np.int32)
    return selectors, np.ascontiguousarray(words[..., 0])


def matmul_int8x4_perm(a: Tensor, sel: Tensor, w: Tensor, n: int,
                       name: str | None = None) -> Tensor:
    """int32 out[..., i, j] = sum over groups g and slots t of dot4_u8s8perm(a[..., i, 4g],
    ..., a[..., i, 4g + 3], sel[p, g, t], w[p, g, t, j % block]) with p = j // block: the
    packed uint8 activation words a[..., M, K4] (K4 = 4 G) times the weight of
    pair_weight_groups (selectors [P, G, 4], words [P, G, 4, block], `n` columns), equal to
    matmul_int8x4 of the byte words. Tagged matmul_prepacked (column panels)."""
    for t, what in ((a, "activation words"), (sel, "selectors"), (w, "weight words")):
        check_tensor("matmul_int8x4_perm", t)
        if t.dtype != "int32":
            raise TEError(f"matmul_int8x4_perm(): the {what} '{t.name}' must be int32, got "
                          f"{t.dtype}")
    if (a.ndim < 2 or sel.ndim != 3 or w.ndim != 4 or sel.shape[2] != 4
            or w.shape[:3] != sel.shape or a.shape[-1] != 4 * sel.shape[1]):
        raise TEError(f"matmul_int8x4_perm(): expects a[..., M, 4 G], sel[P, G, 4] and "
                      f"w[P, G, 4, block], got '{a.name}'{list(a.shape)}, "
                      f"'{sel.name}'{list(sel.shape)} and '{w.name}'{list(w.shape)}")
    block = w.shape[3]
    check_panel_columns("matmul_int8x4_perm", w, block, n)
    g = reduce_axis(sel.shape[1], "g")
    t = reduce_axis(4, "t")

    def body(*idx):
        *row, j = idx
        words = [a(*row, 4 * g.var + u) for u in range(4)]
        p = j // block
        return te_sum(E.dot4_u8s8perm(*words, sel(p, g.var, t.var), w(p, g.var, t.var,
                                                                      j % block)),
                      axis=[g, t])

    return compute(a.shape[:-1] + (n,), body, name=name or "matmul_int8x4_perm",
                   tag=f"{MATMUL},prepacked")
