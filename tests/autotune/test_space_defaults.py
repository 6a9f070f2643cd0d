"""The register-budget default config and the local accumulator of an intermediate anchor."""
import dataclasses
import math
import random

import numpy as np
import pytest

from kiln import te
from kiln.autotune.space.rules import SearchSpace, balanced_rows, taps_along_rows
from kiln.autotune.space.defaults import _rows_broadcast
from kiln.autotune.task import Task
from kiln.schedule.interpret import interpret
from kiln.schedule.lower import lower
from kiln.schedule.schedule import AttachKind
from kiln.te.reference import evaluate
from tests.util import knob, run_config

AVX2 = "llvm -mcpu=haswell"
AVX512 = "llvm -mcpu=skylake-avx512"


def blocked_conv(n, c, h, w, k, kb, r=3, target="native"):
    """Oc[n, ko, y, x, ki] = sum P[n, c, y+ry, x+rx] * Wp[ko, c, ry, rx, ki] (pad 1), then
    the NCHW unpack O and a relu output: the anchor is an intermediate with no epilogue."""
    X = te.placeholder((n, c, h, w), name="X")
    Wp = te.placeholder((k // kb, c, r, r, kb), name="Wp")
    P = te.compute((n, c, h + 2, w + 2), lambda b, ci, y, x: te.select(
        te.all_of(y >= 1, y < h + 1, x >= 1, x < w + 1),
        X[b, ci, te.minimum(te.maximum(y - 1, 0), h - 1),
          te.minimum(te.maximum(x - 1, 0), w - 1)], 0.0), name="P")
    rc, ry, rx = te.reduce_axis(c, "rc"), te.reduce_axis(r, "ry"), te.reduce_axis(r, "rx")
    Oc = te.compute((n, k // kb, h, w, kb), lambda b, ko, y, x, ki: te.sum(
        P[b, rc, y + ry, x + rx] * Wp[ko, rc, ry, rx, ki], axis=[rc, ry, rx]), name="Oc")
    O = te.compute((n, k, h, w), lambda b, f, y, x: Oc[b, f // kb, y, x, f % kb], name="O")
    R = te.compute((n, k, h, w), lambda *i: te.maximum(O(*i), 0.0), name="relu")
    return Task(f"bconv_{c}x{h}", (R,), (X, Wp, R), target)


def _register_tile(space, stage):
    label = knob(space, stage, "")
    inner = {k: space.default_config()[k][1] for k in space.default_config()
             if k.startswith(label + "tile/")}
    return [inner[k] for k in sorted(inner, key=lambda n: int(n.split("/")[2]))]


@pytest.mark.parametrize("target,lanes,regs", [(AVX2, 8, 16), (AVX512, 16, 32)])
def test_gemm_register_tile_fills_three_quarters_of_the_registers(target, lanes, regs):
    space = SearchSpace(Task.from_op("matmul", (96, 64, 96), target=target))
    rows, cols = _register_tile(space, "C")
    assert cols == 2 * lanes                         # two vectors wide
    assert rows * cols // lanes <= regs * 3 // 4     # accumulators within the budget
    assert rows * cols // lanes >= regs // 2


def test_many_spatial_axes_get_one_row_axis_not_a_product():
    space = SearchSpace(blocked_conv(1, 64, 56, 56, 64, 16, target=AVX2))
    tile = _register_tile(space, "Oc")
    assert tile[-1] == 16                            # ki: two AVX2 vectors
    assert [t > 1 for t in tile[:-1]] == [False, False, False, True]   # only x has rows
    assert tile[3] == 4          # rows divide: its x taps run along them (taps_along_rows)
    blocked = SearchSpace(Task.from_op("conv2d_nchwc", (1, 64, 56, 56, 64, 3, 3, 1, 1, 16, 16),
                                       target=AVX2))
    tile = _register_tile(blocked, "conv")
    assert [t > 1 for t in tile[:-1]] == [False, False, False, True]
    assert tile[3] == 6                              # the budget: 6 x 2 vectors, a tail of 2


def test_tail_free_vector_and_row_tiles_are_preferred():
    space = SearchSpace(Task.from_op("conv2d", (1, 4, 14, 14, 8, 3, 3, 1, 1), target=AVX2))
    b, k, y, x = _register_tile(space, "conv")
    assert x == 14                                   # a short axis is taken whole
    assert 14 % y == 0 and y * 2 <= 14 and b == k == 1


def test_reduce_defaults_take_kernel_windows_whole():
    space = SearchSpace(Task.from_op("conv2d", (1, 64, 14, 14, 64, 3, 3, 1, 1)))
    config = space.default_config()
    assert config[knob(space, "conv", "reduce/1")] == 3
    assert config[knob(space, "conv", "reduce/2")] == 3
    assert 8 <= config[knob(space, "conv", "reduce/0")] <= 16


@pytest.mark.parametrize("task", [Task.from_op("matmul", (512, 512, 512)),
                                  blocked_conv(1, 64, 56, 56, 64, 16),
                                  Task.from_op("conv2d", (1, 256, 14, 14, 256, 3, 3, 1, 1))],
                         ids=["matmul", "bconv", "conv"])
def test_default_parallel_loop_has_work_for_every_core(task):
    space = SearchSpace(task)
    config = space.default_config()
    anchor = space.anchors[0]
    label = space.stage_label(anchor.op)
    outers = [math.ceil(a.extent / (mid * inner)) for a, (mid, inner) in zip(
        anchor.op.axis, (config[f"{label}/tile/{p}"] for p, a in
                         enumerate(anchor.op.axis)))]
    from kiln.codegen.target import Target
    cores = Target.from_string(task.target).num_cores
    fused = math.prod(outers[:config[f"{label}/parallel"]])      # the outer axes fused
    assert fused >= 2 * max(2, cores)


def test_intermediate_anchor_offers_and_applies_a_local_accumulator():
    task = blocked_conv(1, 3, 6, 6, 8, 4)
    space = SearchSpace(task)
    assert space.anchors[0].epilogue is None and not space.anchors[0].is_output
    assert space._by_name[knob(space, "Oc", "local")].choices == (0, 1)
    config = space.default_config()
    assert config[knob(space, "Oc", "local")] == 1
    sch, args = space.apply(config)
    local = next(s for s in sch.stages if s.name == "Oc.local")
    assert local.attach is AttachKind.AT
    text = str(lower(sch, args, name="bconv"))
    assert "allocate Oc.local" in text


@pytest.mark.parametrize("shape", [(1, 3, 6, 6, 8, 4), (1, 2, 5, 7, 6, 3)])
def test_blocked_conv_sampled_configs_match_reference(shape):
    task = blocked_conv(*shape)
    space = SearchSpace(task)
    rng = np.random.default_rng(0)
    inputs = {t: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args[:-1]}
    (want,) = evaluate(list(task.outputs), inputs)
    picker = random.Random(3)
    configs = [space.default_config(),
               dict(space.default_config(), **{knob(space, "Oc", "local"): 0})]
    configs += [space.sample(picker) for _ in range(3)]
    for config in configs:
        sch, args = space.apply(config)
        arrays = [inputs[t].copy() if t in inputs else np.full(t.shape, np.nan, t.dtype)
                  for t in args]
        interpret(lower(sch, args, name=task.name), *arrays)
        np.testing.assert_allclose(arrays[-1], want, rtol=1e-4, atol=1e-5, err_msg=str(config))


def test_default_config_is_in_the_space_for_odd_shapes():
    for op_name, shape in [("matmul", (1, 1, 1)), ("matmul", (7, 13, 3)),
                           ("batch_matmul", (3, 1, 5, 17)), ("softmax", (1, 5)),
                           ("conv2d", (1, 1, 3, 3, 1, 3, 3, 1, 0))]:
        space = SearchSpace(dataclasses.replace(Task.from_op(op_name, shape), _key=[]))
        space.validate(space.default_config())


@pytest.mark.parametrize("width,rows,vector", [(56, 6, 16), (28, 6, 16), (14, 6, 16),
                                               (7, 4, 16), (6, 6, 16)])
def test_short_rows_fill_the_budget_in_as_few_balanced_tiles_as_it_allows(width, rows, vector):
    """12 of AVX2's 16 registers hold 6 rows x 2 vectors (7 x 2 would spill); a row that 6
    does not divide leaves a tail (codegen runs the whole tiles unguarded): 7 pixels as 4 + 3
    (1.28x the old 7 x 1 vector at 512->512 @7), 14 as 6 + 6 + 2 (5 is no tile choice)."""
    space = SearchSpace(Task.from_op("conv2d_nchwc", (1, 32, width, width, 64, 3, 3, 1, 1, 16,
                                                     16), target=AVX2))
    tile = _register_tile(space, "conv")
    assert (tile[3], tile[4]) == (rows, vector)


@pytest.mark.parametrize("width,rows,vector", [(56, 4, 16), (28, 4, 16), (14, 7, 8),
                                               (7, 7, 8)])
def test_rows_that_taps_run_along_divide_the_axis(width, rows, vector):
    """An NCHW-input conv's x taps index the input with the register tile's rows: tiles
    with a tail there ran at 0.4-0.8x the divisor rows (ResNet-18's NCHW layout, old vs
    new default 1.9-2.8x at 1 thread), so rows divide the axis as before balanced_rows."""
    space = SearchSpace(blocked_conv(1, 32, width, width, 64, 16, target=AVX2))
    tile = _register_tile(space, "Oc")
    assert (tile[3], tile[4]) == (rows, vector)


@pytest.mark.parametrize("size,rows,vector", [(128, 3, 16), (32, 5, 16), (20, 3, 16),
                                              (15, 7, 8)])
def test_broadcast_rows_that_must_divide_rank_tiles_by_loads(size, rows, vector):
    """A 3x3/2 stem over 3 NCHW channels (a window anchor: rows divide the axis) reads its
    input as one broadcast per row: 63 = 7 x 9 pixels take 3 rows x 2 vectors, not 9 x 1
    (1.56x at 1 thread), 15 take 5 x 2 and 9 take 3 x 2; 7 keep 7 x 1 vector (1 x 2 vectors
    is too few accumulators). The default computes the conv (checked against numpy)."""
    task = Task.from_op("conv2d_nchwc", (1, 3, size, size, 64, 3, 3, 2, 0, 1, 16),
                        target=AVX2)
    space = SearchSpace(task)
    assert _register_tile(space, "conv")[3:] == [rows, vector]
    rng = np.random.default_rng(1)
    inputs = {t: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args[:-1]}
    (want,) = evaluate(list(task.outputs), inputs)
    (got,) = run_config(task, space, space.default_config(), inputs)  # AVX2 code, run here
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_rows_broadcast_only_for_operands_the_lanes_do_not_index():
    stem = SearchSpace(Task.from_op("conv2d_nchwc", (1, 3, 32, 32, 64, 3, 3, 2, 0, 1, 16)))
    assert _rows_broadcast(stem.anchors[0].op, 3)              # x[.., 2 * xx + rx]
    dw = SearchSpace(Task.from_op("depthwise_conv2d_nchwc", (1, 32, 14, 14, 3, 3, 1, 1, 16)))
    assert not _rows_broadcast(dw.anchors[0].op, 3)            # x[.., xx + rx, lanes]
    gemm = SearchSpace(Task.from_op("matmul", (64, 64, 64)))
    assert _rows_broadcast(gemm.anchors[0].op, 0)              # A[i, k]


def test_taps_along_rows_only_when_the_innermost_long_tap_shares_the_rows_index():
    nchw = SearchSpace(blocked_conv(1, 32, 14, 14, 64, 16)).anchors[0].op
    assert taps_along_rows(nchw, 3)                       # P[.., y + ry, x + rx], rows x
    assert not taps_along_rows(nchw, 2)                   # y meets ry, not the inner rx
    blocked = SearchSpace(Task.from_op("conv2d_nchwc", (1, 32, 14, 14, 64, 3, 3, 1, 1, 16, 16)))
    assert not taps_along_rows(blocked.anchors[0].op, 3)  # innermost: the channel block
    stem = SearchSpace(Task.from_op("conv2d_nchwc", (1, 3, 32, 32, 64, 7, 7, 2, 3, 1, 16)))
    assert taps_along_rows(stem.anchors[0].op, 3)         # x[.., 2 * xx + rx]
    one = SearchSpace(Task.from_op("conv2d", (1, 32, 14, 14, 64, 1, 1, 1, 0)))
    assert not taps_along_rows(one.anchors[0].op, 2)      # unit taps do not count
    gemm = SearchSpace(Task.from_op("matmul", (64, 64, 64)))
    assert not taps_along_rows(gemm.anchors[0].op, 0)


def test_first_conv_keeps_four_row_tiles():
    """ResNet-18's 7x7/2 conv over 3 NCHW channels: 6-row tiles (with a tail) ran at 0.78x
    the 4-row ones; its 4-row default is back (MobileNetV2's 3x3/2 is a window: untouched)."""
    space = SearchSpace(Task.from_op("conv2d_nchwc", (1, 3, 224, 224, 64, 7, 7, 2, 3, 1, 16),
                                     target=AVX2))
    assert _register_tile(space, "conv")[3:] == [4, 16]


@pytest.mark.parametrize("width,mid", [(7, 7), (14, 7), (28, 7), (56, 8)])
def test_a_short_cache_tile_axis_is_taken_whole(width, mid):
    """At 7x7 the cache tile's y axis was one row (half of 7 rounded down to a divisor), so a
    blocked conv re-read its weights for every output row; it now covers the whole axis,
    and 14/28/56-wide layers keep their tiles."""
    space = SearchSpace(Task.from_op("conv2d_nchwc", (1, 64, width, width, 64, 3, 3, 1, 1, 16,
                                                     16), target=AVX2))
    config = space.default_config()
    assert config[knob(space, "conv", "tile/2")] == [mid, 1]
    assert config[knob(space, "conv", "parallel")] == 2      # y is not one of the parallel axes


@pytest.mark.parametrize("extent,rows", [(7, 4), (8, 4), (14, 6), (13, 6), (6, 6), (3, 3),
                                         (1024, 6), (96, 6)])
def test_balanced_rows_take_as_few_tiles_as_the_cap_allows_and_no_longer_than_needed(
        extent, rows):
    assert balanced_rows(extent, 6) == rows


@pytest.mark.parametrize("width", [28, 14, 7, 13])
def test_default_cache_tiles_divide_the_axes(width):
    """A middle tile that does not divide extent / inner puts a bound guard inside the
    unrolled register tile (3 x 4 pixels over a 28-wide row did, at a third of the speed)."""
    space = SearchSpace(blocked_conv(1, 32, width, width, 64, 16, target=AVX2))
    config = space.default_config()
    prefix = knob(space, "Oc", "tile/")
    for name, (mid, inner) in ((k, v) for k, v in config.items() if k.startswith(prefix)):
        pos = int(name.split("/")[2])
        extent = space.anchors[0].op.axis[pos].extent
        if extent % inner == 0:
            assert (extent // inner) % mid == 0, (name, extent, mid, inner)


def test_gemm_register_tile_takes_six_rows_on_avx2():
    # (capped at 4 while LLVM stored 5+ unrolled rows of accumulators back every k; codegen
    # now promotes them to registers, schedule/passes/promote.py)
    for shape in [(96, 64, 96), (840, 128, 256), (1024, 64, 64)]:
        rows, cols = _register_tile(SearchSpace(Task.from_op("matmul", shape, target=AVX2)), "C")
        assert (rows, cols) == (6, 16), shape
    rows, cols = _register_tile(SearchSpace(Task.from_op("matmul", (48, 32, 40), target=AVX2)),
                                "C")
    assert (rows, cols) == (12, 8)                         # one vector wide: rows divide M
    rows, cols = _register_tile(SearchSpace(Task.from_op("matmul", (96, 64, 96),
                                                         target=AVX512)), "C")
    assert rows * cols // 16 > 8
    conv = SearchSpace(Task.from_op("conv2d", (1, 64, 28, 28, 64, 3, 3, 1, 1), target=AVX2))
    assert _register_tile(conv, "conv") == [1, 1, 7, 8]     # one vector wide: no tail


@pytest.mark.parametrize("shape,vector,parallel", [
    ((128, 256), 64, 0),          # BERT's 32K-point groups: one loop, whole 64-lane runs
    ((512, 512), 64, 1),          # big enough for the fork
    ((6, 13), 13, 0),             # the whole odd row is one vector, no tail
    ((4, 5), 5, 0),               # narrower than a vector: the nearest choice to 8
])
def test_elementwise_default_vector_and_parallel(shape, vector, parallel):
    from kiln.codegen import build
    X = te.placeholder(shape, name="X")
    Y = te.compute(shape, lambda i, j: te.exp(X[i, j]) * 2.0, name="y")
    task = Task(f"ew_{shape}", (Y,), (X, Y), AVX2)
    space = SearchSpace(task)
    config = space.default_config()
    assert config[knob(space, "y", "vector")] == vector
    assert config[knob(space, "y", "parallel")] == parallel
    native = SearchSpace(Task(f"ew_{shape}", (Y,), (X, Y)))
    sch, args = native.apply(native.default_config())
    x = np.random.default_rng(0).uniform(-1, 1, shape).astype(np.float32)
    y = np.full(shape, np.nan, np.float32)
    build(lower(sch, args, name="ew"), target="native")(x, y)
    np.testing.assert_allclose(y, np.exp(x) * 2.0, rtol=1e-5)


@pytest.mark.parametrize("plane", [7, 5, 3])
def test_a_global_pool_unrolls_a_bounded_number_of_taps(plane):
    # ResNet-50's 7x7 global pool over channel blocks: 4 rows x 2 AVX2 vectors x 49 taps
    # were 392 unrolled adds; the outer tap axis stays a loop above MAX_UNROLLED_TAPS
    from kiln.autotune.space.defaults import MAX_UNROLLED_TAPS
    from kiln.te import ops
    X = te.placeholder((1, 128, plane, plane, 16), name="X")
    Y = ops.mean(X, axis=(2, 3), keepdims=True, name="mean")
    task = Task(f"gap_{plane}", (Y,), (X, Y), AVX2)
    space = SearchSpace(task)
    sch, args = space.apply(space.default_config())
    text = str(lower(sch, args, name="gap"))
    unrolled = [int(n) for n in __import__("re").findall(r"unrolled\((\d+)\)", text)]
    assert unrolled.count(4) == 2                  # 4 rows x 2 vectors: 8 per tap
    taps = math.prod(n for n in unrolled if n == plane)
    # 3x3 (72 updates) stays whole; 5x5 (200) and 7x7 (392) unroll one tap axis
    assert taps == (plane * plane if 8 * plane * plane <= MAX_UNROLLED_TAPS else plane)
    x = np.random.default_rng(0).uniform(-1, 1, X.shape).astype(np.float32)
    (y,) = run_config(task, space, space.default_config(), {X: x})
    np.testing.assert_allclose(y, x.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)
