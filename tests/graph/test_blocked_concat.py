"""Channel concats in the blocked layout (graph/passes/layout/blocked.py): halves that fill
whole blocks of the block their twins share stay blocked (GhostNet's ghost modules), halves
that do not still convert, and both match onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from kiln.graph.compile.model import compile_model
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize, to_blocked_layout

from .graph_helpers import make_model, ort_run


def _ghost(cin, half, hw=11, shortcut=True):
    """A ghost module: 1x1 conv -> ReLU (a), depthwise 3x3 of a -> ReLU (b), concat(a, b)
    along channels, then a 1x1 conv back to `cin` plus the input."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (1, cin, hw, hw)).astype(np.float32)
    inits = {"w1": rng.uniform(-1, 1, (half, cin, 1, 1)).astype(np.float32),
             "w2": rng.uniform(-1, 1, (half, 1, 3, 3)).astype(np.float32),
             "w3": rng.uniform(-1, 1, (cin, 2 * half, 1, 1)).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a0"], kernel_shape=[1, 1]),
             helper.make_node("Relu", ["a0"], ["a"]),
             helper.make_node("Conv", ["a", "w2"], ["b0"], group=half, kernel_shape=[3, 3],
                              pads=[1] * 4),
             helper.make_node("Relu", ["b0"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1),
             helper.make_node("Conv", ["c", "w3"], ["d"], kernel_shape=[1, 1])]
    nodes.append(helper.make_node("Add", ["d", "x"], ["y"]) if shortcut
                 else helper.make_node("Relu", ["d"], ["y"]))
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


def _concat_inputs(model):
    """The ops producing each concat's inputs after the layout pass."""
    graph = to_blocked_layout(optimize(load_onnx(model)))
    producers = {v.name: n.op for n in graph.nodes for v in n.outputs}
    return [[producers.get(v.name) for v in n.inputs] for n in graph.nodes
            if n.op == "concat"]


@pytest.mark.parametrize("cin,half", [(16, 8), (80, 40), (48, 24)])
def test_halves_of_whole_blocks_concat_blocked(cin, half):
    """8 + 8 and 40 + 40 (in blocks of 8; the outputs' own block, 16, misses the halves)."""
    (inputs,) = _concat_inputs(_ghost(cin, half)[0])
    assert "from_blocked" not in inputs


def test_halves_of_padded_blocks_still_convert():
    (inputs,) = _concat_inputs(_ghost(24, 12)[0])      # 12 = one block of 8 and a half
    assert inputs == ["from_blocked", "from_blocked"]


@pytest.mark.parametrize("cin,half,shortcut", [(16, 8, True), (80, 40, True),
                                               (24, 12, True), (19, 8, False)])
def test_ghost_modules_match_onnxruntime(cin, half, shortcut):
    model, feeds = _ghost(cin, half, shortcut=shortcut)
    (got,) = compile_model(model, db=None, jobs=1, threads=1).run(feeds)
    (want,) = ort_run(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
