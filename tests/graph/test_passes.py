"""Graph passes: each one keeps outputs equal (reference executor) and does its rewrite."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.graph import models
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import Graph, Node, Value
from kiln.graph.passes import (cancel_transposes, eliminate_common_subexpressions,
                               eliminate_dead_code, fold_batch_norm, fold_constants, optimize,
                               remove_identities, verify_graph)
from kiln.graph.reference import run_reference
from kiln.te.errors import InternalError

from .graph_helpers import make_model
from .test_models import SMALL, random_feeds

R = np.random.default_rng(3)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def same_outputs(a: Graph, b: Graph, feeds, tol=1e-5):
    ra, rb = run_reference(a, feeds), run_reference(b, feeds)
    assert list(ra) == list(rb)
    for k in ra:
        np.testing.assert_allclose(ra[k], rb[k], rtol=tol, atol=tol, err_msg=k)


def test_fold_constants_evaluates_initializer_only_subgraph():
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("Mul", ["wt", "two"], ["w2"]),
             helper.make_node("MatMul", ["x", "w2"], ["y"])]
    w = f32(4, 3)
    g = load_onnx(make_model(nodes, {"x": ((2, 3), "float32")}, ["y"],
                             {"w": w, "two": np.float32(2)}))
    folded = fold_constants(g)
    assert [n.op for n in folded.nodes] == ["matmul"]
    np.testing.assert_array_equal(folded.constants["w2"], w.T * 2)
    same_outputs(g, folded, {"x": f32(2, 3)})
    assert fold_constants(folded) is folded


def test_fold_constants_size_limit_stops_growth_not_big_weights():
    # past the limit, a transpose of a weight still folds (same bytes); a broadcast that
    # would materialise more than its inputs does not
    nodes = [helper.make_node("Transpose", ["w"], ["wt"], perm=[1, 0]),
             helper.make_node("MatMul", ["x", "wt"], ["y"]),
             helper.make_node("Expand", ["one", "shape"], ["big"]),
             helper.make_node("Add", ["y", "big"], ["z"])]
    w = f32(64, 32)
    g = load_onnx(make_model(nodes, {"x": ((4, 32), "float32")}, ["z"],
                             {"w": w, "one": np.ones((1, 1), np.float32),
                              "shape": np.array([4, 64], np.int64)}))
    folded = fold_constants(g, max_bytes=256)
    ops = [n.op for n in folded.nodes]
    assert "transpose" not in ops and "broadcast_to" in ops, ops
    np.testing.assert_array_equal(folded.constants["wt"], w.T)
    same_outputs(g, folded, {"x": f32(4, 32)})


def test_dce_drops_unused_nodes_and_constants():
    x = Value("x", (3,), "float32")
    used, dead = Value("u", (3,), "float32"), Value("d", (3,), "float32")
    k = Value("k", (3,), "float32")
    g = Graph((x,), (Node("relu", (x,), (used,), {}, "n0"), Node("add", (x, k), (dead,), {}, "n1")),
              (used,), {"k": np.ones(3, np.float32)})
    out = eliminate_dead_code(g)
    assert [n.name for n in out.nodes] == ["n0"] and dict(out.constants) == {}
    assert eliminate_dead_code(out) is out


def test_cse_merges_duplicate_nodes_and_constants():
    nodes = [helper.make_node("Add", ["x", "c1"], ["a"]),
             helper.make_node("Add", ["x", "c2"], ["b"]),
             helper.make_node("Mul", ["a", "b"], ["y"])]
    g = load_onnx(make_model(nodes, {"x": ((2, 3), "float32")}, ["y"],
                             {"c1": np.ones(3, np.float32), "c2": np.ones(3, np.float32)}))
    out = eliminate_common_subexpressions(g)
    assert [n.op for n in out.nodes] == ["add", "mul"]
    assert out.nodes[1].inputs[0] == out.nodes[1].inputs[1]
    same_outputs(g, out, {"x": f32(2, 3)})


def test_remove_identities_keeps_graph_output_names():
    nodes = [helper.make_node("Identity", ["x"], ["a"]),
             helper.make_node("Dropout", ["a"], ["b"]),
             helper.make_node("Relu", ["b"], ["c"]),
             helper.make_node("Identity", ["c"], ["y"])]
    g = load_onnx(make_model(nodes, {"x": ((2, 3), "float32")}, ["y"]))
    out = remove_identities(g)
    assert [n.op for n in out.nodes] == ["relu", "identity"]
    assert out.nodes[0].inputs[0].name == "x" and out.outputs[0].name == "y"
    same_outputs(g, out, {"x": f32(2, 3)})


def test_cancel_transposes_pair_and_compose():
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             helper.make_node("Relu", ["t2"], ["r"]),
             helper.make_node("Transpose", ["r"], ["t3"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t3"], ["y"], perm=[2, 0, 1])]
    g = load_onnx(make_model(nodes, {"x": ((2, 3, 4), "float32")}, ["y"]))
    out = cancel_transposes(g)
    assert [n.op for n in out.nodes] == ["relu", "transpose"]
    assert out.nodes[0].inputs[0].name == "x"
    assert out.nodes[1].attrs["perm"] == (2, 1, 0) and out.outputs[0].name == "y"
    same_outputs(g, out, {"x": f32(2, 3, 4)})
    assert cancel_transposes(out) is out



def test_cancel_transposes_after_a_cancelled_pair_reads_the_renamed_input():
    """t1, t2 cancel (t2 becomes x); t3 then reads x, and t4 composed with t3 must read x,
    not the removed t2 (a Faster R-CNN RPN reshape chain broke so)."""
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[0, 2, 1]),
             helper.make_node("Transpose", ["t2"], ["t3"], perm=[1, 0, 2]),
             helper.make_node("Transpose", ["t3"], ["y"], perm=[2, 0, 1])]
    g = load_onnx(make_model(nodes, {"x": ((2, 3, 4), "float32")}, ["y"]))
    out = cancel_transposes(g)
    verify_graph(out)
    assert [n.op for n in out.nodes] == ["transpose"] and out.nodes[0].inputs[0].name == "x"
    same_outputs(g, out, {"x": f32(2, 3, 4)})

def _conv_bn_model(bias: bool, relu_between: bool = False):
    ins = ["x", "w", "b"] if bias else ["x", "w"]
    nodes = [helper.make_node("Conv", ins, ["c"], pads=[1, 1, 1, 1])]
    bn_in = "c"
    if relu_between:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        bn_in = "r"
    nodes.append(helper.make_node("BatchNormalization", [bn_in, "s", "bb", "m", "v"], ["y"]))
    inits = {"w": f32(5, 3, 3, 3), "b": f32(5), "s": f32(5), "bb": f32(5), "m": f32(5),
             "v": np.abs(f32(5)) + 0.5}
    return make_model(nodes, {"x": ((2, 3, 6, 6), "float32")}, ["y"], inits)


@pytest.mark.parametrize("bias", [False, True])
def test_fold_batch_norm_into_conv(bias):
    g = load_onnx(_conv_bn_model(bias))
    out = verify_graph(fold_batch_norm(fold_constants(g)))  # the bias reshape folds first
    assert [n.op for n in out.nodes] == ["conv2d", "add"]
    same_outputs(g, out, {"x": f32(2, 3, 6, 6)}, tol=1e-4)


def test_batch_norm_not_after_conv_is_decomposed():
    g = load_onnx(_conv_bn_model(False, relu_between=True))
    out = verify_graph(fold_batch_norm(g))
    assert [n.op for n in out.nodes] == ["conv2d", "relu", "mul", "add"]
    same_outputs(g, out, {"x": f32(2, 3, 6, 6)}, tol=1e-4)


def test_decomposed_batch_norm_rounds_as_onnxruntime():
    # onnxruntime's kernel rounds (1 / sqrt(var + eps)) * scale, then bias - mean * that; a
    # quantized model re-quantizes this output, where the last bit can cross a step
    rng = np.random.default_rng(3)
    c = {k: rng.standard_normal(256).astype(np.float32) for k in ("s", "bb", "m")}
    c["v"] = (np.abs(rng.standard_normal(256)) + 0.1).astype(np.float32)
    g = load_onnx(make_model([helper.make_node("BatchNormalization", ["x", "s", "bb", "m", "v"],
                                               ["y"])],
                             {"x": ((1, 256, 3, 3), "float32")}, ["y"], c))
    out = verify_graph(fold_batch_norm(g))
    mul, add = out.nodes
    inv = np.float32(1) / np.sqrt(c["v"] + np.float32(1e-5))
    assert np.any(inv * c["s"] != c["s"] / np.sqrt(c["v"] + np.float32(1e-5)))  # they differ
    scale = out.constants[mul.inputs[1].name].reshape(-1)
    np.testing.assert_array_equal(scale, inv * c["s"])
    np.testing.assert_array_equal(out.constants[add.inputs[1].name].reshape(-1),
                                  c["bb"] - c["m"] * scale)


def test_fold_batch_norm_into_matmul():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]),
             helper.make_node("BatchNormalization", ["h", "s", "bb", "m", "v"], ["y"])]
    inits = {"w": f32(6, 4), "s": f32(4), "bb": f32(4), "m": f32(4), "v": np.abs(f32(4)) + 0.5}
    g = load_onnx(make_model(nodes, {"x": ((3, 6), "float32")}, ["y"], inits))
    out = fold_batch_norm(g)
    assert [n.op for n in out.nodes] == ["matmul", "add"]
    same_outputs(g, out, {"x": f32(3, 6)}, tol=1e-4)


@pytest.mark.parametrize("name", list(SMALL))
def test_optimize_preserves_model_outputs(name):
    model = models.MODELS[name](**SMALL[name])
    g = verify_graph(load_onnx(model))
    out = optimize(g, verify=True)
    assert "batch_norm" not in out.op_counts() and "identity" not in out.op_counts()
    same_outputs(g, out, random_feeds(model), tol=1e-4)


def test_verify_graph_names_the_bad_node():
    x = Value("x", (3,), "float32")
    bad = Value("y", (4,), "float32")
    g = Graph((x,), (Node("relu", (x,), (bad,), {}, "relu_7"),), (bad,))
    with pytest.raises(InternalError, match=r"node 'relu_7' \(relu\) declares outputs"):
        verify_graph(g)
    undefined = Graph((x,), (Node("relu", (Value("z", (3,), "float32"),), (x,), {}, "r"),), (x,))
    with pytest.raises(InternalError, match="reads 'z' before it is defined"):
        verify_graph(undefined)
