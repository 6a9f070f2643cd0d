"""Window anchors (depthwise conv, pooling): their default schedule, the `window` knob and the
padding modes of the `inline` knob (stored configs keep their meaning)."""
import random

import numpy as np
import pytest

from kiln import codegen, te
from kiln.autotune.space.rules import (AT_ANCHOR, INLINE, ROOT_FLAT, ROOT_ROWS, SearchSpace)
from kiln.autotune.task import Task
from kiln.codegen import Target
from kiln.schedule.lower import lower
from kiln.te import ops
from kiln.te.errors import ScheduleError
from kiln.te.reference import evaluate
from tests.util import knob

DW = "depthwise_conv2d_nchw"


def depthwise(c, h, w, stride, k=3):
    X = te.placeholder((1, c, h, w), name="X")
    W = te.placeholder((c, 1, k, k), name="W")
    b = te.placeholder((c, 1, 1), name="bias")
    D = ops.depthwise_conv2d_nchw(X, W, stride=stride, padding=k // 2)
    A = te.compute(D.shape, lambda n, q, y, x: D[n, q, y, x] + b[q, 0, 0], name="add")
    C = te.compute(D.shape, lambda *i: te.minimum(te.maximum(A(*i), 0.0), 6.0), name="clip")
    return Task(f"dw{c}x{h}x{w}s{stride}", (C,), (X, W, b, C))


def maxpool(c, h, w):
    X = te.placeholder((1, c, h, w), name="X")
    P = ops.max_pool2d(X, 3, stride=2, padding=1, name="maxpool")
    return Task(f"maxpool{c}x{h}x{w}", (P,), (X, P))


def _run(task, config):
    sch, args = SearchSpace(task).apply(config)
    kernel = codegen.build(lower(sch, args, name="k"))
    rng = np.random.default_rng(1)
    inputs = {t: rng.uniform(-4, 4, t.shape).astype(t.dtype) for t in task.args
              if t not in task.outputs}
    arrays = [inputs[t].copy() if t in inputs else np.full(t.shape, np.nan, t.dtype)
              for t in args]
    kernel(*arrays)
    (want,) = evaluate(list(task.outputs), inputs)
    np.testing.assert_allclose(arrays[-1], want, rtol=1e-5, atol=1e-5, err_msg=str(config))


def _text(task, config):
    """The loop IR `config` makes at 1 thread: its loop structure before the thread decision
    (autotune/space/thread_plan.py), which runs loops too small to fork serially at 2."""
    sch, args = SearchSpace(task, threads=1).apply(config)
    return str(lower(sch, args, name="k"))


def test_depthwise_default_is_a_channel_plane_with_taps_inside_the_rows():
    space = SearchSpace(depthwise(96, 56, 56, 1))
    config = space.default_config()
    assert config[knob(space, DW, "window")] == 2
    assert config[knob(space, DW + "_pad", "inline")] == AT_ANCHOR
    assert config[knob(space, DW, "tile/1")] == [1, 1]                 # one channel per iteration
    y, x = config[knob(space, DW, "tile/2")], config[knob(space, DW, "tile/3")]
    assert y[0] * y[1] == 56 and x[0] * x[1] == 56            # the whole plane, no tail
    target = Target.native()
    lanes = target.vector_lanes("float32")
    budget = (32 if target.vector_bits >= 512 else 16) * 3 // 4
    assert x[1] % 8 == 0 and y[1] * -(-x[1] // lanes) <= budget   # register tile in budget
    text = _text(space.task, config)
    assert "in parallel(96)" in text                          # over channels only
    # the padded plane of one channel, computed inside the channel loop
    assert text.index("in parallel(96)") < text.index(f"allocate {DW}_pad")
    assert "ry.inner in unrolled(3)" in text and "rx.inner in unrolled(3)" in text


def test_pooling_default_is_a_window_anchor_too():
    space = SearchSpace(maxpool(64, 112, 112))
    config = space.default_config()
    assert config[knob(space, "maxpool", "window")] == 2
    assert config[knob(space, "maxpool_pad", "inline")] == AT_ANCHOR


def test_channel_reduction_is_not_a_window_and_its_pad_is_materialised_as_rows():
    space = SearchSpace(Task.from_op("conv2d", (1, 16, 14, 14, 16, 3, 3, 1, 1)))
    assert not any(k.name.endswith("/window") for k in space.knobs)
    config = space.default_config()
    assert config[knob(space, "conv_pad", "inline")] == ROOT_ROWS
    text = _text(space.task, config)
    assert "in parallel(256)" in text                         # 16 channels x 16 padded rows
    assert "i0.i1.fused.i2.fused in parallel(256)" in text    # div/mod once per row,
    assert "for i3 in range(16)" in text                      # a plain loop along it


@pytest.mark.parametrize("shape", [(5, 13, 13, 2), (1, 7, 7, 1), (3, 11, 9, 1), (2, 1, 1, 1),
                                   (7, 17, 23, 2)])
def test_depthwise_default_matches_reference_on_awkward_shapes(shape):
    task = depthwise(*shape)
    _run(task, SearchSpace(task).default_config())


@pytest.mark.parametrize("shape", [(3, 13, 13), (1, 2, 5), (2, 9, 16)])
def test_pooling_default_matches_reference_on_awkward_shapes(shape):
    task = maxpool(*shape)
    _run(task, SearchSpace(task).default_config())


@pytest.mark.parametrize("mode", [ROOT_FLAT, INLINE, ROOT_ROWS, AT_ANCHOR])
@pytest.mark.parametrize("window", [0, 1, 2])
def test_every_window_and_padding_mode_is_correct(mode, window):
    task = depthwise(3, 9, 11, 2)
    space = SearchSpace(task)
    config = dict(space.default_config(),
                  **{knob(space, DW, "window"): window, knob(space, DW + "_pad", "inline"): mode})
    _run(task, config)


def test_sampled_window_configs_match_reference():
    task = maxpool(2, 9, 7)
    space = SearchSpace(task)
    picker = random.Random(5)
    for _ in range(4):
        _run(task, space.sample(picker))


def test_a_stored_config_without_the_window_knob_keeps_its_schedule():
    task = depthwise(8, 10, 10, 1)
    space = SearchSpace(task)
    stored = {k: v for k, v in space.default_config().items() if not k.endswith("/window")}
    stored[knob(space, DW + "_pad", "inline")] = ROOT_FLAT                    # the old default
    assert space.validate(stored)[knob(space, DW, "window")] == 0
    old = _text(task, stored)
    assert old == _text(task, dict(stored, **{knob(space, DW, "window"): 0}))
    assert old != _text(task, dict(stored, **{knob(space, DW, "window"): 2}))
    # mode 0 is still the flat fused loop (div/mod of one index) it always was
    assert "i0.i1.fused.i2.fused.i3.outer.fused in parallel" in old


def test_an_unknown_padding_mode_is_rejected():
    space = SearchSpace(depthwise(2, 5, 5, 1))
    with pytest.raises(ScheduleError, match="not a choice of knob 's0/inline'"):
        space.validate(dict(space.default_config(), **{knob(space, DW + "_pad", "inline"): 7}))


def gemv(k, n, target="native"):
    A = te.placeholder((1, k), name="A")
    B = te.placeholder((k, n), name="B")
    b = te.placeholder((n,), name="b")
    M = ops.matmul(A, B, name="matmul")
    C = te.compute(M.shape, lambda i, j: M[i, j] + b[j], name="add")
    return Task(f"gemv{k}x{n}", (C,), (A, B, b, C), target)


def test_gemv_default_streams_rows_of_b_in_tail_free_column_blocks():
    space = SearchSpace(gemv(1280, 1000))
    config = space.default_config()
    assert config[knob(space, "matmul", "tile/0")] == [1, 1]
    mid, inner = config[knob(space, "matmul", "tile/1")]
    assert inner % 8 == 0 and 1000 % inner == 0 and inner <= 48   # tail-free vectors
    assert 1000 % (mid * inner) == 0                              # whole column blocks
    assert config[knob(space, "matmul", "reduce/0")] == 1                       # k | block | vector
    text = _text(gemv(1280, 1000), config)
    update = text.split("for k.outer in range(1280)")[1]          # the column loop is inside k
    assert f"for j.outer in range({mid})" in update.split("add[")[0]


def test_gemv_default_splits_columns_across_cores_when_it_divides(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.delenv("KILN_NUM_THREADS", raising=False)
    space = SearchSpace(gemv(784, 256, "llvm -mcpu=haswell"))
    config = space.default_config()
    mid, inner = config[knob(space, "matmul", "tile/1")]
    assert 256 // (mid * inner) == 2 and inner == 32


@pytest.mark.parametrize("cores", [1, 2, 4])
def test_gemv_column_blocks_keep_every_core_busy(monkeypatch, cores):
    """1000 columns are 25 runs of 40 (25 = 5 x 5: no tail-free split in 2): one block
    left the second core idle (MobileNetV2's classifier ran on one thread); 25 one-run
    blocks, each 5 one-vector steps, go 13 + 12. One core keeps one block."""
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    monkeypatch.delenv("KILN_NUM_THREADS", raising=False)
    task = gemv(1280, 1000, "llvm -mcpu=haswell")
    space = SearchSpace(task)
    config = space.default_config()
    mid, inner = config[knob(space, "matmul", "tile/1")]
    assert 1000 % (mid * inner) == 0
    blocks = 1000 // (mid * inner)
    if cores == 1:
        assert (mid, inner) == (25, 40)
    else:
        assert (mid, inner) == (5, 8) and blocks == 25      # 5 blocks would idle cores
    assert config[knob(space, "matmul", "parallel")] >= 1
    text = _text(task, config)
    assert f"in parallel({blocks})" in text
    update = text.split("for k.outer in range(1280)")[1]
    assert f"for j.outer in range({mid})" in update.split("add[")[0]


def test_gemv_keeps_one_column_block_when_kernels_run_on_one_thread(monkeypatch):
    """On one thread 25 blocks ran at 0.78x one block (MobileNetV2's classifier, weights
    from DRAM): the split follows KILN_NUM_THREADS, the count kernels load with."""
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    monkeypatch.setenv("KILN_NUM_THREADS", "1")
    task = gemv(1280, 1000, "llvm -mcpu=haswell")
    space = SearchSpace(task)
    assert space.default_config()[knob(space, "matmul", "tile/1")] == [25, 40]
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    assert SearchSpace(task).default_config()[knob(space, "matmul", "tile/1")] == [5, 8]


@pytest.mark.parametrize("shape", [(13, 1001), (1, 17), (7, 40), (300, 2)])
def test_gemv_default_matches_reference_on_awkward_shapes(shape):
    task = gemv(*shape)
    _run(task, SearchSpace(task).default_config())


def test_a_7x7_stem_conv_over_three_channels_is_not_a_window():
    space = SearchSpace(Task.from_op("conv2d", (1, 3, 32, 32, 8, 7, 7, 2, 3)))
    assert not any(k.name.endswith("/window") for k in space.knobs)
