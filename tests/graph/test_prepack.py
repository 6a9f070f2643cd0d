"""Compile-time pre-packing of constant matmul weights (graph/passes/layout/prepack.py):
where the pass fires, what it leaves alone, and whole models vs onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.graph import models
from kiln.graph.compile.model import compile_model, prepare_graph
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.passes.fusion import fuse_operators
from kiln.graph.passes.layout.prepack import matmul_weight_block, prepack_matmul_weights
from kiln.graph.reference import run_reference
from kiln.te import ops

from .graph_helpers import make_model, ort_run


def _rand(rng, *shape):
    return rng.uniform(-1, 1, shape).astype(np.float32)


def _matmul_model(x_shape, n, const=True, bias=False, trans_b=False):
    rng = np.random.default_rng(0)
    k = x_shape[-1]
    w = _rand(rng, n, k) if trans_b else _rand(rng, k, n)
    inits = {"w": w} if const else {}
    inputs = {"x": _rand(rng, *x_shape)} | ({} if const else {"w": w})
    if trans_b:
        inits["b"] = _rand(rng, n)
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["t" if bias else "y"])]
        if bias:
            inits["b"] = _rand(rng, n)
            nodes.append(helper.make_node("Add", ["t", "b"], ["y"]))
    feeds = {name: value for name, value in inputs.items()}
    return make_model(nodes, inputs, ["y"], inits), feeds


def _ops(model):
    return [n.op for n in optimize(load_onnx(model)).nodes]


def _check(model, feeds, graph_ops=None):
    got = compile_model(model, jobs=1).run(feeds)
    want = ort_run(model, feeds)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)
    if graph_ops is not None:
        assert graph_ops <= set(_ops(model))


def test_a_constant_weight_is_prepacked_and_fuses_its_bias():
    model, feeds = _matmul_model((7, 17), 40, bias=True)
    graph = optimize(load_onnx(model))
    (node,) = [n for n in graph.nodes if n.op.startswith("matmul")]
    assert node.op == "matmul_prepacked" and node.attrs["n"] == 40
    assert graph.constants[node.inputs[1].name].shape == (5, 17, 8)     # 16 misses 40
    assert "w" not in graph.constants                                    # the original goes
    (group,) = fuse_operators(graph)
    assert group.ops == ("matmul_prepacked", "add")
    _check(model, feeds)


def test_a_runtime_weight_keeps_the_plain_matmul():
    model, feeds = _matmul_model((7, 17), 40, const=False)
    assert "matmul_prepacked" not in _ops(model) and "matmul" in _ops(model)
    _check(model, feeds)


def test_narrow_outputs_and_vectors_are_left_alone():
    model, _ = _matmul_model((7, 17), 16)
    assert _ops(model) == ["matmul"]                     # one panel: nothing to re-lay out
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, {"x": _rand(rng, 17)}, ["y"], {"w": _rand(rng, 17, 40)})
    assert _ops(model) == ["matmul"]                     # a 1-D x
    graph = load_onnx(model)
    assert prepack_matmul_weights(graph) is graph


def test_gemm_trans_b_is_folded_then_prepacked():
    model, feeds = _matmul_model((1, 64), 1000, trans_b=True)
    graph = optimize(load_onnx(model))
    (node,) = [n for n in graph.nodes if n.op.startswith("matmul")]
    assert node.op == "matmul_prepacked"
    assert graph.constants[node.inputs[1].name].shape == (25, 64, 40)   # GEMV panels
    _check(model, feeds)


def test_a_gemv_with_a_large_weight_stays_row_major():
    model, _ = _matmul_model((1, 1280), 1000, trans_b=True)       # 5 MB: from DRAM
    assert "matmul_prepacked" not in _ops(model)
    model, _ = _matmul_model((2, 1280), 1000, trans_b=True)       # a GEMM: reused rows
    assert "matmul_prepacked" in _ops(model)


def test_batch_broadcast_form():
    model, feeds = _matmul_model((2, 5, 24), 33, bias=True)
    assert "matmul_prepacked" in _ops(model)
    graph = load_onnx(model)
    want = run_reference(graph, feeds)
    got = run_reference(optimize(graph), feeds)
    for (_, g), w in zip(got.items(), want.values()):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    _check(model, feeds)


def test_a_shared_weight_is_packed_once():
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]),
             helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("MatMul", ["r", "w"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["y"])]
    model = make_model(nodes, {"x": _rand(rng, 4, 8)}, ["y"], {"w": _rand(rng, 8, 48)})
    graph = optimize(load_onnx(model))
    assert [n.op for n in graph.nodes].count("matmul_prepacked") == 2
    assert len(graph.constants) == 1


@pytest.mark.parametrize("rows, columns, block", [
    (128, 1024, 16), (128, 1000, 8), (128, 24, 8), (64, 1001, 16), (1, 1000, 40),
    (1, 256, 32), (1, 96, 48), (1, 128, 32), (1, 1001, 16)])
def test_weight_block(rows, columns, block):
    assert matmul_weight_block(rows, columns) == block


def test_pack_round_trip_and_errors():
    w = np.arange(17 * 13, dtype=np.float32).reshape(17, 13)
    packed = ops.pack_matmul_weight(w, 8)
    assert packed.shape == (2, 17, 8) and packed[1, :, 5:].sum() == 0
    np.testing.assert_array_equal(ops.unpack_matmul_weight(packed, 13), w)
    with pytest.raises(Exception, match=r"pack_matmul_weight\(\).*weight\[K, N\]"):
        ops.pack_matmul_weight(w[0], 8)
    with pytest.raises(Exception, match=r"unpack_matmul_weight\(\).*n=20"):
        ops.unpack_matmul_weight(packed, 20)


@pytest.mark.parametrize("name, make", [
    ("bert_like_encoder", lambda: models.bert_like_encoder(seq=8, hidden=32, heads=2,
                                                           layers=2, vocab=50)),
    ("mlp", lambda: models.mlp(sizes=(48, 32, 64, 10))),
    ("mobilenetv2_classifier", lambda: models.mobilenetv2_like(
        image_size=32, width_mult=0.25, num_classes=100, stages=3)),   # a 1280 x 100 GEMV
])
def test_models_match_onnxruntime(name, make):
    model = make()
    graph, groups = prepare_graph(model)
    assert any(n.op == "matmul_prepacked" for n in graph.nodes), name
    anchors = [g for g in groups if g.anchor is not None and g.anchor.op == "matmul_prepacked"]
    assert anchors and all(len(g.nodes) >= 1 for g in anchors)
    rng = np.random.default_rng(5)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == 7:
            feeds[inp.name] = rng.integers(0, 50, shape).astype(np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    _check(model, feeds)


def test_bert_gelu_epilogue_fuses_with_the_prepacked_anchor():
    model = models.bert_like_encoder(seq=8, hidden=32, heads=2, layers=1, vocab=50)
    _, groups = prepare_graph(model)
    ffn_up = [g for g in groups if g.anchor is not None and g.anchor.op == "matmul_prepacked"
              and "erf" in g.ops]
    assert ffn_up and set(ffn_up[0].ops) >= {"matmul_prepacked", "add", "div", "erf", "mul"}
