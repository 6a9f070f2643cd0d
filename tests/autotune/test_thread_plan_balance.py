"""A parallel loop built for more than one thread fuses more outer tile loops when the ones
the config names split unevenly (autotune/space/thread_plan.balanced_depth): ConvNeXt's and
PoolFormer's 1x1 convs had 4-5 parallel iterations on 2 threads. The kernels still give the
reference's answer; at 1 thread the loop is what the config makes."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln import codegen
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.thread_plan import MIN_ITERATIONS_PER_THREAD, balanced_depth
from kiln.autotune.task import Task
from kiln.schedule.lower import lower
from kiln.te.reference import evaluate

from ..util import task_inputs
from .test_thread_plan import TARGET, parallel_loops


def test_balanced_depth_rule():
    assert balanced_depth([1, 5, 4, 2], 2, 1) == 2          # one thread: as asked
    assert balanced_depth([1, 5, 4, 2], 2, 2) == 3          # 5 -> 20 iterations
    assert balanced_depth([1, 64, 4], 2, 2) == 2            # 64 already enough
    assert balanced_depth([1, 1, 3], 2, 2) == 3             # as deep as there are loops
    assert balanced_depth([1, 5], 0, 2) == 0                # no parallel loop asked


@given(extents=st.lists(st.integers(1, 9), min_size=1, max_size=5),
       depth=st.integers(1, 5), threads=st.integers(1, 8))
def test_balanced_depth_never_shallower_and_stops_when_enough(extents, depth, threads):
    depth = min(depth, len(extents))
    got = balanced_depth(extents, depth, threads)
    assert depth <= got <= len(extents)
    if got > depth:                         # it went deeper only while too few iterations
        assert np.prod(extents[:got - 1]) < MIN_ITERATIONS_PER_THREAD * threads


@pytest.mark.parametrize("shape", [
    (1, 160, 32, 32, 40, 1, 1, 1, 0, 16, 8),      # ConvNeXt-atto's MLP fc2: 5 blocks
    (1, 48, 13, 13, 40, 3, 3, 1, 1, 16, 8),       # 3x3 over a prime-sized plane
])
def test_conv_at_two_threads_splits_finer_and_matches_reference(shape):
    task = Task.from_op("conv2d_nchwc", shape).retargeted(TARGET)
    funcs = {}
    for threads in (1, 2):
        space = SearchSpace(task, threads, TARGET)
        sch, args = space.apply(space.default_config())
        funcs[threads] = (lower(sch, args, name="k"), args)
    one, two = parallel_loops(funcs[1][0]), parallel_loops(funcs[2][0])
    assert int(one[-1].value) == 5                 # the config's depth: 5 channel blocks
    assert int(two[-1].value) >= MIN_ITERATIONS_PER_THREAD * 2
    inputs = task_inputs(task, seed=3)
    (expected,) = evaluate(list(task.outputs), inputs)
    func, args = funcs[2]
    arrays = [inputs[t].copy() if t in inputs else np.full(t.shape, np.nan, t.dtype)
              for t in args]
    codegen.build(func, target=TARGET, num_threads=2)(*arrays)
    out = arrays[[i for i, t in enumerate(args) if t in task.outputs][0]]
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
