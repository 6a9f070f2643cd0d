"""The blocked-layout pass on grouped convs and on channel counts with a padded last block:
which nodes run blocked, and outputs against onnxruntime (compiled with default schedules,
and the numpy reference of the rewritten graph) on awkward shapes: primes, 1x1 spatial,
13/27/36 channels, squeeze-excite, SiLU and HardSwish epilogues."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.reference import run_reference

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(23)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _check(model, feeds):
    want = ort_run(model, feeds)[0]
    atol = 1e-5 * max(1.0, float(np.abs(want).max()))    # float32 sums of random weights
    graph = optimize(load_onnx(model))
    np.testing.assert_allclose(run_reference(graph, feeds)[model.graph.output[0].name], want,
                               rtol=1e-4, atol=atol)
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=atol)
    return graph


def _grouped_model(c, groups, h, w, stride):
    """1x1 conv 5 -> c, relu, 3x3 grouped conv (bias), relu, residual-free 1x1 conv -> 11."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wg", "bg"], ["g"], group=groups,
                              pads=[1, 1, 1, 1], strides=[stride, stride]),
             helper.make_node("Relu", ["g"], ["gr"]),
             helper.make_node("Conv", ["gr", "w2"], ["y"])]
    inits = {"w1": f32(c, 5, 1, 1), "wg": f32(c, c // groups, 3, 3), "bg": f32(c),
             "w2": f32(11, c, 1, 1)}
    return make_model(nodes, {"x": ((1, 5, h, w), "float32")}, ["y"], inits)


@pytest.mark.parametrize("c,groups,h,w,stride,blocked", [
    (48, 6, 7, 5, 1, True),     # group width 8, block 16: two groups per block
    (24, 3, 1, 1, 1, True),     # one group per block, 1x1 spatial
    (32, 2, 5, 3, 2, True),     # two blocks per group, strided
    (48, 2, 5, 7, 1, True),     # 24-wide groups over blocks of 16: re-blocked to 8
    (80, 5, 6, 6, 2, True),     # 16-wide groups, blocks of 16, strided
    (36, 3, 5, 5, 1, False)])   # 12-wide groups in padded blocks of 8: stay NCHW
def test_grouped_convs_run_blocked_where_groups_line_up(c, groups, h, w, stride, blocked):
    model = _grouped_model(c, groups, h, w, stride)
    graph = _check(model, {"x": f32(1, 5, h, w)})
    ops = [n.op for n in graph.nodes]
    assert ("grouped_conv2d_nchwc" in ops) == blocked
    assert ("conv2d" in ops) == (not blocked)


def _se_model(c, h, w, act):
    """MBConv-like: 1x1 expand to c (+act), depthwise 3x3 (+act), squeeze-excite (global pool,
    1x1 convs with bias, sigmoid or hard sigmoid gate), 1x1 project to 13."""
    def activation(x, out):
        if act == "silu":
            return [helper.make_node("Sigmoid", [x], [out + "_s"]),
                    helper.make_node("Mul", [x, out + "_s"], [out])]
        return [helper.make_node("HardSwish", [x], [out])]
    r = 9 + c % 5          # 9 to 13 squeeze channels: a padded block too
    nodes = [helper.make_node("Conv", ["x", "we"], ["e"]), *activation("e", "ea"),
             helper.make_node("Conv", ["ea", "wd", "bd"], ["d"], group=c, pads=[1, 1, 1, 1]),
             *activation("d", "da"),
             helper.make_node("GlobalAveragePool", ["da"], ["p"]),
             helper.make_node("Conv", ["p", "ws1", "bs1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s1r"]),
             helper.make_node("Conv", ["s1r", "ws2", "bs2"], ["s2"]),
             helper.make_node("Sigmoid" if act == "silu" else "HardSigmoid", ["s2"], ["gate"]),
             helper.make_node("Mul", ["da", "gate"], ["se"]),
             helper.make_node("Div", ["se", "six"], ["sd"]),
             helper.make_node("Conv", ["sd", "wp"], ["y"])]
    inits = {"we": f32(c, 7, 1, 1), "wd": f32(c, 1, 3, 3), "bd": f32(c),
             "ws1": f32(r, c, 1, 1), "bs1": f32(r), "ws2": f32(c, r, 1, 1), "bs2": f32(c),
             "six": np.float32(6.0), "wp": f32(13, c, 1, 1)}
    return make_model(nodes, {"x": ((1, 7, h, w), "float32")}, ["y"], inits)


@pytest.mark.parametrize("c,h,w,act", [(27, 5, 7, "silu"), (13, 1, 1, "hard_swish"),
                                       (36, 3, 11, "hard_swish")])
def test_padded_blocks_carry_squeeze_excite_and_activations(c, h, w, act):
    graph = _check(_se_model(c, h, w, act), {"x": f32(1, 7, h, w)})
    ops = [n.op for n in graph.nodes]
    assert "conv2d" not in ops and "depthwise_conv2d_nchwc" in ops
    # one crop at the output; the squeeze-excite stays blocked (padded, no view)
    assert ops.count("from_blocked") == 1 and ops.count("to_blocked") == 0


def test_unsafe_ops_on_padded_lanes_leave_the_blocked_layout():
    """sqrt and a division by a runtime value would turn a padded lane's 0 into NaN or inf
    (then NaN through the next conv's zero weight): they run on the cropped NCHW value."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Sqrt", ["ar"], ["s"]),
             helper.make_node("Div", ["x2", "ar"], ["d"]),
             helper.make_node("Add", ["s", "d"], ["y"])]
    model = make_model(nodes, {"x": ((1, 3, 4, 5), "float32"), "x2": ((1, 11, 4, 5), "float32")},
                       ["y"], {"w": f32(11, 3, 1, 1)})
    feeds = {"x": f32(1, 3, 4, 5), "x2": f32(1, 11, 4, 5)}
    graph = optimize(load_onnx(model))
    blocked = {n.op for n in graph.nodes if len(n.outputs[0].shape) == 5}
    assert blocked == {"conv2d_nchwc", "relu"}
    want = ort_run(model, feeds)[0]
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, equal_nan=True)


def _dense_model(growth, h, w):
    """DenseNet-like: stem conv to 16, two dense layers (relu, conv to `growth`, concat onto
    the running map), a transition (relu, 1x1 conv, 2x2 average pool), a 1x1 conv to 5."""
    c1, c2 = 16 + growth, 16 + 2 * growth
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["ab"], axis=1),
             helper.make_node("Relu", ["ab"], ["abr"]),
             helper.make_node("Conv", ["abr", "w2"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["ab", "c"], ["abc"], axis=1),
             helper.make_node("Relu", ["abc"], ["abcr"]),
             helper.make_node("Conv", ["abcr", "w3"], ["t"]),
             helper.make_node("AveragePool", ["t"], ["p"], kernel_shape=[2, 2],
                              strides=[2, 2], ceil_mode=1),
             helper.make_node("Conv", ["p", "w4"], ["y"])]
    inits = {"w0": f32(16, 3, 3, 3), "w1": f32(growth, 16, 3, 3), "w2": f32(growth, c1, 3, 3),
             "w3": f32(c2 // 2, c2, 1, 1), "w4": f32(5, c2 // 2, 1, 1)}
    return make_model(nodes, {"x": ((1, 3, h, w), "float32")}, ["y"], inits)


@pytest.mark.parametrize("growth,h,w,blocked", [(16, 9, 7, (True, True)),
                                                (32, 2, 3, (True, True)),
                                                (8, 5, 3, (False, True)),
                                                (12, 4, 6, (False, False))])
def test_channel_concats_and_average_pools_run_blocked_when_blocks_line_up(growth, h, w,
                                                                          blocked):
    """growth 8: 16 (blocks of 16) + 8 converts; then 24 + 8 concat in the blocks of 8
    both take; growth 12: a padded block of 8 never concats blocked."""
    graph = _check(_dense_model(growth, h, w), {"x": f32(1, 3, h, w)})
    concats = [n for n in graph.nodes if n.op == "concat"]
    assert len(concats) == 2
    assert tuple(len(n.outputs[0].shape) == 5 for n in concats) == blocked
    pool = next(n for n in graph.nodes if n.op == "avg_pool2d")
    assert len(pool.inputs[0].shape) == 5


@pytest.mark.parametrize("c,h,w", [(520, 5, 3), (1000, 1, 7)])
def test_wide_channels_that_16_does_not_divide_take_padded_blocks_of_16(c, h, w):
    # a classifier-like head: 1x1 conv 24 -> c (8 divides c, 16 does not), relu, global
    # average pool: from 512 channels on, blocks of 16 with a padded last one (8 zero lanes)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("GlobalAveragePool", ["ar"], ["y"])]
    inits = {"w1": f32(c, 24, 1, 1), "b1": f32(c)}
    model = make_model(nodes, {"x": ((1, 24, h, w), "float32")}, ["y"], inits)
    graph = _check(model, {"x": f32(1, 24, h, w)})
    (conv,) = [n for n in graph.nodes if n.op == "conv2d_nchwc"]
    assert conv.outputs[0].shape == (1, -(-c // 16), h, w, 16)


def test_channel_block_pads_to_16_only_for_wide_channels():
    from kiln.graph.passes.layout.blocked import channel_block
    assert [channel_block(c) for c in (8, 24, 440, 504, 512, 520, 1000, 27, 600, 1001)] == \
        [8, 8, 8, 8, 16, 16, 16, 8, 16, 16]


def _mixed_blocks_model(c, groups, h, w):
    """RegNet-Y-like, with a value in two blocks: 1x1 conv to c channels (blocks of 16),
    relu, a grouped 3x3 conv whose groups need blocks of 8, relu, a residual add of the two
    (8 against 16), squeeze-excite (the gate's 1x1 conv writes blocks of 16, the gated value
    is in 8), a depthwise conv on the gated value and on the 16-blocked one, summed, and a
    1x1 conv to 11."""
    r = 7
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "wg"], ["g"], group=groups, pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["g"], ["gr"]),
             helper.make_node("Add", ["gr", "ar"], ["res"]),
             helper.make_node("GlobalAveragePool", ["res"], ["p"]),
             helper.make_node("Conv", ["p", "ws1", "bs1"], ["s1"]),
             helper.make_node("Relu", ["s1"], ["s1r"]),
             helper.make_node("Conv", ["s1r", "ws2", "bs2"], ["s2"]),
             helper.make_node("Sigmoid", ["s2"], ["gate"]),
             helper.make_node("Mul", ["gate", "gr"], ["se"]),
             helper.make_node("Conv", ["se", "wd"], ["d1"], group=c, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["ar", "wd"], ["d2"], group=c, pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["d1", "d2"], ["d"]),
             helper.make_node("Conv", ["d", "w2"], ["y"])]
    inits = {"w1": f32(c, 5, 1, 1), "wg": f32(c, c // groups, 3, 3),
             "ws1": f32(r, c, 1, 1), "bs1": f32(r), "ws2": f32(c, r, 1, 1), "bs2": f32(c),
             "wd": f32(c, 1, 3, 3), "w2": f32(11, c, 1, 1)}
    return make_model(nodes, {"x": ((1, 5, h, w), "float32")}, ["y"], inits)


@pytest.mark.parametrize("c,groups,h,w", [(48, 2, 5, 7), (144, 6, 3, 1)])
def test_a_value_in_two_blocks_meets_its_other_block(c, groups, h, w):
    """The grouped conv's output is in blocks of 8 where its channel count takes 16: the
    residual add, the squeeze-excite gate and the depthwise convs re-block what they read,
    and every conv stays blocked."""
    graph = _check(_mixed_blocks_model(c, groups, h, w), {"x": f32(1, 5, h, w)})
    ops = [n.op for n in graph.nodes]
    assert "grouped_conv2d_nchwc" in ops and ops.count("depthwise_conv2d_nchwc") == 2
    # only the squeeze conv to 7 channels (no block of its own) stays NCHW
    assert [n.outputs[0].shape[1] for n in graph.nodes if n.op == "conv2d"] == [7]
    blocks = [(n.op, n.outputs[0].shape[-1]) for n in graph.nodes
              if n.op in ("conv2d_nchwc", "grouped_conv2d_nchwc")]
    assert blocks[:2] == [("conv2d_nchwc", 16), ("grouped_conv2d_nchwc", 8)]
