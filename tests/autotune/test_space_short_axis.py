"""GEMMs whose columns are not a multiple of 16 (MobileViT's and EdgeNeXt's 24-wide heads and
channels, 40, 72, 120, ...). A batched MatMul's column axis between one and two 16-lane vectors
long gets a half or partial vector tile, or one vector with a tail, never 1.5 vectors (a
24-lane register tile ran 10-20x slower); a constant weight whose columns 8 divides but 16 does
not is packed in panels of 8 (a tail panel's guard ran 3-9x slower). Outputs of awkward shapes
checked against onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import kiln
from kiln.autotune.space.defaults import _vector_tile
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from tests.util import knob

AVX512 = "llvm -mcpu=znver4"


@pytest.mark.parametrize("extent", range(17, 32))
def test_no_tile_between_one_and_two_vectors(extent):
    width = _vector_tile(extent, 16)
    assert width <= 16 and (extent % width == 0 or width == 16)
    # window anchors (depthwise, pooling) keep the whole axis; 8-lane vectors too
    assert _vector_tile(extent, 16, odd=True) == extent


@pytest.mark.parametrize("extent,want", [(24, 8), (20, 10), (28, 14), (30, 15), (17, 16),
                                         (16, 16), (32, 32), (12, 12), (1, 1)])
def test_short_axis_widths(extent, want):
    assert _vector_tile(extent, 16) == want


@pytest.mark.parametrize("extent", [9, 10, 12, 14, 15])
def test_eight_lane_vectors_keep_the_whole_axis(extent):
    assert _vector_tile(extent, 8) == extent


def test_batch_matmul_default_tile_is_whole_vectors():
    task = Task.from_op("batch_matmul", (16, 64, 64, 24), target=AVX512)
    space = SearchSpace(task)
    config = space.default_config()
    assert config[knob(space, task.outputs[0].op.name, "tile/2")][1] == 8


def _matmul_model(a_shape, b_shape):
    out = list(np.broadcast_shapes(a_shape[:-2], b_shape[:-2])) + [a_shape[-2], b_shape[-1]]
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
        "short_axis",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape)),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 64, 64), (2, 3, 64, 24)),      # attention times V, 24-wide heads
    ((4, 13, 7), (4, 7, 20)),              # prime rows and K, 20 columns
    ((3, 17, 31), (3, 31, 17)),            # 17 columns: one vector and a tail
    ((5, 23), (23, 28)),                   # plain GEMM, 28 columns
    ((1, 2, 9, 11), (2, 11, 31)),          # broadcast batch, 31 columns
])
def test_short_axis_matmul_matches_onnxruntime(a_shape, b_shape):
    import onnxruntime as ort
    model = _matmul_model(a_shape, b_shape)
    rng = np.random.default_rng(3)
    a = rng.uniform(-1, 1, a_shape).astype(np.float32)
    b = rng.uniform(-1, 1, b_shape).astype(np.float32)
    compiled = kiln.compile(model, db=None, threads=1)
    (got,) = compiled.run([a, b])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"a": a, "b": b})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def _linear_model(rows, k, n, gemm=False):
    rng = np.random.default_rng(5)
    w = rng.uniform(-1, 1, (n, k) if gemm else (k, n)).astype(np.float32)
    b = rng.uniform(-1, 1, n).astype(np.float32)
    if gemm:
        nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)]
        x_shape = [rows, k]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["t"]),
                 helper.make_node("Add", ["t", "b"], ["y"])]
        x_shape = [1, rows, k]
    graph = helper.make_graph(
        nodes, "linear", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, x_shape[:-1] + [n])],
        [helper.make_tensor(name, TensorProto.FLOAT, a.shape, a.ravel().tolist())
         for name, a in (("w", w), ("b", b))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), x_shape


@pytest.mark.parametrize("rows,k,n,gemm,panel", [
    (33, 96, 24, False, 8),      # EdgeNeXt's pointwise 96 -> 24, prime rows
    (5, 17, 40, True, 8),        # Gemm transB form, prime K
    (130, 64, 120, False, 8),    # MobileViT's 120 channels
    (12, 64, 20, True, 16),      # 8 does not divide: panels of 16 and a guarded tail
    (7, 31, 48, False, 16),      # whole panels of 16
])
def test_linear_panels_match_onnxruntime(rows, k, n, gemm, panel):
    import onnxruntime as ort
    model, x_shape = _linear_model(rows, k, n, gemm)
    graph = optimize(load_onnx(model))
    packed = [n_ for n_ in graph.nodes if n_.op == "matmul_prepacked"]
    assert len(packed) == 1 and packed[0].inputs[1].shape[-1] == panel
    x = np.random.default_rng(6).uniform(-1, 1, x_shape).astype(np.float32)
    (got,) = kiln.compile(model, db=None, threads=1).run([x])
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    (want,) = session.run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
