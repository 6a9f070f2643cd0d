"""Convs over float16 run as float32 convs between casts (graph/passes/half_convs.py): the
optimised graph holds no 16-bit conv, and the compiled model agrees with onnxruntime on odd
sizes, groups, strides and transposed convs."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.graph.compile.model import prepare_graph

from .graph_helpers import ort_run

R = np.random.default_rng(16)
CASES = {
    "3x3-pad": ((1, 3, 17, 19), (8, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "depthwise": ((1, 8, 13, 7), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}),
    "grouped-strided": ((2, 6, 11, 9), (4, 3, 3, 1), {"group": 2, "strides": [2, 1]}),
    "1x1": ((1, 5, 1, 1), (7, 5, 1, 1), {}),
}


def conv_model(x_shape, w, attrs, elem, op="Conv", out_shape=None):
    node = helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)
    g = helper.make_graph([node], "half", [helper.make_tensor_value_info("x", elem, x_shape)],
                          [helper.make_tensor_value_info("y", elem, out_shape)],
                          initializer=[numpy_helper.from_array(w, "w"), numpy_helper.from_array(
                              R.standard_normal(w.shape[1] if op == "ConvTranspose"
                                                else w.shape[0]).astype(w.dtype), "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m)


@pytest.mark.parametrize("case", list(CASES))
def test_float16_convs_match_onnxruntime(case):
    x_shape, w_shape, attrs = CASES[case]
    x = R.standard_normal(x_shape).astype(np.float16)
    w = (R.standard_normal(w_shape) * 0.3).astype(np.float16)
    m = conv_model(x_shape, w, attrs, TensorProto.FLOAT16)
    got = kiln.compile(m, db=None, jobs=1).run([x])[0]
    want = ort_run(m, {"x": x})[0]
    assert got.dtype == np.float16 and got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=4e-3,
                               atol=4e-3)


def test_float16_conv_transpose_matches_onnxruntime():
    x = R.standard_normal((1, 4, 5, 7)).astype(np.float16)
    w = (R.standard_normal((4, 3, 3, 3)) * 0.3).astype(np.float16)
    m = conv_model([1, 4, 5, 7], w, {"strides": [2, 2]}, TensorProto.FLOAT16, "ConvTranspose")
    got = kiln.compile(m, db=None, jobs=1).run([x])[0]
    want = ort_run(m, {"x": x})[0]
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=4e-3,
                               atol=4e-3)


def test_no_16_bit_conv_is_left_in_the_graph():
    x_shape, w_shape, attrs = CASES["3x3-pad"]
    m = conv_model(x_shape, R.standard_normal(w_shape).astype(np.float16), attrs,
                   TensorProto.FLOAT16)
    graph, _ = prepare_graph(m)
    convs = [n for n in graph.nodes if n.op.startswith("conv2d")]
    assert convs and all(n.outputs[0].dtype == "float32" for n in convs)
    assert graph.outputs[0].dtype == "float16"


@settings(max_examples=6, deadline=None)
@given(channels=st.sampled_from([(1, 1), (3, 5), (4, 4), (6, 9)]),
       size=st.tuples(st.integers(1, 9), st.integers(1, 11)),
       kernel=st.sampled_from([(1, 1), (3, 3), (1, 3), (2, 2)]),
       stride=st.integers(1, 2), pad=st.integers(0, 1), depthwise=st.booleans())
def test_any_float16_conv_matches_onnxruntime(channels, size, kernel, stride, pad, depthwise):
    c, f = (channels[0], channels[0]) if depthwise else channels
    group = c if depthwise else 1
    h, w = max(size[0], kernel[0]), max(size[1], kernel[1])
    x = R.standard_normal((1, c, h, w)).astype(np.float16)
    weight = (R.standard_normal((f, c // group) + kernel) * 0.3).astype(np.float16)
    m = conv_model([1, c, h, w], weight, {"group": group, "strides": [stride, stride],
                                          "pads": [pad] * 4}, TensorProto.FLOAT16)
    got = kiln.compile(m, db=None, jobs=1).run([x])[0]
    want = ort_run(m, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=4e-3,
                               atol=4e-3)
