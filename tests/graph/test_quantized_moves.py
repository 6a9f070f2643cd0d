"""Data movement on quantized tensors (graph/passes/int8/quantize.py `_move_on_integers`): a
reshape, transpose, slice, split or concat between a DQ and a Q of one scale, zero point and
type runs on the integers (ShuffleNet-V2's channel shuffle and split). Checked bit for bit
against onnx's reference evaluator and onnxruntime int8, with convs around the shuffle (the
int8 convs' pixel-major layout meets the integer moves), uint8 and int8, zero points other
than 0, odd channel counts; a move between different parameters keeps the float path."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes.int8.quantize import fuse_quantized_kernels

from .graph_helpers import make_model


def _shuffle_model(dtype: str, c: int, h: int, w: int, seed: int = 0, same: bool = True):
    """Q(x) -> conv 1x1 (c -> 2c) -> channel shuffle (reshape, transpose, reshape) -> split
    in two -> conv on one half -> concat with the other half -> DQ, every DQ/Q around the
    moves of one scale and zero point (`same`; else the concat's output has its own)."""
    rng = np.random.default_rng(seed)
    lo, hi = (0, 256) if dtype == "uint8" else (-128, 128)
    zp = np.array(rng.integers(lo + 40, hi - 40), dtype)
    inits = {"s_in": np.float32(0.02), "z_in": zp, "s": np.float32(0.03), "z": zp,
             "s_cat": np.float32(0.03 if same else 0.041),
             "z_cat": np.array(zp if same else zp + 3, dtype),
             "w1": rng.integers(-127, 128, (2 * c, c, 1, 1)).astype(np.int8),
             "w2": rng.integers(-127, 128, (c, c, 1, 1)).astype(np.int8),
             "sw1": rng.uniform(0.002, 0.004, 2 * c).astype(np.float32),
             "sw2": rng.uniform(0.002, 0.004, c).astype(np.float32),
             "zw1": np.zeros(2 * c, np.int8), "zw2": np.zeros(c, np.int8),
             "shape5": np.array([1, 2, c, h, w], np.int64),
             "shape4": np.array([1, 2 * c, h, w], np.int64),
             "halves": np.array([c, c], np.int64)}

    def qdq(src, dst, s="s", z="z"):
        return [helper.make_node("QuantizeLinear", [src, s, z], [dst + "_q"]),
                helper.make_node("DequantizeLinear", [dst + "_q", s, z], [dst])]

    nodes = qdq("x", "xd", "s_in", "z_in") + [
        helper.make_node("DequantizeLinear", ["w1", "sw1", "zw1"], ["w1d"], axis=0),
        helper.make_node("DequantizeLinear", ["w2", "sw2", "zw2"], ["w2d"], axis=0),
        helper.make_node("Conv", ["xd", "w1d"], ["c1"])] + qdq("c1", "c1d") + [
        helper.make_node("Reshape", ["c1d", "shape5"], ["r5"])] + qdq("r5", "r5d") + [
        helper.make_node("Transpose", ["r5d"], ["t5"], perm=[0, 2, 1, 3, 4])] + qdq(
        "t5", "t5d") + [
        helper.make_node("Reshape", ["t5d", "shape4"], ["r4"])] + qdq("r4", "r4d") + [
        helper.make_node("Split", ["r4d", "halves"], ["p0", "p1"], axis=1)] + qdq(
        "p0", "p0d") + qdq("p1", "p1d") + [
        helper.make_node("Conv", ["p1d", "w2d"], ["c2"])] + qdq("c2", "c2d") + [
        helper.make_node("Concat", ["p0d", "c2d"], ["cat"], axis=1)] + qdq(
        "cat", "y", "s_cat", "z_cat")
    x = (rng.standard_normal((1, c, h, w)) * 1.5).astype(np.float32)
    return make_model(nodes, {"x": x}, ["y"], inits, opset=19), {"x": x}


@pytest.mark.parametrize("dtype,c,h,w", [("uint8", 5, 3, 7), ("int8", 29, 4, 4),
                                         ("uint8", 16, 1, 1)])
def test_a_channel_shuffle_runs_on_the_integers_exactly(dtype, c, h, w):
    model, feeds = _shuffle_model(dtype, c, h, w)
    graph = fuse_quantized_kernels(load_onnx(model))
    ops = [n.op for n in graph.nodes]
    assert ops.count("quantize_linear") == 1, ops          # the input's only
    assert ops.count("dequantize_linear") == 1, ops        # the output's only
    for op in ("reshape", "transpose", "split", "concat"):
        node = next(n for n in graph.nodes if n.op == op)
        assert node.outputs[0].dtype == dtype, (op, node.outputs[0].dtype)
    spec = ReferenceEvaluator(model).run(None, feeds)[0]
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, spec)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    ours = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    np.testing.assert_array_equal(got, ours)


def test_a_move_between_different_parameters_keeps_the_float_path():
    model, feeds = _shuffle_model("uint8", 6, 3, 3, same=False)
    graph = fuse_quantized_kernels(load_onnx(model))
    concat = next(n for n in graph.nodes if n.op == "concat")
    assert concat.outputs[0].dtype == "float32"            # requantizes: not a pure move
    assert next(n for n in graph.nodes if n.op == "transpose").outputs[0].dtype == "uint8"
    spec = ReferenceEvaluator(model).run(None, feeds)[0]
    got = kiln.compile(model, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, spec)
