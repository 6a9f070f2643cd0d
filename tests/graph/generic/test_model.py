"""GenericModel: planning, running, errors (graph/generic/model.py)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.codegen.target import Target
from kiln.graph.generic.compile import compile_generic
from kiln.graph.generic.lowering import Unsupported
from kiln.te.errors import KernelArgumentError
from tests.graph.graph_helpers import make_model
from tests.graph.generic.helpers import assert_generic_matches_ort


def _relu_reshape(shape):
    n = int(np.prod(shape))
    return make_model([helper.make_node("Relu", ["x"], ["r"]),
                       helper.make_node("Reshape", ["r", "s"], ["y"])],
                      {"x": (shape, "float32")}, ["y"],
                      inits={"s": np.array([n], np.int64)})


@pytest.mark.parametrize("shape", [(1,), (3, 37), (2, 16), (1, 1, 17), (4, 1023)])
def test_relu_reshape_matches_onnxruntime(shape, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    assert_generic_matches_ort(_relu_reshape(shape), {"x": x})


def test_runs_repeat_on_fresh_inputs(rng):
    gm = compile_generic(_relu_reshape((5, 7)), Target.native(), 2)
    for _ in range(3):
        x = rng.standard_normal((5, 7)).astype(np.float32)
        np.testing.assert_array_equal(gm.run([x])[0], np.maximum(x, 0).reshape(-1))


def test_wrong_input_shape_names_the_input():
    gm = compile_generic(_relu_reshape((5, 7)), Target.native(), 2)
    with pytest.raises(KernelArgumentError, match="input 'x'.*expected float32\\[5, 7\\]"):
        gm.run([np.zeros((5, 8), np.float32)])


def test_an_op_without_generic_kernel_is_named():
    model = make_model([helper.make_node("Det", ["x"], ["y"])], {"x": ((3, 3), "float32")},
                       ["y"])
    with pytest.raises(Unsupported, match="det"):
        compile_generic(model, Target.native(), 1)
