"""Concats of differently quantized int8 tensors (graph/passes/int8/concat.py): each input is
requantized to the output's parameters where it is made (a byte table in the producing
conv's epilogue) and the concat moves bytes. Two or three int8 convs of x, each with its own
scale and zero point (one may share the output's), concatenated along channels, then a conv;
uint8 and int8 activations, awkward channel counts (1, primes, non-multiples of 16), 1x1
spatial. Checked bit for bit against onnxruntime int8 and onnx's reference evaluator."""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize

from .graph_helpers import make_model
from .test_int8_nhwc import _int8_conv

R = np.random.default_rng(17)


def _model(dtype: str, c: int, widths: tuple[int, ...], h: int, w: int, shared: int | None):
    """x -> Q/DQ -> convs (widths) -> Q/DQ each -> Concat -> Q/DQ -> conv 1x1 -> Q/DQ -> y;
    the input number `shared` has the concat output's scale and zero point."""
    lo = 0 if dtype == "uint8" else -128
    inits = {}
    params = {"x": (0.02, lo + 128), "cat": (0.037, lo + 9), "y": (0.05, lo + 121)}
    for k in range(len(widths)):
        params[f"b{k}"] = params["cat"] if k == shared else (0.021 + 0.013 * k, lo + 3 + 40 * k)
    for name, (scale, zp) in params.items():
        inits[f"{name}_s"], inits[f"{name}_z"] = np.float32(scale), np.array(zp, dtype)

    def qdq(src, name, dst):
        return [helper.make_node("QuantizeLinear", [src, f"{name}_s", f"{name}_z"], [dst + "q"]),
                helper.make_node("DequantizeLinear", [dst + "q", f"{name}_s", f"{name}_z"],
                                 [dst])]

    conv = functools.partial(_int8_conv, inits)
    nodes = qdq("x", "x", "xf")
    for k, f in enumerate(widths):
        nodes += conv(k, "xf", f"c{k}", c, f, 3 if k % 2 == 0 else 1) + qdq(f"c{k}", f"b{k}",
                                                                            f"d{k}")
    nodes += [helper.make_node("Concat", [f"d{k}" for k in range(len(widths))], ["cat"],
                               axis=1)] + qdq("cat", "cat", "catf")
    nodes += conv(len(widths), "catf", "out", sum(widths), 5, 1) + qdq("out", "y", "y")
    x = (R.standard_normal((1, c, h, w)) * 1.5).astype(np.float32)
    return make_model(nodes, {"x": x}, ["y"], inits, opset=19), {"x": x}


@pytest.mark.parametrize("dtype,c,widths,h,w,shared", [
    ("uint8", 5, (7, 13), 6, 5, None), ("int8", 3, (1, 16), 4, 7, None),
    ("uint8", 8, (5, 3, 19), 1, 1, 1), ("int8", 7, (24, 11, 2), 5, 3, 0)])
def test_a_concat_of_different_scales_moves_bytes(dtype, c, widths, h, w, shared):
    model, feeds = _model(dtype, c, widths, h, w, shared)
    graph = optimize(load_onnx(model), target="native")
    concat = next(n for n in graph.nodes if n.op == "concat")
    assert concat.outputs[0].dtype == dtype
    tables = sum(n.op == "lookup_table" for n in graph.nodes)
    assert tables == len(widths) - (shared is not None), graph.op_counts()
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feeds)[0])
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    theirs = ort.InferenceSession(model.SerializeToString(), opts,
                                  providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, theirs)
