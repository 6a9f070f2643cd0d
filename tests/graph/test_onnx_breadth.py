"""Error classes and operators of the ONNX node suite's breadth work, each against onnx's
reference evaluator on small one-node models with awkward shapes (1, primes, zero-size)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import kiln

from .graph_helpers import one_node_model

R = np.random.default_rng(23)


def one_node(op, feeds, outputs=1, inits=None, opset=24, **attrs):
    return one_node_model(op, feeds, inits, opset=opset, n_out=outputs, ir_version=10, **attrs)


def check(m, feeds, rtol=1e-5, atol=1e-6):
    """Kiln's compiled model against onnx's reference evaluator (dtype, shape, values)."""
    want = ReferenceEvaluator(m).run(None, feeds)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


@pytest.mark.parametrize("base,exp", [("int32", "int32"), ("int64", "float32")])
def test_integer_pow(base, exp):
    x = R.integers(0 if exp.startswith("float") else -7, 8, (3, 5)).astype(base)
    y = (R.integers(0, 6, (5,)) + (0.5 if exp.startswith("float") else 0)).astype(exp)
    check(one_node("Pow", {"x": x, "y": y}, opset=15), {"x": x, "y": y})


@pytest.mark.parametrize("base,exp", [(np.float32(2.0), "float32"), (np.float32(1.5), "int64"),
                                      (np.int32(3), "int32"), (np.int64(2), "float32")])
def test_pow_of_a_constant_scalar_base(base, exp):
    """A scalar initializer as the base (it reaches the lowering as a Python number, not a
    tensor) with an exponent tensor of the same or another type."""
    y = (R.integers(0, 5, (2, 7)) + (0.25 if exp.startswith("float") else 0)).astype(exp)
    check(one_node("Pow", {"y": y}, inits={"b": np.array(base)}, order=["b", "y"], opset=15),
          {"y": y})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceProd", "ReduceLogSumExp",
                                "ReduceL2"])
def test_reduce_over_an_empty_set_gives_the_identity(op):
    """A zero-length reduced axis: the reducer's identity; the kernel reads no input."""
    x = np.zeros((2, 0, 7), np.float32)
    axes = np.array([1], np.int64)
    check(one_node(op, {"x": x}, inits={"axes": axes}, opset=18, keepdims=1), {"x": x})


def test_zero_size_outputs_and_buffers():
    """Zero-size outputs (no kernel work), next to a non-empty one in the same model."""
    x = R.standard_normal((0, 5)).astype(np.float32)
    check(one_node("ReduceSum", {"x": x}, inits={"axes": np.array([1], np.int64)},
                   opset=18, keepdims=0), {"x": x})
    y = R.standard_normal((3, 5)).astype(np.float32)
    m = one_node("Split", {"y": y}, outputs=3, inits={"s": np.array([0, 5, 0], np.int64)},
                 opset=18, axis=1)
    check(m, {"y": y})


def test_swiglu_expands_to_its_function_body():
    a = R.standard_normal((3, 7)).astype(np.float32)
    b = R.standard_normal((3, 7)).astype(np.float32)
    check(one_node("SwiGLU", {"a": a, "b": b}, opset=28, alpha=1.3), {"a": a, "b": b})


def test_causal_conv_with_state_expands_to_its_function_body():
    x = R.standard_normal((2, 5, 11)).astype(np.float32)
    w = R.standard_normal((5, 1, 3)).astype(np.float32)
    bias = R.standard_normal((5,)).astype(np.float32)
    past = R.standard_normal((2, 5, 2)).astype(np.float32)
    feeds = {"x": x, "w": w, "bias": bias, "past": past}
    check(one_node("CausalConvWithState", feeds, outputs=2, opset=27, activation="silu"),
          feeds, rtol=1e-4, atol=1e-5)


def test_expand_functions_leaves_what_it_cannot_expand():
    """Only nodes without a converter that onnx defines as a function are replaced; the
    body's internal values get fresh names and the node's outputs keep theirs."""
    from kiln.graph.onnx.functions import expand_functions
    x = np.zeros((2, 3), np.float32)
    m = one_node("Celu", {"x": x}, opset=18, alpha=0.5)
    assert expand_functions(m, lambda d, op: True) is m
    expanded = expand_functions(m, lambda d, op: op != "Celu")
    ops = [n.op_type for n in expanded.graph.node]
    assert "Celu" not in ops and expanded.graph.node[-1].output[0] == "y0"
    x = R.standard_normal((2, 3)).astype(np.float32)
    np.testing.assert_allclose(ReferenceEvaluator(expanded).run(None, {"x": x})[0],
                               ReferenceEvaluator(m).run(None, {"x": x})[0], rtol=1e-6)


@pytest.mark.parametrize("attrs", [{}, {"is_causal": 1},
                                   {"left_window_size": 1, "right_window_size": 2}])
