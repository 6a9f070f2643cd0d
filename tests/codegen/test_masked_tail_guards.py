"""Masked vector tails (codegen/masked_tail.py) write nothing outside their arrays: kernels
whose columns the vector width does not divide (1, primes, 8k + r), under the default
schedule and sampled ones, run on guarded copies of their arguments (tests/codegen/guarded.py)
and match numpy. Narrow outputs (uint8, int8, int16, bfloat16) are the ones LLVM 22's X86
backend stored wide from a one-lane constant mask (codegen/emit_expr.opaque_mask); a model's
intermediate tensors (its arena) are guarded the same way, kernel by kernel."""
from __future__ import annotations

import ctypes
import random

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import Target, build, emit_expr
from kiln.codegen.dot4 import target_features
from kiln.codegen.jit import compile_module
from kiln.codegen.target import init_llvm
from kiln.schedule.lower import lower
from kiln.te import expr as E
from kiln.te.ops import indexing, reduction

from .guarded import guarded_call

COLUMNS = [1, 2, 3, 5, 7, 9, 13, 17, 19, 23, 25, 31, 33, 41]
ROWS = [1, 2, 3, 4, 5, 7, 9, 24]
_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767)}


def _quantize(m: int, n: int, dtype: str):
    """x * 50 rounded, shifted, clamped and stored as a narrow integer (QuantizeLinear's
    shape of computation)."""
    x = te.placeholder((m, n), "float32", "x")
    lo, hi = _RANGES[dtype]
    y = te.compute((m, n), lambda i, j: E.cast(E.minimum(E.maximum(
        E.round(x[i, j] * 50.0) + 3.0, float(lo)), float(hi)), dtype), name="y")
    return [x], y, lambda a: np.clip(np.round(a * np.float32(50)) + 3, lo, hi).astype(dtype)


def _to_half(m: int, n: int, dtype: str):
    x = te.placeholder((m, n), "float32", "x")
    y = te.compute((m, n), lambda i, j: E.cast(x[i, j] * 3.0 + 0.5, dtype), name="y")
    return [x], y, lambda a: a * np.float32(3) + np.float32(0.5)


def _matmul(m: int, n: int, k: int):
    a, b = te.placeholder((m, k), "float32", "a"), te.placeholder((k, n), "float32", "b")
    r = te.reduce_axis((0, k), "r")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="c")
    return [a, b], c, lambda x, w: x @ w


def _softmax_rows(m: int, n: int):
    """Two stages: a row max, then exp(x - max) (an intermediate the kernel keeps)."""
    x = te.placeholder((m, n), "float32", "x")
    mx = reduction.max(x, axis=1)
    y = te.compute((m, n), lambda i, j: E.call("exp", x[i, j] - mx[i]), name="y")
    return [x], y, lambda a: np.exp(a - a.max(axis=1, keepdims=True))


def _dag(kind: str, m: int, n: int):
    if kind in _RANGES:
        return _quantize(m, n, kind)
    if kind in ("bfloat16", "float16"):
        return _to_half(m, n, kind)
    if kind == "matmul":
        return _matmul(m, n, 1 + (m * 7 + n) % 11)
    x = te.placeholder((m, n), "float32", "x")
    if kind == "colmax":
        return [x], reduction.max(x, axis=0), lambda a: a.max(axis=0)
    if kind == "rowsum":
        return [x], reduction.sum(x, axis=1), lambda a: a.sum(axis=1)
    if kind == "cumsum":
        return [x], indexing.cumsum(x, axis=1), lambda a: np.cumsum(a, axis=1)
    return _softmax_rows(m, n)


