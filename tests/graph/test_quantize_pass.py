"""The QDQ -> integer kernel pass (graph/passes/int8/quantize.py): what it rewrites, what it leaves
alone, and that the compiled integer kernels agree with the spec (onnx's reference evaluator
running the QDQ model in float) within one quantization step, and with onnxruntime's int8
run of models quantized by onnxruntime.quantization."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import fuse_quantized_kernels, optimize
from kiln.graph.reference import run_reference

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(23)


def qdq_conv_model(xdtype: str, per_channel: bool, act: str | None, w_zp: int = 0,
                   bias: str = "int32", f: int = 6, groups: int = 1):
    """x -> Q -> DQ -> Conv(DQ(W), bias) [-> act] -> Q -> DQ -> y (float output)."""
    c, h, w = 4, 7, 5
    x_zp = 130 if xdtype == "uint8" else -5
    x_scale, y_scale = np.float32(0.02), np.float32(0.05)
    y_zp = 120 if xdtype == "uint8" else 3
    wq = R.integers(-127, 128, size=(f, c // groups, 3, 2)).astype(np.int8)
    ws = (R.uniform(0.002, 0.01, f).astype(np.float32) if per_channel
          else np.float32(0.005))
    inits = {"xs": x_scale, "xzp": np.array(x_zp, xdtype), "wq": wq, "ws": ws,
             "wzp": (np.full(f, w_zp, np.int8) if per_channel else np.array(w_zp, np.int8)),
             "ys": y_scale, "yzp": np.array(y_zp, xdtype)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["wf"], axis=0)]
    conv_in = ["xf", "wf"]
    if bias == "int32":
        inits.update(bq=R.integers(-500, 500, f).astype(np.int32),
                     bs=(x_scale * ws).astype(np.float32), bzp=np.zeros(f, np.int32))
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "bs", "bzp"], ["bf"],
                                      axis=0))
        conv_in.append("bf")
    elif bias == "float":
        inits["bf"] = R.uniform(-0.3, 0.3, f).astype(np.float32)
        conv_in.append("bf")
    nodes.append(helper.make_node("Conv", conv_in, ["conv"], pads=[1, 0, 1, 1],
                                  strides=[1, 2], group=groups))
    last = "conv"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["conv"], ["act"]))
        last = "act"
    elif act == "clip":
        inits.update(lo=np.float32(-0.5), hi=np.float32(1.0))
        nodes.append(helper.make_node("Clip", ["conv", "lo", "hi"], ["act"]))
        last = "act"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "yzp"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["y"])]
    x = R.uniform(-2.0, 2.0, size=(2, c, h, w)).astype(np.float32)
    return make_model(nodes, {"x": x}, ["y"], inits, opset=19), {"x": x}, float(y_scale)


def _integer_convs(ops) -> int:
    return ops.get("conv2d_integer", 0) + ops.get("conv2d_int8x4", 0)


def _assert_within_one_step(got, want, step):
    steps = np.abs(got - want) / step
    assert steps.max() <= 1.0 + 1e-3, f"off by {steps.max():.2f} steps"
    assert (steps < 1e-3).mean() > 0.97


@pytest.mark.parametrize("xdtype,per_channel,act,bias", [
    ("uint8", True, "relu", "int32"), ("int8", True, None, "int32"),
    ("uint8", False, "clip", "float"), ("int8", False, "relu", None)])
def test_qdq_conv_becomes_integer_kernel(xdtype, per_channel, act, bias):
    model, feeds, step = qdq_conv_model(xdtype, per_channel, act, bias=bias)
    graph = optimize(load_onnx(model))
    ops = graph.op_counts()
    # an int8 weight: the packed dot4 kernel, as a pixel-major GEMM (passes/int8_nhwc.py)
    assert ops.get("matmul_int8x4") == 1 and ops.get("requantize") == 1
    assert _integer_convs(ops) == 0
    assert not {"conv2d", "conv2d_nchwc", "conv2d_kpacked"} & set(ops)
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    _assert_within_one_step(run_reference(graph, feeds)["y"], want, step)
    _assert_within_one_step(kiln.compile(model, db=None, jobs=1).run(feeds)[0], want, step)


def test_grouped_qdq_conv():
    model, feeds, step = qdq_conv_model("uint8", True, "relu", groups=2)
    graph = optimize(load_onnx(model))
    assert graph.op_counts().get("conv2d_integer") == 1     # grouped: not packed
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    _assert_within_one_step(kiln.compile(model, db=None, jobs=1).run(feeds)[0], want, step)


def test_weight_zero_point_is_left_to_the_float_path():
    model, feeds, step = qdq_conv_model("uint8", True, "relu", w_zp=3)
    graph = load_onnx(model)
    assert fuse_quantized_kernels(graph) is graph
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    _assert_within_one_step(kiln.compile(model, db=None, jobs=1).run(feeds)[0], want, step)


def test_no_qdq_is_identity():
    x = R.uniform(size=(2, 3)).astype(np.float32)
    model = make_model([helper.make_node("Relu", ["x"], ["y"])], {"x": x}, ["y"])
    graph = load_onnx(model)
    assert fuse_quantized_kernels(graph) is graph


def _quantize_static(model: onnx.ModelProto, shape, per_channel=True) -> onnx.ModelProto:
    from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                          quantize_static)
    import tempfile, os

    class Reader(CalibrationDataReader):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.it = iter([{model.graph.input[0].name: rng.standard_normal(shape).astype(
                np.float32)} for _ in range(4)])

        def get_next(self):
            return next(self.it, None)

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "m.onnx"), os.path.join(d, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
        return onnx.load(dst)


@pytest.mark.parametrize("builder", ["default_cnn", "mlp"])
def test_onnxruntime_quantized_model(builder):
    """A model quantized by onnxruntime: every conv/matmul becomes an integer kernel, and
    the output is much closer to onnxruntime's int8 output than the fp32 model's is."""
    from kiln.graph import models
    fp32 = getattr(models, builder)()
    shape = [d.dim_value for d in fp32.graph.input[0].type.tensor_type.shape.dim]
    q = _quantize_static(fp32, shape)
    graph = optimize(load_onnx(q))
    ops = graph.op_counts()
    assert _integer_convs(ops) + ops.get("matmul_integer", 0) + ops.get("matmul_int8x4",
                                                                         0) >= 2
    assert not {"conv2d", "conv2d_nchwc", "matmul", "matmul_prepacked"} & set(ops)
    compiled = kiln.compile(q, db=None, jobs=1)
    worst_int8, worst_fp32 = 0.0, 0.0
    for seed in range(3):
        x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
        got = compiled.run({fp32.graph.input[0].name: x})[0]
        ort_int8 = ort_run(q, {fp32.graph.input[0].name: x})[0]
        ort_fp32 = ort_run(fp32, {fp32.graph.input[0].name: x})[0]
        worst_int8 = max(worst_int8, float(np.abs(got - ort_int8).max()))
        worst_fp32 = max(worst_fp32, float(np.abs(ort_fp32 - ort_int8).max()))
    assert worst_int8 < 0.5 * worst_fp32, (worst_int8, worst_fp32)


def test_the_requantize_multiplier_is_onnxruntimes_float32_quotient():
    """M[f] = (x_scale * w_scale[f]) / y_scale in float32, in that order, as onnxruntime's
    QLinearConv computes it (the float64 quotient rounded once differs in the last bit for
    some scales, and such a bit moved rounding ties: ResNet-18 int8 agreed with
    onnxruntime's top-1 on 97% of random inputs, bit for bit on all with it)."""
    model, _, _ = qdq_conv_model("uint8", True, None, f=64)
    graph = fuse_quantized_kernels(load_onnx(model))
    (req,) = [n for n in graph.nodes if n.op == "requantize"]
    got = np.asarray(graph.constants[req.inputs[1].name]).reshape(-1)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    xs, ws, ys = inits["xs"], inits["ws"], inits["ys"]
    want = (np.float32(xs) * ws) / np.float32(ys)
    once = (np.float64(xs) * ws.astype(np.float64) / np.float64(ys)).astype(np.float32)
    assert got.dtype == np.float32 and np.array_equal(got, want)
    assert not np.array_equal(want, once)          # these scales tell the two apart
