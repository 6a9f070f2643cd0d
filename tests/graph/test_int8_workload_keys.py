"""An int8 model's tasks keep their workload keys (so their tuning records apply) in another
model with the same layers but other weights, quantization scales and zero points: scales
and zero points are kernel arguments, never constants of the DAG or shared by value."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from kiln.graph.compile.model import model_tasks
from kiln.quantize import quantize_model

from .graph_helpers import make_model


def _residual_block(seed: int) -> onnx.ModelProto:
    """x -> conv -> relu -> conv -> + x -> relu (ResNet's basic block) -> conv, weights of
    `seed`: the add's output is quantized (a requantized add fused into the second conv)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 8, 6, 6)).astype(np.float32)
    inits = {f"w{k}": (rng.standard_normal((8, 8, 3, 3)) * rng.uniform(0.05, 0.5))
             .astype(np.float32) for k in (1, 2, 3)}
    inits.update({f"b{k}": rng.standard_normal(8).astype(np.float32) for k in (1, 2, 3)})
    conv = {"pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], **conv),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], **conv),
             helper.make_node("Add", ["c2", "x"], ["s"]),
             helper.make_node("Relu", ["s"], ["r2"]),
             helper.make_node("Conv", ["r2", "w3", "b3"], ["y"], **conv)]
    return make_model(nodes, {"x": x}, [("y", "float32")], inits, opset=17)


def _int8_keys(tmp_path, seed: int) -> dict[str, str]:
    src, dst = tmp_path / f"m{seed}.onnx", tmp_path / f"q{seed}.onnx"
    onnx.save(_residual_block(seed), src)
    quantize_model(src, dst, mode="static", random=2)
    return {t.task.workload_key: t.task.name for t in model_tasks(onnx.load(dst))}


def test_int8_tasks_have_one_key_whatever_the_quantization_parameters(tmp_path):
    first, second = _int8_keys(tmp_path, 0), _int8_keys(tmp_path, 1)
    assert any("int8" in name for name in first.values()), first
    assert set(first) == set(second), (sorted(first.values()), sorted(second.values()))


def test_a_requantized_add_has_one_key_whatever_its_scales():
    """onnxruntime's ratio form of a quantized add (graph/passes/int8/add.py): the
    ratios of the scales are kernel arguments, not immediates in the DAG."""
    from .test_quantized_add import _qdq_add
    keys = [{t.task.workload_key for t in model_tasks(_qdq_add("uint8", seed=seed)[0])}
            for seed in (0, 1)]
    assert keys[0] == keys[1] and len(keys[0]) == 1
