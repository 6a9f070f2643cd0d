"""1x1 packed int8 convs over flattened pixels (graph/passes/int8/pointwise.py): the conv and
its elementwise epilogue (offset, requantize, a residual DQ -> Add -> Q) run on [N, C, 1,
H*W] views and a view restores [N, F, H, W]; the compiled model equals, bit for bit, the numpy
reference of the same integer graph without the rewrite (exact accumulation). These NCHW forms
are what the pipeline does with the pixel-major pass (graph/passes/int8/nhwc.py, which takes
these convs first) skipped: NCHW = ("pixel-major int8",)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import fuse_operators, optimize
from kiln.graph.passes.int8.pointwise import flatten_pointwise_int8
from kiln.graph.reference import run_reference

from .graph_helpers import make_model

R = np.random.default_rng(31)
NCHW = ("pixel-major int8",)


def pointwise_feeds(rng, c: int, f: int, h: int, w: int, residual: bool, strides=(1, 1),
                    kernel=(1, 1), pads=(0, 0, 0, 0)) -> dict:
    """Inputs for _pointwise_model: x (scaled to span the int8 range) and, with a residual,
    r of the conv output's shape."""
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    feeds = {"x": rng.standard_normal((1, c, h, w)).astype(np.float32) * 3}
    if residual:
        feeds["r"] = rng.standard_normal((1, f, oh, ow)).astype(np.float32)
    return feeds


def _pointwise_model(xdtype: str, c: int, f: int, h: int, w: int, residual: bool,
                     strides=(1, 1), kernel=(1, 1), pads=(0, 0, 0, 0), groups: int = 1):
    """x -> Q -> DQ -> Conv 1x1 (per-channel int8 W, int32 bias) -> Relu -> Q [-> DQ ->
    Add(DQ(Q(r))) -> Q] -> DQ -> y."""
    x_zp, y_zp = (131, 117) if xdtype == "uint8" else (-9, 4)
    wq = R.integers(-127, 128, size=(f, c // groups) + tuple(kernel)).astype(np.int8)
    ws = R.uniform(0.002, 0.01, f).astype(np.float32)
    xs, ys = np.float32(0.02), np.float32(0.05)
    inits = {"xs": xs, "xzp": np.array(x_zp, xdtype), "wq": wq, "ws": ws,
             "wzp": np.zeros(f, np.int8), "ys": ys, "yzp": np.array(y_zp, xdtype),
             "bq": R.integers(-400, 400, f).astype(np.int32), "bs": (xs * ws).astype(
                 np.float32), "bzp": np.zeros(f, np.int32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs", "bzp"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["conv"], strides=list(strides),
                              pads=list(pads), group=groups),
             helper.make_node("Relu", ["conv"], ["act"]),
             helper.make_node("QuantizeLinear", ["act", "ys", "yzp"], ["yq"])]
    inputs = {"x": ((1, c, h, w), "float32")}
    last = "yq"
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    if residual:
        inputs["r"] = ((1, f, oh, ow), "float32")
        inits.update(rs=np.float32(0.03), rzp=np.array(y_zp + 1, xdtype), zs=np.float32(0.07),
                     zzp=np.array(y_zp - 2, xdtype))
        nodes += [helper.make_node("QuantizeLinear", ["r", "rs", "rzp"], ["rq"]),
                  helper.make_node("DequantizeLinear", ["rq", "rs", "rzp"], ["rf"]),
                  helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["yf"]),
                  helper.make_node("Add", ["yf", "rf"], ["sum"]),
                  helper.make_node("QuantizeLinear", ["sum", "zs", "zzp"], ["zq"])]
        last = "zq"
    scale, zp = ("zs", "zzp") if residual else ("ys", "yzp")
    nodes.append(helper.make_node("DequantizeLinear", [last, scale, zp], ["y"]))
    return make_model(nodes, inputs, ["y"], inits)


@pytest.mark.parametrize("xdtype,c,f,h,w,residual", [
    ("uint8", 7, 13, 5, 3, False),       # channels not a multiple of 4, prime filters
    ("int8", 9, 8, 3, 7, True),          # int8 activations (the flip offset), a residual
    ("uint8", 4, 11, 2, 1, True),        # a column of pixels
])
def test_flattened_pointwise_conv_is_exact(xdtype, c, f, h, w, residual):
    model = _pointwise_model(xdtype, c, f, h, w, residual)
    graph = load_onnx(model)
    plain = optimize(graph, skip=NCHW + ("flatten pointwise int8",))
    flat = flatten_pointwise_int8(plain)
    assert flat is not plain
    convs = [n for n in flat.nodes if n.op == "conv2d_int8x4"]
    assert convs and all(n.outputs[0].shape[2] == 1 for n in convs)
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 2}
    if residual:
        feeds["r"] = R.standard_normal((1, f, h, w)).astype(np.float32)
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(flat, feeds)["y"], want)
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, want)
    anchor = next(g for g in fuse_operators(optimize(graph, skip=NCHW))
                  if any(n.op == "conv2d_int8x4" for n in g.nodes))
    assert any(n.op == "requantize" for n in anchor.nodes)     # the epilogue stays fused


def test_strided_or_padded_convs_are_not_flattened_without_im2col():
    model = _pointwise_model("uint8", 4, 6, 3, 3, False, strides=(2, 2))
    plain = optimize(load_onnx(model), skip=NCHW + ("flatten pointwise int8", "im2col int8"))
    assert any(n.op == "conv2d_int8x4" for n in plain.nodes)
    assert flatten_pointwise_int8(plain) is plain


@pytest.mark.parametrize("xdtype,c,f,h,w,strides,kernel,pads,residual", [
    ("uint8", 5, 7, 9, 6, (2, 2), (3, 3), (1, 1, 1, 1), False),   # zero point in the pads
    ("int8", 3, 16, 7, 7, (1, 1), (3, 2), (1, 0, 1, 1), True),    # uneven window and pads
    ("uint8", 8, 5, 1, 1, (1, 1), (3, 3), (1, 1, 1, 1), False),   # 1x1 spatial
])
def test_im2col_conv_is_exact(xdtype, c, f, h, w, strides, kernel, pads, residual):
    model = _pointwise_model(xdtype, c, f, h, w, residual, strides, kernel, pads)
    plain = optimize(load_onnx(model), skip=NCHW + ("flatten pointwise int8", "im2col int8"))
    rewritten = optimize(load_onnx(model), skip=NCHW)
    ops = rewritten.op_counts()
    assert ops.get("im2col_int8x4") == 1 and ops.get("conv2d_int8x4") == 1
    convs = [n for n in rewritten.nodes if n.op == "conv2d_int8x4"]
    assert convs[0].inputs[1].shape[2:] == (1, 1)
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 2}
    if residual:
        oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
        feeds["r"] = R.standard_normal((1, f, oh, ow)).astype(np.float32)
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(rewritten, feeds)["y"], want)
    np.testing.assert_array_equal(kiln.compile(model, db=None, jobs=1).run(feeds)[0], want)


def test_convs_with_whole_vector_rows_and_deep_taps_stay_direct():
    model = _pointwise_model("uint8", 32, 5, 8, 8, False, (1, 1), (3, 3), (1, 1, 1, 1))
    ops = optimize(load_onnx(model), skip=NCHW).op_counts()
    assert "im2col_int8x4" not in ops and ops.get("conv2d_int8x4") == 1
