"""ConvTranspose over 5-D inputs (graph/onnx/convtranspose3d.py): the stride-1 3-D conv
over the spread-out input, against onnxruntime and the numpy reference, with strides,
explicit and automatic pads, output_padding, output_shape, dilations and groups on odd
sizes."""
from __future__ import annotations

import numpy as np
import pytest

from kiln.graph.onnx.load import load_onnx
from kiln.te.errors import ModelFormatError

from .graph_helpers import one_node_model
from .test_onnx_ordering import check

R = np.random.default_rng(11)
CASES = {
    "plain": ((1, 1, 3, 4, 5), (1, 2, 3, 3, 3), {}),
    "strides-pads": ((2, 4, 3, 5, 2), (4, 3, 2, 3, 1),
                     {"strides": [2, 1, 3], "pads": [1, 0, 0, 0, 1, 0]}),
    "groups-dilation-outpad": ((1, 4, 2, 3, 3), (4, 1, 3, 2, 2),
                               {"group": 2, "dilations": [1, 2, 1], "strides": [2, 2, 1],
                                "output_padding": [1, 1, 0]}),
    "same-upper": ((1, 2, 3, 3, 2), (2, 3, 3, 3, 3), {"strides": [2, 2, 2],
                                                      "auto_pad": "SAME_UPPER"}),
    "output-shape": ((1, 2, 3, 3, 2), (2, 3, 3, 3, 3), {"strides": [2, 2, 2],
                                                        "output_shape": [6, 7, 4]}),
}


def f32(*shape):
    return R.uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("case", list(CASES))
def test_conv_transpose_3d_matches_onnxruntime(case):
    x_shape, w_shape, attrs = CASES[case]
    feeds = {"x": f32(*x_shape)}
    bias = f32(w_shape[1] * attrs.get("group", 1))
    m = one_node_model("ConvTranspose", feeds, {"w": f32(*w_shape), "b": bias}, opset=17,
                       strict=False, **attrs)
    check(m, feeds, rtol=1e-4, atol=1e-5)


def test_a_weight_that_does_not_fit_is_named():
    feeds = {"x": f32(1, 3, 2, 2, 2)}
    m = one_node_model("ConvTranspose", feeds, {"w": f32(2, 1, 2, 2, 2)}, opset=17,
                       strict=False)
    with pytest.raises(ModelFormatError, match=r"ConvTranspose.*weight \[2, 1, 2, 2, 2\]"):
        load_onnx(m)
