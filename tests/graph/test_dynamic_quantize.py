"""DynamicQuantizeLinear's whole-tensor min and max (graph/onnx/quant.py _whole_reduce):
two reductions, over every axis but the contiguous last one, then over it, with the same
scale and zero point as onnx's reference evaluator for ranks 1-4, odd extents, and the
extreme values placed first, last and inside."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.onnx.load import load_onnx

from .graph_helpers import make_model

R = np.random.default_rng(41)


def _model(shape):
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yzp"])
    return make_model([node], {"x": (tuple(shape), "float32")},
                      [("y", "uint8"), ("ys", "float32"), ("yzp", "uint8")], {}, 13)


@pytest.mark.parametrize("shape", [(7,), (5, 13), (3, 1, 10), (2, 3, 4, 17), (1, 128, 256)])
def test_dynamic_quantize_linear_scale_and_zero_point_are_exact(shape):
    x = R.uniform(-3.0, 5.0, size=shape).astype(np.float32)
    x.flat[0], x.flat[-1], x.flat[x.size // 2] = -7.5, 9.25, 0.125
    model = _model(shape)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    got = kiln.compile(model, db=None, jobs=1).run({"x": x})
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[2], want[2])
    assert np.abs(got[0].astype(int) - want[0].astype(int)).max() <= 1


def test_whole_tensor_min_keeps_the_last_axis_first():
    graph = load_onnx(_model((1, 128, 256)))
    reduces = [(n.op, n.attrs["axes"], n.outputs[0].shape) for n in graph.nodes
               if n.op in ("reduce_min", "reduce_max")]
    assert sorted(reduces) == sorted([
        ("reduce_min", (0, 1), (256,)), ("reduce_min", (0,), ()),
        ("reduce_max", (0, 1), (256,)), ("reduce_max", (0,), ())])
