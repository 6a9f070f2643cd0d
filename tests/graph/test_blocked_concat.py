"""Channel concats and splits in the blocked layout (graph/passes/layout/blocked.py): halves
that fill whole blocks of the block their twins share stay blocked (GhostNet's ghost
modules), splits into whole blocks split the twin (MixNet's mixed convs), the others still
convert, and every form matches onnxruntime."""
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


def _mixed(channels, sizes):
    """MixNet's mixed conv: 1x1 conv to `channels`, Split along channels into `sizes`,
    a depthwise conv of its own kernel (3, 5, ...) on each part, concat, 1x1 conv."""
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (1, 5, 9, 9)).astype(np.float32)
    inits = {"w0": rng.uniform(-1, 1, (channels, 5, 1, 1)).astype(np.float32),
             "w9": rng.uniform(-1, 1, (3, channels, 1, 1)).astype(np.float32)}
    parts = [f"p{i}" for i in range(len(sizes))]
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], kernel_shape=[1, 1]),
             helper.make_node("Split", ["a", "sizes"], parts, axis=1)]
    inits["sizes"] = np.array(sizes, np.int64)
    for i, size in enumerate(sizes):
        k = 3 + 2 * i
        inits[f"w{i + 1}"] = rng.uniform(-1, 1, (size, 1, k, k)).astype(np.float32)
        nodes.append(helper.make_node("Conv", [parts[i], f"w{i + 1}"], [f"d{i}"], group=size,
                                      kernel_shape=[k, k], pads=[k // 2] * 4))
    nodes += [helper.make_node("Concat", [f"d{i}" for i in range(len(sizes))], ["c"], axis=1),
              helper.make_node("Conv", ["c", "w9"], ["y"], kernel_shape=[1, 1])]
    return make_model(nodes, {"x": x}, ["y"], inits), {"x": x}


@pytest.mark.parametrize("channels,sizes,blocked", [(32, [16, 16], True),
                                                    (48, [16, 32], True),
                                                    (32, [8, 24], False),
                                                    (24, [8, 16], True)])
def test_channel_splits_in_whole_blocks_run_blocked(channels, sizes, blocked):
    """Parts of whole blocks of the input's block split its twin (24 = 3 blocks of 8);
    8 + 24 of 32 (blocks of 16) converts; every form matches onnxruntime."""
    model, feeds = _mixed(channels, sizes)
    graph = to_blocked_layout(optimize(load_onnx(model)))
    (split,) = [n for n in graph.nodes if n.op == "split"]
    assert (len(split.inputs[0].shape) == 5) == blocked
    (got,) = compile_model(model, db=None, jobs=1, threads=1).run(feeds)
    (want,) = ort_run(model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
