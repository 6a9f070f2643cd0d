"""A model compiled for 2 threads with the thread decision's row loops (a transpose out of the
blocked layout, a softmax over 33-wide rows) and its deeper parallel loops (a 1x1 conv of 5
channel blocks) gives onnxruntime's answer and the 1-thread model's, and forks."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from kiln.codegen.runtime import backend, fork_count
from kiln.graph.compile.model import compile_model

from .graph_helpers import ort_run


def _model() -> onnx.ModelProto:
    """x[1, 48, 32, 33] -> 1x1 conv to 80 channels -> relu -> NHWC transpose -> softmax over
    the channels; and the conv's output as NCHW, transposed to put width last."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((80, 48, 1, 1)).astype(np.float32) * 0.2
    b = rng.standard_normal(80).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Softmax", ["t"], ["y"], axis=-1),
        helper.make_node("Transpose", ["c"], ["z"], perm=[0, 1, 3, 2]),
    ]
    graph = helper.make_graph(
        nodes, "threads_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 48, 32, 33])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 33, 80]),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 80, 33, 32])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled():
    model = _model()
    return model, {n: compile_model(model, db=None, threads=n, jobs=1, cache_model=False)
                   for n in (1, 2)}


def test_two_threads_match_onnxruntime_and_one_thread(compiled):
    model, by_threads = compiled
    x = np.random.default_rng(1).standard_normal((1, 48, 32, 33)).astype(np.float32)
    want = ort_run(model, {"x": x})
    one = by_threads[1].run({"x": x})
    two = by_threads[2].run({"x": x})
    for w, a, b in zip(want, one, two):
        np.testing.assert_allclose(b, w, rtol=2e-4, atol=2e-5)
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(backend() != "kiln", reason="fork counter is Kiln's pool's")
def test_two_thread_model_forks_one_thread_model_does_not(compiled):
    _, by_threads = compiled
    x = np.zeros((1, 48, 32, 33), np.float32)
    counts = {}
    for n, m in by_threads.items():
        # every kernel at the model's count: the measured thread choice (thread_choice.py)
        # may have put some on one thread on this machine
        m.set_num_threads(n, choice=False)
        m.run({"x": x})
        before = fork_count()
        m.run({"x": x})
        counts[n] = fork_count() - before
        m.set_num_threads(n)
    assert counts[1] == 0
    assert counts[2] >= 2