def _check(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    if dtype in _RANGES:
        np.testing.assert_array_equal(got, want)
        return
    tol = {"bfloat16": 1e-2, "float16": 1e-3}.get(dtype, 1e-4)
    np.testing.assert_allclose(got.astype(np.float32), want, rtol=tol, atol=tol)


@settings(max_examples=24, deadline=None)
@given(kind=st.sampled_from(["uint8", "int8", "int16", "bfloat16", "float16", "matmul",
                             "colmax", "rowsum", "cumsum", "softmax"]),
       rows=st.sampled_from(ROWS), cols=st.sampled_from(COLUMNS),
       schedule=st.one_of(st.none(), st.integers(0, 10_000)))
@example(kind="uint8", rows=24, cols=17, schedule=None)      # DynamicQuantizeLinear's kernel
@example(kind="int16", rows=3, cols=9, schedule=None)
@example(kind="bfloat16", rows=4, cols=17, schedule=None)
@example(kind="int8", rows=5, cols=13, schedule=1)
def test_tails_write_nothing_outside_their_arrays_and_match_numpy(kind, rows, cols, schedule):
    inputs, out, reference = _dag(kind, rows, cols)
    task = Task(f"guarded_{kind}", (out,), tuple(inputs) + (out,))
    space = SearchSpace(task)
    config = (space.default_config() if schedule is None
              else space.sample(random.Random(schedule)))
    sch, args = space.apply(config)
    kernel = build(lower(sch, args, name=f"guarded_{kind}"), target="native")
    rng = np.random.default_rng(cols * 31 + rows)
    arrays = [rng.uniform(-3, 3, t.shape).astype(t.dtype) for t in inputs]
    result = np.zeros(out.shape, out.dtype)
    assert guarded_call(kernel, *arrays, result) == []
    _check(result, reference(*arrays), kind)


def test_a_models_intermediates_are_not_written_past():
    """DynamicQuantizeLinear over 17 columns (whose uint8 tail overran its output and
    corrupted the heap): every kernel of the model, run in order on guarded copies of the
    model's buffers, inputs, arena intermediates and outputs alike."""
    from onnx import helper

    from tests.graph.graph_helpers import make_model
    shape = (2, 3, 4, 17)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yzp"])
    model = make_model([node], {"x": (shape, "float32")},
                       [("y", "uint8"), ("ys", "float32"), ("yzp", "uint8")], {}, 13)
    compiled = kiln.compile(model, db=None, jobs=1)
    x = np.random.default_rng(5).uniform(-3.0, 5.0, shape).astype(np.float32)
    compiled.buffers["x"][...] = x
    problems = []
    for step in compiled.plan.steps:
        problems += guarded_call(compiled.kernels[step.kernel],
                                 *[compiled.buffers[a] for a in step.args])
    assert problems == []
    scale = np.float32((max(x.max(), 0) - min(x.min(), 0)) / 255)
    zero = np.clip(np.round(-min(x.min(), 0) / scale), 0, 255)
    want = np.clip(np.round(x / scale) + zero, 0, 255).astype(np.uint8)
    got = compiled.buffers[compiled.plan.outputs[0]]
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1


def test_a_guard_is_steady_only_without_loops_inside_the_allocation():
    """A matmul tile's column guard (`j0 + lane < n`, j0 outside the tile's Allocate) keeps
    each accumulator lane valid or off for the tile's life: its stores need no select. A
    scan's `lane <= i`, i a loop inside the Allocate, turns lanes on later: it is not."""
    from kiln.codegen.masked_tail import loop_vars, steady
    from kiln.schedule.ir import ForKind, Store
    from .cg_util import buf, loop
    acc = buf("acc", "float32", [16])
    j0, i, lane = E.var("j0"), E.var("i"), E.var("lane")
    body = loop(i, 5, loop(lane, 16, Store(acc, lane, E.const(1.0)), ForKind.VECTORIZED))
    inner = loop_vars(body)
    assert inner == frozenset({i, lane})
    assert steady(j0 * 16 + lane < 17, lane, inner)
    assert not steady(lane <= i, lane, inner)


def _one_lane_truncating_store(wide: int, narrow: int, lanes: int, lane: int):
    """LLVM IR of f(src, dst): dst <- trunc(src's `lanes` i<wide>) under a constant mask with
    only `lane` on, the mask passed through emit_expr.opaque_mask as kernels pass it."""
    init_llvm()
    mod = ir.Module(name="one_lane")
    mod.triple = llvm.get_process_triple()
    ptr = ir.PointerType(ir.IntType(8))
    fn = ir.Function(mod, ir.FunctionType(ir.VoidType(), [ptr, ptr]), name="f")
    b = ir.IRBuilder(fn.append_basic_block())
    wide_t = ir.VectorType(ir.IntType(wide), lanes)
    narrow_t = ir.VectorType(ir.IntType(narrow), lanes)
    mask_t = ir.VectorType(ir.IntType(1), lanes)
    value = b.trunc(b.load(b.bitcast(fn.args[0], wide_t.as_pointer()), align=1), narrow_t)
    mask = ir.Constant(mask_t, [ir.Constant(ir.IntType(1), int(k == lane))
                                for k in range(lanes)])
    store = ir.Function(mod, ir.FunctionType(ir.VoidType(), [narrow_t, ptr, ir.IntType(32),
                                                             mask_t]),
                        name=f"llvm.masked.store.v{lanes}i{narrow}.p0")
    b.call(store, [value, fn.args[1], ir.Constant(ir.IntType(32), 1),
                   emit_expr.opaque_mask(b, mask)])
    b.ret_void()
    return mod


@pytest.mark.parametrize("wide,narrow", [(32, 8), (32, 16), (64, 32), (16, 8), (64, 8)])
def test_a_one_lane_truncating_masked_store_stores_one_lane(wide, narrow):
    """The LLVM pattern behind the heap corruption (llvm/llvm-project#179489: a masked
    store of a truncated vector under a constant one-lane mask stored the lane at its wide
    width): with the mask made opaque, exactly the lane's bytes change."""
    target = Target.native()
    if "avx512bw" not in target_features(target):
        pytest.skip("masked stores of 8/16-bit lanes need AVX-512BW")
    lanes = 8
    for lane in (0, 3, lanes - 1):
        compiled = compile_module(_one_lane_truncating_store(wide, narrow, lanes, lane), target)
        f = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)(compiled.address("f"))
        src = np.arange(1, lanes + 1, dtype=f"int{wide}") * 0x0101
        raw = np.full(64 + lanes * narrow // 8 + 64, 0xA5, np.uint8)
        f(src.ctypes.data, raw[64:].ctypes.data)
        changed = np.flatnonzero(raw != 0xA5) - 64
        width = narrow // 8
        assert set(changed) <= set(range(lane * width, (lane + 1) * width)), (lane, changed)
        got = raw[64 + lane * width:64 + (lane + 1) * width].view(f"int{narrow}")[0]
        assert got == src.astype(f"int{narrow}")[lane]
