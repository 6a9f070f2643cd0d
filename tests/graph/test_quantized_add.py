"""Quantized adds in onnxruntime's rounding (graph/passes/int8/add.py): bit for bit what
onnxruntime's int8 run gives, within one step of the ONNX reference, and only where matched."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.passes.int8.add import ratio_form

from .graph_helpers import make_model

R = np.random.default_rng(31)


def _qdq_add(dtype: str, shape_b=(1, 64, 56, 56), seed: int = 0):
    """DQ(a), DQ(b) -> Add -> Q, scales and zero points like a quantizer's."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    a = rng.integers(lo, hi, (1, 64, 56, 56)).astype(dtype)
    b = rng.integers(lo, hi, shape_b).astype(dtype)
    zps = rng.integers(lo // 2 + 64 if dtype == "uint8" else -20, hi // 2 + 64 if dtype ==
                       "uint8" else 20, 3).astype(dtype)
    scales = rng.uniform(0.005, 0.05, 3).astype(np.float32)
    inits = {"sa": scales[0], "za": zps[0], "sb": scales[1], "zb": zps[1], "sc": scales[2],
             "zc": zps[2]}
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["fa"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["fb"]),
             helper.make_node("Add", ["fa", "fb"], ["s"]),
             helper.make_node("QuantizeLinear", ["s", "sc", "zc"], ["y"])]
    model = make_model(nodes, {"a": a, "b": b}, [("y", dtype)], inits, opset=19)
    return model, {"a": a, "b": b}


def _onnxruntime_int8(model, feeds):
    """onnxruntime as a user runs it (optimizations on: the add becomes QLinearAdd)."""
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_quantized_add_gives_onnxruntimes_bits(dtype, seed):
    model, feeds = _qdq_add(dtype, seed=seed)
    graph = optimize(load_onnx(model))
    assert [n.op for n in graph.nodes].count("dequantize_linear") == 0
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, _onnxruntime_int8(model, feeds))
    spec = ReferenceEvaluator(model).run(None, feeds)[0]
    assert np.abs(got.astype(np.int32) - spec.astype(np.int32)).max() <= 1


def test_a_broadcast_add_keeps_the_qdq_form():
    model, feeds = _qdq_add("uint8", shape_b=(1, 64, 1, 1))
    graph = optimize(load_onnx(model))
    assert "dequantize_linear" in [n.op for n in graph.nodes]
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    spec = ReferenceEvaluator(model).run(None, feeds)[0]
    assert np.abs(got.astype(np.int32) - spec.astype(np.int32)).max() <= 1


def test_the_ratio_form_constants():
    ra, rb, fixed = ratio_form(0.02, 153, 0.0131, 132, 0.00981, 0)
    assert (ra, rb) == (np.float32(0.02) / np.float32(0.00981),
                        np.float32(0.0131) / np.float32(0.00981))
    assert fixed.dtype == np.float32
    assert abs(float(fixed) + (float(ra) * 153 + float(rb) * 132)) < 1e-3
