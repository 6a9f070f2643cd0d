"""int8 convs in pixel-major layout (graph/passes/int8/nhwc.py): dense packed convs become
im2col_nhwc_int8x4 + matmul_int8x4 over [pixels, K4] columns, depthwise integer convs
depthwise_conv2d_integer_nhwc, with their epilogues in NHWC. The compiled model equals, bit for
bit, the numpy reference of the integer graph without the rewrite (exact accumulation, the
same requantization); the new ops' references agree with the NCHW ops' references."""
from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import FrozenDict, Node, Value
from kiln.graph.passes import fuse_operators, optimize
from kiln.graph.passes.int8.nhwc import nhwc_weight_words, to_pixel_major_int8
from kiln.graph.passes.int8.widen import panel_width
from kiln.graph.reference import IMPLS, run_reference
from kiln.te.ops.int8 import core as tq
from kiln.te.tensor import placeholder

from .graph_helpers import make_model
from .test_int8_pointwise import _pointwise_model

R = np.random.default_rng(47)
SKIP = ("pixel-major int8",)


def _depthwise_model(xdtype: str, c: int, h: int, w: int, kernel, strides, pads):
    """x -> Q -> DQ -> depthwise Conv (per-channel int8 W, int32 bias) -> Clip -> Q -> DQ."""
    x_zp, y_zp = (129, 7) if xdtype == "uint8" else (-11, -3)
    ws = R.uniform(0.005, 0.03, c).astype(np.float32)
    xs = np.float32(0.03)
    inits = {"xs": xs, "xzp": np.array(x_zp, xdtype),
             "wq": R.integers(-127, 128, size=(c, 1) + tuple(kernel)).astype(np.int8),
             "ws": ws, "wzp": np.zeros(c, np.int8), "ys": np.float32(0.04),
             "yzp": np.array(y_zp, xdtype), "bq": R.integers(-300, 300, c).astype(np.int32),
             "bs": (xs * ws).astype(np.float32), "bzp": np.zeros(c, np.int32),
             "lo": np.float32(0.0), "hi": np.float32(2.5)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xf"]),
             helper.make_node("DequantizeLinear", ["wq", "ws", "wzp"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["bq", "bs", "bzp"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["conv"], group=c,
                              strides=list(strides), pads=list(pads)),
             helper.make_node("Clip", ["conv", "lo", "hi"], ["act"]),
             helper.make_node("QuantizeLinear", ["act", "ys", "yzp"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["y"])]
    return make_model(nodes, {"x": ((1, c, h, w), "float32")}, ["y"], inits)


def _check_exact(model, feeds, want_ops: set[str], steps: float = 0.0):
    """The pixel-major graph's reference equals the NCHW one's; the compiled model equals it
    too, or (`steps`, for float ops between the convs whose rounding order may differ at a
    tie, e.g. an average pool) lies within that many of the output's steps (0.05)."""
    graph = load_onnx(model)
    plain = optimize(graph, skip=SKIP)
    nhwc = optimize(graph)
    ops = nhwc.op_counts()
    assert want_ops <= set(ops), ops
    assert not {"conv2d_int8x4", "conv2d_integer"} & set(ops), ops
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(nhwc, feeds)["y"], want)
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=steps * 0.05 * 1.0001)
    return nhwc


@pytest.mark.parametrize("xdtype,c,f,h,w,strides,kernel,pads,residual", [
    ("uint8", 7, 13, 5, 3, (1, 1), (1, 1), (0, 0, 0, 0), False),   # 1x1, primes
    ("int8", 9, 8, 3, 7, (1, 1), (1, 1), (0, 0, 0, 0), True),      # int8 x, a residual
    ("uint8", 5, 7, 9, 6, (2, 2), (3, 3), (1, 1, 1, 1), False),    # zero point in the pads
    ("int8", 3, 17, 7, 7, (1, 1), (3, 2), (1, 0, 1, 1), True),     # uneven window and pads
    ("uint8", 8, 5, 1, 1, (1, 1), (3, 3), (1, 1, 1, 1), False),    # 1x1 spatial
    ("uint8", 12, 24, 4, 5, (2, 1), (1, 1), (0, 0, 0, 0), True),   # strided 1x1, 24 -> 8-panels
])
def test_dense_conv_as_pixel_major_gemm_is_exact(xdtype, c, f, h, w, strides, kernel, pads,
                                                 residual):
    model = _pointwise_model(xdtype, c, f, h, w, residual, strides, kernel, pads)
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 2}
    if residual:
        oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
        feeds["r"] = R.standard_normal((1, f, oh, ow)).astype(np.float32)
    window = kernel != (1, 1) or strides != (1, 1) or any(pads)
    nhwc = _check_exact(model, feeds, {"matmul_int8x4"}
                        | ({"im2col_nhwc_int8x4"} if window else set()))
    if window and c <= 4:      # one word of channels (a stem): padded words, tap-row runs
        assert any(n.op == "im2col_nhwc_int8x4" and n.attr("split_taps") for n in nhwc.nodes)
        assert "pad" in nhwc.op_counts() or not any(pads)
    anchor = next(g for g in fuse_operators(nhwc)
                  if any(n.op == "matmul_int8x4" for n in g.nodes))
    assert any(n.op == "requantize" for n in anchor.nodes)     # the epilogue stays fused
    if residual:   # the residual DQ -> Add -> Q too
        assert any(n.op == "quantize_linear" for n in anchor.nodes)


