"""The Winograd pass: which convs become Winograd ops, the fused groups they make, and
compiled models (Winograd on and off) and the numpy reference against onnxruntime.

Tolerance: errors are bounded relative to the output's largest magnitude (Winograd's fp32
rounding grows with the transformed values; see tests/te/test_winograd.py): 1e-4 of it."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.graph.compile.model import prepare_graph
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.passes.layout import winograd as winograd_pass
from kiln.graph.passes.layout.winograd import winograd_tile_size
from kiln.graph.reference import run_reference

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(11)
WINOGRAD_OPS = ("winograd_input_transform", "winograd_batch_matmul",
                "winograd_output_transform")


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _assert_close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-4 * np.abs(want).max())


def _residual_model(c=32, f=32, h=9, w=11, pads=(1, 1, 1, 1)):
    """conv 3x3 (c -> c, stride 2 so the next conv reads a blocked input) -> relu ->
    conv 3x3 stride 1 (c -> f, bias) -> + residual (a 1x1 conv of the same input) -> relu."""
    nodes = [helper.make_node("Conv", ["x", "w0", "b0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"]),
             helper.make_node("Conv", ["ar", "w1", "b1"], ["b"], pads=list(pads)),
             helper.make_node("Conv", ["ar", "ws"], ["s"]),
             helper.make_node("Add", ["b", "s"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    inits = {"w0": f32(c, 3, 3, 3) * 0.3, "b0": f32(c), "w1": f32(f, c, 3, 3) * 0.1,
             "b1": f32(f), "ws": f32(f, c, 1, 1)}
    return make_model(nodes, {"x": ((1, 3, h, w), "float32")}, ["y"], inits)


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_eligible_conv_becomes_three_ops_and_the_epilogue_fuses_into_the_output():
    graph, groups = prepare_graph(_residual_model())
    ops = _ops(graph)
    assert [ops.count(op) for op in WINOGRAD_OPS] == [1, 1, 1]
    assert ops.count("conv2d_nchwc") == 2          # the first conv (NCHW input) and the 1x1
    by_ops = {g.ops for g in groups}
    assert ("winograd_input_transform",) in by_ops
    assert ("winograd_batch_matmul",) in by_ops
    assert ("winograd_output_transform", "add", "add", "relu") in by_ops
    u = next(n for n in graph.nodes if n.op == "winograd_batch_matmul").inputs[1]
    assert u.name in graph.constants and u.shape == (4, 4, 2, 32, 16)     # m = 2 at 9x11


@pytest.mark.parametrize("h,w", [(9, 11), (7, 7), (13, 13), (2, 2), (1, 1), (5, 17)])
@pytest.mark.parametrize("m", [2, 4])
def test_compiled_model_matches_onnxruntime(monkeypatch, h, w, m):
    monkeypatch.setattr(winograd_pass, "winograd_tile_size", lambda *shape: m)
    model = _residual_model(h=h, w=w)
    feeds = {"x": f32(1, 3, h, w)}
    want = ort_run(model, feeds)[0]
    graph = optimize(load_onnx(model))
    # over one pixel only the 3x3's centre tap reads the image: it runs as a 1x1 conv
    assert ("winograd_batch_matmul" in _ops(graph)) == ((h, w) != (1, 1))
    _assert_close(run_reference(graph, feeds)["y"], want)
    _assert_close(kiln.compile(model, jobs=1).run(feeds)[0], want)


@pytest.mark.parametrize("c,f,pads", [(32, 48, (1, 1, 1, 1)), (48, 32, (0, 1, 2, 0))])
def test_channel_counts_and_asymmetric_pads(c, f, pads):
    model = _residual_model(c, f, 8, 10, pads) if pads == (1, 1, 1, 1) else None
    if model is None:       # no residual: the padded output shape differs from the 1x1's
        nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
                 helper.make_node("Conv", ["a", "w1", "b1"], ["b"], pads=list(pads)),
                 helper.make_node("Relu", ["b"], ["y"])]
        model = make_model(nodes, {"x": ((1, 3, 8, 10), "float32")}, ["y"],
                           {"w0": f32(c, 3, 3, 3), "w1": f32(f, c, 3, 3) * 0.1,
                            "b1": f32(f)})
    feeds = {"x": f32(1, 3, 8, 10)}
    assert "winograd_batch_matmul" in _ops(optimize(load_onnx(model)))
    _assert_close(kiln.compile(model, jobs=1).run(feeds)[0], ort_run(model, feeds)[0])


def test_winograd_off_keeps_the_direct_conv_and_matches():
    model = _residual_model()
    feeds = {"x": f32(1, 3, 9, 11)}
    graph, _ = prepare_graph(model, winograd=False)
    assert not set(WINOGRAD_OPS) & set(_ops(graph)) and _ops(graph).count("conv2d_nchwc") == 3
    want = ort_run(model, feeds)[0]
    _assert_close(kiln.compile(model, jobs=1, winograd=False).run(feeds)[0], want)
    _assert_close(kiln.compile(model, jobs=1, winograd=True).run(feeds)[0], want)


@pytest.mark.parametrize("attrs,c", [({"strides": [2, 2]}, 16), ({"dilations": [2, 2]}, 16),
                                     ({"group": 2}, 32), ({}, 8),
                                     ({"kernel_shape": [3, 1]}, 16)])
def test_unsupported_convs_stay_direct(attrs, c):
    kernel = attrs.get("kernel_shape", [3, 3])
    group = attrs.get("group", 1)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["y"], pads=[1, 1, 1, 1], **attrs)]
    model = make_model(nodes, {"x": ((1, 3, 12, 12), "float32")}, ["y"],
                       {"w0": f32(c, 3, 3, 3), "w1": f32(16, c // group, *kernel)})
    graph = optimize(load_onnx(model))
    assert not set(WINOGRAD_OPS) & set(_ops(graph))
    feeds = {"x": f32(1, 3, 12, 12)}
    _assert_close(kiln.compile(model, jobs=1).run(feeds)[0], ort_run(model, feeds)[0])


def test_a_shared_weight_is_transformed_once():
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["b", "w1"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, {"x": ((1, 3, 8, 8), "float32")}, ["y"],
                       {"w0": f32(32, 3, 3, 3), "w1": f32(32, 32, 3, 3) * 0.2})
    graph = optimize(load_onnx(model))
    gemms = [n for n in graph.nodes if n.op == "winograd_batch_matmul"]
    assert len(gemms) == 2 and gemms[0].inputs[1] == gemms[1].inputs[1]
    feeds = {"x": f32(1, 3, 8, 8)}
    _assert_close(kiln.compile(model, jobs=1).run(feeds)[0], ort_run(model, feeds)[0])


def test_equal_shaped_weights_share_a_transform_only_when_their_bytes_match():
    """Three 32->32 convs: w1, w2 (one value differs by one ulp) and w3 (a copy of w1 under
    another name): w1 and w3 share one U, w2 has its own; the model still matches."""
    w1 = f32(32, 32, 3, 3) * 0.2
    w2 = w1.copy()
    w2[31, 31, 2, 2] = np.nextafter(w2[31, 31, 2, 2], np.float32(np.inf))
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["b", "w2"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["c", "w3"], ["y"], pads=[1, 1, 1, 1])]
    model = make_model(nodes, {"x": ((1, 3, 8, 8), "float32")}, ["y"],
                       {"w0": f32(32, 3, 3, 3), "w1": w1, "w2": w2, "w3": w1.copy()})
    graph = optimize(load_onnx(model))
    gemms = [n.inputs[1] for n in graph.nodes if n.op == "winograd_batch_matmul"]
    assert len(gemms) == 3
    assert gemms[0] == gemms[2] and gemms[1] != gemms[0]
    feeds = {"x": f32(1, 3, 8, 8)}
    _assert_close(kiln.compile(model, jobs=1).run(feeds)[0], ort_run(model, feeds)[0])


def test_tile_size_rule():
    assert winograd_tile_size(56, 56, 64, 64) == 4
    assert winograd_tile_size(28, 28, 128, 128) == 4
    assert winograd_tile_size(14, 14, 256, 256) == 2
    assert winograd_tile_size(7, 7, 512, 512) == 2
    assert winograd_tile_size(56, 56, 8, 64) is None
    assert winograd_tile_size(32, 32, 16, 16) is None       # the default CNN's convs: direct
    assert winograd_tile_size(32, 32, 32, 32) == 4
