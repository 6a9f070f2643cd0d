"""graph/passes/layout/sink.py: transposes and reshapes moved past pointwise ops keep every
output equal (numpy reference executor; compiled kernels against onnxruntime), meet their
inverse and cancel, and stay put where an operand cannot move with them."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.graph.compile.model import compile_model
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import cancel_transposes, sink_layout_moves, verify_graph
from kiln.graph.passes.layout.sink import _reshape_groups
from kiln.graph.reference import run_reference

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(5)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def same_outputs(a, b, feeds, tol=1e-6):
    ra, rb = run_reference(a, feeds), run_reference(b, feeds)
    assert list(ra) == list(rb)
    for k in ra:
        assert ra[k].shape == rb[k].shape
        np.testing.assert_allclose(ra[k], rb[k], rtol=tol, atol=tol, err_msg=k)


def _ops(graph):
    return [n.op for n in graph.nodes]


def test_inverse_transposes_meet_across_bias_relu_and_cancel():
    # [N, D, C, H, W] -> [N, C, D, H, W], per-channel bias, ReLU, back: the 3-D conv pattern
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Add", ["t", "bias"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Transpose", ["r"], ["back"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Sigmoid", ["back"], ["y"])]
    bias = f32(5, 1, 1, 1)
    g = load_onnx(make_model(nodes, {"x": ((1, 3, 5, 2, 7), "float32")}, ["y"],
                             {"bias": bias}))
    sunk = sink_layout_moves(g)
    verify_graph(sunk)
    out = cancel_transposes(sunk)
    assert _ops(out) == ["add", "relu", "sigmoid", "identity"]   # y keeps its name
    assert out.nodes[0].inputs[0].name == "x" and out.outputs[0].name == "y"
    moved = out.constants[out.nodes[0].inputs[1].name]
    assert moved.shape == (1, 1, 5, 1, 1)      # the channel axis of x
    np.testing.assert_array_equal(moved.reshape(5), bias.reshape(5))
    same_outputs(g, out, {"x": f32(1, 3, 5, 2, 7)})
    assert sink_layout_moves(out) is out


def test_residual_of_two_reshaped_values_sinks_once():
    nodes = [helper.make_node("Reshape", ["x", "s"], ["rx"]),
             helper.make_node("Reshape", ["y", "s"], ["ry"]),
             helper.make_node("Add", ["rx", "ry"], ["a"]),
             helper.make_node("Mul", ["a", "scale"], ["m"]),
             helper.make_node("Relu", ["m"], ["z"])]
    g = load_onnx(make_model(nodes, {"x": ((6, 4, 3), "float32"), "y": ((6, 4, 3), "float32")},
                             ["z"], {"s": np.array([2, 3, 4, 3], np.int64),
                                     "scale": f32(1, 1, 4, 1)}))
    out = sink_layout_moves(g)
    verify_graph(out)
    assert _ops(out) == ["add", "mul", "relu", "reshape"]
    same_outputs(g, out, {"x": f32(6, 4, 3), "y": f32(6, 4, 3)})


def test_an_operand_that_cannot_move_keeps_the_graph():
    # y is neither a constant nor moved alike: the transpose stays before the add
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
             helper.make_node("Add", ["t", "y"], ["z"])]
    g = load_onnx(make_model(nodes, {"x": ((3, 4), "float32"), "y": ((4, 3), "float32")},
                             ["z"]))
    assert sink_layout_moves(g) is g


def test_a_constant_varying_inside_a_merged_group_is_expanded():
    # reshape [2, 3, 4] -> [6, 4], then add a constant varying along the merged axis
    nodes = [helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Add", ["r", "c"], ["z"])]
    c = f32(6, 1)
    g = load_onnx(make_model(nodes, {"x": ((2, 3, 4), "float32")}, ["z"],
                             {"s": np.array([6, 4], np.int64), "c": c}))
    out = sink_layout_moves(g)
    assert _ops(out)[-2:] == ["add", "reshape"]
    moved = out.constants[out.nodes[-2].inputs[1].name]
    assert moved.shape == (2, 3, 1)
    same_outputs(g, out, {"x": f32(2, 3, 4)})


@pytest.mark.parametrize("src,dst,want", [
    ((8, 144, 28), (1, 8, 144, 28), [((0,), (0, 1)), ((1,), (2,)), ((2,), (3,))]),
    ((2, 3, 4), (6, 4), [((0, 1), (0,)), ((2,), (1,))]),
    ((6,), (2, 3, 1), [((0,), (0, 1)), ((), (2,))]),
    ((4, 6), (6, 4), [((0, 1), (0, 1))]),
])
def test_reshape_groups(src, dst, want):
    got = [(tuple(a), tuple(b)) for a, b in _reshape_groups(src, dst)]
    assert got == want


# -- random chains ---------------------------------------------------------------------------

DIMS = st.sampled_from([1, 2, 3, 5, 6, 7])


@st.composite
def chains(draw):
    """Two inputs of one random shape, moved alike by random transposes and reshapes, with
    pointwise ops (unary, a constant of a random broadcast shape, the two values combined)
    in between: the ONNX model and its feeds."""
    shape = tuple(draw(st.lists(DIMS, min_size=2, max_size=4)))
    nodes, inits, count = [], {}, [0]

    def fresh(stem):
        count[0] += 1
        return f"{stem}{count[0]}"

    a, b, cur = "x", "y", shape
    for _ in range(draw(st.integers(2, 6))):
        kind = draw(st.sampled_from(["transpose", "reshape", "unary", "const", "combine"]))
        if kind == "transpose":
            perm = draw(st.permutations(range(len(cur))))
            a2, b2 = fresh("t"), fresh("t")
            nodes += [helper.make_node("Transpose", [a], [a2], perm=list(perm)),
                      helper.make_node("Transpose", [b], [b2], perm=list(perm))]
            a, b, cur = a2, b2, tuple(cur[p] for p in perm)
        elif kind == "reshape":
            i = draw(st.integers(0, len(cur) - 1))
            if len(cur) > 2 and draw(st.booleans()) and i + 1 < len(cur):   # merge i, i+1
                new = cur[:i] + (cur[i] * cur[i + 1],) + cur[i + 2:]
            else:                                                           # insert a 1
                new = cur[:i] + (1,) + cur[i:]
            s = fresh("s")
            inits[s] = np.array(new, np.int64)
            a2, b2 = fresh("r"), fresh("r")
            nodes += [helper.make_node("Reshape", [a, s], [a2]),
                      helper.make_node("Reshape", [b, s], [b2])]
            a, b, cur = a2, b2, new
        elif kind == "unary":
            op = draw(st.sampled_from(["Relu", "Neg", "Sigmoid", "Abs"]))
            a2 = fresh("u")
            nodes.append(helper.make_node(op, [a], [a2]))
            a = a2
        elif kind == "const":
            dims = [d if draw(st.booleans()) else 1 for d in cur]
            dims = dims[draw(st.integers(0, len(dims))):]          # maybe fewer dims
            c = fresh("c")
            inits[c] = f32(*dims)
            a2 = fresh("k")
            op = draw(st.sampled_from(["Add", "Mul", "Sub", "Max"]))
            nodes.append(helper.make_node(op, [a, c] if draw(st.booleans()) else [c, a], [a2]))
            a = a2
        else:
            a2 = fresh("m")
            nodes.append(helper.make_node(draw(st.sampled_from(["Add", "Mul"])), [a, b], [a2]))
            a = a2
    nodes += [helper.make_node("Identity", [a], ["out_a"]),
              helper.make_node("Identity", [b], ["out_b"])]
    model = make_model(nodes, {"x": (shape, "float32"), "y": (shape, "float32")},
                       ["out_a", "out_b"], inits)
    return model, {"x": f32(*shape), "y": f32(*shape)}


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(chains())
def test_random_chains_keep_their_outputs(case):
    model, feeds = case
    g = load_onnx(model)
    out = cancel_transposes(sink_layout_moves(g))
    verify_graph(out)
    same_outputs(g, out, feeds)
    # every pointwise op reads unmoved operands: no transpose/reshape before a pointwise op
    producers = out.producers()
    for n in out.nodes:
        if n.op in ("relu", "neg", "sigmoid", "abs", "add", "mul", "sub", "max"):
            assert not any(producers.get(v.name) is not None
                           and producers[v.name].op in ("transpose", "reshape")
                           for v in n.inputs if v.name not in out.constants), n


@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(chains())
def test_random_chains_compile_like_onnxruntime(case):
    model, feeds = case
    want = ort_run(model, feeds)
    got = compile_model(model, jobs=1, db=None).run(feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
