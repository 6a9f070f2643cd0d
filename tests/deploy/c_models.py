"""The small models the deploy tests export, each with inputs and onnxruntime's outputs:
a CNN, a transformer encoder, an int8 (QDQ) CNN and a Hugging Face export with dynamic
batch/sequence axes specialised at compile time. Built once per test process."""
from __future__ import annotations

import gzip
import os
import tempfile
from functools import cache
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def ort_run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _quantize_static(model: onnx.ModelProto, shape) -> onnx.ModelProto:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    name = model.graph.input[0].name

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.it = iter([{name: rng.standard_normal(shape).astype(np.float32)}
                            for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "m.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)


@cache
def model_case(name: str):
    """(ONNX model, input_shapes for the compile or None, feeds by input name)."""
    from kiln.graph import models
    rng = np.random.default_rng(7)
    if name == "cnn":
        m = models.default_cnn(image_size=20, width=8)
        return m, None, {"input": rng.standard_normal((1, 3, 20, 20)).astype(np.float32)}
    if name == "transformer":
        m = models.bert_like_encoder(seq=12, hidden=32, heads=2, layers=2, vocab=50)
        return m, None, {"input_ids": rng.integers(0, 50, (1, 12)).astype(np.int64)}
    if name == "int8":
        fp32 = models.default_cnn(image_size=20, width=8)
        q = _quantize_static(fp32, (1, 3, 20, 20))
        return q, None, {"input": rng.standard_normal((1, 3, 20, 20)).astype(np.float32)}
    if name == "dynamic":      # batch and sequence axes symbolic: specialised to (1, 7)
        with gzip.open(FIXTURES / "hf_distilbert.onnx.gz", "rb") as f:
            m = onnx.load_model_from_string(f.read())
        ids = rng.integers(0, 128, (1, 7)).astype(np.int64)
        mask = np.ones((1, 7), np.int64)
        mask[0, -2:] = 0
        return m, {"ids": (1, 7), "mask": (1, 7)}, {"ids": ids, "mask": mask}
    if name == "pinned":     # Reshape's shape is a graph input, pinned at compile time
        from onnx import TensorProto, helper
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"]),
                 helper.make_node("Relu", ["y"], ["z"])]
        graph = helper.make_graph(
            nodes, "pinned",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4, 6)),
             helper.make_tensor_value_info("shape", TensorProto.INT64, (2,))],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, (3, 8)),
             helper.make_tensor_value_info("z", TensorProto.FLOAT, (3, 8))])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        return m, None, {"x": rng.standard_normal((4, 6)).astype(np.float32),
                         "shape": np.array([3, 8], np.int64)}
    raise KeyError(name)


CASES = ("cnn", "transformer", "int8", "dynamic")
