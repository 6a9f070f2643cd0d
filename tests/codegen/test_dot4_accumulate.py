"""`acc + dot4(...)` emitted as one vpdpbusd accumulating into acc on a VNNI target
(codegen/emit_expr.py _accumulated_dot): exact against numpy's integer product in either
operand order, at every lane count the emitter splits or pads (scalar, 7, 16, 24, 48), with
int32 accumulators that wrap; the assembly of a pinned znver4 GEMM has no vpaddd left beside
its vpdpbusd, and an AVX2 target keeps its plain add."""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
import pytest

import kiln
from kiln.codegen.build import DEFAULT_FASTMATH, fastmath_flags
from kiln.codegen.emit_module import emit_module
from kiln.codegen.target import Target
from kiln.schedule import lower
from kiln.te import expr as E
from kiln.te.ops.int8.core import pack_weight_int8x4
from kiln.te.tensor import compute, placeholder, reduce_axis
from kiln.te.tensor import sum as te_sum
from tests.util import vector_gemm_schedule

M, K, N = 3, 20, 48          # K = 5 words


def _gemm():
    a = placeholder((M, K // 4), "int32", "a")
    b = placeholder((K // 4, N), "int32", "b")
    k = reduce_axis(K // 4, "k")
    c = compute((M, N), lambda i, j: te_sum(E.dot4_u8s8(a[i, k], b[k, j]), axis=k), name="c")
    return a, b, c


def _biased(dot_first: bool):
    """out[i, j] = dot4(a[i, 0], b[0, j]) + bias[i, j] (or bias + dot4): no reduction, so
    the add is the expression's own, in the order asked."""
    a = placeholder((M, 1), "int32", "a")
    b = placeholder((1, N), "int32", "b")
    bias = placeholder((M, N), "int32", "bias")

    def body(i, j):
        dot = E.dot4_u8s8(a[i, 0], b[0, j])
        return dot + bias[i, j] if dot_first else bias[i, j] + dot

    return a, b, bias, compute((M, N), body, name="c")


def _vector_schedule(c, lanes: int):
    s = kiln.create_schedule(c)
    if lanes:
        _, ji = s[c].split(c.op.axis[1], lanes)
        s[c].vectorize(ji)
    return s


def _asm(target: str, lanes: int) -> str:
    a, b, c = _gemm()
    func = lower(vector_gemm_schedule(c, lanes), [a, b, c], name="dot4_gemm")
    t = Target.from_string(target)
    module = llvm.parse_assembly(str(emit_module(func, t, fastmath_flags(DEFAULT_FASTMATH))))
    return t.create_target_machine().emit_assembly(module)


@pytest.mark.parametrize("lanes", [0, 7, 16, 24, 48])
@pytest.mark.parametrize("dot_first", [False, True])
def test_accumulated_dot_is_exact_in_either_order(lanes, dot_first):
    a, b, bias, c = _biased(dot_first)
    rng = np.random.default_rng(7)
    a8 = rng.integers(0, 256, size=(M, 4)).astype(np.uint8)
    b8 = rng.integers(-128, 128, size=(4, N)).astype(np.int8)
    a8[0], b8[:, 0] = 255, -128
    bias_v = rng.integers(-2 ** 31, 2 ** 31, size=(M, N)).astype(np.int32)
    bias_v[0, :4] = [2 ** 31 - 1, -2 ** 31, 2 ** 31 - 1, -2 ** 31]     # the sums wrap
    f = kiln.build(_vector_schedule(c, lanes), [a, b, bias, c], target="native")
    out = np.empty((M, N), np.int32)
    f(a8.view(np.int32), pack_weight_int8x4(b8, 0), bias_v, out)
    want = (a8.astype(np.int64) @ b8.astype(np.int64) + bias_v).astype(np.int64)
    np.testing.assert_array_equal(out, ((want + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32))


@pytest.mark.parametrize("lanes", [16, 8, 24])
def test_vnni_gemm_accumulates_in_vpdpbusd(lanes):
    asm = _asm("llvm -mcpu=znver4", lanes)       # the assembly only: any host
    assert "vpdpbusd" in asm
    assert "vpaddd" not in asm                   # no zeroed product added afterwards


def test_avx2_keeps_its_add():
    asm = _asm("llvm -mcpu=znver3", 8)
    assert "vpdpbusd" not in asm and "vpaddd" in asm
