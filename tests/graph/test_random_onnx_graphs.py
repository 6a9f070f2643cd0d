"""Property: a random small ONNX graph (tests/graph/onnx_strategies.py) compiled by Kiln gives
onnxruntime's outputs: shapes exactly, values to fp32 rounding. One test per op mix, so a
failure names the family; the example counts keep the file under a minute."""
from __future__ import annotations


import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from onnx import TensorProto, helper

import kiln

from ..util import finishes_in_child
from .graph_helpers import ort_run
from .onnx_strategies import onnx_graphs

MIXES = {
    "elementwise_broadcast": ("unary", "binary"),
    "reductions": ("unary", "binary", "reduce"),
    "reshapes": ("reshape", "flatten", "squeeze", "transpose", "unary"),
    "slice_split_concat": ("slice", "split", "concat", "unary", "binary"),
    "gather": ("gather", "transpose", "binary"),
    "cnn_views": ("conv", "slice", "split", "concat", "reduce", "binary", "reshape"),
    "everything": ("unary", "binary", "reduce", "reshape", "flatten", "squeeze", "transpose",
                   "slice", "split", "concat", "gather", "conv"),
}
EXAMPLES = 10


def check_against_onnxruntime(model, feeds):
    want = ort_run(model, feeds)
    got = kiln.compile(model, db=None, jobs=1).run(feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {k}: shape {g.shape}, onnxruntime {w.shape}"
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"output {k}")


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_random_graphs_match_onnxruntime(mix):
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(onnx_graphs(families=MIXES[mix]))
    def check(model_and_feeds):
        check_against_onnxruntime(*model_and_feeds)
    check()


def _whole_reduction(op: str, shape, axes) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    out = [1 if k in [a % len(shape) for a in axes] else d for k, d in enumerate(shape)]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, out)
    nodes = [helper.make_node("Tanh", ["x"], ["t"]),
             helper.make_node(op, ["t"], ["y"], axes=list(axes), keepdims=1)]
    model = helper.make_model(helper.make_graph(nodes, "whole", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _compile_and_check(op, shape, axes):
    x = np.random.default_rng(len(shape)).uniform(-2, 2, shape).astype(np.float32)
    got = kiln.compile(_whole_reduction(op, shape, axes), db=None, jobs=1).run({"x": x})[0]
    ref = (np.max if op == "ReduceMax" else np.min)(np.tanh(x), axis=tuple(axes),
                                                   keepdims=True)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op, shape, axes", [("ReduceMax", (5, 5), (0, -1)),
                                             ("ReduceMin", (7, 5, 1), (0, -2)),
                                             ("ReduceMax", (7, 3, 5), (0, 1, 2))])
def test_whole_tensor_reductions_compile_in_seconds(op, shape, axes):
    """Regression (found by benchmarks/llvm_hang_hunt.py): the reductions mix's graphs whose
    ReduceMax/ReduceMin covers every element hung a CI run in LLVM (exponential in the
    element count; see codegen/emit_module.remove_unit_loops). Compiled in a forked child,
    so that a regression fails instead of hanging the suite."""
    assert finishes_in_child(_compile_and_check, (op, shape, axes), 120), \
        f"{op} of {shape} over {axes}: the compile failed or took over 120 s"
