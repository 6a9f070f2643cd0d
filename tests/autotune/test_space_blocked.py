"""Search-space rules for channel-blocked (NCHWc) convs: the pad copy of a blocked input is
vectorised over its channel block (its NCHW counterpart is not: the padded axis is innermost),
and nested reduce axes get inner tiles within one register-tile step budget."""
import random

import numpy as np
import pytest

from kiln import te
from kiln.codegen.target import Target
from kiln.schedule.ir import ForKind
from kiln.schedule.visitor import StmtVisitor
from kiln.te.reference import evaluate
from kiln.autotune.space.rules import (AT_ANCHOR, REDUCE_STEPS, ROOT_ROWS, SearchSpace, is_copy_axis,
                                       nested_reduce_tiles)
from kiln.autotune.task import Task
from kiln.schedule.lower import lower
from kiln.te import ops

from ..util import knob, run_config, task_inputs


def _pad_op(out):
    return next(t.op for t in out.op.input_tensors if t.op.name.endswith("_pad"))


def test_only_an_unpadded_innermost_axis_is_a_copy_axis():
    blocked = ops.depthwise_conv2d_nchwc(te.placeholder((1, 2, 9, 7, 8), name="X"),
                                         te.placeholder((2, 3, 3, 8), name="W"), 1, 1)
    plain = ops.depthwise_conv2d_nchw(te.placeholder((1, 16, 9, 7), name="X"),
                                      te.placeholder((16, 1, 3, 3), name="W"), 1, 1)
    assert is_copy_axis(_pad_op(blocked))
    assert not is_copy_axis(_pad_op(plain))


def test_the_blocked_pad_copy_is_vectorised_as_rows_and_at_the_anchor():
    task = Task.from_op("depthwise_conv2d_nchwc", (1, 16, 9, 7, 3, 3, 2, 1, 8))
    space = SearchSpace(task)
    (pad,) = [k for k in space.knobs if k.name.endswith("/inline")]
    for mode in (ROOT_ROWS, AT_ANCHOR):
        config = dict(space.default_config(), **{pad.name: mode})
        sch, args = space.apply(config)
        text = str(lower(sch, args, name="k"))
        pad_loops = [line for line in text.splitlines() if "for i4 in" in line]
        assert pad_loops and all("vectorized" in line for line in pad_loops), (mode, text)


def test_nested_reduce_tiles_fill_the_step_budget_from_the_innermost_axis():
    x = te.placeholder((1, 32, 7, 7, 16), name="X")
    w3 = te.placeholder((2, 32, 3, 3, 16, 16), name="W")
    w1 = te.placeholder((2, 32, 1, 1, 16, 16), name="W1")
    conv3 = ops.conv2d_nchwc(x, w3, 1, 1)
    conv1 = ops.conv2d_nchwc(x, w1)
    assert nested_reduce_tiles(conv3.op) == [1, 3, 3, 16]     # 144 steps
    assert nested_reduce_tiles(conv1.op) == [16, 1, 1, 16]    # 256 steps
    plain = ops.conv2d_nchw(te.placeholder((1, 256, 14, 14), name="X"),
                            te.placeholder((64, 256, 3, 3), name="W"), 1, 1)
    tiles = nested_reduce_tiles(plain.op)
    assert tiles[1:] == [3, 3] and 256 % tiles[0] == 0
    assert tiles[0] * 9 <= REDUCE_STEPS < 2 * tiles[0] * 9 * 2


def _parallel_extents(func) -> list[int]:
    """Extents of the parallel loops of a lowered function."""
    found = []

    class Collect(StmtVisitor):
        def visit_For(self, node):
            if node.kind == ForKind.PARALLEL:
                found.append(node.extent.value)
            self.generic_visit(node)

    Collect()(func.body)
    return found


def test_parallel_depth_three_is_offered_and_earlier_depths_keep_their_meaning():
    # 1 thread: at 2, the thread decision runs this small conv's loop serially
    conv = SearchSpace(Task.from_op("conv2d_nchwc", (1, 32, 14, 14, 16, 1, 1, 1, 0, 16, 16)),
                       threads=1)
    gemm = SearchSpace(Task.from_op("matmul", (64, 64, 64)))
    assert conv._by_name[knob(conv, "conv", "parallel")].choices == (0, 1, 2, 3)
    assert gemm._by_name["s0/parallel"].choices == (0, 1, 2)
    config = dict(conv.default_config(), **{knob(conv, "conv", "tile/1"): [1, 1],
                                            knob(conv, "conv", "tile/2"): [2, 1]})
    extents = {}
    for depth in (1, 2, 3):
        sch, args = conv.apply(dict(config, **{knob(conv, "conv", "parallel"): depth}))
        extents[depth] = _parallel_extents(lower(sch, args, name="k"))
    # b and ko are one block each: only the third loop (14 rows in tiles of 2) splits work
    assert extents == {1: [1], 2: [1], 3: [7]}


@pytest.mark.parametrize("op,shape", [
    ("conv2d_nchwc", (1, 32, 112, 112, 16, 1, 1, 1, 0, 16, 16)),   # MobileNetV2's 32->16
    ("conv2d_nchwc", (1, 16, 56, 56, 16, 3, 3, 1, 1, 16, 16)),
    ("depthwise_conv2d_nchwc", (1, 16, 56, 56, 3, 3, 1, 1, 16))])
def test_the_default_parallel_loop_of_a_one_block_conv_has_work_for_every_core(op, shape):
    """With one output-channel block the first two outer loops (batch, block) have one
    iteration: the default now fuses the rows in too. Before, these kernels ran serially at
    any thread count (parallel extent 1)."""
    task = Task.from_op(op, shape)
    space = SearchSpace(task, threads=1)    # the loop the default makes, before the thread
    sch, args = space.apply(space.default_config())    # decision (small ones run serially)
    cores = Target.from_string(task.target).num_cores
    extent = _parallel_extents(lower(sch, args, name="k"))[-1]     # the conv's (last) loop
    assert extent >= 2 * max(2, cores)


@pytest.mark.parametrize("op,shape", [
    ("conv2d_nchwc", (1, 8, 7, 5, 8, 3, 3, 1, 1, 4, 4)),
    ("conv2d_nchwc", (1, 4, 13, 3, 12, 1, 1, 2, 0, 4, 4)),
    ("depthwise_conv2d_nchwc", (1, 8, 11, 6, 3, 3, 1, 1, 4))])
def test_sampled_configs_with_parallel_rows_match_the_reference(op, shape):
    task = Task.from_op(op, shape)
    space = SearchSpace(task)
    label = space.stage_label(space.anchors[0].op)
    inputs = task_inputs(task, seed=1)
    (want,) = evaluate(list(task.outputs), inputs)
    picker = random.Random(5)
    configs = [dict(space.default_config(), **{f"{label}/parallel": 3})]
    configs += [dict(space.sample(picker), **{f"{label}/parallel": 3}) for _ in range(4)]
    for config in configs:
        (got,) = run_config(task, space, config, inputs, compiled=False)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=str(config))
