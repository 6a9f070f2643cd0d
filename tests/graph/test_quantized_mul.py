"""Quantized multiplies in onnxruntime's rounding (graph/passes/int8/mul.py): every one
of the 65,536 byte pairs through DQ -> Mul -> Q, compiled by Kiln, equals onnxruntime int8
bit for bit, at RegNet-Y-400MF's squeeze-excitation scales (where the float32 QDQ order
differs from it at 2 pairs) and at random scales and zero points, uint8 and int8, with the
second operand broadcast as a [1, C, 1, 1] gate or full size."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes.int8.mul import onnxruntime_rounded_muls

from .graph_helpers import make_model

# RegNet-Y-400MF block3-5's gate, activation and product scales (zero points 0)
_REGNET = (np.float32(0.0006883721216581762), np.float32(0.0021221251226961613),
           np.float32(0.00033410737523809075))


def _model(dtype, sa, za, sb, zb, sc, zc, gate: bool):
    n = helper.make_node
    inits = {"sa": np.float32(sa), "za": np.array(za, dtype), "sb": np.float32(sb),
             "zb": np.array(zb, dtype), "sc": np.float32(sc), "zc": np.array(zc, dtype)}
    nodes = [n("DequantizeLinear", ["a", "sa", "za"], ["ad"]),
             n("DequantizeLinear", ["b", "sb", "zb"], ["bd"]),
             n("Mul", ["ad", "bd"], ["m"]), n("QuantizeLinear", ["m", "sc", "zc"], ["y"])]
    b_shape = (1, 256, 1, 1) if gate else (1, 256, 1, 256)
    return make_model(nodes, {"a": ((1, 256, 1, 256), dtype), "b": (b_shape, dtype)},
                      [("y", dtype)], inits, opset=19)


def _pairs(dtype, gate: bool):
    byte = np.arange(256, dtype=np.uint8).view(dtype)
    a = np.tile(byte, 256).reshape(1, 256, 1, 256)
    b = byte.reshape(1, 256, 1, 1) if gate else np.repeat(byte, 256).reshape(1, 256, 1, 256)
    return {"a": a, "b": np.ascontiguousarray(b)}


def _ort(model, feeds):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("dtype,params,gate", [
    ("uint8", _REGNET[:1] + (0,) + _REGNET[1:2] + (0,) + _REGNET[2:] + (0,), True),
    ("uint8", _REGNET[:1] + (0,) + _REGNET[1:2] + (0,) + _REGNET[2:] + (0,), False),
    ("uint8", (0.021, 131, 0.0037, 7, 0.043, 250), True),
    ("int8", (0.0173, -5, 0.009, 100, 0.0311, -128), False),
    ("int8", (0.0021, 0, 0.0007, -3, 0.00033, 17), True)])
def test_every_byte_pair_equals_onnxruntime(dtype, params, gate):
    model = _model(dtype, *params, gate)
    graph = onnxruntime_rounded_muls(load_onnx(model))
    assert "dequantize_linear" not in [n.op for n in graph.nodes]
    feeds = _pairs(dtype, gate)
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, _ort(model, feeds))


def test_the_float32_qdq_order_differs_at_regnet_scales():
    """The case the pass exists for: the literal float32 QDQ order is off by one at 2 pairs."""
    sa, sb, sc = _REGNET
    feeds = _pairs("uint8", True)
    a, b = feeds["a"].astype(np.float32), feeds["b"].astype(np.float32)
    literal = np.clip(np.round((a * sa) * (b * sb) / sc), 0, 255)
    theirs = _ort(_model("uint8", sa, 0, sb, 0, sc, 0, True), feeds)
    assert np.count_nonzero(literal != theirs) == 2
