"""The search space on Winograd tasks: the default, random and mutated configs of the input
transform, the batched GEMM and the output transform compute their stage (against numpy),
and the default transform schedules unroll the transform axes."""
import random

import numpy as np
import pytest

from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.schedule.ir import For, ForKind
from kiln.schedule.lower import lower
from kiln.schedule.visitor import StmtVisitor
from kiln.te.ops import winograd as W
from tests.util import run_config, task_inputs


def _configs(space, samples=3, mutations=2):
    rng = random.Random(2)
    default = space.default_config()
    return ([default] + [space.sample(rng) for _ in range(samples)]
            + [space.neighbors(default, rng, 3) for _ in range(mutations)])


def _input_ref(x, m, pad):
    """V[e1, e2, p, c] = (B^T d B)[e1, e2] of tile p, from a float64 numpy loop."""
    n, cb, h, w, b = x.shape
    _, _, bt = W.winograd_matrices_f64(m)
    alpha = m + 2
    plain = x.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w).astype(np.float64)
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    th, tw = -(-oh // m), -(-ow // m)
    padded = np.zeros((n, cb * b, th * m + 2, tw * m + 2))
    rows, cols = min(h, th * m + 2 - pad), min(w, tw * m + 2 - pad)
    padded[:, :, pad:pad + rows, pad:pad + cols] = plain[:, :, :rows, :cols]
    v = np.zeros((alpha, alpha, n * th * tw, cb * b))
    for img in range(n):
        for ty in range(th):
            for tx in range(tw):
                d = padded[img, :, ty * m:ty * m + alpha, tx * m:tx * m + alpha]
                v[:, :, (img * th + ty) * tw + tx, :] = np.einsum("ai,cij,bj->abc", bt, d, bt)
    return v


def _output_ref(mm, m, oh, ow, n):
    a_t, _, _ = W.winograd_matrices_f64(m)
    _, _, fo, p, b = mm.shape
    th, tw = -(-oh // m), -(-ow // m)
    y = np.einsum("ka,abfpc,lb->fpklc", a_t, mm.astype(np.float64), a_t)
    y = y.reshape(fo, n, th, tw, m, m, b).transpose(1, 0, 2, 4, 3, 5, 6)
    return y.reshape(n, fo, th * m, tw * m, b)[:, :, :oh, :ow]


def _check(task, want, rtol=1e-4, atol=1e-4, inputs=None):
    inputs = inputs or task_inputs(task)
    space = SearchSpace(task)
    for config in _configs(space):
        got = run_config(task, space, config, inputs)[0]
        np.testing.assert_allclose(got, want(inputs), rtol=rtol, atol=atol, err_msg=str(config))


@pytest.mark.parametrize("shape", [(1, 16, 7, 7, 2), (2, 32, 9, 11, 4), (1, 16, 1, 1, 4),
                                   (1, 8, 5, 6, 2, 0, 8)])
def test_input_transform_configs(shape):
    task = Task.from_op("winograd_input_transform", shape)
    m, pad = shape[4], (shape[5] if len(shape) > 5 else 1)
    x_t = task.args[0]
    _check(task, lambda ins: _input_ref(ins[x_t], m, pad))


@pytest.mark.parametrize("shape", [(1, 16, 7, 7, 32, 2), (1, 48, 9, 11, 16, 4)])
def test_batch_matmul_configs(shape):
    task = Task.from_op("winograd_batch_matmul", shape)
    v_t, u_t = task.args[0], task.args[1]
    _check(task, lambda ins: np.einsum("abpc,abfcj->abfpj", ins[v_t].astype(np.float64),
                                       ins[u_t]))


@pytest.mark.parametrize("shape", [(1, 32, 7, 7, 2), (2, 16, 9, 11, 4), (1, 16, 1, 1, 4),
                                   (1, 16, 13, 13, 4)])
def test_output_transform_configs(shape):
    task = Task.from_op("winograd_output_transform", shape)
    n, _, oh, ow, m = shape
    m_t = task.args[0]
    _check(task, lambda ins: _output_ref(ins[m_t], m, oh, ow, n))


class _Kinds(StmtVisitor):
    def __init__(self):
        self.kinds, self.loops = [], []

    def visit_For(self, loop: For):
        self.kinds.append((loop.loop_var.name, loop.kind))
        self.loops.append(loop)
        self.generic_visit(loop)


@pytest.mark.parametrize("op,shape", [("winograd_input_transform", (1, 64, 56, 56, 4)),
                                      ("winograd_output_transform", (1, 64, 56, 56, 4))])
def test_default_transform_schedule_unrolls_transform_axes(op, shape):
    task = Task.from_op(op, shape)
    space = SearchSpace(task)
    sch, args = space.apply(space.default_config())
    kinds = _Kinds()
    kinds.visit(lower(sch, args, name="k").body)
    got = [kind for _, kind in kinds.kinds]
    # two unrolled transform axes inside, the channel block vectorised, one parallel loop
    assert got.count(ForKind.UNROLLED) == 2 and got[-1] is ForKind.VECTORIZED
    assert got.count(ForKind.PARALLEL) == 1, kinds.kinds


@pytest.mark.parametrize("shape", [(1, 128, 28, 28, 4), (1, 64, 14, 14, 2, 1, 8)])
def test_input_transform_vectors_stay_inside_one_channel_block(shape):
    """A vector across two channel blocks of x[N, C/b, H, W, b] would be a gather (with
    16-lane vectors, two of them spanned 32 channels: 28 s in LLVM per kernel)."""
    task = Task.from_op("winograd_input_transform", shape)
    block = task.args[0].shape[-1]
    for transform in (0, 1):
        space = SearchSpace(task)
        (knob,) = space.default_config()
        sch, args = space.apply({knob: transform})
        loops = _Kinds()
        loops.visit(lower(sch, args, name="k").body)
        (vector,) = [lp for lp in loops.loops if lp.kind is ForKind.VECTORIZED]
        assert block % vector.extent.value == 0, (block, vector.extent)


def test_a_model_group_with_bias_residual_and_relu_under_sampled_configs():
    from onnx import helper

    from kiln.graph.compile.model import prepare_graph
    from kiln.graph.reference import run_reference
    from kiln.graph.compile.tasks import extract_tasks
    from tests.graph.graph_helpers import make_model
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Conv", ["x", "w0"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["a", "w1", "b1"], ["b"], pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["b", "a"], ["c"]),
             helper.make_node("Relu", ["c"], ["y"])]
    inits = {"w0": rng.uniform(-1, 1, (32, 3, 3, 3)).astype(np.float32),
             "w1": rng.uniform(-0.3, 0.3, (32, 32, 3, 3)).astype(np.float32),
             "b1": rng.uniform(-1, 1, 32).astype(np.float32)}
    model = make_model(nodes, {"x": ((1, 3, 9, 10), "float32")}, ["y"], inits)
    graph, groups = prepare_graph(model)
    tasks, _ = extract_tasks(graph, groups)
    (mt,) = [t for t in tasks if t.dag.group.ops[0] == "winograd_output_transform"]
    assert mt.dag.group.ops == ("winograd_output_transform", "add", "add", "relu")
    # the group's inputs from the reference executor's values of the whole graph
    x = rng.uniform(-1, 1, (1, 3, 9, 10)).astype(np.float32)
    values = _all_values(graph, {"x": x}, run_reference)
    inputs = {t: values[v.name] for t, v in zip(mt.dag.placeholders, mt.dag.inputs)}
    want = values[mt.dag.group.outputs[0].name]
    space = SearchSpace(mt.task)
    assert any(k.name.endswith("/transform") for k in space.knobs)
    for config in _configs(space):
        got = run_config(mt.task, space, config, inputs)[0]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=str(config))


def _all_values(graph, feeds, run_reference):
    """Every value of `graph` under `feeds` (each node's outputs made graph outputs)."""
    outputs = tuple(v for n in graph.nodes for v in n.outputs)
    return {**graph.constants, **feeds, **run_reference(graph.replace(outputs=outputs), feeds)}


@pytest.mark.parametrize("op,shape", [("conv2d_nchwc", (1, 16, 8, 8, 16, 3, 3, 1, 1, 16, 16)),
                                      ("batch_matmul", (4, 8, 16, 32))])
def test_other_tasks_get_no_transform_knob(op, shape):
    assert not any(k.name.endswith("/transform")
                   for k in SearchSpace(Task.from_op(op, shape)).knobs)
