"""The rule-generated search space on transposed-conv tasks: the default, random and mutated
configs all compute ConvTranspose (phase conv, plain or block-packed, grouped, depthwise with
zero taps, stride 1, and a model's group with its bias and relu epilogue)."""
import random

import numpy as np
import pytest
from onnx import helper

from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.graph.compile.model import prepare_graph
from kiln.graph.compile.tasks import extract_tasks
from kiln.te import ops
from tests.graph.graph_helpers import make_model, ort_run
from tests.te.test_conv_transpose import conv_transpose_ref
from tests.util import run_config, task_inputs

SHAPES = {  # Task.from_op("conv2d_transpose", shape): N, C, H, W, F, R, S, stride, pad, op, groups
    "blocked-4x4-s2": (1, 16, 7, 5, 8, 4, 4, 2, 1),
    "depthwise-3x3-s2-zero-taps": (1, 8, 6, 9, 8, 3, 3, 2, 1, 1, 8),
    "grouped-s3": (2, 6, 5, 7, 9, 3, 3, 3, 1, 2, 3),
    "stride1": (1, 5, 7, 6, 3, 3, 3, 1, 1),
    "blocked-2x2-s2-no-pad": (1, 12, 5, 5, 4, 2, 2, 2, 0),
}


def _configs(space, samples=4, mutations=2):
    rng = random.Random(1)
    default = space.default_config()
    return ([default] + [space.sample(rng) for _ in range(samples)]
            + [space.neighbors(default, rng, 3) for _ in range(mutations)])


@pytest.mark.parametrize("name", list(SHAPES))
def test_sampled_configs_compute_conv_transpose(name):
    shape = SHAPES[name]
    task = Task.from_op("conv2d_transpose", shape)
    kernel, rest = shape[5:7], list(shape[7:]) + [1, 0, 0, 1][len(shape) - 7:]
    stride, pad, out_pad, groups = rest
    x_t, w_t = task.args[0], task.args[1]
    inputs = task_inputs(task)
    # a valid packing: a random array has non-zero values in the slots of absent taps
    w = ops.unpack_conv_transpose_weight(inputs[w_t], kernel, stride, 1, groups)
    block = w_t.shape[4] if w_t.ndim == 5 else None
    inputs[w_t] = ops.pack_conv_transpose_weight(w, stride, 1, groups, block)
    want = conv_transpose_ref(inputs[x_t], w, stride, pad, 1, out_pad, groups)
    space = SearchSpace(task)
    for config in _configs(space):
        got = run_config(task, space, config, inputs)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_a_model_group_with_bias_and_relu_under_sampled_configs():
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (1, 16, 6, 5)).astype(np.float32)
    nodes = [helper.make_node("ConvTranspose", ["x", "w", "b"], ["t"], strides=[2, 2],
                              pads=[1, 1, 1, 1], output_padding=[1, 0]),
             helper.make_node("Relu", ["t"], ["y"])]
    inits = {"w": rng.uniform(-1, 1, (16, 8, 3, 3)).astype(np.float32),
             "b": rng.uniform(-1, 1, 8).astype(np.float32)}
    model = make_model(nodes, {"x": x}, ["y"], inits)
    graph, groups = prepare_graph(model)
    (mt,) = extract_tasks(graph, groups)[0]
    assert set(mt.dag.group.ops) == {"conv2d_transpose", "add", "relu"}
    inputs = {t: graph.constants[v.name] if v.name in graph.constants else x
              for t, v in zip(mt.dag.placeholders, mt.dag.inputs)}
    want = ort_run(model, {"x": x})[0]
    space = SearchSpace(mt.task)
    for config in _configs(space, samples=3, mutations=2):
        got = run_config(mt.task, space, config, inputs)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_conv2d_transpose_is_a_tuning_operator():
    task = Task.from_op("conv2d_transpose", (1, 64, 32, 32, 32, 4, 4, 2, 1))
    assert task.shapes == [["X", [1, 64, 32, 32], "float32"],
                           ["W", [8, 64, 2, 2, 16], "float32"],     # 4 phases x 32, blocks of 16
                           ["convt", [1, 32, 64, 64], "float32"]]
    # 2 * 64 * 32 * 64 * 64 * 4 multiply-adds over the 33 x 33 phase rows and columns
    assert task.flops >= 2 * 64 * 32 * 32 * 32 * 16
    grouped = Task.from_op("conv2d_transpose", (1, 8, 5, 5, 8, 3, 3, 2, 1, 1, 8))
    assert grouped.shapes[1] == ["W", [32, 1, 2, 2], "float32"]
