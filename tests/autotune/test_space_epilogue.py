"""Epilogues that branch and rejoin (GELU reads x twice): fused at the anchor's tile under the
`epilogue` knob, every config correct, stored configs keep the unfused schedule."""
import random

import numpy as np
import pytest

from kiln import te
from kiln.autotune.space.rules import LEGACY, SearchSpace
from kiln.autotune.task import Task
from kiln.schedule.lower import lower
from kiln.schedule.schedule import AttachKind
from kiln.te.reference import evaluate

from ..util import knob, run_config, task_inputs


def _linear(m, k, n, batched):
    """x @ W + bias as the graph lowers it: [1, m, n] when `batched`, else [m, n]."""
    X = te.placeholder((1, m, k) if batched else (m, k), name="X")
    W = te.placeholder((k, n), name="W")
    b = te.placeholder((n,), name="b")
    r = te.reduce_axis(k, "k")
    if batched:
        C = te.compute((1, m, n), lambda z, i, j: te.sum(X[0, i, r] * W[r, j], axis=[r]),
                       name="matmul")
        Y = te.compute(C.shape, lambda z, i, j: C[0, i, j] + b[j], name="add")
    else:
        C = te.compute((m, n), lambda i, j: te.sum(X[i, r] * W[r, j], axis=[r]),
                       name="matmul")
        Y = te.compute(C.shape, lambda i, j: C[i, j] + b[j], name="add")
    return X, W, b, Y


def gelu_task(m, k, n, batched=False, target="native"):
    """matmul + bias, then x * 0.5 * (1 + erf(x / sqrt 2)) as ONNX spells it: five stages,
    x read by the `multiply` and by the `divide` branch, joined by the last multiply."""
    X, W, b, x = _linear(m, k, n, batched)
    half = te.compute(x.shape, lambda *i: x(*i) * 0.5, name="multiply")
    scaled = te.compute(x.shape, lambda *i: x(*i) / 1.4142135381698608, name="divide")
    e = te.compute(x.shape, lambda *i: te.erf(scaled(*i)), name="erf")
    one = te.compute(x.shape, lambda *i: e(*i) + 1.0, name="add1")
    Y = te.compute(x.shape, lambda *i: half(*i) * one(*i), name="gelu")
    return Task(f"gelu_{m}x{k}x{n}", (Y,), (X, W, b, Y), target)


def silu_task(m, k, n):
    """x * sigmoid(x): the exit reads the bias-add directly and through one branch."""
    X, W, b, x = _linear(m, k, n, False)
    s = te.compute(x.shape, lambda *i: te.sigmoid(x(*i)), name="sigmoid")
    Y = te.compute(x.shape, lambda *i: x(*i) * s(*i), name="silu")
    return Task(f"silu_{m}x{k}x{n}", (Y,), (X, W, b, Y))


def two_matmul_task(m, k, n):
    """gelu-like(A @ B) * (A @ B2): the joined exit also reads a second reduction, so the
    first anchor's epilogue is not fused (its tile would depend on the other anchor)."""
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    B2 = te.placeholder((k, n), name="B2")
    r1, r2 = te.reduce_axis(k, "k1"), te.reduce_axis(k, "k2")
    C1 = te.compute((m, n), lambda i, j: te.sum(A[i, r1] * B[r1, j], axis=[r1]), name="C1")
    C2 = te.compute((m, n), lambda i, j: te.sum(A[i, r2] * B2[r2, j], axis=[r2]), name="C2")
    t = te.compute(C1.shape, lambda *i: te.tanh(C1(*i)), name="t")
    Y = te.compute(C1.shape, lambda *i: C1(*i) * t(*i) * C2(*i), name="Y")
    return Task(f"twomm_{m}x{k}x{n}", (Y,), (A, B, B2, Y))




