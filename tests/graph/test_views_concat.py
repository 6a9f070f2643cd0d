"""Views (slice, split, reshape) feeding concat or another fusion group, as in GhostNet and
MixNet blocks: compiled in both layouts and compared with onnxruntime.

The bug class: GhostNet's `cat([x1, x2])[:, :oup]` read by a squeeze-excite block failed to
compile (`ScheduleError: 'g1_out' is not part of this schedule (stages: )`): the blocked
layout converted the slice's output for the SE multiply, then kept the multiply in NCHW, and
the unread conversion became a fused group with no outputs. Now the pass decides every operand
before converting any, a last dead-code pass removes whatever a layout pass leaves unread, and
fusion refuses a group with no outputs as a bug.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import FrozenDict, Node, Value
from kiln.graph.passes import fuse_operators, optimize
from kiln.te.errors import InternalError

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(5)
X16 = R.standard_normal((1, 16, 7, 7)).astype(np.float32)


def _w(*shape):
    return (R.standard_normal(shape) * 0.3).astype(np.float32)


def _i64(*values):
    return np.array(values, np.int64)


def _ghost(prefix: str, x: str, cin: int, cout: int):
    """GhostNet's module: 1x1 conv + relu, its 3x3 depthwise 'cheap' twin, concat, slice."""
    init = -(-cout // 2)
    p = prefix
    nodes = [helper.make_node("Conv", [x, p + "w1"], [p + "p"]),
             helper.make_node("Relu", [p + "p"], [p + "pr"]),
             helper.make_node("Conv", [p + "pr", p + "wd"], [p + "d"], pads=[1, 1, 1, 1],
                              group=init),
             helper.make_node("Relu", [p + "d"], [p + "dr"]),
             helper.make_node("Concat", [p + "pr", p + "dr"], [p + "c"], axis=1),
             helper.make_node("Slice", [p + "c", p + "s", p + "e", p + "a"], [p + "out"])]
    inits = {p + "w1": _w(init, cin, 1, 1), p + "wd": _w(init, 1, 3, 3), p + "s": _i64(0),
             p + "e": _i64(cout), p + "a": _i64(1)}
    return nodes, inits


def _squeeze_excite(x: str, channels: int, out: str):
    nodes = [helper.make_node("GlobalAveragePool", [x], ["se_gap"]),
             helper.make_node("Conv", ["se_gap", "se_w1"], ["se_1"]),
             helper.make_node("Relu", ["se_1"], ["se_1r"]),
             helper.make_node("Conv", ["se_1r", "se_w2"], ["se_2"]),
             helper.make_node("HardSigmoid", ["se_2"], ["se_gate"]),
             helper.make_node("Mul", [x, "se_gate"], [out])]
    return nodes, {"se_w1": _w(4, channels, 1, 1), "se_w2": _w(channels, 4, 1, 1)}


def ghost_se():
    g, gi = _ghost("g_", "x", 16, 16)
    se, si = _squeeze_excite("g_out", 16, "y")
    return make_model(g + se, {"x": X16}, ["y"], {**gi, **si}), {"x": X16}


def ghost_bottleneck_odd():
    """Two ghost modules whose slices really cut (odd widths), a residual add."""
    g1, i1 = _ghost("a_", "x", 16, 23)
    g2, i2 = _ghost("b_", "a_out", 23, 16)
    nodes = g1 + g2 + [helper.make_node("Add", ["b_out", "x"], ["y"])]
    return make_model(nodes, {"x": X16}, ["y"], {**i1, **i2}), {"x": X16}


def mixnet_se():
    """MixNet's mixed depthwise conv: channel split, 3x3 and 5x5 depthwise, concat, then
    swish and squeeze-excite."""
    nodes = [helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=1),
             helper.make_node("Conv", ["a", "w3"], ["ca"], pads=[1, 1, 1, 1], group=8),
             helper.make_node("Conv", ["b", "w5"], ["cb"], pads=[2, 2, 2, 2], group=8),
             helper.make_node("Concat", ["ca", "cb"], ["cat"], axis=1),
             helper.make_node("Sigmoid", ["cat"], ["sig"]),
             helper.make_node("Mul", ["cat", "sig"], ["swish"])]
    se, si = _squeeze_excite("swish", 16, "y")
    inits = {"sizes": _i64(8, 8), "w3": _w(8, 1, 3, 3), "w5": _w(8, 1, 5, 5), **si}
    return make_model(nodes + se, {"x": X16}, ["y"], inits), {"x": X16}


