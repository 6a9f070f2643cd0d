"""3-D Conv (graph/onnx_ops_conv3d.py: depth taps folded into channels of a 2-D conv): the
numpy reference executor and compiled models against onnxruntime, over strides, dilations,
pads, groups and awkward sizes, and the errors for inconsistent shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.graph.compile import compile_model
from kiln.graph.frontend import load_onnx
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
