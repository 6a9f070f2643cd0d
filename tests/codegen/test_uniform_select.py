"""Lane-uniform selects made branches (codegen/uniform_select.py): the analysis, the rewrite
of a concatenation along the vectorized axis, and compiled concatenations against numpy with
boundaries that are and are not multiples of the lane count (uniform ones read their inputs
with whole-vector loads, checked in the LLVM IR)."""
import re

import numpy as np
import pytest

import kiln
from kiln import te
from kiln.codegen import build
from kiln.codegen.emit_module import emit_module, fastmath_flags
from kiln.codegen.target import Target
from kiln.codegen.uniform_select import branch_uniform_selects, is_lane_uniform, multiple_of
from kiln.schedule.ir import For, ForKind
from kiln.schedule.lower import lower
from kiln.te import expr as E
from kiln.te.ops.quantized import quantize
from kiln.te.ops.transform import concatenate

RNG = np.random.default_rng(3)


def test_multiple_of():
    o, v = E.var("o"), E.var("v")
    assert multiple_of(E.floormod(o, 4) * 64) == 64
    assert multiple_of(E.floormod(o, 4) * 64 - 192) == 64
    assert multiple_of(E.floormod(o, 4) * 64 - 224) == 32
    assert multiple_of(E.floormod(o * 8, 12)) == 4
    assert multiple_of(E.floordiv(o * 64, 4)) == 16
    assert multiple_of(o + 64) == 1
    assert multiple_of(E.const(0)) == 0


def test_uniformity_needs_the_boundary_on_a_vector_start():
    o, v = E.var("o"), E.var("v")
    loop = _vloop(v, 64)
    base = E.floormod(o, 4) * 64
    assert is_lane_uniform(base + v < 192, loop)
    assert is_lane_uniform(E.logical_and(base + v < 192, o < 5), loop)
    assert not is_lane_uniform(base + v < 224, loop)        # 224 is inside a vector
    assert not is_lane_uniform(base + 2 * v < 192, loop)    # stride 2 crosses it
    assert not is_lane_uniform(o * 3 + v < 192, loop)       # base not a multiple of 64


def _vloop(v, n):
    from kiln.schedule.ir import Evaluate
    return For(v, E.const(0), E.const(n), ForKind.VECTORIZED, Evaluate(E.const(0)))


def _concat_kernel(widths, lanes, dtype, rows=3, quant=False):
    ins = [te.placeholder((rows, w), dtype, name=f"x{i}") for i, w in enumerate(widths)]
    out = concatenate(ins, axis=1)
    extra = []
    if quant:
        scale = te.placeholder((1,), "float32", name="scale")
        zp = te.placeholder((1,), "uint8", name="zp")
        out = quantize(out, scale, zp)
        extra = [scale, zp]
    s = kiln.create_schedule(out)
    if quant:
        s[out.op.input_tensors[0]].compute_inline()
    r, c = out.op.axis
    co, ci = s[out].split(c, lanes)
    s[out].vectorize(ci)
    args = ins + extra + [out]
    return ins, extra, out, lower(s, args, name="cat")


def _run(widths, lanes, dtype, quant=False):
    ins, extra, out, func = _concat_kernel(widths, lanes, dtype, quant=quant)
    if dtype == "uint8":
        arrays = [RNG.integers(0, 256, t.shape).astype("uint8") for t in ins]
    else:
        arrays = [RNG.uniform(-4, 4, t.shape).astype(dtype) for t in ins]
    result = np.zeros(out.shape, out.dtype)
    if quant:
        s, z = np.array([0.03], "float32"), np.array([9], "uint8")
        build(func, cache_kernel=False)(*arrays, s, z, result)
        ref = np.clip(np.round(np.concatenate(arrays, axis=1) / s[0]) + 9, 0, 255)
        np.testing.assert_array_equal(result, ref.astype("uint8"))
    else:
        build(func, cache_kernel=False)(*arrays, result)
        np.testing.assert_array_equal(result, np.concatenate(arrays, axis=1))
    return func


@pytest.mark.parametrize("widths,lanes", [
    ((64, 128, 32, 32), 64), ((64, 128, 32, 32), 32), ((16, 8, 24), 8),     # uniform, some all
    ((7, 13), 8), ((1, 3, 5), 4), ((3,), 4), ((1,), 8), ((2, 3, 1, 17), 16),  # straddling
])
@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_concat_along_the_vector_axis_matches_numpy(widths, lanes, dtype):
    _run(widths, lanes, dtype)


def test_concat_then_quantize_matches_numpy():
    _run((64, 128, 32, 32), 64, "float32", quant=True)
    _run((5, 11), 8, "float32", quant=True)


def test_uniform_boundaries_read_whole_vectors():
    """Every boundary a multiple of the lanes: each input a branch with an unclamped,
    contiguous index (no lane-by-lane reads); a straddled boundary keeps its select."""
    *_, func = _concat_kernel((64, 128, 32, 32), 32, "float32")
    body = str(branch_uniform_selects(func.body))
    assert "select" not in body and "min(" not in body and "max(" not in body
    assert body.count("if ") == 3
    *_, func = _concat_kernel((64, 128, 32, 32), 64, "float32")
    body = str(branch_uniform_selects(func.body))
    assert body.count("if ") == 2 and body.count("select(") == 1   # 224 is inside a vector
    *_, func = _concat_kernel((7, 13), 8, "float32")
    assert branch_uniform_selects(func.body) is func.body


def test_uniform_concat_emits_no_per_lane_loads():
    *_, func = _concat_kernel((64, 128, 32, 32), 32, "float32")
    text = str(emit_module(func, Target("native"), fastmath_flags(("contract",))))
    assert not re.search(r"= load float, ptr", text)          # only <32 x float> loads
    assert "extractelement" not in text                      # no per-lane addresses
    *_, func = _concat_kernel((7, 13), 8, "float32")
    text = str(emit_module(func, Target("native"), fastmath_flags(("contract",))))
    assert re.search(r"= load float, ptr", text)              # straddling: per lane, still
