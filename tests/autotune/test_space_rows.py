"""Row groups: an output computed row by row with its row reductions split into a vectorised
partial and a final reduction (softmax, layer norm, mean): which DAGs get one, every config
correct on awkward shapes, stored configs keep their schedule."""
import random

import numpy as np
import pytest

from kiln import te
from kiln.autotune.space.rules import AT_ANCHOR, INLINE, LEGACY, SearchSpace
from kiln.autotune.task import Task
from kiln.codegen import Target
from kiln.schedule.lower import lower
from kiln.te import ops
from kiln.te.reference import evaluate

from ..util import knob, run_config, task_inputs


def softmax_task(*shape):
    X = te.placeholder(shape, name="X")
    Y = ops.softmax(X, axis=-1, name="softmax")
    return Task(f"softmax_{shape}", (Y,), (X, Y))


def log_softmax_task(*shape):
    X = te.placeholder(shape, name="X")
    Y = ops.log_softmax(X, axis=-1, name="log_softmax")
    return Task(f"log_softmax_{shape}", (Y,), (X, Y))


def layer_norm_task(*shape):
    X = te.placeholder(shape, name="X")
    gamma = te.placeholder(shape[-1:], name="gamma")
    beta = te.placeholder(shape[-1:], name="beta")
    Y = ops.layer_norm(X, gamma, beta, axis=-1, name="layer_norm")
    return Task(f"layer_norm_{shape}", (Y,), (X, gamma, beta, Y))


def mean_task(*shape):
    """A keepdims mean over the last axis: a row sum with an elementwise epilogue."""
    X = te.placeholder(shape, name="X")
    Y = ops.mean(X, axis=-1, keepdims=True, name="mean")
    return Task(f"mean_{shape}", (Y,), (X, Y))


def row_max_task(*shape):
    """The row reduction is the output itself."""
    X = te.placeholder(shape, name="X")
    Y = ops.max(X, axis=-1, keepdims=True, name="rowmax")
    return Task(f"rowmax_{shape}", (Y,), (X, Y))


def column_sum_task(m, n):
    """Sums over the first axis into [1, n]: not a row reduction (strided)."""
    X = te.placeholder((m, n), name="X")
    Y = ops.sum(X, axis=0, keepdims=True, name="colsum")
    return Task(f"colsum_{m}x{n}", (Y,), (X, Y))


def shared_max_task(m, n):
    """softmax whose row max is also an output: the max cannot move into the row loop."""
    X = te.placeholder((m, n), name="X")
    r = te.reduce_axis(n, "r")
    M = te.compute((m, 1), lambda i, z: te.max(X[i, r], axis=[r]), name="rowmax")
    Y = te.compute((m, n), lambda i, j: te.exp(X[i, j] - M[i, 0]), name="shifted")
    return Task(f"shared_{m}x{n}", (M, Y), (X, M, Y))


def row_sum_silu_task(m, n):
    """s * sigmoid(s) of a row sum: a joined epilogue of the sum and a row group at once."""
    X = te.placeholder((m, n), name="X")
    r = te.reduce_axis(n, "r")
    S = te.compute((m, 1), lambda i, z: te.sum(X[i, r], axis=[r]), name="rowsum")
    G = te.compute(S.shape, lambda *i: te.sigmoid(S(*i)), name="sigmoid")
    Y = te.compute(S.shape, lambda *i: S(*i) * G(*i), name="silu")
    return Task(f"rowsum_silu_{m}x{n}", (Y,), (X, Y))


def _inputs(task, seed=0):
    return task_inputs(task, seed, -2.0, 2.0)


def _names(ops_):
    return [op.name for op in ops_]


def test_softmax_is_one_row_group_with_exp_computed_per_row():
    space = SearchSpace(softmax_task(4, 128))
    (group,) = space.row_groups
    assert group.out.name == "softmax" and group.knob == knob(space, "softmax", "rows")
    assert _names(group.members) == ["softmax_max", "softmax_sum"]
    assert _names(group.stages) == ["softmax_exp"]
    default = space.default_config()
    assert default[knob(space, "softmax", "rows")] >= 1
    # read twice: materialised per row
    assert default[knob(space, "softmax_exp", "inline")] == AT_ANCHOR
    assert LEGACY["rows"] == 0


def test_layer_norm_mean_and_row_max_groups():
    ln = SearchSpace(layer_norm_task(3, 40))
    (group,) = ln.row_groups
    assert _names(group.members) == ["layer_norm_sum", "layer_norm_var"]
    # one reader: recomputed
    assert ln.default_config()[knob(ln, "layer_norm_sq", "inline")] == INLINE
    (mean,) = SearchSpace(mean_task(5, 24)).row_groups
    assert mean.out.name == "mean" and _names(mean.members) == ["mean_sum"]
    (rowmax,) = SearchSpace(row_max_task(6, 33)).row_groups
    assert rowmax.out is rowmax.members[0]                        # the reduction is the output


