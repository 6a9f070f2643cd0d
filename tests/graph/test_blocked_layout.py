"""The channel-blocked (NCHWc) layout pass: which ops run blocked, where the layout converts,
and that outputs match onnxruntime in reference and compiled form on awkward shapes."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize, to_blocked_layout
from kiln.graph.reference import run_reference
from kiln.te.errors import KilnError

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(5)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _block_model(h=9, w=11):
    """conv 3->16 (+bias, relu) -> conv 16->24 stride 2 -> depthwise 24 (+bias, clip)
    -> residual add -> max pool -> conv 24->10 (a padded block of 8) -> global pool -> flatten
    -> gemm; plus a mul by a constant that varies over W (cannot run blocked)."""
    nodes = [helper.make_node("Conv", ["x", "w16", "b16"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w24", "b24"], ["b"], strides=[2, 2]),
             helper.make_node("Conv", ["b", "wdw", "bdw"], ["c"], group=24, pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["cc"]),
             helper.make_node("Add", ["cc", "b"], ["d"]),
             helper.make_node("Mul", ["d", "scale"], ["ds"]),
             helper.make_node("MaxPool", ["ds"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Mul", ["p", "wide"], ["pw"]),
             helper.make_node("Conv", ["pw", "w10"], ["e"], pads=[0, 1, 0, 1], kernel_shape=[1, 3]),
             helper.make_node("Relu", ["e"], ["er"]),
             helper.make_node("GlobalAveragePool", ["er"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("Gemm", ["f", "wfc"], ["y"], transB=1)]
    ph, pw = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    ph, pw = (ph - 1) // 2 + 1, (pw - 1) // 2 + 1
    inits = {"w16": f32(16, 3, 3, 3), "b16": f32(16), "w24": f32(24, 16, 1, 1), "b24": f32(24),
             "wdw": f32(24, 1, 3, 3), "bdw": f32(24), "lo": np.float32(0),
             "hi": np.float32(6), "scale": f32(24, 1, 1), "wide": f32(1, 1, 1, pw),
             "w10": f32(10, 24, 1, 3), "wfc": f32(5, 10)}
    return make_model(nodes, {"x": ((1, 3, h, w), "float32")}, ["y"], inits)


def test_convs_their_epilogues_and_pooling_run_blocked():
    graph = optimize(load_onnx(_block_model()))
    ops = [n.op for n in graph.nodes]
    assert ops.count("conv2d_nchwc") == 3
    assert ops.count("depthwise_conv2d_nchwc") == 1
    first, second, third = [n for n in graph.nodes if n.op == "conv2d_nchwc"]
    assert first.attrs["in_block"] == 0 and first.attrs["block"] == 16   # reads NCHW input
    assert second.attrs["in_block"] == 16 and second.attrs["block"] == 8
    assert second.inputs[1].shape == (3, 1, 1, 1, 16, 8)
    pool = next(n for n in graph.nodes if n.op == "max_pool2d")
    assert len(pool.inputs[0].shape) == 5                  # pooled in blocks
    # the W-varying constant forces NCHW before the last conv (one conversion back); its 10
    # filters run as two blocks of 8, the last padded with zero filters, cropped after the pool
    assert ops.count("from_blocked") == 2 and ops.count("to_blocked") == 0
    assert "conv2d" not in ops
    assert third.attrs["in_block"] == 0 and third.attrs["block"] == 8
    assert third.outputs[0].shape[1:] == (2, 3, 3, 8) and third.inputs[1].shape[0] == 2
    for n in graph.nodes:
        if n.op == "add" and len(n.outputs[0].shape) == 5:
            assert all(len(v.shape) in (0, 5) for v in n.inputs)


def test_blocked_graph_matches_onnxruntime_in_reference_and_compiled_form():
    for h, w in ((9, 11), (1, 1), (7, 13)):
        model = _block_model(h, w)
        feeds = {"x": f32(1, 3, h, w)}
        want = ort_run(model, feeds)[0]
        graph = optimize(load_onnx(model))
        np.testing.assert_allclose(run_reference(graph, feeds)["y"], want, rtol=1e-4,
                                   atol=1e-4)
        got = kiln.compile(model, jobs=1).run(feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{h}x{w}")


def test_global_pool_then_flatten_is_a_view_of_the_blocked_result():
    graph = optimize(load_onnx(_block_model()))
    reduce = next(n for n in graph.nodes if n.op == "reduce_mean")
    assert len(reduce.inputs[0].shape) == 5
    # 10 channels in a padded block: the pooled result is cropped, not viewed
    consumers = [n for n in graph.nodes if reduce.outputs[0] in n.inputs]
    assert [n.op for n in consumers] == ["from_blocked"]
    assert consumers[0].attrs["channels"] == 10 and consumers[0].outputs[0].shape == (1, 10, 1, 1)
    # 16 channels: a view
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]),
             helper.make_node("GlobalAveragePool", ["c"], ["g"]),
             helper.make_node("Flatten", ["g"], ["y"])]
    model = make_model(nodes, {"x": ((1, 3, 4, 5), "float32")}, ["y"], {"w": f32(16, 3, 1, 1)})
    graph = optimize(load_onnx(model))
    assert "from_blocked" not in [n.op for n in graph.nodes]


def test_nchw_layout_keeps_the_model_layout_and_unknown_layouts_are_refused():
    model = _block_model()
    graph = optimize(load_onnx(model), skip=("blocked layout",))
    assert not {"conv2d_nchwc", "depthwise_conv2d_nchwc", "from_blocked"} & set(
        n.op for n in graph.nodes)
    feeds = {"x": f32(1, 3, 9, 11)}
    np.testing.assert_allclose(kiln.compile(model, jobs=1, layout="nchw").run(feeds)[0],
                               ort_run(model, feeds)[0], rtol=1e-4, atol=1e-4)
    with pytest.raises(KilnError, match="layout='nhwc'"):
        kiln.compile(model, layout="nhwc")
    with pytest.raises(ValueError, match="no pass named"):
        optimize(load_onnx(model), skip=("blocked layuot",))


def test_a_graph_without_eligible_convs_is_returned_unchanged():
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], group=2)]
    model = make_model(nodes, {"x": ((1, 4, 5, 5), "float32")}, ["y"],
                       {"w": f32(6, 2, 3, 3)})
    graph = load_onnx(model)
    assert to_blocked_layout(graph) is graph
