"""onnxruntime's com.microsoft QOperator ops (graph/onnx/quant_contrib.py) against
onnxruntime itself (onnx's evaluator has none of them), through Kiln's reference and compiled
model: within one quantization step, exact for QGemm's integer part."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.reference import run_reference

from .test_quant_ops import _ort, check_ort, ms_model, s8, u8

R = np.random.default_rng(29)


def _qgemm_model(m, k, n, trans_b, alpha, bias, quantized_out, w_range):
    """A QGemm over uint8 A (zero point 100) and int8 B with per-column scales."""
    lo, hi = w_range
    a = u8(m, k)
    b = s8(*((n, k) if trans_b else (k, n)), lo=lo, hi=hi)
    inits = {"as": np.float32(0.02), "azp": np.array(100, np.uint8), "b": b,
             "bs": R.uniform(0.01, 0.03, n).astype(np.float32), "bzp": np.zeros(n, np.int8)}
    names = ["a", "as", "azp", "b", "bs", "bzp"]
    if bias:
        inits["c"] = R.integers(-5000, 5000, n).astype(np.int32)
        names.append("c")
    elif quantized_out:
        names.append("")
    if quantized_out:
        inits.update(ys=np.float32(0.5), yzp=np.array(128, np.uint8))
        names += ["ys", "yzp"]
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", transB=trans_b,
                            alpha=alpha)
    model = ms_model(node, {"a": a}, "uint8" if quantized_out else "float32", (m, n), inits)
    return model, a, inits


@pytest.mark.parametrize("trans_b,alpha,bias,quantized_out", [
    (0, 1.0, False, True), (1, 1.0, True, True), (1, 0.5, True, True),
    (0, 1.0, True, False), (1, 2.0, True, False)])
def test_qgemm_matches_onnxruntime(trans_b, alpha, bias, quantized_out):
    """Weights in [-60, 60): onnxruntime's AVX2 u8 x s8 kernel saturates pairs of products
    above 32767, so full-range weights are checked against numpy below instead."""
    model, a, _ = _qgemm_model(5, 13, 7, trans_b, alpha, bias, quantized_out, (-60, 60))
    want = _ort(model, {"a": a})
    for got in (run_reference(load_onnx(model), {"a": a})["y"],
                kiln.compile(model, db=None, jobs=1).run({"a": a})[0]):
        assert got.dtype == want.dtype and got.shape == want.shape
        if quantized_out:
            assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_qgemm_full_range_weights_are_exact():
    """int8 weights over their whole range, awkward sizes: the int32 accumulation is exact
    (numpy in int64), the float output its scale times the accumulator."""
    model, a, inits = _qgemm_model(3, 37, 11, 1, 1.0, True, False, (-128, 128))
    got = kiln.compile(model, db=None, jobs=1).run({"a": a})[0]
    acc = (a.astype(np.int64) - 100) @ inits["b"].T.astype(np.int64) + inits["c"]
    np.testing.assert_allclose(got, acc * (np.float32(0.02) * inits["bs"]), rtol=1e-6)


def _unary_model(op, x, dtype, **attrs):
    zp = np.array(7 if dtype == "uint8" else -3, dtype)
    inits = {"xs": np.float32(0.05), "xzp": zp, "ys": np.float32(0.02),
             "yzp": np.array(128 if dtype == "uint8" else 0, dtype)}
    node = helper.make_node(op, ["x", "xs", "xzp", "ys", "yzp"], ["y"], domain="com.microsoft",
                            **attrs)
    return ms_model(node, {"x": x}, dtype, x.shape, inits)


@pytest.mark.parametrize("op,attrs", [("QLinearSigmoid", {}),
                                      ("QLinearLeakyRelu", {"alpha": 0.1})])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_activations(op, attrs, dtype):
    x = (u8 if dtype == "uint8" else s8)(2, 3, 17)
    check_ort(_unary_model(op, x, dtype, **attrs), {"x": x})


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_average_pool(count_include_pad, channels_last):
    x = u8(1, 5, 7, 9) if not channels_last else u8(1, 7, 9, 5)
    out = (1, 5, 4, 5) if not channels_last else (1, 4, 5, 5)
    inits = {"xs": np.float32(0.1), "xzp": np.array(60, np.uint8), "ys": np.float32(0.05),
             "yzp": np.array(10, np.uint8)}
    node = helper.make_node("QLinearAveragePool", ["x", "xs", "xzp", "ys", "yzp"], ["y"],
                            domain="com.microsoft", kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1], count_include_pad=count_include_pad,
                            channels_last=channels_last)
    check_ort(ms_model(node, {"x": x}, "uint8", out, inits), {"x": x})


@pytest.mark.parametrize("dtype,opset,axis", [("uint8", 13, -1), ("int8", 13, 1),
                                              ("uint8", 12, 1)])
def test_qlinear_softmax(dtype, opset, axis):
    """Output scale 1/256 as onnxruntime's quantizer writes it (zero point 0 for uint8,
    -128 for int8); opset 12 is the old flatten-at-axis softmax."""
    x = (u8 if dtype == "uint8" else s8)(2, 3, 11)
    inits = {"xs": np.float32(0.08), "xzp": np.array(5 if dtype == "uint8" else -5, dtype),
             "ys": np.float32(1 / 256), "yzp": np.array(0 if dtype == "uint8" else -128,
                                                       dtype)}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xzp", "ys", "yzp"], ["y"],
                            domain="com.microsoft", axis=axis, opset=opset)
    check_ort(ms_model(node, {"x": x}, dtype, x.shape, inits), {"x": x})


def test_qlinear_where():
    cond = R.random((3, 1, 7)) > 0.5
    x, y = s8(3, 5, 7), s8(5, 1)
    inits = {"xs": np.float32(0.05), "xzp": np.array(2, np.int8), "yv": y,
             "ys": np.float32(0.2), "yzp": np.array(-4, np.int8), "zs": np.float32(0.1),
             "zzp": np.array(1, np.int8)}
    node = helper.make_node("QLinearWhere", ["c", "x", "xs", "xzp", "yv", "ys", "yzp", "zs",
                                             "zzp"], ["y"], domain="com.microsoft")
    model = ms_model(node, {"c": cond, "x": x}, "int8", (3, 5, 7), inits)
    check_ort(model, {"c": cond, "x": x})
