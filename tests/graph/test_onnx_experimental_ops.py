"""ONNX's early experimental operators as onnxruntime runs them (graph/onnx/experimental.py):
ImageScaler, Scale, Affine, ScaledTanh, ParametricSoftplus and Crop, compiled and in the
numpy reference, against onnxruntime; bad attributes are named."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from kiln.graph.onnx.load import load_onnx
from kiln.te.errors import ModelFormatError

from .test_onnx_ordering import check

R = np.random.default_rng(3)


def model(op, x_shape, y_shape, opset=8, **attrs):
    """A one-node model with typed output (onnx's shape inference does not know these)."""
    node = helper.make_node(op, ["x"], ["y"], name=f"{op}_0", **attrs)
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                      list(x_shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                         list(y_shape))])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 7
    return m


@pytest.mark.parametrize("op, attrs", [
    ("ImageScaler", {"bias": [0.1, -0.2, 0.3], "scale": 2.0}),
    ("ImageScaler", {"bias": [0.0, 0.0, 1.0]}),
    ("Scale", {"scale": -1.5}),
    ("Affine", {"alpha": 0.5, "beta": 2.0}),
    ("ScaledTanh", {"alpha": 0.5, "beta": 2.0}),
    ("ParametricSoftplus", {"alpha": 0.7, "beta": 1.3}),
])
def test_elementwise_experimental_ops(op, attrs):
    x = R.standard_normal((1, 3, 5, 7)).astype(np.float32)
    check(model(op, x.shape, x.shape, **attrs), {"x": x}, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attrs, out", [
    ({"border": [1, 1, 1, 1]}, (1, 3, 3, 5)),
    ({"border": [2, 0, 0, 3]}, (1, 3, 2, 5)),
    ({"border": [1, 2, 0, 0], "scale": [2, 3]}, (1, 3, 2, 3)),
])
def test_crop(attrs, out):
    x = R.standard_normal((1, 3, 5, 7)).astype(np.float32)
    check(model("Crop", x.shape, out, **attrs), {"x": x})


def test_a_crop_past_the_image_is_named():
    m = model("Crop", (1, 3, 5, 7), (1, 3, 1, 1), border=[1, 2, 0, 0], scale=[9, 3])
    with pytest.raises(ModelFormatError, match=r"Crop_0.*border \[1, 2, 0, 0\] and scale "
                                               r"\[9, 3\] do not fit the 5x7 input"):
        load_onnx(m)