@pytest.mark.parametrize("task", [
    column_sum_task(6, 40),                      # reduces the strided axis
    shared_max_task(4, 32),                      # the max is read outside the group
    Task.from_op("matmul", (8, 16, 24)),         # a reduction, but not into [rows, 1]
    Task.from_op("dense", (4, 8, 6)),
    Task.from_op("conv2d", (1, 2, 5, 5, 3, 3, 3, 1, 1)),
])
def test_no_row_group(task):
    space = SearchSpace(task)
    assert space.row_groups == []
    assert not any(k.name.endswith("/rows") for k in space.knobs)


def test_row_schedule_splits_the_reductions_and_vectorises():
    space = SearchSpace(softmax_task(4, 64))
    sch, args = space.apply(space.default_config())
    text = str(lower(sch, args, name="softmax"))
    lanes = Target.native().vector_lanes("float32")
    assert any(f"allocate softmax_max_rf: float32[1, {w}] (local)" in text
               for w in (lanes, 2 * lanes))           # one or two accumulator vectors a row
    assert "allocate softmax_exp: float32[1, 64] (local)" in text    # one row of exp
    assert "vectorized" in text and "parallel" not in text          # too small to fork
    big = SearchSpace(softmax_task(512, 128))
    sch, args = big.apply(big.default_config())
    assert "parallel(512)" in str(lower(sch, args, name="softmax"))


def test_stored_configs_without_the_knob_keep_the_old_schedule():
    space = SearchSpace(softmax_task(4, 64))
    stored = {k: v for k, v in space.default_config().items() if not k.endswith("/rows")}
    stored[knob(space, "softmax_exp", "inline")] = 2
    assert space.validate(stored)[knob(space, "softmax", "rows")] == 0
    sch, args = space.apply(stored)
    text = str(lower(sch, args, name="softmax"))
    assert "_rf" not in text
    assert "allocate softmax_exp: float32[4, 64] (global)" in text


TASKS = [
    (softmax_task, (3, 13)),
    (softmax_task, (1, 5)),
    (softmax_task, (2, 3, 20)),
    (softmax_task, (4, 1)),
    (log_softmax_task, (3, 17)),
    (layer_norm_task, (5, 13)),
    (layer_norm_task, (1, 2, 40)),
    (mean_task, (7, 9)),
    (row_max_task, (3, 11)),
    (row_max_task, (2, 1, 16)),
]


@pytest.mark.parametrize("make,shape", TASKS)
def test_row_configs_match_reference(make, shape):
    task = make(*shape)
    space = SearchSpace(task)
    (group,) = space.row_groups
    inputs = _inputs(task)
    expected = evaluate(list(task.outputs), inputs)
    default = space.default_config()
    configs = [dict(default, **{group.knob: v}) for v in (0, 1, 2)]
    for stage in group.stages:
        name = f"{space.stage_label(stage)}/inline"
        if name in default:
            configs += [dict(default, **{name: mode}) for mode in range(4)]
    rng = random.Random(sum(shape) + len(shape))
    configs += [space.sample(rng) for _ in range(4)]
    for k, config in enumerate(configs):
        got_all = run_config(task, space, config, inputs, compiled=k % 3 != 2)
        for got, want in zip(got_all, expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(config))


def test_matmul_into_one_column_is_a_row_group_and_correct():
    task = Task.from_op("matmul", (5, 19, 1))
    space = SearchSpace(task)
    (group,) = space.row_groups
    assert group.out.name == "C" and group.members == (group.out,)
    inputs = _inputs(task)
    expected = evaluate(list(task.outputs), inputs)
    rng = random.Random(3)
    default = space.default_config()
    configs = [default, dict(default, **{group.knob: 2})]
    configs += [space.sample(rng) for _ in range(4)]
    for config in configs:
        (got,) = run_config(task, space, config, inputs, compiled=True)
        np.testing.assert_allclose(got, expected[0], rtol=1e-4, atol=1e-5, err_msg=str(config))


def test_row_group_of_a_joined_epilogue_every_knob_combination():
    task = row_sum_silu_task(5, 21)
    space = SearchSpace(task)
    (anchor,) = space.anchors
    (group,) = space.row_groups
    assert anchor.joined and anchor.epilogue.name == "silu" and group.out.name == "silu"
    inputs = _inputs(task, seed=2)
    expected = evaluate(list(task.outputs), inputs)
    default = space.default_config()
    for rows in (0, 1, 2):
        for epilogue in (0, 1):
            config = dict(default, **{group.knob: rows,
                                      knob(space, "rowsum", "epilogue"): epilogue})
            (got,) = run_config(task, space, config, inputs, compiled=True)
            np.testing.assert_allclose(got, expected[0], rtol=1e-4, atol=1e-5,
                                       err_msg=str(config))
