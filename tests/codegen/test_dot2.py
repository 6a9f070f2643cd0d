"""dot2_s16 / dot2_s16s8 (codegen/dot4.py) and matmul_int16x2 (te/ops/int8/pairs.py):
int16 activation pairs times int16 or int8 weight pairs, exact against numpy, lowered
through target strings (AVX2: one vpmaddwd, vpmovsxbw for the int8 pairs, no byte split;
SSE2; odd lane counts as plain IR); the weight and activation layouts against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.te import expr as E
from kiln.te.errors import TEError
from kiln.te.ops.int8.core import pack_weight_int8x4, widen_weight_words
from kiln.te.ops.int8.pairs import (matmul_int16x2, narrow_weight_pairs,
                                    pair_weight_rows, widen_words_int16x2)
from kiln.te.tensor import compute, placeholder, reduce_axis
from kiln.te.tensor import sum as te_sum
from tests.util import vector_gemm_schedule


def _dot2_gemm(m: int, k2: int, n: int, wdtype: str):
    a = placeholder((m, k2), "int32", "a")
    b = placeholder((k2, n), wdtype, "b")
    k = reduce_axis(k2, "k")
    dot = E.dot2_s16s8 if wdtype == "int16" else E.dot2_s16
    c = compute((m, n), lambda i, j: te_sum(dot(a[i, k], b[k, j]), axis=k), name="c")
    return a, b, c


@pytest.mark.parametrize("target", ["native", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
@pytest.mark.parametrize("lanes", [0, 3, 8, 14, 16])
@pytest.mark.parametrize("wdtype", ["int32", "int16"])
def test_dot2_matches_integer_product(target, lanes, wdtype):
    m, k2, n = 5, 11, 37
    rng = np.random.default_rng(3)
    a16 = rng.integers(0, 256, size=(m, 2 * k2)).astype(np.int16)   # zero-extended bytes
    a16[0] = 255
    if wdtype == "int32":
        w = rng.integers(-32768, 32768, size=(2 * k2, n)).astype(np.int16)
        w[:, 0], w[:, 1] = -32768, 32767
        b = np.ascontiguousarray(w.reshape(k2, 2, n).transpose(0, 2, 1)).view(np.int32)[..., 0]
    else:
        w = rng.integers(-128, 128, size=(2 * k2, n)).astype(np.int8)
        w[:, 0], w[:, 1] = -128, 127
        b = np.ascontiguousarray(w.reshape(k2, 2, n).transpose(0, 2, 1)).view(np.int16)[..., 0]
    a, bt, c = _dot2_gemm(m, k2, n, wdtype)
    f = kiln.build(vector_gemm_schedule(c, lanes), [a, bt, c], target=target)
    out = np.empty((m, n), np.int32)
    f(np.ascontiguousarray(a16).view(np.int32), np.ascontiguousarray(b), out)
    np.testing.assert_array_equal(out, (a16.astype(np.int64) @ w.astype(np.int64))
                                  .astype(np.int32))


def test_avx2_lowering_is_one_vpmaddwd_without_a_split():
    a, b, c = _dot2_gemm(4, 3, 16, "int16")
    asm = kiln.build(vector_gemm_schedule(c, 8), [a, b, c], target="llvm -mcpu=haswell").asm()
    assert "vpmaddwd" in asm and "vpmovsxbw" in asm
    assert "vpsrlw" not in asm and "vpmaddubsw" not in asm


def test_intrinsics_check_their_dtypes():
    with pytest.raises(TEError, match="dot2_s16s8 takes an int32 word of 2 int16, then an "
                                      "int16 of 2 int8"):
        E.call("dot2_s16s8", E.const(1, "int32"), E.const(2, "int32"))
    with pytest.raises(TEError, match="dot2_s16 takes two int32 words of 2 packed int16"):
        E.call("dot2_s16", E.const(1, "int32"), E.const(2, "int16"))


@pytest.mark.parametrize("m,k,n,block,panel", [
    (7, 13, 37, 4, 16), (1, 4, 5, 1, None), (9, 24, 24, 2, 8), (3, 40, 131, 5, 16)])
def test_matmul_over_pairs_default_schedule(m, k, n, block, panel):
    """The pixel-major GEMM path end to end in TE: bytes -> words -> widened pairs (block) x
    int8 weight pairs in the same row order (plain or panels), default schedule, exact."""
    rng = np.random.default_rng(m * 100 + k)
    k4 = -(-k // 4)
    a8 = np.zeros((m, 4 * k4), np.uint8)
    a8[:, :k] = rng.integers(0, 256, size=(m, k))
    w8 = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    rows = narrow_weight_pairs(pair_weight_rows(widen_weight_words(pack_weight_int8x4(w8, 0), 1),
                                                block))                       # [2 * k4, n]
    if panel is not None:
        p = -(-n // panel)
        padded = np.zeros((2 * k4, p * panel), np.int16)
        padded[:, :n] = rows
        rows = np.ascontiguousarray(padded.reshape(2 * k4, p, panel).transpose(1, 0, 2))
    words = placeholder((m, k4), "int32", "words")
    pairs = widen_words_int16x2(words, block)
    b = placeholder(rows.shape, "int16", "b")
    c = matmul_int16x2(pairs, b, n=n if panel else None)
    f = kiln.build(kiln.create_schedule(c), [words, b, c])
    out = np.empty((m, n), np.int32)
    f(np.ascontiguousarray(a8).view(np.int32), rows, out)
    np.testing.assert_array_equal(out, a8[:, :k].astype(np.int32) @ w8.astype(np.int32))


def test_layout_errors_name_the_problem():
    with pytest.raises(TEError, match="outside int8"):
        narrow_weight_pairs(np.array([0x00800000], np.int32))          # a pair half of 128
    with pytest.raises(TEError, match="multiple of block=3"):
        pair_weight_rows(np.zeros((4, 2, 5), np.int32), 3)
    with pytest.raises(TEError, match="multiple of block=3"):
        widen_words_int16x2(placeholder((2, 4), "int32", "x"), 3)
    with pytest.raises(TEError, match="need the column count"):
        matmul_int16x2(placeholder((2, 6), "int32", "a"), placeholder((2, 6, 8), "int16", "b"),
                       n=3)
