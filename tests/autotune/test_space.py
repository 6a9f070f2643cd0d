"""Rule-generated spaces: every sampled config lowers to a kernel equal to the reference."""
import random

import numpy as np
import pytest

from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.schedule.interpret import interpret
from kiln.schedule.lower import lower
from kiln.schedule.schedule import AttachKind
from kiln.te.errors import ScheduleError
from kiln.te.reference import evaluate
from tests.util import knob

# tiny awkward shapes (primes, non-multiples of the vector width) keep the interpreter fast
OPERATORS = [
    ("matmul", (7, 5, 11)),
    ("dense", (5, 6, 9)),
    ("batch_matmul", (2, 3, 5, 7)),
    ("conv2d", (1, 2, 5, 5, 3, 3, 3, 1, 1)),
    ("conv2d", (1, 2, 7, 7, 2, 3, 3, 2, 0)),
    ("depthwise_conv2d", (1, 3, 6, 6, 3, 3, 1, 1)),
    ("pooling", (1, 2, 7, 7, 2)),
    ("softmax", (3, 13)),
]


def _inputs(task, seed=0):
    rng = np.random.default_rng(seed)
    return {t: rng.uniform(-1, 1, t.shape).astype(t.dtype)
            for t in task.args if t not in task.outputs}


def _run_interpreted(task, config, inputs):
    sch, args = SearchSpace(task).apply(config)
    func = lower(sch, args, name=task.name)
    arrays = [inputs[t].copy() if t in inputs else np.full(t.shape, np.nan, t.dtype)
              for t in args]
    interpret(func, *arrays)
    return [arrays[p] for p in task.output_positions]


@pytest.mark.parametrize("op_name,shape", OPERATORS)
def test_sampled_configs_match_reference(op_name, shape):
    task = Task.from_op(op_name, shape)
    space = SearchSpace(task)
    inputs = _inputs(task)
    expected = evaluate(list(task.outputs), inputs)
    rng = random.Random(sum(map(ord, op_name)) + len(shape))
    configs = [space.default_config()] + [space.sample(rng) for _ in range(5)]
    for config in configs:
        for got, want in zip(_run_interpreted(task, config, inputs), expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(config))


def test_rules_classify_stages():
    conv = SearchSpace(Task.from_op("conv2d", (1, 2, 5, 5, 3, 3, 3, 1, 1)))
    assert [op.name for op in conv.inlined] == ["conv_pad"]       # injective, not an output
    assert [a.op.name for a in conv.anchors] == ["conv"]
    dense = SearchSpace(Task.from_op("dense", (4, 8, 6)))
    assert [op.name for op in dense.inlined] == ["D_bias"]
    (anchor,) = dense.anchors
    assert anchor.op.name == "D" and anchor.epilogue.name == "relu"  # bias+relu epilogue
    softmax = SearchSpace(Task.from_op("softmax", (3, 13)))
    assert [a.op.name for a in softmax.anchors] == ["softmax_max", "softmax_sum"]
    assert [op.name for op in softmax.elementwise] == ["softmax"]
    assert [op.name for op in softmax.inlined] == ["softmax_exp"]


def test_local_accumulator_and_epilogue_fusion_are_applied():
    space = SearchSpace(Task.from_op("dense", (16, 8, 32)))
    config = dict(space.default_config(), **{knob(space, "D", "local"): 1})
    sch, _ = space.apply(config)
    assert sch[space.anchors[0].op].attach is AttachKind.AT      # D computed inside Y's tile
    mm = SearchSpace(Task.from_op("matmul", (16, 8, 32)), threads=1)  # at 2: serial (tiny)
    sch, _ = mm.apply(dict(mm.default_config(), **{"s0/local": 1}))
    assert any(s.name == "C.local" and s.attach is AttachKind.AT for s in sch.stages)
    text = str(lower(sch, list(mm.task.args), name="mm"))
    assert "allocate C.local" in text and "vectorized" in text and "parallel" in text


def test_tile_choices_include_non_divisors_near_powers_of_two():
    space = SearchSpace(Task.from_op("matmul", (24, 24, 24)))
    tile = next(k for k in space.knobs if k.name == "s0/tile/0")
    inner = {c[1] for c in tile.choices}
    assert {1, 2, 3, 4, 6, 8, 12, 16}.issubset(inner)   # divisors and 16, a non-divisor


def test_neighbors_change_few_knobs_and_stay_in_space():
    space = SearchSpace(Task.from_op("matmul", (64, 64, 64)))
    rng = random.Random(0)
    base = space.default_config()
    for _ in range(50):
        child = space.neighbors(base, rng)
        changed = [k for k in base if base[k] != child[k]]
        assert len(changed) <= 2
        space.validate(child)       # raises if a value left the space


def test_size_counts_every_knob_combination():
    space = SearchSpace(Task.from_op("matmul", (8, 8, 8)))
    assert space.size == int(np.prod([len(k.choices) for k in space.knobs]))
    first = list(zip(range(5), space.grid()))
    assert len({str(c) for _, c in first}) == 5


def test_unknown_knob_is_invalid_config():
    space = SearchSpace(Task.from_op("matmul", (8, 8, 8)))
    with pytest.raises(ScheduleError, match=r"unknown knob\(s\) \['C/warp'\]"):
        space.apply({"C/warp": 4})


def test_value_outside_choices_is_invalid_config():
    space = SearchSpace(Task.from_op("matmul", (8, 8, 8)))
    with pytest.raises(ScheduleError, match=r"not a choice of knob 's0/unroll'"):
        space.apply({"s0/unroll": 7})


@pytest.mark.parametrize("op_name,shape", OPERATORS)
def test_sampled_configs_compile_to_correct_kernels(op_name, shape):
    from kiln.codegen import build
    task = Task.from_op(op_name, shape)
    space = SearchSpace(task)
    inputs = _inputs(task, seed=1)
    expected = evaluate(list(task.outputs), inputs)
    rng = random.Random(7 + len(shape))
    for config in [space.default_config()] + [space.sample(rng) for _ in range(4)]:
        sch, args = space.apply(config)
        kernel = build(lower(sch, args, name=task.name), target="native")
        arrays = [inputs[t].copy() if t in inputs else np.full(t.shape, np.nan, t.dtype)
                  for t in args]
        kernel(*arrays)
        for position, want in zip(task.output_positions, expected):
            np.testing.assert_allclose(arrays[position], want, rtol=1e-4, atol=1e-5,
                                       err_msg=str(config))
