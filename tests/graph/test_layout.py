"""The conv weight layout rewrite: which convs are packed, and that outputs do not change."""
from __future__ import annotations

import numpy as np
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize, pack_conv_weights
from kiln.graph.reference import run_reference
from kiln.te.ops import unpack_conv_weight

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(11)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _convs_model():
    """Four convs: dense 16 filters (block 16), dense 24 (block 8), dense 10 (no block),
    depthwise (never packed); plus one conv whose weight is a graph input (runtime)."""
    nodes = [helper.make_node("Conv", ["x", "w16", "b16"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w24"], ["b"], strides=[2, 2]),
             helper.make_node("Conv", ["b", "w10"], ["c"], pads=[0, 1, 0, 1]),
             helper.make_node("Conv", ["c", "wdw"], ["d"], group=10, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["d", "wrt"], ["y"])]
    inits = {"w16": f32(16, 3, 3, 3), "b16": f32(16), "w24": f32(24, 16, 1, 1),
             "w10": f32(10, 24, 1, 3), "wdw": f32(10, 1, 3, 3)}
    return make_model(nodes, {"x": ((1, 3, 9, 11), "float32"),
                              "wrt": ((8, 10, 1, 1), "float32")}, ["y"], inits)


def test_only_dense_convs_with_constant_weights_and_a_block_are_packed():
    model = _convs_model()
    graph = pack_conv_weights(load_onnx(model))
    convs = [n for n in graph.nodes if n.op.startswith("conv2d")]
    assert [(n.op, n.attrs.get("block")) for n in convs] == [
        ("conv2d_kpacked", 16), ("conv2d_kpacked", 8), ("conv2d", None), ("conv2d", None),
        ("conv2d", None)]
    packed = graph.constants[convs[0].inputs[1].name]
    assert packed.shape == (1, 3, 3, 3, 16)
    original = load_onnx(model).constants
    np.testing.assert_array_equal(unpack_conv_weight(packed, 16), original["w16"])
    assert "w16" not in graph.constants          # the unpacked copy is dropped
    assert pack_conv_weights(graph) is graph      # nothing left to do


def test_packed_graph_matches_onnxruntime_in_reference_and_compiled_form():
    model = _convs_model()
    feeds = {"x": f32(1, 3, 9, 11), "wrt": f32(8, 10, 1, 1)}
    want = ort_run(model, feeds)[0]
    packed = optimize(load_onnx(model), skip=("blocked layout",))
    assert "conv2d_kpacked" in packed.op_counts()
    np.testing.assert_allclose(run_reference(packed, feeds)["y"], want, rtol=1e-4, atol=1e-4)
    got = kiln.compile(model, layout="nchw").run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