@pytest.mark.parametrize("xdtype,c,f,groups,h,w,kernel,strides,pads,residual", [
    ("uint8", 12, 9, 3, 5, 7, (3, 3), (1, 1), (1, 1, 1, 1), False),   # zero point in pads
    ("int8", 16, 6, 2, 6, 5, (3, 3), (2, 2), (1, 0, 1, 1), True),     # int8 x, a residual
    ("uint8", 8, 10, 2, 3, 3, (1, 1), (1, 1), (0, 0, 0, 0), False),   # 1x1, no window
])
def test_grouped_conv_as_per_group_gemms_is_exact(xdtype, c, f, groups, h, w, kernel,
                                                  strides, pads, residual):
    """A grouped (not depthwise) int8 conv: per group a slice of the NHWC words, a GEMM
    with the group's weight, the outputs concatenated; bit-identical to conv2d_integer."""
    model = _pointwise_model(xdtype, c, f, h, w, residual, strides, kernel, pads, groups)
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 2}
    if residual:
        oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
        ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
        feeds["r"] = R.standard_normal((1, f, oh, ow)).astype(np.float32)
    nhwc = _check_exact(model, feeds, {"matmul_int8x4", "concat"})
    assert nhwc.op_counts()["matmul_int8x4"] == groups


@pytest.mark.parametrize("xdtype,c,h,w,kernel,strides,pads", [
    ("uint8", 13, 7, 5, (3, 3), (1, 1), (1, 1, 1, 1)),     # prime channels
    ("int8", 8, 9, 9, (3, 3), (2, 2), (1, 1, 1, 1)),       # stride 2, int8 activations
    ("uint8", 3, 1, 6, (3, 2), (1, 1), (1, 0, 1, 1)),      # one row, uneven window
])
def test_depthwise_conv_nhwc_is_exact(xdtype, c, h, w, kernel, strides, pads):
    model = _depthwise_model(xdtype, c, h, w, kernel, strides, pads)
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 2}
    _check_exact(model, feeds, {"depthwise_conv2d_integer_nhwc"})