def test_gelu_diamond_is_the_anchors_joined_epilogue():
    space = SearchSpace(gelu_task(16, 8, 32))
    (anchor,) = space.anchors
    assert anchor.op.name == "matmul" and anchor.epilogue.name == "gelu" and anchor.joined
    assert {op.name for op in space.inlined} == {"add", "multiply", "divide", "erf", "add1"}
    # the exit keeps its elementwise knobs: they schedule it when the knob is 0
    assert [op.name for op in space.elementwise] == ["gelu"]
    assert space.default_config()[knob(space, "matmul", "epilogue")] == 1
    assert LEGACY["epilogue"] == 0


def test_chains_and_other_operators_get_no_epilogue_knob():
    dense = SearchSpace(Task.from_op("dense", (4, 8, 6)))         # bias + relu: a chain
    (anchor,) = dense.anchors
    assert anchor.epilogue.name == "relu" and not anchor.joined
    for op_name, shape in [("dense", (4, 8, 6)), ("matmul", (7, 5, 11)),
                           ("softmax", (3, 13)), ("conv2d", (1, 2, 5, 5, 3, 3, 3, 1, 1))]:
        space = SearchSpace(Task.from_op(op_name, shape))
        assert not any("/epilogue" in k.name for k in space.knobs), op_name


def test_a_joined_exit_reading_another_reduction_is_not_fused():
    space = SearchSpace(two_matmul_task(5, 4, 6))
    first, second = space.anchors
    assert first.op.name == "C1" and first.epilogue is None
    assert second.op.name == "C2" and second.epilogue.name == "Y" and not second.joined


def test_fused_epilogue_computes_the_anchor_inside_the_exit_tile():
    space = SearchSpace(gelu_task(32, 16, 64))
    sch, args = space.apply(space.default_config())
    assert sch[space.anchors[0].op].attach is AttachKind.AT
    text = str(lower(sch, args, name="gelu"))
    assert "allocate matmul: float32" in text and "(local)" in text
    assert "allocate matmul: float32[32, 64] (global)" not in text
    assert text.count("erf(") >= 1


def test_stored_configs_without_the_knob_keep_the_separate_epilogue_loop():
    space = SearchSpace(gelu_task(32, 16, 64))
    stored = {k: v for k, v in space.default_config().items() if not k.endswith("/epilogue")}
    assert space.validate(stored)[knob(space, "matmul", "epilogue")] == 0
    sch, args = space.apply(stored)
    assert sch[space.anchors[0].op].attach is AttachKind.ROOT
    assert any(s.name == "matmul.local" for s in sch.stages)
    text = str(lower(sch, args, name="gelu"))
    assert "allocate matmul: float32[32, 64] (global)" in text


SHAPES = [(7, 13, 5), (1, 37, 19), (1, 5, 3), (6, 9, 40), (12, 4, 17)]


@pytest.mark.parametrize("m,k,n", SHAPES)
@pytest.mark.parametrize("batched", [False, True])
def test_gelu_configs_match_reference(m, k, n, batched):
    task = gelu_task(m, k, n, batched)
    space = SearchSpace(task)
    inputs = task_inputs(task)
    expected = evaluate(list(task.outputs), inputs)
    rng = random.Random(m * 1000 + k * 10 + n + batched)
    default = space.default_config()
    configs = [default, dict(default, **{knob(space, "matmul", "epilogue"): 0})]
    configs += [space.sample(rng) for _ in range(6)]
    for config in configs:
        for got, want in zip(run_config(task, space, config, inputs, compiled=True), expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(config))


@pytest.mark.parametrize("make", [silu_task, two_matmul_task])
def test_other_joined_shapes_match_reference_interpreted(make):
    task = make(7, 13, 5)
    space = SearchSpace(task)
    assert space.anchors[0].joined == (make is silu_task)
    inputs = task_inputs(task, seed=3)
    expected = evaluate(list(task.outputs), inputs)
    rng = random.Random(11)
    for config in [space.default_config()] + [space.sample(rng) for _ in range(4)]:
        for got, want in zip(run_config(task, space, config, inputs, compiled=False), expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(config))
