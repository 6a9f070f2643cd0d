"""One test per user-facing error of the frontend and the reference executor."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.graph import models
from kiln.graph.onnx.load import load_onnx
from kiln.graph.reference import run_reference
from kiln.te.errors import KernelArgumentError, ModelFormatError, UnsupportedOperatorError

from .graph_helpers import make_model


def _unsupported_model():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu_0"),
             helper.make_node("NonMaxSuppression", ["b0", "s0"], ["nms"], name="nms_0"),
             helper.make_node("Unique", ["x"], ["u1"], name="unique_1"),
             helper.make_node("Unique", ["x"], ["u2"], name="unique_2"),
             helper.make_node("Relu", ["a"], ["y"])]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", 1, [2])],
                          [helper.make_tensor_value_info("y", 1, [2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_unsupported_ops_listed_together():
    with pytest.raises(UnsupportedOperatorError,
                       match=r"2 operator types Kiln does not support \(opset 17\): "
                             r"NonMaxSuppression \(node 'nms_0'\), "
                             r"Unique \(nodes 'unique_1', 'unique_2'\)\."):
        load_onnx(_unsupported_model())


def test_truncated_file_names_the_file(tmp_path):
    data = models.default_cnn().SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ModelFormatError, match=r"cut\.onnx.*truncated"):
        load_onnx(path)


def test_missing_file():
    with pytest.raises(ModelFormatError, match="'nope.onnx' does not exist"):
        load_onnx("nope.onnx")


def _relu_model(shape):
    return make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": (shape, "float32")},
                      ["y"])


def test_symbolic_batch_resolved_to_one_or_given():
    m = _relu_model(["N", 3])
    assert load_onnx(m).inputs[0].shape == (1, 3)
    assert load_onnx(m, input_shapes={"x": (5, 3)}).inputs[0].shape == (5, 3)


def test_given_shape_conflicting_with_model():
    with pytest.raises(ModelFormatError, match=r"input 'x': given shape \[5, 4\] does not match "
                                               r"the model's \['\?', 3\]"):
        load_onnx(_relu_model(["N", 3]), input_shapes={"x": (5, 4)})


def test_dynamic_reshape_target_is_reported():
    m = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                   {"x": ((2, 3), "float32"), "s": ((2,), "int64")}, ["y"])
    with pytest.raises(ModelFormatError, match=r"node 'rs' \(Reshape\) needs its 'shape' input "
                                               r"\('s'\) at compile time"):
        load_onnx(m)


def test_unsupported_conv_rank_names_node():
    # 1-D and 3-D convs run as 2-D ones; 4-D windows are not supported
    m = make_model([helper.make_node("Conv", ["x", "w"], ["y"], name="conv4d")],
                   {"x": ((1, 2, 4, 4, 4, 4), "float32")}, ["y"],
                   {"w": np.ones((3, 2, 2, 2, 2, 2), np.float32)})
    with pytest.raises(UnsupportedOperatorError, match=r"node 'conv4d' \(Conv.*4-D window"):
        load_onnx(m)


def test_reference_rejects_wrong_shape_and_dtype():
    g = load_onnx(_relu_model([2, 3]))
    with pytest.raises(KernelArgumentError, match=r"input 'x'.*expected float32\[2, 3\], "
                                                  r"got float32\[3, 2\]"):
        run_reference(g, {"x": np.zeros((3, 2), np.float32)})
    with pytest.raises(KernelArgumentError, match=r"expected float32\[2, 3\], got float64"
                                                  r".*astype\(np.float32\)"):
        run_reference(g, {"x": np.zeros((2, 3))})
    with pytest.raises(KernelArgumentError, match=r"input 'x' \(float32\[2, 3\]\) was not "
                                                  "given"):
        run_reference(g, {})
    with pytest.raises(KernelArgumentError, match="takes 1 inputs"):
        run_reference(g, [])


@pytest.mark.parametrize("cols", [8, 40])     # 8 x 8 = 64 weights; 40 x 40 = 1600 (a typed input)
def test_a_weight_that_contradicts_the_input_shape_is_named_by_shape_inference(cols):
    # the cross-check gives large initializers to onnx as typed inputs, not as data
    # (graph/frontend._without_large_initializers): the contradiction is still found
    w = helper.make_tensor("w", 1, [cols, cols], np.ones(cols * cols, np.float32))
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "m",
                          [helper.make_tensor_value_info("x", 1, [1, cols + 1])],
                          [helper.make_tensor_value_info("y", 1, [1, cols])], [w])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelFormatError, match="ONNX shape inference failed"):
        load_onnx(model)
