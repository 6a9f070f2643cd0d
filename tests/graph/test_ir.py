"""Graph IR basics: printing, frozen nodes, hashable attrs, op classes."""
from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest
from onnx import helper

from kiln.graph import FrozenDict, OpClass, Value, load_onnx, op_class
from kiln.te.errors import InternalError

from .graph_helpers import make_model


def test_graph_prints_readably():
    m = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="fc")],
                   {"x": ((2, 3), "float32")}, ["y"],
                   {"w": np.ones((4, 3), np.float32), "b": np.ones(4, np.float32)})
    assert str(load_onnx(m)) == "\n".join([
        "graph test(%x: float32[2, 3]) {",
        "  const %w: float32[4, 3]",
        "  const %b: float32[4]",
        "  %fc/transpose: float32[3, 4] = transpose(%w, perm=(1, 0))",
        "  %fc/matmul: float32[2, 4] = matmul(%x, %fc/transpose)",
        "  %y: float32[2, 4] = add(%fc/matmul, %b)",
        "  return %y",
        "}"])


def test_nodes_are_frozen_and_pickle():
    g = load_onnx(make_model([helper.make_node("Relu", ["x"], ["y"])],
                             {"x": ((2,), "float32")}, ["y"]))
    with pytest.raises(dataclasses.FrozenInstanceError):
        g.nodes[0].op = "exp"
    again = pickle.loads(pickle.dumps(g))
    assert again.nodes == g.nodes and hash(again.nodes[0].attrs) == hash(g.nodes[0].attrs)


def test_frozen_dict_is_hashable_and_equal():
    a, b = FrozenDict(perm=(1, 0), k=1), FrozenDict(k=1, perm=(1, 0))
    assert a == b and hash(a) == hash(b) and {a: 1}[b] == 1
    with pytest.raises(TypeError):
        a["k"] = 2  # type: ignore[index]


def test_value_canonicalises_dtype_and_size():
    v = Value("v", [2, 3], np.float32)
    assert v.shape == (2, 3) and v.dtype == "float32" and v.nbytes == 24


def test_op_classes():
    assert op_class("conv2d") is OpClass.OUT_ELEMWISE_FUSABLE
    assert op_class("add") is OpClass.BROADCAST and op_class("relu") is OpClass.ELEMWISE
    assert op_class("transpose") is OpClass.INJECTIVE and op_class("softmax") is OpClass.REDUCTION
    with pytest.raises(InternalError, match="'nosuchop' is not in Kiln's op table"):
        op_class("nosuchop")
