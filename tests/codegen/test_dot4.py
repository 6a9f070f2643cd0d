"""The dot4 integer intrinsics (codegen/dot4.py): every lowering against numpy's exact integer
product, on the extreme bytes where AVX2's vpmaddubsw saturates (255 * -128 + 255 * -128),
lowered through target strings: AVX2 (vpmaddubsw + vpmaddwd), SSE-only (plain IR), and the
VNNI path (vpdpbusd) checked in the assembly of a pinned znver4 target (it cannot run on a
CPU without AVX-512)."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import kiln
from kiln.codegen.build import DEFAULT_FASTMATH, fastmath_flags
from kiln.codegen.dot4 import dot4_strategies, target_features
from kiln.codegen.emit_module import emit_module
from kiln.codegen.target import Target
from kiln.schedule import lower
from kiln.te import expr as E
from kiln.te.errors import TEError
from kiln.te.ops.int8.core import pack_weight_int8x4
from kiln.te.tensor import compute, placeholder, reduce_axis
from kiln.te.tensor import sum as te_sum
from tests.util import vector_gemm_schedule

M, K, N = 5, 28, 37          # N prime: vector tails; K = 7 words


_DOTS = {False: E.dot4_u8s8, True: E.dot4_u8s7, "sym": E.dot4_u8s8sym}
_WEIGHTS = {False: (-128, 128), True: (-64, 64), "sym": (-127, 128)}


def _gemm(seven_bit):
    a = placeholder((M, K // 4), "int32", "a")
    b = placeholder((K // 4, N), "int32", "b")
    k = reduce_axis(K // 4, "k")
    dot = _DOTS[seven_bit]
    c = compute((M, N), lambda i, j: te_sum(dot(a[i, k], b[k, j]), axis=k), name="c")
    return a, b, c


def _operands(seven_bit):
    rng = np.random.default_rng(4)
    a8 = rng.integers(0, 256, size=(M, K)).astype(np.uint8)
    lo, hi = _WEIGHTS[seven_bit]
    b8 = rng.integers(lo, hi, size=(K, N)).astype(np.int8)
    a8[0] = 255                                   # pair sums of +-65280 without the split
    a8[1] = 0                                     # |a - 128| = 128 (the sign trick's edge)
    a8[2, ::2] = 128                              # a - 128 = 0
    b8[:, 0], b8[:, 1] = lo, hi - 1
    return a8, b8


@pytest.mark.parametrize("target", ["native", "llvm -mcpu=haswell", "llvm -mcpu=x86-64"])
@pytest.mark.parametrize("lanes", [0, 4, 7, 8, 16, 24])
@pytest.mark.parametrize("seven_bit", [False, True, "sym"])
def test_dot4_matches_integer_product(target, lanes, seven_bit):
    a, b, c = _gemm(seven_bit)
    a8, b8 = _operands(seven_bit)
    f = kiln.build(vector_gemm_schedule(c, lanes), [a, b, c], target=target)
    out = np.empty((M, N), np.int32)
    f(a8.view(np.int32), pack_weight_int8x4(b8, 0), out)
    np.testing.assert_array_equal(out, a8.astype(np.int32) @ b8.astype(np.int32))


def test_avx2_lowering_uses_vpmaddubsw():
    a, b, c = _gemm(False)
    f = kiln.build(vector_gemm_schedule(c, 8), [a, b, c], target="llvm -mcpu=haswell")
    asm = f.asm()
    assert "vpmaddubsw" in asm and "vpmaddwd" in asm and "vpdpbusd" not in asm


def test_avx2_symmetric_lowering_uses_the_sign_trick():
    a, b, c = _gemm("sym")
    asm = kiln.build(vector_gemm_schedule(c, 8), [a, b, c], target="llvm -mcpu=haswell").asm()
    assert "vpsignb" in asm and "vpabsb" in asm and "vpmaddubsw" in asm


def test_symmetric_lowering_on_avx512bw_without_vnni():
    asm = _asm("llvm -mcpu=skylake-avx512", 16, "sym")
    assert "vpmaddubsw" in asm and "vpdpbusd" not in asm
    assert "vpdpbusd" in _asm("llvm -mcpu=znver4", 16, "sym")


def _asm(target: str, lanes: int, kind=False) -> str:
    a, b, c = _gemm(kind)
    func = lower(vector_gemm_schedule(c, lanes), [a, b, c], name="dot4_gemm")
    t = Target.from_string(target)
    module = llvm.parse_assembly(str(emit_module(func, t, fastmath_flags(DEFAULT_FASTMATH))))
    return t.create_target_machine().emit_assembly(module)


def test_vnni_lowering_on_a_pinned_znver4():
    assert "vpdpbusd" in _asm("llvm -mcpu=znver4", 16)
    assert "vpdpbusd" in _asm("llvm -mcpu=znver4", 8)         # 256-bit with AVX512-VL
    no_vnni = _asm("llvm -mcpu=skylake-avx512", 16)
    assert "vpdpbusd" not in no_vnni and "vpmaddubsw" in no_vnni


def test_strategies_follow_the_target():
    assert dot4_strategies(target_features(Target.from_string("llvm -mcpu=znver4")))[0] == (
        16, "vnni")
    assert dot4_strategies(target_features(Target.from_string("llvm -mcpu=znver3"))) == [
        (8, "madd"), (4, "madd")]
    assert dot4_strategies(target_features(Target.from_string("llvm -mcpu=x86-64"))) == []


def test_dot4_takes_int32_words():
    with pytest.raises(TEError, match=r"dot4_u8s8 takes two int32 words.*float32"):
        E.dot4_u8s8(E.const(1.0, "float32"), E.const(2, "int32"))
