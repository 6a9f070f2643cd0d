"""ONNX ConvTranspose: the numpy reference executor and compiled models vs onnxruntime, the
graph it becomes, and the errors for bad attributes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.graph.compile.model import compile_model, prepare_graph
from kiln.graph.onnx.load import ConvertContext, load_onnx
from kiln.graph.ir import Value
from kiln.graph.onnx.core import CONVERTERS
from kiln.te.errors import ModelFormatError, UnsupportedOperatorError

from .graph_helpers import assert_matches_ort, make_model, ort_run

R = np.random.default_rng(11)


def f32(*shape):
    return R.uniform(-1.0, 1.0, size=shape).astype(np.float32)


def convt(x, w, b=None, weight_input=False, **attrs):
    """A one-node ConvTranspose model (weight an initializer unless `weight_input`)."""
    names = ["x", "w"] + (["b"] if b is not None else [])
    node = helper.make_node("ConvTranspose", names, ["y"], name="convt_0", **attrs)
    feeds = {"x": x, "w": w} if weight_input else {"x": x}
    inits = {} if weight_input else {"w": w}
    if b is not None:
        inits["b"] = b
    return make_model([node], feeds, ["y"], inits), feeds


def check(model, feeds, tol=1e-4):
    """Reference executor and compiled model both agree with onnxruntime."""
    assert_matches_ort(model, feeds, rtol=tol, atol=tol)
    want = ort_run(model, feeds)
    got = compile_model(model, jobs=1).run(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


IMG = f32(2, 4, 5, 7)
CASES = {
    "plain": convt(IMG, f32(4, 3, 3, 3)),
    "bias": convt(IMG, f32(4, 3, 3, 3), f32(3)),
    "stride2-pads": convt(IMG, f32(4, 6, 4, 4), f32(6), strides=[2, 2], pads=[1, 1, 1, 1]),
    "stride3-asym-pads": convt(IMG, f32(4, 5, 3, 2), strides=[3, 3], pads=[2, 0, 1, 1]),
    "stride-mixed": convt(IMG, f32(4, 2, 3, 3), strides=[2, 1], pads=[0, 1, 1, 0]),
    "output-padding": convt(IMG, f32(4, 3, 3, 3), strides=[2, 3], pads=[1, 1, 1, 1],
                            output_padding=[1, 2]),
    "dilations": convt(IMG, f32(4, 3, 3, 2), strides=[1, 1], dilations=[2, 3]),
    "dilations-stride": convt(IMG, f32(4, 3, 3, 3), f32(3), strides=[2, 3], dilations=[3, 2],
                              pads=[1, 2, 0, 1]),
    "group2": convt(IMG, f32(4, 3, 3, 3), f32(6), strides=[2, 2], pads=[1, 0, 1, 0], group=2),
    "depthwise": convt(IMG, f32(4, 1, 4, 4), f32(4), strides=[2, 2], pads=[1, 1, 1, 1],
                       group=4),
    "depthwise-multiplier": convt(IMG, f32(4, 2, 3, 3), strides=[3, 2], group=4),
    "kernel-smaller-than-stride": convt(IMG, f32(4, 3, 2, 1), strides=[3, 3]),
    "kernel-1x1": convt(IMG, f32(4, 3, 1, 1), f32(3)),
    "pads-crop-past-kernel": convt(IMG, f32(4, 3, 2, 2), strides=[3, 3], pads=[5, 4, 1, 0]),
    "same-upper": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2], auto_pad="SAME_UPPER"),
    "same-lower": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2], auto_pad="SAME_LOWER"),
    "same-upper-odd-kernel-stride3": convt(IMG, f32(4, 3, 4, 4), strides=[3, 3],
                                           auto_pad="SAME_UPPER"),
    "same-upper-short-kernel": convt(IMG, f32(4, 3, 1, 1), strides=[3, 3],
                                     auto_pad="SAME_UPPER"),
    "valid": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2], auto_pad="VALID"),
    "output-shape": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2], output_shape=[10, 14]),
    "output-shape-odd": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2], output_shape=[9, 12]),
    "output-shape-past-full": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2],
                                    output_shape=[12, 16]),
    "output-shape-same-upper": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2],
                                     output_shape=[10, 13], auto_pad="SAME_UPPER"),
    "output-shape-ignores-pads": convt(IMG, f32(4, 3, 3, 3), strides=[2, 2], pads=[2, 2, 2, 2],
                                       output_shape=[10, 14]),
    "one-pixel": convt(f32(1, 3, 1, 1), f32(3, 2, 3, 3), strides=[2, 2]),
    "primes": convt(f32(1, 7, 11, 13), f32(7, 5, 5, 3), f32(5), strides=[3, 2],
                    pads=[2, 1, 1, 2], output_padding=[1, 1]),
    "weight-input": convt(IMG, f32(4, 3, 4, 4), f32(3), weight_input=True, strides=[2, 2],
                          pads=[1, 1, 1, 1]),
    "weight-input-group": convt(IMG, f32(4, 1, 3, 3), weight_input=True, strides=[2, 2],
                                group=4),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_conv_transpose_matches_onnxruntime(case):
    check(*CASES[case])


def test_the_weight_relayout_is_folded_for_a_constant_weight_only():
    const_graph, _ = prepare_graph(CASES["stride2-pads"][0])
    runtime_graph, groups = prepare_graph(CASES["weight-input"][0])
    assert "conv_transpose_weight" not in const_graph.op_counts()
    assert const_graph.op_counts()["conv2d_transpose"] == 1
    assert "conv_transpose_weight" in runtime_graph.op_counts()
    # the runtime re-layout is its own kernel, not recomputed inside the conv's loops
    assert [g.ops for g in groups][0] == ("conv_transpose_weight",)


def test_a_dense_phase_weight_is_block_packed():
    graph = load_onnx(CASES["stride2-pads"][0])
    relayout = next(n for n in graph.nodes if n.op == "conv_transpose_weight")
    assert relayout.attrs["block"] == 8          # 2 * 2 phases * 6 filters = 24 = 3 x 8
    assert relayout.outputs[0].shape == (3, 4, 2, 2, 8)
    grouped = load_onnx(CASES["group2"][0])
    assert next(n for n in grouped.nodes if n.op == "conv_transpose_weight").attrs["block"] == 0


def _unet_like():
    """Conv (+bias, relu) -> ConvTranspose 16->16 stride 2 (+bias) -> relu -> Conv stride 2
    -> depthwise ConvTranspose (+bias) -> add the first conv's output."""
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("ConvTranspose", ["r1", "wt1", "bt1"], ["t1"], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["t1"], ["r2"]),
        helper.make_node("Conv", ["r2", "w2"], ["c2"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("ConvTranspose", ["c2", "wt2", "bt2"], ["t2"], strides=[1, 1],
                         pads=[1, 1, 1, 1], group=16),
        helper.make_node("Add", ["t2", "r1"], ["y"]),
    ]
    inits = {"w1": f32(16, 3, 3, 3), "b1": f32(16), "wt1": f32(16, 16, 4, 4), "bt1": f32(16),
             "w2": f32(16, 16, 3, 3), "wt2": f32(16, 1, 3, 3), "bt2": f32(16)}
    x = f32(1, 3, 9, 10)
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def test_a_model_mixing_conv_and_conv_transpose_compiles_in_the_blocked_layout():
    model, feeds = _unet_like()
    graph, _ = prepare_graph(model)
    ops = graph.op_counts()
    assert ops.get("conv2d_nchwc", 0) == 2 and ops["conv2d_transpose"] == 2
    # a transposed conv reads NCHW: each blocked conv output converts back before it
    assert ops["from_blocked"] >= 2
    want = ort_run(model, feeds)[0]
    for layout in ("nchwc", "nchw"):
        got = compile_model(model, jobs=1, layout=layout).run(feeds)[0]
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4, err_msg=layout)


