"""3-D Conv (graph/onnx/conv3d.py: depth taps folded into channels of a 2-D conv): the
numpy reference executor and compiled models against onnxruntime, over strides, dilations,
pads, groups and awkward sizes, and the errors for inconsistent shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.graph.compile.model import compile_model
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.te.errors import ModelFormatError

from .graph_helpers import assert_matches_ort, make_model, ort_run

R = np.random.default_rng(3)


def f32(*shape):
    return R.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def conv3d(x, w, b=None, **attrs):
    names = ["x", "w"] + (["b"] if b is not None else [])
    inits = {"w": w, **({"b": b} if b is not None else {})}
    node = helper.make_node("Conv", names, ["y"], name="conv3d_0", **attrs)
    return make_model([node], {"x": x}, ["y"], inits), {"x": x}


def check(model, feeds, tol=1e-4):
    assert_matches_ort(model, feeds, rtol=tol, atol=tol)
    want = ort_run(model, feeds)
    got = compile_model(model, jobs=1, db=None).run(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


CASES = {
    "r3d-stem-like": conv3d(f32(1, 3, 5, 12, 12), f32(8, 3, 3, 7, 7), f32(8),
                            strides=[1, 2, 2], pads=[1, 3, 3, 1, 3, 3]),
    "depth-1 (2+1D spatial)": conv3d(f32(2, 4, 3, 9, 9), f32(6, 4, 1, 3, 3),
                                     pads=[0, 1, 1, 0, 1, 1]),
    "depth-only (2+1D temporal)": conv3d(f32(1, 5, 7, 4, 5), f32(3, 5, 3, 1, 1), f32(3),
                                         strides=[2, 1, 1], pads=[1, 0, 0, 1, 0, 0]),
    "grouped, asymmetric pads": conv3d(f32(2, 4, 5, 7, 6), f32(6, 2, 3, 1, 3),
                                       group=2, strides=[2, 1, 2], pads=[1, 0, 0, 0, 1, 1]),
    "depthwise, dilated depth": conv3d(f32(1, 4, 7, 6, 5), f32(4, 1, 3, 3, 3), f32(4),
                                       group=4, dilations=[2, 1, 1], pads=[2, 1, 1, 2, 1, 1]),
    "1x1x1 over one frame": conv3d(f32(1, 7, 1, 3, 5), f32(5, 7, 1, 1, 1)),
    "SAME_UPPER, stride 2": conv3d(f32(1, 2, 5, 5, 7), f32(3, 2, 2, 3, 3),
                                   auto_pad="SAME_UPPER", strides=[2, 2, 2]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_conv3d_matches_onnxruntime(name):
    check(*CASES[name])


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_conv3d_random_windows(data):
    """Any legal window: taps, stride, dilation and pads per axis, groups, odd sizes."""
    draw = data.draw
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cin, cout = group * draw(st.integers(1, 3)), group * draw(st.integers(1, 3))
    size = [draw(st.integers(1, 7)) for _ in range(3)]
    kernel, strides, dil, begin, end = [], [], [], [], []
    for extent in size:
        k = draw(st.integers(1, min(3, extent + 2)))
        d = draw(st.integers(1, 2))
        b, e = draw(st.integers(0, k - 1)), draw(st.integers(0, k - 1))
        if extent + b + e < d * (k - 1) + 1:       # the window must fit the padded input
            d, b, e = 1, k - 1, k - 1
        kernel.append(k), dil.append(d), begin.append(b), end.append(e)
        strides.append(draw(st.integers(1, 2)))
    x = f32(draw(st.integers(1, 2)), cin, *size)
    w = f32(cout, cin // group, *kernel)
    bias = f32(cout) if draw(st.booleans()) else None
    check(*conv3d(x, w, bias, group=group, strides=strides, dilations=dil, pads=begin + end))


def test_conv3d_bad_weight_rank_is_named():
    m, _ = conv3d(f32(1, 2, 3, 4, 4), f32(3, 2, 3, 3))
    with pytest.raises(ModelFormatError, match=r"conv3d_0.*weight"):
        load_onnx(m)


def test_conv3d_group_mismatch_is_named():
    m, _ = conv3d(f32(1, 4, 3, 4, 4), f32(3, 2, 1, 1, 1), group=2)
    with pytest.raises(ModelFormatError, match=r"conv3d_0.*group 2 do not agree"):
        load_onnx(m)


def r2plus1d_block(channels: int, mid: int, frames: int, size: int, groups: int = 1):
    """x -> 1x3x3 conv -> ReLU -> 3x1x1 conv (grouped) -> + x -> ReLU: a (2+1)-D residual
    block, with biases."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[0, 1, 1, 0, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 0, 0, 1, 0, 0],
                              group=groups),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["y"])]
    x = f32(1, channels, frames, size, size)
    inits = {"w1": f32(mid, channels, 1, 3, 3), "b1": f32(mid),
             "w2": f32(channels, mid // groups, 3, 1, 1), "b2": f32(channels)}
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


@pytest.mark.parametrize("channels,mid,frames,size,groups", [
    (16, 32, 4, 6, 1),      # whole blocks of 16: taps copy blocks
    (8, 24, 3, 5, 1),       # blocks of 8, 3 frames
    (16, 32, 5, 3, 2),      # grouped temporal conv, 16 channels per group
    (12, 12, 2, 7, 1),      # a padded block of 8: taps on NCHW
    (5, 7, 1, 5, 1),        # no block, one frame
])
def test_2plus1d_block_stays_frames_major(channels, mid, frames, size, groups):
    """Between the two convs and around the residual add, the moves to and from
    [N, C, D, H, W] cancel (graph/passes/layout/sink.py): only the model's input and output
    are transposed, and with whole channel blocks the taps run blocked."""
    model, feeds = r2plus1d_block(channels, mid, frames, size, groups)
    graph = optimize(load_onnx(model))
    ops = [n.op for n in graph.nodes]
    assert ops.count("transpose") <= 2, ops
    taps = [n for n in graph.nodes if n.op == "frame_taps"]
    assert len(taps) == 1
    assert len(taps[0].inputs[0].shape) == (5 if mid % 8 == 0 and mid // groups % 8 == 0
                                            else 4)
    check(model, feeds)