def _single(nodes, inits, outputs=("y",)):
    return lambda: (make_model(nodes, {"x": X16}, list(outputs), inits), {"x": X16})


# small view -> concat/group patterns (each once failed somewhere, or could)
VIEWS = {
    "ghost_se": ghost_se,
    "ghost_bottleneck_odd": ghost_bottleneck_odd,
    "mixnet_se": mixnet_se,
    "split_concat_swapped": _single(
        [helper.make_node("Split", ["x"], ["a", "b"], axis=1),
         helper.make_node("Concat", ["b", "a"], ["y"], axis=1)], {}),
    "slice_of_conv_concat": _single(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("Slice", ["c", "s", "e", "a"], ["sl"]),
         helper.make_node("Concat", ["sl", "c"], ["y"], axis=1)],
        {"w": _w(16, 16, 1, 1), "s": _i64(3), "e": _i64(11), "a": _i64(1)}),
    "reshape_of_conv_concat": _single(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("Reshape", ["c", "shape"], ["r"]),
         helper.make_node("Concat", ["r", "r"], ["y"], axis=-1)],
        {"w": _w(8, 16, 1, 1), "shape": _i64(1, -1)}),
    "split_branches_to_two_groups": _single(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("Split", ["c"], ["a", "b"], axis=1),
         helper.make_node("GlobalAveragePool", ["a"], ["ga"]),
         helper.make_node("Mul", ["b", "ga"], ["y1"]),
         helper.make_node("Relu", ["a"], ["y2"])],
        {"w": _w(16, 16, 1, 1)}, outputs=("y1", "y2")),
    "slice_is_graph_output_and_read": _single(
        [helper.make_node("Conv", ["x", "w"], ["c"]),
         helper.make_node("Slice", ["c", "s", "e", "a"], ["y1"]),
         helper.make_node("Concat", ["y1", "c"], ["y2"], axis=1)],
        {"w": _w(16, 16, 1, 1), "s": _i64(0), "e": _i64(16), "a": _i64(1)},
        outputs=("y1", "y2")),
}


@pytest.mark.parametrize("layout", ["nchwc", "nchw"])
@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_feeding_groups_match_onnxruntime(name, layout):
    model, feeds = VIEWS[name]()
    got = kiln.compile(model, db=None, jobs=1, layout=layout).run(feeds)
    for g, w in zip(got, ort_run(model, feeds)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)


def test_optimized_graph_has_no_unread_nodes():
    """After every pass, each node's output is read by a node or is a graph output."""
    model, _ = ghost_se()
    graph = optimize(load_onnx(model))
    read = {v.name for n in graph.nodes for v in n.inputs if v is not None} | \
        {v.name for v in graph.outputs}
    unread = [n.name for n in graph.nodes if not any(o.name in read for o in n.outputs)]
    assert not unread


def test_squeeze_excite_multiply_runs_blocked():
    """The SE gate (N, C, 1, 1) broadcasts in the blocked layout: the multiply needs no
    conversion of the gate back to NCHW."""
    model, _ = ghost_se()
    graph = optimize(load_onnx(model))
    mul = next(n for n in graph.nodes if n.op == "mul")
    assert all(len(v.shape) == 5 for v in mul.inputs + mul.outputs)


def test_fusion_refuses_a_group_without_outputs():
    x = Value("x", (4,), "float32")
    dead = Node("relu", (x,), (Value("dead", (4,), "float32"),), FrozenDict(), "dead_relu")
    live = Node("neg", (x,), (Value("y", (4,), "float32"),), FrozenDict(), "neg")
    from kiln.graph.ir import Graph
    graph = Graph((x,), (dead, live), (live.outputs[0],), {}, "dead")
    with pytest.raises(InternalError, match=r"computes nothing.*dead node"):
        fuse_operators(graph)
