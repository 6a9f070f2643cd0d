"""Lane-uniform selects made branches (schedule/passes/uniform_select.py): the analysis, the rewrite
of a concatenation along the vectorized axis, and compiled concatenations against numpy with
boundaries that are and are not multiples of the lane count (uniform ones read their inputs
with whole-vector loads, checked in the LLVM IR)."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.codegen import build
from kiln.codegen.emit_module import emit_module, fastmath_flags
from kiln.codegen.target import Target
from kiln.schedule.passes.uniform_select import branch_uniform_selects, is_lane_uniform, multiple_of
from kiln.schedule.ir import For, ForKind
from kiln.schedule.lower import lower
from kiln.te import expr as E
from kiln.te.ops.int8.core import quantize
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


def _concat_kernel(widths, lanes, dtype, rows=3, quant=False, axis=1):
    shapes = [(rows, w) if axis == 1 else (w, rows * lanes) for w in widths]
    ins = [te.placeholder(shape, dtype, name=f"x{i}") for i, shape in enumerate(shapes)]
    out = concatenate(ins, axis=axis)
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


@pytest.mark.parametrize("dtype", ["float16", "int32", "float64"])
def test_masked_loads_of_other_dtypes(dtype):
    _run((5, 19), 16, dtype)


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
    *_, func = _concat_kernel((64, 128, 32, 32), 8, "float32", axis=0)
    assert branch_uniform_selects(func.body) is func.body     # conditions free of the lanes


def _llvm(func) -> str:
    return str(emit_module(func, Target.native(), fastmath_flags(("contract",))))


@pytest.mark.parametrize("widths,lanes", [((64, 128, 32, 32), 32), ((64, 128, 32, 32), 64),
                                          ((7, 17), 8)])
def test_concat_emits_no_per_lane_loads(widths, lanes):
    """Uniform boundaries: plain vector loads; a boundary inside a vector: masked loads of
    both sides (llvm.masked.load), never a load per lane."""
    *_, func = _concat_kernel(widths, lanes, "float32")
    text = _llvm(func)
    assert not re.search(r"= load float, ptr", text)
    assert "extractelement" not in text and "gather" not in text
    assert ("llvm.masked.load" in text) == any(sum(widths[:k]) % lanes
                                               for k in range(1, len(widths)))


def test_a_clamp_the_condition_does_not_cover_stays():
    """out[v] = select(v < 4, x[min(v, 2)], y[v]): lanes 3 read x[2] (an edge clamp, not a
    dead-branch guard), so that load keeps its clamp and its per-lane reads."""
    from kiln.schedule.ir import PrimFunc, Store
    from .cg_util import buf, load, loop
    x, y, out = buf("x", "float32", [3]), buf("y", "float32", [8]), buf("out", "float32", [8])
    v = E.var("v")
    value = E.select(v < 4, load(x, E.minimum(v, 2)), load(y, v))
    func = PrimFunc("edge", (x, y, out), loop(v, 8, Store(out, v, value), ForKind.VECTORIZED))
    assert branch_uniform_selects(func.body) is func.body
    xs, ys = RNG.random(3).astype("float32"), RNG.random(8).astype("float32")
    result = np.zeros(8, "float32")
    build(func, cache_kernel=False)(xs, ys, result)
    np.testing.assert_array_equal(result, np.where(np.arange(8) < 4, xs[np.minimum(
        np.arange(8), 2)], ys))


@pytest.mark.parametrize("before,after", [(2, 3), (8, 8), (1, 0)])
def test_pad_along_the_vector_axis_reads_masked_vectors(before, after):
    """A constant pad of the last axis (`0 <= w - before` and `w - before < 13`): the
    condition covers the read's clamp from both sides, so the read is one masked load."""
    from kiln.te.ops.transform import pad
    x = te.placeholder((2, 13), "float32", name="x")
    out = pad(x, (0, before), (0, after), value=1.5)
    s = kiln.create_schedule(out)
    width = 13 + before + after
    lanes = 8 if width % 8 == 0 else 2 if width % 2 == 0 else 1
    if lanes == 1:
        lanes = width
    r, c = out.op.axis
    co, ci = s[out].split(c, lanes)
    s[out].vectorize(ci)
    func = lower(s, [x, out], name="pad")
    xs = RNG.random((2, 13)).astype("float32")
    result = np.zeros(out.shape, "float32")
    build(func, cache_kernel=False)(xs, result)
    np.testing.assert_array_equal(result, np.pad(xs, ((0, 0), (before, after)),
                                                 constant_values=1.5))
    assert "llvm.masked.load" in _llvm(func) and "extractelement" not in _llvm(func)


@pytest.mark.parametrize("dtype,masked", [("float32", True), ("uint8", False)])
def test_avx2_masks_only_the_elements_it_has_masked_loads_for(dtype, masked):
    """AVX2 has vmaskmov for 32/64-bit elements only: a uint8 boundary inside a vector keeps
    its clamped reads there (LLVM would expand the masked load into a branch per lane)."""
    *_, func = _concat_kernel((7, 17), 8, dtype)
    avx2 = Target.from_string("llvm -mcpu=znver3")
    text = str(emit_module(func, avx2, fastmath_flags(("contract",))))
    assert ("llvm.masked.load" in text) == masked
    if avx2.can_run_on_host():
        ins = [RNG.integers(0, 200, (3, w)).astype(dtype) for w in (7, 17)]
        result = np.zeros((3, 24), dtype)
        build(func, target=avx2, cache_kernel=False)(*ins, result)
        np.testing.assert_array_equal(result, np.concatenate(ins, axis=1))


@settings(max_examples=10, deadline=None)
@given(widths=st.lists(st.integers(1, 40), min_size=1, max_size=4),
       lanes=st.sampled_from([1, 4, 8, 16, 32, 64]), dtype=st.sampled_from(["float32", "uint8"]))
def test_random_concats_match_numpy(widths, lanes, dtype):
    _run(tuple(widths), lanes, dtype)
