"""Quantized ONNX operators: Kiln's numpy reference and compiled kernels against onnx's
reference evaluator (the spec) on tiny models with awkward shapes, zero points other than 0,
per-channel scales and uint8/int8 activations. Integer outputs must match exactly;
requantized outputs within one quantization step (the order of float operations differs
from the evaluator's)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.reference import run_reference

from .graph_helpers import make_model

R = np.random.default_rng(17)
MS_OPSET = helper.make_opsetid("com.microsoft", 1)


def u8(*shape, lo=0, hi=256):
    return R.integers(lo, hi, size=shape).astype(np.uint8)


def s8(*shape, lo=-128, hi=128):
    return R.integers(lo, hi, size=shape).astype(np.int8)


def f32(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape).astype(np.float32)


def one_node(op, inputs, inits, out_dtype, domain="", opset=19, **attrs):
    names = list(inputs) + list(inits)
    node = helper.make_node(op, [n if not n.startswith("_none") else "" for n in names],
                            ["y"], name=f"{op.lower()}_0", domain=domain, **attrs)
    inits = {k: v for k, v in inits.items() if not k.startswith("_none")}
    model = make_model([node], inputs, [("y", out_dtype)], inits, opset)
    if domain:
        model.opset_import.append(MS_OPSET)
    return model


def check(model, feeds, exact: bool, compile_too: bool = True):
    """Kiln's reference and compiled model against the spec evaluator: exact for integer
    results, else within one quantization step (and exact for most elements)."""
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    graph = load_onnx(model)
    got = [run_reference(graph, feeds)["y"]]
    if compile_too:
        compiled = kiln.compile(model, db=None, jobs=1)
        got.append(compiled.run(feeds)[0])
    for g in got:
        assert g.dtype == want.dtype and g.shape == want.shape
        if exact:
            np.testing.assert_array_equal(g, want)
        else:
            diff = np.abs(g.astype(np.int32) - want.astype(np.int32))
            assert diff.max() <= 1, f"off by {diff.max()} steps"
            assert (diff == 0).mean() > 0.97


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_linear(dtype, per_axis):
    x = f32(2, 5, 3, 7, lo=-40, hi=40)
    x[0, 3, 0, :4] = [0.5, 1.5, 2.5, -0.5]              # ties (scale 1.0) round to even
    x[1, :, 1, :4] = [0.25, 0.75, 1.25, -0.25]          # ties at scale 0.5
    scale = (np.array([0.1, 0.2, 0.05, 1.0, 0.3], np.float32) if per_axis
             else np.float32(0.5))
    zp = np.array([3, 0, 7, 1, 200 if dtype == "uint8" else -9] if per_axis else 11,
                  dtype=dtype)
    model = one_node("QuantizeLinear", {"x": x}, {"s": scale, "zp": zp}, dtype, axis=1)
    check(model, {"x": x}, exact=True)


@pytest.mark.parametrize("dtype", ["uint8", "int8", "int32"])
def test_dequantize_linear_per_axis(dtype):
    x = (R.integers(-1000, 1000, size=(3, 1, 4)).astype(np.int32) if dtype == "int32"
         else (u8(3, 1, 4) if dtype == "uint8" else s8(3, 1, 4)))
    scale = np.array([0.5, 0.25, 0.1, 2.0], np.float32)
    zp = np.array([1, 0, -3, 5] if dtype != "uint8" else [1, 0, 3, 255], dtype=dtype)
    inits = {"s": scale} if dtype == "int32" else {"s": scale, "zp": zp}
    model = one_node("DequantizeLinear", {"x": x}, inits, "float32", axis=2)
    check(model, {"x": x}, exact=True)


@pytest.mark.parametrize("adtype,bdtype", [("uint8", "int8"), ("int8", "int8"),
                                           ("uint8", "uint8")])
def test_matmul_integer(adtype, bdtype):
    a = u8(2, 7, 13) if adtype == "uint8" else s8(2, 7, 13)
    b = u8(13, 5) if bdtype == "uint8" else s8(13, 5)
    azp = np.array(129 if adtype == "uint8" else -3, dtype=adtype)
    bzp = np.array([1, 0, 7, 3, 2] if bdtype == "uint8" else [0, -1, 2, 0, 5], dtype=bdtype)
    model = one_node("MatMulInteger", {"a": a}, {"b": b, "azp": azp, "bzp": bzp}, "int32",
                     opset=13)
    check(model, {"a": a}, exact=True)


def test_matmul_integer_runtime_zero_point():
    """Dynamic quantization's form: both operands and the activation zero point at run
    time."""
    a, b = u8(1, 3, 17), s8(17, 11)
    azp = np.array(77, np.uint8)
    model = one_node("MatMulInteger", {"a": a, "b": b, "azp": azp}, {}, "int32", opset=13)
    check(model, {"a": a, "b": b, "azp": azp}, exact=True)


@pytest.mark.parametrize("group,wzp", [(1, False), (1, True), (3, True), (6, False)])
def test_conv_integer(group, wzp):
    x = u8(1, 6, 9, 7)
    w = (u8 if wzp else s8)(6, 6 // group, 3, 3)
    inits = {"w": w, "xzp": np.array(131, np.uint8)}
    if wzp:
        inits["wzp"] = np.array(9, np.uint8)
    model = one_node("ConvInteger", {"x": x}, inits, "int32", opset=13, group=group,
                     pads=[1, 2, 0, 1], strides=[2, 1])
    check(model, {"x": x}, exact=True)


@pytest.mark.parametrize("pads", [[0, 0, 0, 0], [1, 0, 0, 2]])
@pytest.mark.parametrize("xdtype", ["uint8", "int8"])
def test_conv_integer_runtime_zero_point(pads, xdtype):
    """Dynamic quantization's ConvInteger (a ViT's patch embedding, Whisper's padded
    audio convs): the activation zero point comes at run time; the conv takes the packed
    int8 kernels, padded by a pad kernel that fills in the zero point; exact."""
    x = u8(1, 3, 13, 11) if xdtype == "uint8" else s8(1, 3, 13, 11)
    w, xzp = s8(5, 3, 4, 3), np.array(77 if xdtype == "uint8" else -9, xdtype)
    node = helper.make_node("ConvInteger", ["x", "w", "xzp"], ["y"], pads=pads,
                            strides=[4, 3])
    model = make_model([node], {"x": x, "xzp": xzp}, [("y", "int32")], {"w": w}, opset=13)
    check(model, {"x": x, "xzp": xzp}, exact=True)
    kernels = " ".join(s.kernel for s in kiln.compile(model, db=None, jobs=1).plan.steps)
    assert "int8x4" in kernels and ("pad" in kernels) == any(pads), kernels


@pytest.mark.parametrize("xdtype", ["uint8", "int8"])
@pytest.mark.parametrize("per_channel", [False, True])
def test_qlinear_conv(xdtype, per_channel):
    x = u8(2, 5, 11, 6) if xdtype == "uint8" else s8(2, 5, 11, 6)
    w = s8(7, 5, 3, 2)
    f = 7
    ws = (R.uniform(0.002, 0.02, f).astype(np.float32) if per_channel
          else np.float32(0.01))
    wzp = np.zeros(f, np.int8) if per_channel else np.array(0, np.int8)
    xzp = np.array(121 if xdtype == "uint8" else -7, xdtype)
    inits = {"xs": np.float32(0.05), "xzp": xzp, "w": w, "ws": ws, "wzp": wzp,
             "ys": np.float32(0.4), "yzp": np.array(100 if xdtype == "uint8" else 5, xdtype),
             "b": R.integers(-3000, 3000, f).astype(np.int32)}
    names = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 0, 1, 1], strides=[1, 2])
    model = make_model([node], {"x": x}, [("y", xdtype)], inits, opset=13)
    check(model, {"x": x}, exact=False)


def test_qlinear_matmul_per_column():
    a, b = u8(3, 1, 29), s8(29, 10)
    bs = R.uniform(0.01, 0.03, 10).astype(np.float32)
    inits = {"as": np.float32(0.02), "azp": np.array(128, np.uint8), "b": b, "bs": bs,
             "bzp": np.zeros(10, np.int8), "ys": np.float32(0.1),
             "yzp": np.array(3, np.uint8)}
    node = helper.make_node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys",
                                              "yzp"], ["y"])
    model = make_model([node], {"a": a}, [("y", "uint8")], inits, opset=21)
    check(model, {"a": a}, exact=False)


def test_dynamic_quantize_linear():
    x = f32(3, 1, 10, lo=-3.0, hi=5.0)
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "ys", "yzp"])
    model = make_model([node], {"x": x}, [("y", "uint8"), ("ys", "float32"),
                                          ("yzp", "uint8")], {}, opset=13)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    for outs in (list(run_reference(load_onnx(model), {"x": x}).values()),
                 kiln.compile(model, db=None, jobs=1).run({"x": x})):
        np.testing.assert_array_equal(outs[2], want[2])
        np.testing.assert_allclose(outs[1], want[1], rtol=1e-6)
        assert np.abs(outs[0].astype(int) - want[0].astype(int)).max() <= 1


def _ort(model, feeds):
    from .graph_helpers import ort_run
    return ort_run(model, feeds)[0]


def ms_model(node, inputs, out_dtype, out_shape, inits):
    """A one-node com.microsoft model (its output shape given: onnx cannot infer it)."""
    from onnx import numpy_helper
    from .graph_helpers import _ELEM
    ins = [helper.make_tensor_value_info(k, _ELEM[v.dtype.name], list(v.shape))
           for k, v in inputs.items()]
    out = helper.make_tensor_value_info("y", _ELEM[out_dtype], list(out_shape))
    graph = helper.make_graph([node], "test", ins, [out], initializer=[
        numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), MS_OPSET])
    model.ir_version = 8
    return model


def check_ort(model, feeds):
    """com.microsoft ops (the onnx evaluator has none): onnxruntime within one step."""
    want = _ort(model, feeds)
    for got in (run_reference(load_onnx(model), feeds)["y"],
                kiln.compile(model, db=None, jobs=1).run(feeds)[0]):
        assert got.dtype == want.dtype and got.shape == want.shape
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_qlinear_binary(op, dtype):
    gen = u8 if dtype == "uint8" else s8
    a, b = gen(2, 3, 5), gen(3, 1)
    zp = (lambda v: np.array(v, dtype))
    inits = {"as": np.float32(0.03), "azp": zp(9), "b": b, "bs": np.float32(0.07),
             "bzp": zp(-2 if dtype == "int8" else 250), "cs": np.float32(0.05),
             "czp": zp(4)}
    node = helper.make_node(op, ["a", "as", "azp", "b", "bs", "bzp", "cs", "czp"], ["y"],
                            domain="com.microsoft")
    model = ms_model(node, {"a": a}, dtype, (2, 3, 5), inits)
    check_ort(model, {"a": a})


def test_qlinear_global_average_pool():
    x = u8(2, 3, 5, 7)
    inits = {"xs": np.float32(0.1), "xzp": np.array(60, np.uint8), "ys": np.float32(0.05),
             "yzp": np.array(10, np.uint8)}
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xzp", "ys", "yzp"],
                            ["y"], domain="com.microsoft", channels_last=0)
    model = ms_model(node, {"x": x}, "uint8", (2, 3, 1, 1), inits)
    check_ort(model, {"x": x})


def test_qlinear_concat():
    a, b = s8(1, 2, 3), s8(1, 5, 3)
    inits = {"ys": np.float32(0.1), "yzp": np.array(-1, np.int8),
             "as": np.float32(0.2), "azp": np.array(3, np.int8), "b": b,
             "bs": np.float32(0.05), "bzp": np.array(0, np.int8)}
    node = helper.make_node("QLinearConcat", ["ys", "yzp", "a", "as", "azp", "b", "bs",
                                              "bzp"], ["y"], domain="com.microsoft", axis=1)
    model = ms_model(node, {"a": a}, "int8", (1, 7, 3), inits)
    check_ort(model, {"a": a})


def test_blocked_dequantization():
    """block_size 2 along axis 1 (blocked Q/DQ: graph/onnx/lowbit.py), a runtime input."""
    x = s8(4, 4)
    node = helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1, block_size=2)
    model = make_model([node], {"x": x}, [("y", "float32")],
                       {"s": f32(4, 2, lo=0.1, hi=1.0)}, opset=21)
    check(model, {"x": x}, exact=True)

@pytest.mark.parametrize("group,wzp", [(1, False), (3, True)])
def test_conv_integer_1d(group, wzp):
    """ConvInteger over [N, C, L] (Whisper's and wav2vec2's audio convs, dynamic): run as a
    2-D conv over [N, C, 1, L]; exact against the evaluator, zero points nonzero."""
    x = u8(1, 6, 13)
    w = (u8 if wzp else s8)(9, 6 // group, 3)
    inits = {"w": w, "xzp": np.array(131, np.uint8)}
    if wzp:
        inits["wzp"] = np.array(9, np.uint8)
    model = one_node("ConvInteger", {"x": x}, inits, "int32", opset=13, group=group,
                     pads=[1, 2], strides=[2], dilations=[1])
    check(model, {"x": x}, exact=True)


def test_qlinear_conv_1d():
    x, w = u8(2, 5, 11), s8(7, 5, 3)
    inits = {"xs": np.float32(0.05), "xzp": np.array(121, np.uint8), "w": w,
             # a per-tensor weight scale: the evaluator broadcasts per-channel ones as 2-D only
             "ws": np.float32(0.013), "wzp": np.array(0, np.int8),
             "ys": np.float32(0.4), "yzp": np.array(100, np.uint8),
             "b": R.integers(-3000, 3000, 7).astype(np.int32)}
    names = ["x", "xs", "xzp", "w", "ws", "wzp", "ys", "yzp", "b"]
    node = helper.make_node("QLinearConv", names, ["y"], pads=[1, 0], strides=[2])
    model = make_model([node], {"x": x}, [("y", "uint8")], inits, opset=13)
    check(model, {"x": x}, exact=False)
