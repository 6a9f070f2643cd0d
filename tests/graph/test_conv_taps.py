"""Dead kernel taps (graph/onnx/conv_taps.py): a dilated conv whose outer taps only read padding
becomes a smaller conv. The trimmed window is checked against a direct numpy conv over
random windows, and compiled models against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.graph.compile.model import compile_model
from kiln.graph.onnx.conv_taps import trimmed_window
from kiln.graph.onnx.load import load_onnx

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(5)


def direct_conv(x, w, strides, dilations, pads):
    """A plain numpy 2-D conv (one image, one group): the oracle for the window algebra."""
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = strides, dilations, pads
    xp = np.pad(x, ((0, 0), (pt, pb), (pl, pr)))
    o, c, kh, kw = w.shape
    oh = (xp.shape[1] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[2] - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, i * dh: i * dh + sh * (oh - 1) + 1: sh,
                       j * dw: j * dw + sw * (ow - 1) + 1: sw]
            y += np.einsum("oc,chw->ohw", w[:, :, i, j], patch)
    return y


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_trimmed_window_computes_the_same_conv(data):
    draw = data.draw
    sizes = [draw(st.integers(1, 9)) for _ in range(2)]
    kernel = [draw(st.integers(1, 5)) for _ in range(2)]
    strides = [draw(st.integers(1, 3)) for _ in range(2)]
    dilations = [draw(st.integers(1, 12)) for _ in range(2)]
    pads = [draw(st.integers(0, 14)) for _ in range(4)]
    for a in range(2):      # the padded input must hold one window
        if sizes[a] + pads[a] + pads[a + 2] < dilations[a] * (kernel[a] - 1) + 1:
            pads[a + 2] += dilations[a] * (kernel[a] - 1) + 1 - sizes[a] - pads[a] - pads[a + 2]
    x = R.standard_normal((2, *sizes))
    w = R.standard_normal((3, 2, *kernel))
    want = direct_conv(x, w, strides, dilations, pads)
    trim = trimmed_window(tuple(sizes), tuple(kernel), tuple(strides), tuple(dilations),
                          tuple(pads))
    if trim is None:
        return
    (r0, c0), (kh, kw), new_pads = trim
    assert kh * kw < kernel[0] * kernel[1] and min(new_pads) >= 0
    got = direct_conv(x, w[:, :, r0:r0 + kh, c0:c0 + kw], strides, dilations, new_pads)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def aspp_like(dilation, size=8, pads=None):
    x = R.standard_normal((1, 6, size, size)).astype(np.float32)
    w = R.standard_normal((5, 6, 3, 3)).astype(np.float32)
    b = R.standard_normal(5).astype(np.float32)
    node = helper.make_node("Conv", ["x", "w", "b"], ["y"], name="aspp",
                            dilations=[dilation] * 2, pads=pads or [dilation] * 4)
    return make_model([node], {"x": x}, ["y"], {"w": w, "b": b}), {"x": x}


@pytest.mark.parametrize("dilation,size,pads,kernel", [
    (12, 8, None, (1, 1)),          # only the centre tap sees the 8x8 image
    (6, 8, None, (3, 3)),           # every tap live
    (3, 6, [6, 6, 0, 0], (2, 2)),   # the last taps live, the first dead
    (4, 3, [8, 0, 0, 8], (1, 1)),   # uneven pads: the last row, the first column
])
def test_dead_taps_dropped_and_result_unchanged(dilation, size, pads, kernel):
    model, feeds = aspp_like(dilation, size, pads)
    graph = load_onnx(model)
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert len(convs) == 1 and tuple(convs[0].inputs[1].shape[2:]) == kernel
    got = compile_model(model, jobs=1, db=None).run(feeds)[0]
    np.testing.assert_allclose(got, ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)
