"""Default schedules of blocked convs whose channel block is one vector (a register tile over
output-channel blocks x pixels) and of convs with few pixels over a big weight (reduce visits
that stream the weight in short runs): the tiles chosen, and the results against numpy."""
import numpy as np
import pytest

from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.defaults import (REDUCE_STEPS, _block_axis, _blocks_rows_tile,
                                          _few_pixels_big_weight, _reduce_steps)
from kiln.autotune.task import Task
from tests.util import knob, numpy_conv_nchwc, run_config

AVX2 = "llvm -mcpu=haswell"


def _conv_task(c, h, w, k, r=1, stride=1, pad=0, in_block=8, block=8, target=AVX2):
    return Task.from_op("conv2d_nchwc", (1, c, h, w, k, r, r, stride, pad, in_block, block),
                        target=target)


def _tile(space, config):
    return [config[knob(space, "conv", f"tile/{p}")][1] for p in range(5)]


@pytest.mark.parametrize("blocks,rows,want", [
    (51, 6, (3, 3)),      # RegNet-X-1.6GF's 408 channels at 6 x 6
    (21, 12, (3, 4)),     # 168 channels at 12 x 12: 12 accumulators, 7 loads a step
    (9, 24, (3, 4)),
    (17, 5, (1, 5)),      # 17 blocks do not fit: pixel rows only
    (1, 7, (1, 7)),
    (4, 1, (4, 1)),
    (2, 3, (2, 3)),
])
def test_blocks_rows_tile_fills_the_budget_with_divisors(blocks, rows, want):
    assert _blocks_rows_tile(blocks, rows, 12) == want
    c, r = _blocks_rows_tile(blocks, rows, 12)
    assert blocks % c == 0 and rows % r == 0 and c * r <= 12


def test_only_the_output_block_axis_shares_the_rows_broadcast():
    conv = SearchSpace(_conv_task(16, 6, 6, 24)).anchors[0].op
    assert _block_axis(conv, 3) == 1                      # w[ko, ..], x without ko
    gemm = SearchSpace(Task.from_op("matmul", (6, 40, 8), target=AVX2)).anchors[0].op
    assert _block_axis(gemm, 0) is None


@pytest.mark.parametrize("c,h,w,k,r,stride,pad", [
    (24, 6, 6, 24, 1, 1, 0),     # 3 blocks x 3 pixels
    (56, 5, 7, 72, 1, 1, 0),     # 7 input blocks, 9 output blocks, prime rows
    (8, 9, 9, 40, 3, 2, 1),      # a 3x3/2 conv: 5 blocks, 5-pixel rows
    (16, 1, 1, 24, 1, 1, 0),     # one pixel
])
def test_one_vector_blocks_tile_blocks_and_pixels_and_compute_the_conv(c, h, w, k, r, stride,
                                                                      pad):
    task = _conv_task(c, h, w, k, r, stride, pad)
    space = SearchSpace(task)
    config = space.default_config()
    tile = _tile(space, config)
    ow = (w + 2 * pad - r) // stride + 1
    assert (tile[1], tile[3], tile[4]) == (*_blocks_rows_tile(k // 8, ow, 12), 8)
    rng = np.random.default_rng(3)
    inputs = {t: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args[:-1]}
    x, wt = (inputs[t] for t in task.args[:-1])
    (got,) = run_config(task, space, config, inputs)
    np.testing.assert_allclose(got, numpy_conv_nchwc(x, wt, stride, pad), rtol=1e-4, atol=1e-4)


def test_two_vector_blocks_keep_their_rows_tile():
    space = SearchSpace(_conv_task(32, 6, 6, 64, block=16))
    assert _tile(space, space.default_config())[1] == 1


@pytest.mark.parametrize("c,h,k,in_block,block,steps", [
    (912, 3, 912, 16, 16, 16),   # 1 KB of each weight row per visit: one input block
    (912, 3, 912, 8, 16, 16),    # 512 bytes an input block: two of them
    (408, 6, 408, 8, 8, 24),     # 256 bytes: 3 of the 51 blocks (768 bytes)
    (1024, 7, 256, 16, 16, REDUCE_STEPS),  # 49 pixels: not few (slower with short runs)
    (96, 3, 96, 8, 8, REDUCE_STEPS),     # a 36 KB weight stays in cache
])
def test_few_pixels_over_a_big_weight_stream_it_in_short_runs(c, h, k, in_block, block, steps):
    op = SearchSpace(_conv_task(c, h, h, k, in_block=in_block, block=block)).anchors[0].op
    assert (_few_pixels_big_weight(op) is not None) == (steps != REDUCE_STEPS)
    assert _reduce_steps(op) == steps


def test_a_few_pixel_conv_over_a_big_weight_computes_the_conv():
    """57 output blocks of 16 from 114 input blocks of 8 (a 3.3 MB weight) over 3 x 3 pixels,
    and 51 blocks of 8 at 1 x 5 pixels (prime rows, 666 KB): the streaming default against
    numpy."""
    for c, h, w, k, in_block, block in ((912, 3, 3, 912, 8, 16), (408, 1, 5, 408, 8, 8)):
        task = _conv_task(c, h, w, k, in_block=in_block, block=block)
        space = SearchSpace(task.retargeted("native"))
        config = space.default_config()
        assert config[knob(space, "conv", "reduce/0")] < c // in_block
        rng = np.random.default_rng(5)
        inputs = {t: rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in task.args[:-1]}
        x, wt = (inputs[t] for t in task.args[:-1])
        (got,) = run_config(task, space, config, inputs)
        np.testing.assert_allclose(got, numpy_conv_nchwc(x, wt, 1, 0), rtol=1e-4, atol=1e-3)


def test_a_few_pixel_grouped_conv_over_a_big_weight_streams_and_computes_it():
    """RegNet-X-1.6GF's last grouped 3x3 (912 channels in groups of 24 = 3 blocks of 8, 788 KB
    of weight) over 3 x 3 pixels: its input blocks are read in short runs, and the default
    matches numpy."""
    from kiln import te
    from kiln.te import ops
    blocks, per_group, h = 114, 3, 3
    x = te.placeholder((1, blocks, h, h, 8), name="X")
    w = te.placeholder((blocks, per_group, 3, 3, 8, 8), name="W")
    out = ops.grouped_conv2d_nchwc(x, w, per_group, 1, 1, name="conv")
    op = SearchSpace(Task("gconv", (out,), (x, w, out), AVX2)).anchors[0].op
    assert _few_pixels_big_weight(op) is not None and _reduce_steps(op) < REDUCE_STEPS
    task = Task("gconv", (out,), (x, w, out), "native")
    space = SearchSpace(task)
    rng = np.random.default_rng(7)
    xa = rng.uniform(-1, 1, x.shape).astype(np.float32)
    wa = rng.uniform(-1, 1, w.shape).astype(np.float32)
    (got,) = run_config(task, space, space.default_config(), {x: xa, w: wa})
    xp = np.pad(xa, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros(got.shape)
    for ko in range(blocks):
        first = (ko // per_group) * per_group
        for ry in range(3):
            for rx in range(3):
                want[:, ko] += np.einsum("nbyxi,bio->nyxo",
                                         xp[:, first:first + per_group, ry:ry + h, rx:rx + h],
                                         wa[ko, :, ry, rx])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
