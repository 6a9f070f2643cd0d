"""Scans vectorised across their own axis: the sum's guard (`if j <= i`) leaves some lanes
of the accumulator vector off in each step, and those lanes must keep their value (a masked
tail once overwrote them: CumSum returned the last element everywhere)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln


def _cumsum_model(shape, axis, exclusive, reverse):
    node = helper.make_node("CumSum", ["x", "axis"], ["y"], exclusive=exclusive,
                            reverse=reverse)
    graph = helper.make_graph(
        [node], "scan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(np.array(axis, np.int64), "axis")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("shape,axis", [((2, 3, 5), -1), ((4, 7), 1), ((3, 13), -1),
                                        ((2, 17), 1), ((1, 24), -1), ((5, 1), -1),
                                        ((9, 6), 0), ((2, 3, 4, 5), -1), ((3, 4, 7), 2),
                                        ((2, 8, 13), -1), ((1, 6, 24), 2)])
@pytest.mark.parametrize("exclusive,reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum_matches_onnxruntime(shape, axis, exclusive, reverse, rng):
    model = _cumsum_model(shape, axis, exclusive, reverse)
    x = rng.standard_normal(shape).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = kiln.compile(model, db=None, threads=1).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