@st.composite
def conv_transpose_models(draw):
    """A random ConvTranspose: channels, groups, kernel, strides, dilations, pads or auto_pad
    or output_shape, output_padding, bias."""
    group = draw(st.sampled_from([1, 1, 2, 3]))
    c = group * draw(st.integers(1, 3))
    per_group = draw(st.integers(1, 3))
    h, w = draw(st.integers(1, 7)), draw(st.integers(1, 7))
    kh, kw = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    sh, sw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    dh, dw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    attrs = {"strides": [sh, sw], "dilations": [dh, dw], "group": group}
    oph, opw = draw(st.integers(0, sh - 1)), draw(st.integers(0, sw - 1))
    if oph or opw:
        attrs["output_padding"] = [oph, opw]
    full = [s * (i - 1) + o + (k - 1) * d + 1 for s, i, o, k, d in
            zip((sh, sw), (h, w), (oph, opw), (kh, kw), (dh, dw))]
    mode = draw(st.sampled_from(["pads", "pads", "auto", "output_shape"]))
    if mode == "pads":
        pads = [draw(st.integers(0, (f - 1) // 2)) for f in full]
        attrs["pads"] = pads + [draw(st.integers(0, f - 1 - 2 * p)) for f, p in zip(full, pads)]
    elif mode == "auto":
        attrs["auto_pad"] = draw(st.sampled_from(["SAME_UPPER", "SAME_LOWER", "VALID"]))
    else:
        attrs["output_shape"] = [draw(st.integers(max(1, f // 2), f + s - 1 - o))
                                 for f, s, o in zip(full, (sh, sw), (oph, opw))]
    bias = f32(group * per_group) if draw(st.booleans()) else None
    return convt(f32(1, c, h, w), f32(c, per_group, kh, kw), bias, **attrs)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_transpose_models())
def test_random_conv_transposes_reference_matches_onnxruntime(case):
    assert_matches_ort(*case, rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conv_transpose_models())
def test_random_conv_transposes_compile_and_match_onnxruntime(case):
    check(*case)


# -- errors ------------------------------------------------------------------------------------

def _load(x, w, **attrs):
    return load_onnx(convt(x, w, **attrs)[0])


def test_a_4d_conv_transpose_is_unsupported_naming_the_node():
    # 3-D runs as a 3-D conv: tests/graph/test_conv_transpose_3d.py
    with pytest.raises(UnsupportedOperatorError, match=r"convt_0.*ConvTranspose.*4-D"):
        _load(f32(1, 2, 3, 3, 3, 3), f32(2, 2, 2, 2, 2, 2))


# a 1-D ConvTranspose runs as a 2-D one over [N, C, 1, L]: tests/graph/test_onnx_ops_more.py


@pytest.mark.parametrize("attrs, words", [
    ({"output_shape": [20, 30]}, r"convt_0.*output_shape \[20, 30\] does not fit"),
    ({"auto_pad": "SAME"}, r"convt_0.*unknown auto_pad 'SAME'.*SAME_UPPER"),
    ({"kernel_shape": [2, 2]}, r"convt_0.*kernel_shape \[2, 2\].*\[3, 3\]"),
    ({"pads": [3, 0, 3, 0]}, r"convt_0.*conv2d_transpose.*crop the whole output"),
    # caught by ONNX shape inference before conversion, still naming the node
    ({"output_shape": [1, 5, 9, 11]}, r"convt_0.*output_shape has incorrect size"),
    ({"strides": [0, 1]}, r"convt_0.*strides must only contain positive"),
], ids=["output-shape-too-big", "auto-pad-name", "kernel-shape", "pads-crop-all",
        "output-shape-rank", "zero-stride"])
def test_bad_attributes_give_clear_errors(attrs, words):
    with pytest.raises(ModelFormatError, match=words):
        _load(f32(1, 2, 2, 2), f32(2, 3, 3, 3), **attrs)


def _convert(x_shape, w_shape, bias=False, **attrs):
    """The ConvTranspose converter alone (load_onnx runs ONNX shape inference first, which
    rejects some of these models before the converter sees them); returns its context."""
    ctx = ConvertContext(17)
    ctx.node_name, ctx.op_type, ctx.output_names = "convt_0", "ConvTranspose", ["y"]
    x = Value("x", x_shape, "float32")
    w = ctx.const(np.zeros(w_shape, np.float32), name="w")
    b = ctx.const(np.zeros(w_shape[1], np.float32), name="b") if bias else None
    ctx.values["y"] = CONVERTERS["ConvTranspose"](ctx, x, w, b, **attrs)
    return ctx


@pytest.mark.parametrize("attrs, words", [
    ({"pads": (1, 1, 1, 1), "auto_pad": "SAME_UPPER"}, r"pads \[1, 1, 1, 1\] cannot be used "
                                                      r"with auto_pad=SAME_UPPER"),
    ({"strides": (0, 1)}, r"strides \[0, 1\] must be 2 ints >= 1"),
    ({"output_padding": (1,)}, r"output_padding \[1\] must be 2 ints >= 0"),
    ({"pads": (1, 1, 1)}, r"pads \[1, 1, 1\] must be 4 non-negative"),
    ({"output_shape": (1, 5, 9, 11)}, r"output_shape \[1, 5, 9, 11\] must give the 2 spatial"),
    ({"group": 3}, r"weight \[2, 3, 3, 3\] must be \[C=2, M/group, kH, kW\].*group=3"),
], ids=["pads-and-auto-pad", "zero-stride", "output-padding-length", "pads-length",
        "output-shape-rank", "group"])
def test_the_converter_names_the_node_and_the_bad_attribute(attrs, words):
    with pytest.raises(ModelFormatError, match=r"node 'convt_0' \(ConvTranspose\): " + words):
        _convert((1, 2, 2, 2), (2, 3, 3, 3), **attrs)


def test_the_converter_emits_the_relayout_the_conv_and_the_bias_add():
    ctx = _convert((1, 2, 4, 4), (2, 3, 3, 3), bias=True, strides=(2, 2), output_shape=(8, 8))
    assert [n.op for n in ctx.nodes] == ["conv_transpose_weight", "conv2d_transpose",
                                         "reshape", "add"]
    conv = ctx.nodes[1]
    # full output 9 rows; 8 asked: one pixel of padding, at the beginning (not SAME_UPPER)
    assert conv.attrs["pads"] == (1, 1, 0, 0) and conv.attrs["output_padding"] == (0, 0)
    assert ctx.values["y"].shape == (1, 3, 8, 8)
