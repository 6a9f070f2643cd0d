"""The search space on Winograd tasks: the default, random and mutated configs of the input
transform, the batched GEMM and the output transform compute their stage (against numpy),
and the default transform schedules unroll the transform axes."""
import random

import numpy as np
import pytest

from kiln.autotune.space import SearchSpace
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
        self.kinds = []

    def visit_For(self, loop: For):
        self.kinds.append((loop.loop_var.name, loop.kind))
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
