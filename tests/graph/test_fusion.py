"""Operator fusion: expected groups on a conv-bn-relu-add model and on the BERT block."""
from __future__ import annotations

import numpy as np
from onnx import helper

from kiln.graph import models
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import OpClass
from kiln.graph.passes import fuse_operators, optimize

from .graph_helpers import make_model

R = np.random.default_rng(5)


def _conv_bn_relu_add():
    def bn(i):
        return {f"s{i}": R.uniform(0.5, 1.5, 4).astype(np.float32),
                f"b{i}": R.uniform(-1, 1, 4).astype(np.float32),
                f"m{i}": R.uniform(-1, 1, 4).astype(np.float32),
                f"v{i}": R.uniform(0.5, 1.5, 4).astype(np.float32)}
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], pads=[1, 1, 1, 1], name="conv0"),
        helper.make_node("BatchNormalization", ["c0", "s0", "b0", "m0", "v0"], ["n0"]),
        helper.make_node("Relu", ["n0"], ["r0"]),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "s1", "b1", "m1", "v1"], ["n1"]),
        helper.make_node("Add", ["n1", "r0"], ["a"]),
        helper.make_node("Relu", ["a"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["y1"], name="conv2"),
        helper.make_node("Softmax", ["r1"], ["y2"], axis=1),
    ]
    inits = {"w0": R.standard_normal((4, 4, 3, 3)).astype(np.float32),
             "w1": R.standard_normal((4, 4, 3, 3)).astype(np.float32),
             "w2": R.standard_normal((4, 4, 1, 1)).astype(np.float32), **bn(0), **bn(1)}
    return make_model(nodes, {"x": ((1, 4, 8, 8), "float32")}, ["y1", "y2"], inits)


def test_conv_bn_relu_add_groups():
    graph = optimize(load_onnx(_conv_bn_relu_add()))
    groups = fuse_operators(graph)
    assert [g.ops for g in groups] == [
        ("conv2d", "add", "relu"),
        ("conv2d", "add", "add", "relu"),  # folded BN bias, residual add, relu
        ("conv2d",),
        ("softmax",),
    ]
    assert [g.kind for g in groups] == [OpClass.OUT_ELEMWISE_FUSABLE] * 3 + [OpClass.REDUCTION]
    g1 = groups[1]
    assert [v.name for v in g1.inputs if v.name not in g1.constant_inputs] == ["r0"]
    assert len(g1.constant_inputs) == 2 and g1.anchor.op == "conv2d"
    assert [v.name for v in g1.outputs] == ["r1"]
    # both groups 0 and 1 have the same shapes, so they share one tuning task (constants by
    # shape only); group 1 differs by its residual input
    assert groups[0].key != groups[1].key
    assert all(sum(n in g.nodes for g in groups) == 1 for n in graph.nodes)


def test_identical_blocks_share_a_signature():
    graph = optimize(load_onnx(models.resnet18_like(image_size=32, base_width=8)))
    groups = fuse_operators(graph)
    keys = [g.key for g in groups]
    assert len(set(keys)) < len(keys)
    conv_groups = [g for g in groups if g.anchor is not None and g.anchor.op.startswith("conv2d")]
    by_key = {}
    for g in conv_groups:
        by_key.setdefault(g.key, []).append(g)
    shared = [gs for gs in by_key.values() if len(gs) > 1]
    assert shared and all(gs[0].signature == gs[1].signature for gs in shared)
    assert all(gs[0].inputs[1].name != gs[1].inputs[1].name for gs in shared)  # other weights


def test_bert_block_groups():
    graph = optimize(load_onnx(models.bert_like_encoder(seq=8, hidden=32, heads=2, layers=1)))
    groups = fuse_operators(graph)
    ops = [g.ops for g in groups]
    assert ops[0] == ("gather", "add") and ops[1] == ("layer_norm",)
    # (linears read their constant weights as prepacked panels: matmul_prepacked)
    assert ops[2:4] == [("matmul_prepacked", "add"), ("reshape", "transpose")]  # Q proj, heads
    assert ("matmul", "div") in ops  # scores scaled by 1/sqrt(d) in the matmul epilogue
    assert ("softmax",) in ops and ("transpose", "reshape") in ops
    assert ("matmul_prepacked", "add", "add") in ops  # output projection + bias + residual
    # FFN up-projection + bias + the whole GELU diamond (x feeds both x/sqrt(2) and x*0.5)
    assert ("matmul_prepacked", "add", "div", "erf", "mul", "add", "mul") in ops
    assert not any(g.ops in (("div", "erf", "add", "mul"), ("mul",)) for g in groups)
    assert ops.count(("layer_norm",)) == 3
    produced = set()
    for g in groups:  # execution order: every non-constant input is ready
        for v in g.inputs:
            assert v.name in produced or v.name in g.constant_inputs or v.name == "input_ids"
        produced.update(v.name for v in g.outputs)