def test_attention_nonpad_kv_seqlen_is_a_runtime_mask(attrs):
    """One compiled model, several valid KV lengths per batch (zero and past the query
    block too): the length is a kernel argument, not a specialisation."""
    q = R.standard_normal((3, 2, 3, 5)).astype(np.float32)
    k = R.standard_normal((3, 2, 7, 5)).astype(np.float32)
    v = R.standard_normal((3, 2, 7, 4)).astype(np.float32)
    lens = np.array([7, 2, 5], np.int64)
    feeds = {"q": q, "k": k, "v": v}
    node = helper.make_node("Attention", ["q", "k", "v", "", "", "", "lens"], ["y"], **attrs)
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape) for n, a in
           feeds.items()] + [helper.make_tensor_value_info("lens", TensorProto.INT64, [3])]
    g = helper.make_graph([node], "t", ins, [helper.make_tensor_value_info(
        "y", TensorProto.FLOAT, [3, 2, 3, 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 25)])
    compiled = kiln.compile(m, db=None, jobs=1)
    for lens in ([7, 2, 5], [3, 7, 0]):
        feeds["lens"] = np.array(lens, np.int64)
        want = ReferenceEvaluator(m).run(None, feeds)[0]
        np.testing.assert_allclose(compiled.run(feeds)[0], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op,attrs", [
    ("MaxPool", {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2], "pads": [1, 0, 1, 0, 2, 1],
                 "dilations": [1, 2, 1], "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [3, 2, 2], "strides": [2, 3, 1], "pads": [1, 1, 0, 1, 0, 1],
                     "count_include_pad": 1, "ceil_mode": 1}),
    ("AveragePool", {"kernel_shape": [2, 2, 3], "auto_pad": "SAME_LOWER", "strides": [1, 2, 2]}),
    ("LpPool", {"kernel_shape": [2, 1, 3], "p": 3}),
])
def test_3d_pooling(op, attrs):
    x = R.standard_normal((1, 2, 5, 6, 7)).astype(np.float32)
    check(one_node(op, {"x": x}, opset=19, **attrs), {"x": x}, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("src,dst", [("float16", "int16"), ("int16", "float16"),
                                     ("float32", "uint32"), ("bool", "uint8")])
def test_bitcast(src, dst):
    """The bytes read as another dtype; the half dtypes are float32 in registers."""
    if src == "bool":
        x = R.integers(0, 2, (3, 37)).astype(bool)
    elif src == "int16":   # finite float16 bit patterns (a NaN's payload may be quieted)
        x = R.integers(-0x7BFF, 0x7BFF, (3, 37)).astype(np.int16)
    else:
        x = R.standard_normal((3, 37)).astype(src)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    check(one_node("BitCast", {"x": x}, opset=26, to=to), {"x": x}, rtol=0, atol=0)


@pytest.mark.parametrize("complex_in,attrs,length", [
    (False, {"onesided": 1}, None), (True, {}, 9), (False, {}, 5), (True, {}, None),
    (True, {"inverse": 1, "onesided": 1}, 12), (True, {"inverse": 1, "onesided": 1}, 7)])
def test_dft(complex_in, attrs, length):
    """Forward (real, complex, one-sided, cut and zero-padded lengths) and inverse one-sided
    transforms over a middle axis, against numpy's FFT."""
    x = R.standard_normal((2, 7, 3, 2 if complex_in else 1)).astype(np.float32)
    feeds = {"x": x}
    inits = {"len": np.array(length or 7, np.int64), "axis": np.array(1, np.int64)}
    m = one_node("DFT", feeds, inits=inits, opset=20, **attrs)
    check(m, feeds, rtol=1e-4, atol=1e-4)


def test_stft_with_a_runtime_window():
    x = R.standard_normal((2, 41, 1)).astype(np.float32)
    win = R.uniform(0.1, 1, 10).astype(np.float32)
    node = helper.make_node("STFT", ["x", "step", "win", "size"], ["y"], onesided=1)
    g = helper.make_graph([node], "t", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
        helper.make_tensor_value_info("win", TensorProto.FLOAT, win.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 11, 6, 2])],
        initializer=[numpy_helper.from_array(np.array(3, np.int64), "step"),
                     numpy_helper.from_array(np.array(10, np.int64), "size")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    check(m, {"x": x, "win": win}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter_with_runtime_write_indices(mode):
    past = R.standard_normal((3, 2, 7, 5)).astype(np.float32)
    upd = R.standard_normal((3, 2, 3, 5)).astype(np.float32)
    feeds = {"past": past, "upd": upd, "w": np.array([0, 4, 2], np.int64)}
    m = one_node("TensorScatter", feeds, opset=24, mode=mode)
    compiled = kiln.compile(m, db=None, jobs=1)
    for w in ([0, 4, 2], [3, 1, 4] if mode == "linear" else [6, 5, 0]):
        feeds["w"] = np.array(w, np.int64)
        want = ReferenceEvaluator(m).run(None, feeds)[0]
        np.testing.assert_array_equal(compiled.run(feeds)[0], want)


def test_expand_functions_renames_what_a_subgraph_reads():
    """LinearAttention's body is a Scan whose subgraph reads values of the body around it:
    the expanded model computes what the node computes (in onnx's reference evaluator)."""
    from kiln.graph.onnx.functions import expand_functions
    feeds = {n: R.standard_normal(s).astype(np.float32) for n, s in (
        ("q", (2, 3, 8)), ("k", (2, 3, 8)), ("v", (2, 3, 8)), ("decay", (2, 3, 8)),
        ("beta", (2, 3, 2)))}
    node = helper.make_node("LinearAttention", ["q", "k", "v", "", "decay", "beta"],
                            ["y", "state"], q_num_heads=2, kv_num_heads=2,
                            update_rule="gated_delta")
    g = helper.make_graph([node], "t", [helper.make_tensor_value_info(
        n, TensorProto.FLOAT, a.shape) for n, a in feeds.items()], [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("state", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 27)])
    expanded = expand_functions(m, lambda d, op: op != "LinearAttention")
    assert "Scan" in [n.op_type for n in expanded.graph.node]
    for got, want in zip(ReferenceEvaluator(expanded).run(None, feeds),
                         ReferenceEvaluator(m).run(None, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode,coords", [("avg", "half_pixel"), ("max", "output_half_pixel")])
def test_roi_align(mode, coords):
    """Boxes inside, across the border and outside the image, from two images; the graph
    reference (numpy) agrees too."""
    from kiln.graph.onnx.load import load_onnx
    from kiln.graph.reference import run_reference
    x = R.standard_normal((2, 3, 7, 9)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 6.0, 5.5], [-3.0, -2.0, 4.0, 20.0], [7.5, 5.0, 8.0, 5.2],
                     [12.0, 9.0, 15.0, 12.0], [1.0, 1.0, 1.0, 1.0]], np.float32)
    idx = np.array([1, 0, 1, 0, 1], np.int64)
    feeds = {"x": x, "rois": rois, "idx": idx}
    m = one_node("RoiAlign", feeds, opset=22, mode=mode, output_height=3, output_width=4,
                 sampling_ratio=2, spatial_scale=0.9, coordinate_transformation_mode=coords)
    check(m, feeds, rtol=1e-5, atol=1e-5)
    ref = list(run_reference(load_onnx(m), feeds).values())[0]
    np.testing.assert_allclose(ref, ReferenceEvaluator(m).run(None, feeds)[0], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("with_mask", [False, True])
def test_deform_conv(with_mask):
    """Two offset groups, stride, dilation and padding; offsets push taps off the image."""
    x = R.standard_normal((2, 4, 6, 7)).astype(np.float32)
    w = R.standard_normal((3, 4, 2, 3)).astype(np.float32)
    # out: (6 + 1 + 1 - 2) // 2 + 1 = 4 rows, (7 + 0 + 2 - 5) // 1 + 1 = 5 columns
    offset = (R.standard_normal((2, 2 * 2 * 6, 4, 5)) * 2).astype(np.float32)
    feeds = {"x": x, "w": w, "offset": offset, "b": R.standard_normal(3).astype(np.float32)}
    if with_mask:
        feeds["mask"] = R.uniform(0, 1, (2, 2 * 6, 4, 5)).astype(np.float32)
    m = one_node("DeformConv", feeds, opset=22, offset_group=2, strides=[2, 1],
                 dilations=[1, 2], pads=[1, 0, 1, 2], kernel_shape=[2, 3])
    check(m, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("mode,coord,exclude,scales", [
    ("linear", "half_pixel", 0, [1, 1, 0.6, 0.35]),
    ("cubic", "half_pixel", 1, [1, 1, 0.45, 1.5]),
    ("cubic", "align_corners", 0, [1, 1, 0.7, 0.5]),
    ("linear", "pytorch_half_pixel", 0, [1, 1, 0.3, 0.8])])
def test_resize_antialias(mode, coord, exclude, scales):
    x = R.standard_normal((1, 2, 11, 13)).astype(np.float32)
    m = one_node("Resize", {"x": x}, inits={"roi": np.zeros(0, np.float32),
                                           "scales": np.array(scales, np.float32)},
                 opset=19, antialias=1, mode=mode, coordinate_transformation_mode=coord,
                 exclude_outside=exclude)
    check(m, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("storage_order,ties", [(0, True), (1, False)])
def test_max_pool_indices(storage_order, ties):
    """Indices of each window's maximum (the first one on ties), padding never chosen."""
    x = (R.integers(-3, 3, (2, 3, 7, 8)) if ties else R.standard_normal((2, 3, 7, 8)))
    x = x.astype(np.float32)
    m = one_node("MaxPool", {"x": x}, outputs=2, opset=12, kernel_shape=[3, 2],
                 strides=[2, 3], pads=[1, 0, 1, 1], dilations=[1, 2],
                 storage_order=storage_order)
    check(m, {"x": x}, rtol=0, atol=0)
