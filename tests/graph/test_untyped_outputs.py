"""Leniency where onnxruntime is lenient and the model is unambiguous: a graph output declared
without a shape (or without any type) is accepted with a warning, its type inferred."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln import ModelFormatError

from .graph_helpers import ort_run

X = np.random.default_rng(3).standard_normal((2, 3, 5)).astype(np.float32)


def _model(*outputs):
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("ReduceSum", ["r", "axes"], ["s"], keepdims=0)]
    graph = helper.make_graph(
        nodes, "untyped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        list(outputs), initializer=[helper.make_tensor("axes", TensorProto.INT64, [1], [-1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


NO_SHAPE = helper.make_tensor_value_info("s", TensorProto.FLOAT, None)
NO_TYPE = helper.make_empty_tensor_value_info("s")
TYPED_R = helper.make_tensor_value_info("r", TensorProto.FLOAT, list(X.shape))


@pytest.mark.parametrize("outputs, what", [((NO_SHAPE,), "shape"), ((NO_TYPE,), "type"),
                                           ((TYPED_R, NO_SHAPE), "shape")])
def test_output_without_shape_compiles_with_a_warning(outputs, what):
    model = _model(*outputs)
    with pytest.warns(UserWarning, match=rf"output 's' is declared without a {what}; using "
                                         r"the inferred FLOAT\[2, 3\]"):
        compiled = kiln.compile(model, db=None, jobs=1)
    got = compiled.run({"x": X})
    for g, w in zip(got, ort_run(model, {"x": X})):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_typed_outputs_give_no_warning():
    model = _model(TYPED_R, helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kiln.compile(model, db=None, jobs=1)


def test_an_output_type_that_contradicts_the_graph_is_still_refused():
    model = _model(helper.make_tensor_value_info("s", TensorProto.INT64, None))
    with pytest.raises(ModelFormatError, match="invalid"):
        kiln.compile(model, db=None, jobs=1)
