"""dot4_u8s8perm (codegen/dot4.py) and matmul_int8x4_perm (te/ops/int8/perm.py): a dot4
of 4 bytes picked out of a group of 4 activation words by a selector, lowered with one vpshufb
and vpmaddubsw + vpmaddwd on AVX2 (exact for pair-safe weights), vpdpbusd with VNNI, plain IR
elsewhere. Every lowering against numpy's integer product and te.reference, on activations of
255 (where an unsafe pair would saturate), selectors with bit 7 (a zero byte) and bits 4-6
set (ignored), lane-invariant and lane-varying words and selectors."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import kiln
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen.build import DEFAULT_FASTMATH, fastmath_flags
from kiln.codegen.emit_module import emit_module
from kiln.codegen.target import Target
from kiln.schedule import lower
from kiln.te import expr as E
from kiln.te.errors import TEError
from kiln.te.ops.int8.perm import (matmul_int8x4_perm, pair_safe,
                                   pair_weight_groups)
from kiln.te.reference import dot4_u8s8perm_reference
from kiln.te.tensor import compute, placeholder, reduce_axis
from kiln.te.tensor import sum as te_sum

R = np.random.default_rng(61)
TARGETS = ["native", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"]


def safe_bytes(shape) -> np.ndarray:
    """Random int8 weights whose pairs (bytes 0, 1 and 2, 3 of each word along the last axis
    of 4) are pair-safe, the extremes included."""
    w0 = R.integers(-128, 128, size=shape[:-1] + (2,))
    lo = np.where(w0 > 0, -128, np.where(w0 < 0, -128 - w0, -128))
    hi = np.where(w0 > 0, 128 - w0, 127)
    w1 = lo + (R.random(lo.shape) * (hi - lo + 1)).astype(np.int64)
    out = np.stack([w0, w1], axis=-1).reshape(shape).astype(np.int8)
    assert pair_safe(out[..., 0::2], out[..., 1::2]).all()
    return out


def selectors(shape) -> np.ndarray:
    """Selector words: bytes 0..15, some with bits 4-6 set, some with bit 7 (zero)."""
    b = R.integers(0, 16, size=shape + (4,))
    b = b | (R.integers(0, 8, size=b.shape) << 4) * (R.random(b.shape) < 0.3)
    b = np.where(R.random(b.shape) < 0.1, 0x80 | b, b)
    return np.ascontiguousarray(b.astype(np.uint8)).view(np.int32)[..., 0]


def _kernel(m: int, g: int, n: int, lane_words: bool):
    """c[i, j] = sum_{g, t} dot4_u8s8perm(group of a, sel[g, t, j], w[g, t, j]); with
    lane_words the words vary along j (a[j, 4 g + u]: the plain-IR path)."""
    a = placeholder((n if lane_words else m, 4 * g), "int32", "a")
    s = placeholder((g, 4, n), "int32", "s")
    w = placeholder((g, 4, n), "int32", "w")
    kg, kt = reduce_axis(g, "g"), reduce_axis(4, "t")

    def body(i, j):
        row = j if lane_words else i
        words = [a[row, 4 * kg.var + u] for u in range(4)]
        return te_sum(E.dot4_u8s8perm(*words, s[kg.var, kt.var, j], w[kg.var, kt.var, j]),
                      axis=[kg, kt])

    return a, s, w, compute((m, n), body, name="c")


def _schedule(c, lanes):
    sch = kiln.create_schedule(c)
    if lanes:
        i, j = c.op.axis
        jo, ji = sch[c].split(j, lanes)
        sch[c].reorder(i, jo, *c.op.reduce_axis, ji)
        sch[c].vectorize(ji)
    return sch


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [0, 4, 7, 8, 16])
@pytest.mark.parametrize("lane_words", [False, True])
def test_dot4_perm_matches_reference(target, lanes, lane_words):
    m, g, n = 3, 2, 16
    a, s, w, c = _kernel(m, g, n, lane_words)
    a8 = R.integers(0, 256, size=(a.shape[0], 16 * g)).astype(np.uint8)
    a8[0] = 255
    sel = selectors((g, 4, n))
    wb = safe_bytes((g, 4, n, 4))
    w32 = np.ascontiguousarray(wb).view(np.int32)[..., 0]
    f = kiln.build(_schedule(c, lanes), [a, s, w, c], target=target)
    out = np.empty((m, n), np.int32)
    a32 = a8.view(np.int32)
    f(a32, sel, w32, out)
    want = np.zeros((m, n), np.int64)
    for i in range(m):
        for j in range(n):
            row = a32[j if lane_words else i].reshape(g, 4)
            for kg in range(g):
                want[i, j] += dot4_u8s8perm_reference(*row[kg], sel[kg, :, j],
                                                      w32[kg, :, j]).sum()
    np.testing.assert_array_equal(out, want)


def test_reference_picks_bytes_by_hand():
    words = np.array([0x03020100, 0x07060504, 0x0B0A0908, 0x0F0E0D0C], np.int64)
    words = words.astype(np.uint32).view(np.int32)
    sel = np.array([0x8F_1F_05_00], np.uint32).view(np.int32)[0]   # bytes 0, 5, 15|16, zero
    b = np.array([0x04_03_02_01], np.int32)[0]                      # weights 1, 2, 3, 4
    assert dot4_u8s8perm_reference(*words, sel, b) == 0 * 1 + 5 * 2 + 15 * 3 + 0 * 4


def _asm(target: str, lanes: int) -> str:
    a, s, w, c = _kernel(4, 2, 32, False)
    func = lower(_schedule(c, lanes), [a, s, w, c], name="perm")
    t = Target.from_string(target)
    module = llvm.parse_assembly(str(emit_module(func, t, fastmath_flags(DEFAULT_FASTMATH))))
    return t.create_target_machine().emit_assembly(module)


def test_lowerings_follow_the_target():
    avx2 = _asm("llvm -mcpu=haswell", 8)
    assert "vpshufb" in avx2 and "vpmaddubsw" in avx2 and "vpdpbusd" not in avx2
    vnni = _asm("llvm -mcpu=znver4", 16)            # cannot run here: the assembly only
    assert "vpshufb" in vnni and "vpdpbusd" in vnni and "vpmaddubsw" not in vnni
    assert "vpdpbusd" in _asm("llvm -mcpu=znver4", 8)
    bw = _asm("llvm -mcpu=skylake-avx512", 16)      # AVX-512BW without VNNI: zmm madd
    lines = [line for line in bw.splitlines() if "zmm" in line]
    assert any("vpshufb" in line for line in lines) and "vpdpbusd" not in bw
    assert any("vpmaddubsw" in line for line in lines)


def test_dot4_perm_takes_six_words():
    with pytest.raises(TEError, match=r"dot4_u8s8perm takes six int32 words"):
        E.dot4_u8s8perm(*[E.const(1, "int32")] * 5, E.const(1.0, "float32"))


# ------------------------------------------------------------------ the weight and the GEMM

def _gaussian(k: int, n: int, sigma: float = 30.0) -> np.ndarray:
    w = np.clip(np.rint(R.standard_normal((k, n)) * sigma), -128, 127).astype(np.int8)
    w[0, 0], w[-1, -1] = -128, 127
    return w


@pytest.mark.parametrize("k,n,block", [(16, 5, 8), (32, 24, 8), (48, 40, 16), (16, 1, 16)])
def test_pair_weight_groups_are_safe_and_hold_the_weight(k, n, block):
    w = _gaussian(k, n)
    sel, words = pair_weight_groups(w, block)
    p, g = -(-n // block), k // 16
    assert sel.shape == (p, g, 4) and words.shape == (p, g, 4, block)
    order = np.ascontiguousarray(sel).view(np.uint8).reshape(p, g, 16)
    assert (np.sort(order, axis=-1) == np.arange(16)).all()       # a permutation per group
    wb = np.ascontiguousarray(words).view(np.int8).reshape(p, g, 4, block, 4)
    assert pair_safe(wb[..., 0::2], wb[..., 1::2]).all()
    # back to [K, N]: byte order[p, g, 4 t + b] of group g is wb[p, g, t, j, b]
    back = np.zeros((k, p * block), np.int64)
    for pp in range(p):
        for gg in range(g):
            for t in range(4):
                for b in range(4):
                    back[16 * gg + order[pp, gg, 4 * t + b], pp * block:(pp + 1) * block] = \
                        wb[pp, gg, t, :, b]
    np.testing.assert_array_equal(back[:, :n], w)
    assert not back[:, n:].any()


def test_pair_weight_groups_report_an_impossible_group():
    w = np.full((16, 3), 100, np.int8)            # any pair sums 200 > 128 in every column
    assert pair_weight_groups(w, 8) is None
    w[1::2] = -100                                 # 100 next to -100: the identity pairs
    sel, _ = pair_weight_groups(w, 8)
    assert (np.ascontiguousarray(sel).view(np.uint8).reshape(-1) ==
            np.arange(16)).all()
    w = np.tile(np.array([100, 100, -100, -100], np.int8), 4)[:, None].repeat(3, axis=1)
    sel, words = pair_weight_groups(w, 8)          # (0, 1) sums 200: pairs across instead
    order = np.ascontiguousarray(sel).view(np.uint8).reshape(16)
    assert (order != np.arange(16)).any()
    wb = np.ascontiguousarray(words).view(np.int8).reshape(4, 8, 4)
    assert pair_safe(wb[..., 0::2], wb[..., 1::2]).all()
    with pytest.raises(TEError, match="multiple of 16"):
        pair_weight_groups(np.zeros((12, 3), np.int8), 8)


@pytest.mark.parametrize("target", ["native", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("m,k,n,block", [(1, 16, 5, 8), (7, 32, 24, 8), (13, 48, 40, 8),
                                         (29, 64, 16, 16)])
def test_matmul_int8x4_perm_default_schedule_is_exact(target, m, k, n, block):
    w = _gaussian(k, n)
    sel, words = pair_weight_groups(w, block)
    a8 = R.integers(0, 256, size=(m, k)).astype(np.uint8)
    a8[0] = 255
    a = placeholder((m, k // 4), "int32", "a")
    s = placeholder(sel.shape, "int32", "s")
    wt = placeholder(words.shape, "int32", "w")
    out = matmul_int8x4_perm(a, s, wt, n)
    space = SearchSpace(Task("mmp", (out,), (a, s, wt, out), target=target), threads=1)
    sch, args = space.apply(space.default_config())
    f = kiln.build(sch, args, target=target)
    got = np.empty((m, n), np.int32)
    f(a8.view(np.int32), sel, words, got)
    np.testing.assert_array_equal(got, a8.astype(np.int64) @ w.astype(np.int64))


def test_matmul_int8x4_perm_checks_its_operands():
    a = placeholder((4, 8), "int32", "a")
    with pytest.raises(TEError, match="4 G"):
        matmul_int8x4_perm(a, placeholder((1, 3, 4), "int32", "s"),
                           placeholder((1, 3, 4, 8), "int32", "w"), 8)
    with pytest.raises(TEError, match="column count"):
        matmul_int8x4_perm(a, placeholder((1, 2, 4), "int32", "s"),
                           placeholder((1, 2, 4, 8), "int32", "w"), 9)