def _two_conv_model(c: int, f: int, h: int, w: int, pool: bool = False):
    """x -> Q -> DQ -> Conv 3x3 (pads 1) -> Relu -> Q -> DQ [-> MaxPool 3x3/2 (pads 1) -> Q ->
    DQ] -> Conv 1x1 -> Q -> DQ -> y."""
    inits = {"xs": np.float32(0.02), "xzp": np.array(128, np.uint8), "ys": np.float32(0.03),
             "yzp": np.array(3, np.uint8), "zs": np.float32(0.05),
             "zzp": np.array(121, np.uint8)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xzp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "xs", "xzp"], ["xf"])]
    for k, (src, dst, cin, cout, kernel, scale) in enumerate(
            [("xf", "yq", c, f, 3, "ys"), ("yf", "zq", f, f + 3, 1, "zs")]):
        inits[f"w{k}"] = R.integers(-127, 128, size=(cout, cin, kernel, kernel)).astype(np.int8)
        inits[f"ws{k}"] = R.uniform(0.002, 0.01, cout).astype(np.float32)
        inits[f"wzp{k}"] = np.zeros(cout, np.int8)
        nodes += [helper.make_node("DequantizeLinear", [f"w{k}", f"ws{k}", f"wzp{k}"],
                                   [f"wf{k}"], axis=0),
                  helper.make_node("Conv", [src, f"wf{k}"], [f"conv{k}"],
                                   pads=[kernel // 2] * 4),
                  helper.make_node("Relu", [f"conv{k}"], [f"act{k}"]),
                  helper.make_node("QuantizeLinear", [f"act{k}", scale, scale[0] + "zp"],
                                   [dst])]
        if k == 0 and pool:
            nodes += [helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["yd"]),
                      helper.make_node("MaxPool", ["yd"], ["pooled"], kernel_shape=[3, 3],
                                       strides=[2, 2], pads=[1, 1, 1, 1]),
                      helper.make_node("QuantizeLinear", ["pooled", "ys", "yzp"], ["pq"]),
                      helper.make_node("DequantizeLinear", ["pq", "ys", "yzp"], ["yf"])]
        elif k == 0:
            nodes.append(helper.make_node("DequantizeLinear", ["yq", "ys", "yzp"], ["yf"]))
    nodes.append(helper.make_node("DequantizeLinear", ["zq", "zs", "zzp"], ["y"]))
    return make_model(nodes, {"x": ((1, c, h, w), "float32")}, ["y"], inits)


def test_chained_convs_keep_activations_pixel_major():
    """Two pixel-major convs in a row: the transposes back and forth between them cancel,
    so the second packs the first's NHWC output directly; one transpose into NHWC at the
    input and one back at the output remain."""
    model = _two_conv_model(5, 8, 6, 5)
    feeds = {"x": R.standard_normal((1, 5, 6, 5)).astype(np.float32)}
    nhwc = _check_exact(model, feeds, {"matmul_int8x4", "im2col_nhwc_int8x4"})
    ops = nhwc.op_counts()
    assert ops["matmul_int8x4"] == 2 and ops.get("transpose") == 2, ops
    # the 8-channel uint8 activation is read as words in place: a view, no kernel
    assert ops.get("bitcast_int8x4") == 1
    words = next(n for n in nhwc.nodes if n.op == "bitcast_int8x4").outputs[0]
    compiled = kiln.compile(model, db=None, jobs=1)
    spec = next(b for b in compiled.plan.buffers if b.name == words.name)
    assert spec.kind == "alias" and spec.dtype == "int32"


def test_max_pool_between_convs_pools_in_nhwc():
    model = _two_conv_model(3, 12, 9, 7, pool=True)
    feeds = {"x": R.standard_normal((1, 3, 9, 7)).astype(np.float32)}
    nhwc = _check_exact(model, feeds, {"matmul_int8x4", "max_pool2d"})
    pool = next(n for n in nhwc.nodes if n.op == "max_pool2d")
    assert pool.inputs[0].shape == (1, 1, 9, 7, 12)      # [N, 1, H, W, C]: NHWC as a block
    assert nhwc.op_counts().get("transpose") == 2


def _node(op, ins, out_shape, out_dtype, **attrs):
    return Node(op, tuple(ins), (Value("out", out_shape, out_dtype),), FrozenDict(attrs), op)


def test_im2col_nhwc_reference_matches_the_nchw_columns():
    x = R.integers(-2 ** 31, 2 ** 31, size=(2, 3, 7, 5), dtype=np.int64).astype(np.int32)
    attrs = {"kernel": (3, 2), "strides": (2, 1), "dilations": (1, 2), "pads": (1, 2, 0, 1),
             "pad_word": -77}
    nchw = IMPLS["im2col_int8x4"](_node("im2col_int8x4", [], (2, 18, 3, 5), "int32",
                                        **attrs), x)
    out = IMPLS["im2col_nhwc_int8x4"](_node("im2col_nhwc_int8x4", [], (2, 3, 5, 6, 3),
                                            "int32", **attrs), x.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(out.reshape(2, 3, 5, 18).transpose(0, 3, 1, 2), nchw)


def test_depthwise_nhwc_reference_matches_the_nchw_conv():
    x = R.integers(0, 256, size=(1, 5, 6, 7)).astype(np.uint8)
    w = R.integers(-128, 128, size=(5, 1, 3, 3)).astype(np.int8)
    attrs = {"strides": (2, 1), "dilations": (1, 1), "pads": (1, 1, 1, 0)}
    want = IMPLS["conv2d_integer"](_node("conv2d_integer", [], (1, 5, 3, 5), "int32",
                                         groups=5, **attrs), x, w, np.uint8(201))
    got = IMPLS["depthwise_conv2d_integer_nhwc"](
        _node("depthwise_conv2d_integer_nhwc", [], (1, 3, 5, 5), "int32", pad_value=201,
              **attrs), x.transpose(0, 2, 3, 1), w[:, 0].transpose(1, 2, 0))
    np.testing.assert_array_equal(got.transpose(0, 3, 1, 2), want)


def test_nhwc_weight_words_meet_the_columns():
    words = R.integers(-2 ** 31, 2 ** 31, size=(5, 3, 2, 3), dtype=np.int64).astype(np.int32)
    w = nhwc_weight_words(words)
    assert w.shape == (2 * 3 * 3, 5)
    assert w[(1 * 3 + 2) * 3 + 1, 4] == words[4, 1, 1, 2]      # row (ry * KW + rx) * C4 + c4


def test_no_int8_convs_is_identity():
    model = _pointwise_model("uint8", 4, 4, 3, 3, False)
    plain = optimize(load_onnx(model), skip=SKIP + ("pack integer kernels",))
    assert to_pixel_major_int8(plain) is plain


def test_panels_follow_the_column_count():
    assert (panel_width(24), panel_width(144), panel_width(20), panel_width(32)) == \
        (8, 16, 16, 16)


def test_short_k_int8_gemm_default_tiles_divide_the_rows():
    """A pixel-major 1x1 conv over 24 channels sums 6 words: a GEMM, not a window, so the
    default cache tile divides the 3136 rows (no guard in the register tile)."""
    a = placeholder((3136, 6), "int32", "a")
    w = placeholder((9, 6, 2, 16), "int32", "w")
    out = tq.matmul_int8x4(a, w, n=144)
    config = SearchSpace(Task("mm", (out,), (a, w, out)), threads=1).default_config()
    mid, inner = config["s0/tile/0"]
    assert 3136 % (mid * inner) == 0 and inner > 1


def _qdq(src, scale, dst):
    """QuantizeLinear -> DequantizeLinear of `src` with the scale named `scale` and the zero
    point named by its first letter + "zp"."""
    zp = scale[0] + "zp"
    return [helper.make_node("QuantizeLinear", [src, scale, zp], [dst + "q"]),
            helper.make_node("DequantizeLinear", [dst + "q", scale, zp], [dst])]


def _int8_conv(inits, k, src, dst, cin, cout, kernel):
    """A Conv of `src` by the k-th int8 weight (per-channel scales, zero points 0), its
    initializers added to `inits`."""
    inits[f"w{k}"] = R.integers(-127, 128, size=(cout, cin, kernel, kernel)).astype(np.int8)
    inits[f"ws{k}"] = R.uniform(0.002, 0.01, cout).astype(np.float32)
    inits[f"wzp{k}"] = np.zeros(cout, np.int8)
    return [helper.make_node("DequantizeLinear", [f"w{k}", f"ws{k}", f"wzp{k}"],
                             [f"wf{k}"], axis=0),
            helper.make_node("Conv", [src, f"wf{k}"], [dst], pads=[kernel // 2] * 4)]


def _silu_se_model(c: int, f: int, h: int, w: int):
    """x -> Q -> DQ -> Conv 3x3 -> Q -> DQ -> SiLU (Sigmoid -> Q -> DQ -> Mul, all QDQ) ->
    squeeze-excite (GlobalAveragePool -> Q -> DQ -> Sigmoid -> Q -> DQ -> Mul) -> Q -> DQ ->
    Conv 1x1 -> Q -> DQ -> y: EfficientNet's float detours between two int8 convs, each
    with its own scale and a nonzero zero point."""
    scales = {"xs": (0.02, 128), "ys": (0.03, 3), "ss": (1 / 255, 0), "ms": (0.025, 9),
              "ps": (0.02, 5), "gs": (1 / 250, 2), "es": (0.021, 11), "zs": (0.05, 121)}
    inits = {}
    for name, (scale, zp) in scales.items():
        inits[name], inits[name[0] + "zp"] = np.float32(scale), np.array(zp, np.uint8)

    qdq, conv = _qdq, functools.partial(_int8_conv, inits)

    nodes = (qdq("x", "xs", "xf") + conv(0, "xf", "c0", c, f, 3) + qdq("c0", "ys", "yf")
             + [helper.make_node("Sigmoid", ["yf"], ["sig"])] + qdq("sig", "ss", "sf")
             + [helper.make_node("Mul", ["yf", "sf"], ["silu"])] + qdq("silu", "ms", "mf")
             + [helper.make_node("GlobalAveragePool", ["mf"], ["pool"])]
             + qdq("pool", "ps", "pf") + [helper.make_node("Sigmoid", ["pf"], ["gate"])]
             + qdq("gate", "gs", "gf") + [helper.make_node("Mul", ["mf", "gf"], ["se"])]
             + qdq("se", "es", "ef") + conv(1, "ef", "c1", f, f + 3, 1) + qdq("c1", "zs", "y"))
    return make_model(nodes, {"x": ((1, c, h, w), "float32")}, ["y"], inits)


def test_float_detours_between_convs_run_pixel_major():
    """QDQ SiLU and squeeze-excite between two int8 convs: the per-tensor (de)quantizes,
    the sigmoid, the broadcast gate multiply and the global pool take the NHWC activations
    as they are (graph/passes/layout/sink.py, quantized), so no transpose is left between
    the convs; bit-identical to the NCHW detour."""
    model = _silu_se_model(5, 12, 7, 6)
    feeds = {"x": R.standard_normal((1, 5, 7, 6)).astype(np.float32)}
    # (the SiLU and the gate's sigmoid are byte tables: graph/passes/int8/tables.py)
    nhwc = _check_exact(model, feeds, {"matmul_int8x4", "lookup_table", "reduce_mean"})
    assert nhwc.op_counts().get("transpose") == 2, nhwc.op_counts()   # in and out only
    pool = next(n for n in nhwc.nodes if n.op == "reduce_mean")
    assert pool.inputs[0].shape == (1, 7, 6, 12) and pool.attr("axes") == (1, 2)


def _concat_pool_model(c: int, f1: int, f2: int, h: int, w: int):
    """Two int8 convs of x -> QDQ each -> Concat (channels) -> QDQ -> AveragePool 2x2/2
    (pads, count_include_pad 0) -> QDQ -> Conv 1x1 -> QDQ -> y: DenseNet's and SqueezeNet's
    concats and transitions between int8 convs."""
    inits = {}
    for name, (scale, zp) in {"xs": (0.02, 128), "as": (0.03, 3), "bs": (0.04, 250),
                              "cs": (0.035, 7), "ps": (0.03, 1), "zs": (0.05, 121)}.items():
        inits[name], inits[name[0] + "zp"] = np.float32(scale), np.array(zp, np.uint8)

    qdq, conv = _qdq, functools.partial(_int8_conv, inits)

    nodes = (qdq("x", "xs", "xf") + conv(0, "xf", "a", c, f1, 3) + qdq("a", "as", "af")
             + conv(1, "xf", "b", c, f2, 1) + qdq("b", "bs", "bf")
             + [helper.make_node("Concat", ["af", "bf"], ["cat"], axis=1)]
             + qdq("cat", "cs", "cf")
             + [helper.make_node("AveragePool", ["cf"], ["pool"], kernel_shape=[2, 2],
                                 strides=[2, 2], pads=[0, 0, 1, 1])]
             + qdq("pool", "ps", "pf") + conv(2, "pf", "c2", f1 + f2, 5, 1)
             + qdq("c2", "zs", "y"))
    return make_model(nodes, {"x": ((1, c, h, w), "float32")}, ["y"], inits)


def test_concat_and_pool_between_convs_run_pixel_major():
    """A channel concat of two int8 convs and an average pool after it run on the NHWC
    activations (the concat along the last axis, the pool over the [N, 1, H, W, C] view):
    no transpose between the convs; bit-identical to the NCHW form."""
    model = _concat_pool_model(5, 8, 4, 7, 5)
    feeds = {"x": R.standard_normal((1, 5, 7, 5)).astype(np.float32)}
    # the float average pool rounds like the NCHW form's compiled pool, not always like the
    # reference's at ties: one output step
    nhwc = _check_exact(model, feeds, {"matmul_int8x4", "concat", "avg_pool2d"}, steps=1)
    assert nhwc.op_counts().get("transpose") == 2, nhwc.op_counts()
    cat = next(n for n in nhwc.nodes if n.op == "concat")
    assert cat.attr("axis") == 3 and cat.outputs[0].shape == (1, 7, 5, 12)
