"""Operators as older opsets define them (models exported years ago still run): Resize-10
(scales only, Upsample's asymmetric map, also shrinking), Resize-11's tf_half_pixel_for_nn,
GlobalLpPool, and Softmax/LogSoftmax before opset 13 (coerced to 2-D at the axis). Kiln's
compiled model and the numpy reference against onnxruntime, on awkward sizes (primes, 1)."""
from __future__ import annotations

import numpy as np
import pytest

from .graph_helpers import one_node_model
from .test_onnx_ordering import check, f32


@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 0.5, 0.7), (1, 1, 1.7, 0.6),
                                    (1, 1, 2.5, 1)], ids=["up", "down", "mixed", "one-axis"])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_10_matches_onnxruntime(mode, scales):
    feeds = {"x": f32(1, 3, 7, 9)}
    m = one_node_model("Resize", feeds, {"s": np.array(scales, np.float32)}, opset=10,
                       strict=False, mode=mode)
    check(m, feeds)


@pytest.mark.parametrize("scales", [(1, 1, 2, 3), (1, 1, 0.5, 0.7), (1, 1, 1.7, 0.6)])
def test_resize_11_tf_half_pixel_for_nn(scales):
    feeds = {"x": f32(1, 2, 7, 5)}
    m = one_node_model("Resize", feeds, {"roi": np.array([], np.float32),
                                         "s": np.array(scales, np.float32)}, opset=11,
                       strict=False, mode="nearest",
                       coordinate_transformation_mode="tf_half_pixel_for_nn")
    check(m, feeds)


@pytest.mark.parametrize("p", [1, 2, 3])
@pytest.mark.parametrize("shape", [(1, 3, 5, 7), (2, 1, 1, 1), (1, 4, 11)])
def test_global_lp_pool(p, shape):
    feeds = {"x": f32(*shape)}
    check(one_node_model("GlobalLpPool", feeds, opset=2, strict=False, p=p), feeds,
          rtol=1e-4)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("axis", [0, 1, 2, -1, None])
def test_softmax_before_13_flattens_at_its_axis(op, axis):
    feeds = {"x": f32(2, 3, 1, 5)}
    attrs = {} if axis is None else {"axis": axis}
    check(one_node_model(op, feeds, opset=11, strict=False, **attrs), feeds, rtol=1e-5)
