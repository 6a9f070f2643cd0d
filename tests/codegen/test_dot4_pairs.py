"""dot4_u8s16 (codegen/dot4.py): uint8 activation words times int16 weight pairs, exact,
against numpy's integer product, lowered through target strings: AVX2 (two vpmaddwd and no
vpmaddubsw), SSE2 (128-bit vpmaddwd), odd lane counts (plain IR); the weight packing
(te/ops/int8/core.py widen_weight_words, panel_weight_pairs) against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln.te import expr as E
from kiln.te.errors import TEError
from kiln.te.ops.int8.core import (matmul_int8x4, pack_weight_int8x4, panel_weight_pairs,
                                   widen_weight_words)
from kiln.te.tensor import compute, placeholder, reduce_axis
from kiln.te.tensor import sum as te_sum
from tests.util import vector_gemm_schedule


def _pairs_gemm(m: int, k4: int, n: int):
    a = placeholder((m, k4), "int32", "a")
    b = placeholder((k4, 2, n), "int32", "b")
    k = reduce_axis(k4, "k")
    c = compute((m, n), lambda i, j: te_sum(E.dot4_u8s16(a[i, k], b[k, 0, j], b[k, 1, j]),
                                            axis=k), name="c")
    return a, b, c


def _pairs_from_int16(b16: np.ndarray) -> np.ndarray:
    """int16 weights [K, N] (K a multiple of 4) -> [K/4, 2, N] pairs, as widen_weight_words
    lays them out for int8 ones."""
    k, n = b16.shape
    w = b16.reshape(k // 4, 4, n)
    even = np.ascontiguousarray(np.stack([w[:, 0], w[:, 2]], -1)).view(np.int32)[..., 0]
    odd = np.ascontiguousarray(np.stack([w[:, 1], w[:, 3]], -1)).view(np.int32)[..., 0]
    return np.ascontiguousarray(np.stack([even, odd], 1))


@pytest.mark.parametrize("target", ["native", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
@pytest.mark.parametrize("lanes", [0, 3, 4, 7, 8, 14, 16, 24])
def test_dot4_u8s16_matches_integer_product(target, lanes):
    m, k, n = 5, 28, 37
    rng = np.random.default_rng(8)
    a8 = rng.integers(0, 256, size=(m, k)).astype(np.uint8)
    b16 = rng.integers(-32768, 32768, size=(k, n)).astype(np.int16)   # any int16 weight
    a8[0] = 255
    b16[:, 0], b16[:, 1] = -32768, 32767             # the largest pair sums there are
    a, b, c = _pairs_gemm(m, k // 4, n)
    f = kiln.build(vector_gemm_schedule(c, lanes), [a, b, c], target=target)
    out = np.empty((m, n), np.int32)
    f(a8.view(np.int32), _pairs_from_int16(b16), out)
    want = a8.astype(np.int64) @ b16.astype(np.int64)
    np.testing.assert_array_equal(out, want.astype(np.int32))


def test_avx2_pairs_lowering_is_two_vpmaddwd():
    a, b, c = _pairs_gemm(4, 3, 16)
    asm = kiln.build(vector_gemm_schedule(c, 8), [a, b, c], target="llvm -mcpu=haswell").asm()
    assert asm.count("vpmaddwd") >= 2 and "vpsrlw" in asm
    assert "vpmaddubsw" not in asm and "vpdpbusd" not in asm


def test_widened_weights_hold_the_bytes():
    rng = np.random.default_rng(2)
    w8 = rng.integers(-128, 128, size=(13, 9)).astype(np.int8)
    w8[0, 0], w8[1, 1] = -128, 127
    words = pack_weight_int8x4(w8, 0)                  # [4, 9], K padded to 16
    pairs = widen_weight_words(words, 1)               # [4, 2, 9]
    assert pairs.shape == (4, 2, 9) and pairs.dtype == np.int32
    halves = pairs[..., None].view(np.int16)           # [4, 2, 9, 2]
    padded = np.zeros((16, 9), np.int16)
    padded[:13] = w8
    for t in range(4):
        np.testing.assert_array_equal(halves[:, t % 2, :, t // 2], padded[t::4])
    panels = panel_weight_pairs(pairs, 4)              # [3, 4, 2, 4], one padded column
    assert panels.shape == (3, 4, 2, 4)
    np.testing.assert_array_equal(panels.transpose(1, 2, 0, 3).reshape(4, 2, 12)[..., :9],
                                  pairs)
    assert not panels[2, ..., 1:].any()
    with pytest.raises(TEError, match="int32 words"):
        widen_weight_words(w8, 0)


def test_dot4_u8s16_takes_three_words():
    with pytest.raises(TEError, match=r"dot4_u8s16 takes three int32 words.*int32, int32$"):
        E.call("dot4_u8s16", E.const(1, "int32"), E.const(2, "int32"))


@settings(max_examples=10, deadline=None)
@given(m=st.integers(1, 9), k=st.integers(1, 23), n=st.integers(1, 41),
       panel=st.sampled_from([None, 8, 16]), seed=st.integers(0, 2 ** 16))
def test_matmul_pairs_random_shapes(m, k, n, panel, seed):
    """matmul_int8x4 over int16 pairs (plain and in column panels) with its default
    schedule: exact for any shape, full-range int8 weights."""
    rng = np.random.default_rng(seed)
    a8 = rng.integers(0, 256, size=(m, k)).astype(np.uint8)
    w8 = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    k4 = -(-k // 4)
    a_words = np.zeros((m, 4 * k4), np.uint8)
    a_words[:, :k] = a8
    pairs = widen_weight_words(pack_weight_int8x4(w8, 0), 1)
    weight = pairs if panel is None else panel_weight_pairs(pairs, panel)
    a = placeholder((m, k4), "int32", "a")
    b = placeholder(weight.shape, "int32", "b")
    c = matmul_int8x4(a, b, n=n)
    f = kiln.build(kiln.create_schedule(c), [a, b, c])
    out = np.empty((m, n), np.int32)
    f(np.ascontiguousarray(a_words).view(np.int32), weight, out)
    np.testing.assert_array_equal(out, a8.astype(np.int32) @ w8.astype(np.int32))
