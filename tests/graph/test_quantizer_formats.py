"""Every form onnxruntime's static quantizer writes, on one CNN (convs, a residual add, max
pool, global pool, Gemm): QOperator (QLinearConv, QLinearAdd, com.microsoft QGemm) and QDQ,
uint8 or int8 activations, uint8 or int8 weights, per tensor or per channel. Kiln's compiled
model agrees with onnxruntime's int8 run within one step of the output's quantization (the
two round the float requantization differently now and then)."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import kiln
from kiln.graph import models

from .graph_helpers import ort_run


def _quantized(fmt: str, activations: str, weights: str, per_channel: bool):
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    fp32 = models.default_cnn()
    name = fp32.graph.input[0].name
    shape = [d.dim_value for d in fp32.graph.input[0].type.tensor_type.shape.dim]

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.feeds = iter([{name: rng.standard_normal(shape).astype(np.float32)}
                               for _ in range(4)])

        def get_next(self):
            return next(self.feeds, None)

    types = {"uint8": QuantType.QUInt8, "int8": QuantType.QInt8}
    with tempfile.TemporaryDirectory() as folder:
        src, dst = os.path.join(folder, "m.onnx"), os.path.join(folder, "q.onnx")
        onnx.save(fp32, src)
        quantize_static(src, dst, Reader(),
                        quant_format=getattr(QuantFormat, fmt), per_channel=per_channel,
                        activation_type=types[activations], weight_type=types[weights])
        return fp32, onnx.load(dst), name, shape


def _output_step(model: onnx.ModelProto) -> float:
    """The scale of the DequantizeLinear that produces the model's output."""
    out = model.graph.output[0].name
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    node = next(n for n in model.graph.node if out in n.output)
    assert node.op_type == "DequantizeLinear", node.op_type
    return float(inits[node.input[1]])


@pytest.mark.parametrize("fmt,activations,weights,per_channel", [
    ("QOperator", "uint8", "int8", True),
    ("QOperator", "int8", "int8", False),
    ("QOperator", "uint8", "uint8", True),
    ("QDQ", "uint8", "uint8", False),
    ("QDQ", "int8", "int8", True),
])
def test_onnxruntime_quantizer_forms(fmt, activations, weights, per_channel):
    fp32, q, name, shape = _quantized(fmt, activations, weights, per_channel)
    ops = {n.op_type for n in q.graph.node}
    assert ("QLinearConv" in ops) == (fmt == "QOperator")
    step = _output_step(q)
    compiled = kiln.compile(q, db=None, jobs=1)
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        got = compiled.run({name: x})[0]
        theirs = ort_run(q, {name: x})[0]
        reference = ort_run(fp32, {name: x})[0]
        assert np.abs(got - theirs).max() <= 1.01 * step
        assert np.abs(got - reference).max() <= np.abs(theirs - reference).max() + 1.01 * step
