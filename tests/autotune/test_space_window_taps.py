"""Which reductions are windows (autotune/space/apply.py window_axes): every reduce axis a
tap (depthwise convs, pools) up to 9 x 9, channel sums only up to 7 x 7 taps in all; 9x9
depthwise convs and pools on their window defaults match onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln import te
from kiln.autotune.space.apply import window_axes
from kiln.graph.compile.model import compile_model
from kiln.te import ops
from tests.graph.graph_helpers import make_model, ort_run


def _dw(c, k, stride=1):
    x = te.placeholder((1, c, 19, 19), name="X")
    w = te.placeholder((c, 1, k, k), name="W")
    return ops.depthwise_conv2d_nchw(x, w, stride=stride, padding=k // 2).op


def _dense(c, k):
    x = te.placeholder((1, c, 19, 19), name="X")
    w = te.placeholder((8, c, k, k), name="W")
    return ops.conv2d_nchw(x, w, padding=k // 2).op


def _pool(k):
    x = te.placeholder((1, 8, 19, 19), name="X")
    return ops.max_pool2d(x, k, stride=1, padding=k // 2).op


def test_depthwise_and_pools_up_to_9x9_are_windows():
    assert window_axes(_dw(16, 9)) and window_axes(_dw(16, 9, stride=2))
    assert window_axes(_dw(16, 7)) and window_axes(_dw(16, 3))
    assert window_axes(_pool(9)) and window_axes(_pool(5))


def test_channel_sums_and_larger_taps_are_not():
    assert not window_axes(_dense(3, 9))        # a 9x9 stem over 3 channels: a channel sum
    assert not window_axes(_dense(3, 7))        # 147 taps in all, as before
    assert window_axes(_dense(1, 7))            # one channel: 49 taps, as before
    assert not window_axes(_dw(16, 11))         # past 9 x 9
    assert not window_axes(_pool(11))


def _depthwise_model(c, k, stride, pool):
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (1, c, 17, 17)).astype(np.float32)
    w = rng.uniform(-1, 1, (c, 1, k, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (c,)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["d"], group=c, kernel_shape=[k, k],
                              pads=[k // 2] * 4, strides=[stride, stride]),
             helper.make_node("Relu", ["d"], ["r"])]
    if pool:
        nodes.append(helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[9, 9],
                                      pads=[4] * 4))
    else:
        nodes.append(helper.make_node("Identity", ["r"], ["y"]))
    return make_model(nodes, {"x": x}, ["y"], {"w": w, "b": b}), {"x": x}


@pytest.mark.parametrize("c,k,stride,pool", [(40, 9, 1, False), (13, 9, 2, False),
                                             (16, 9, 1, True), (1, 9, 1, False)])
def test_9x9_depthwise_and_pool_match_onnxruntime(c, k, stride, pool):
    model, feeds = _depthwise_model(c, k, stride, pool)
    (got,) = compile_model(model, db=None, jobs=1, threads=1).run(feeds)
    (want,) = ort_run(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
