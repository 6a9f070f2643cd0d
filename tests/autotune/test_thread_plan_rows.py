"""The thread decision's view of data movement (autotune/space/thread_plan.py): loads that
gather across an input's rows (transposes, blocked-layout copies) are priced per element,
per-row scalar reduction chains are priced per step, and a reduction-free stage with no
parallel loop is given one over its rows at more than one thread when that pays. Every kernel,
serial or parallel, gives numpy's answer on awkward shapes; 1-thread schedules are untouched."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln import codegen, te
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.thread_plan import (STRIDED_NS, _points, _strided_reads,
                                             kernel_estimate_us, root_groups)
from kiln.autotune.task import Task
from kiln.schedule.lower import lower
from kiln.te import expr as E
from kiln.te import ops

from .test_space_rows import softmax_task
from .test_thread_plan import (TARGET, default_func, forks_of, kiln_pool, parallel_loops,
                               softmax_ref)


def transpose_task(shape, axes):
    x = te.placeholder(shape, name="x")
    y = ops.transpose(x, axes, name="t")
    return Task(f"transpose_{shape}_{axes}", (y,), (x, y))


def default_schedule(task: Task, threads: int):
    space = SearchSpace(task.retargeted(TARGET), threads, TARGET)
    return space.apply(space.default_config())


def test_gathers_are_counted_rows_and_broadcasts_are_not():
    x = te.placeholder((6, 40), name="x")
    bias = te.placeholder((40,), name="b")
    same = te.compute((6, 40), lambda i, j: x[i, j] + bias[j], name="same")
    flipped = te.placeholder((40, 6), name="f")
    turned = te.compute((6, 40), lambda i, j: flipped[j, i] * 2.0, name="turned")
    clamped = te.compute((6, 40), lambda i, j: x[i, E.minimum(j, 15)], name="clamped")
    assert _strided_reads(same.op, set()) == 0
    assert _strided_reads(clamped.op, set()) == 0          # a clamped row: no gather
    assert _strided_reads(turned.op, set()) == _points(turned.op)


def test_a_transpose_undone_through_an_inlined_stage_is_no_gather():
    x = te.placeholder((5, 33, 17), name="x")
    t = ops.transpose(x, (0, 2, 1), name="t")
    back = te.compute((5, 33, 17), lambda a, b, c: t[a, c, b] + 1.0, name="back")
    assert _strided_reads(t.op, set()) == _points(t.op)
    assert _strided_reads(back.op, {t.op}) == 0
    assert _strided_reads(back.op, set()) == _points(back.op)   # t materialised: it gathers


def test_blocked_layout_copy_gathers():
    x = te.placeholder((1, 48, 9, 9), name="x")
    blocked = ops.to_blocked(x, 16, name="xb")
    plain = ops.from_blocked(blocked, 48, name="xp")
    assert _strided_reads(blocked.op, set()) == _points(blocked.op)
    assert _strided_reads(plain.op, set()) == _points(plain.op)


def test_estimate_prices_the_gathers():
    sch, _ = default_schedule(transpose_task((96, 131), (1, 0)), 1)
    est = kernel_estimate_us(sch, TARGET)
    assert est >= 96 * 131 * STRIDED_NS / 1e3


def test_softmax_rows_price_their_scalar_chains():
    """256 rows of 64: two scalar 32-step chains a row (max and sum over the partial's
    lanes) are most of the kernel (measured ~22 us; the arithmetic alone is ~3 us)."""
    sch, _ = default_schedule(softmax_task(4, 64, 64), 2)
    ((_, est),) = root_groups(sch, TARGET)
    assert est > 10
    func = default_func(softmax_task(4, 64, 64), 2)
    assert len(parallel_loops(func)) == 1


@pytest.mark.parametrize("shape, axes, forks", [
    ((192, 131), (1, 0), 1),            # 25K gathered elements: a row loop pays
    ((4, 67, 97), (0, 2, 1), 1),
    ((96, 131), (1, 0), 0),             # 12.6K: about 6 us, a fork would save ~3
    ((5, 7), (1, 0), 0),                # tiny: stays serial
    ((1, 3, 5, 7), (0, 3, 1, 2), 0),
])
def test_transpose_rows_at_two_threads(shape, axes, forks):
    task = transpose_task(shape, axes)
    func2 = default_func(task, 2)
    assert len(parallel_loops(func2)) == forks
    assert parallel_loops(default_func(task, 1)) == []      # 1 thread: no loop offered
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y = np.empty(np.transpose(x, axes).shape, np.float32)
    kernel = codegen.build(func2, target=TARGET, num_threads=2)
    kernel(x, y)
    np.testing.assert_array_equal(y, np.transpose(x, axes))


@kiln_pool
def test_offered_row_loop_forks_once():
    func = default_func(transpose_task((192, 131), (1, 0)), 2)
    kernel = codegen.build(func, target=TARGET, num_threads=2)
    x = np.random.default_rng(1).standard_normal((192, 131)).astype(np.float32)
    y = np.empty((131, 192), np.float32)
    assert forks_of(kernel, x, y) == 1
    np.testing.assert_array_equal(y, x.T)


def test_one_thread_schedule_is_what_the_config_makes():
    """No row loop and no change at 1 thread: the lowered IR equals a plain apply of the
    same config with the decision off."""
    from kiln.autotune.space.thread_plan import disabled
    task = transpose_task((96, 131), (1, 0))
    sch, args = default_schedule(task, 1)
    with disabled():
        sch0, args0 = default_schedule(task, 1)
    assert str(lower(sch, args, name="k")) == str(lower(sch0, args0, name="k"))


@settings(max_examples=12, deadline=None)
@given(dims=st.lists(st.sampled_from([1, 2, 3, 7, 16, 17, 31]), min_size=2, max_size=4),
       data=st.data())
def test_random_transposes_at_two_threads_match_numpy(dims, data):
    axes = tuple(data.draw(st.permutations(range(len(dims)))))
    task = transpose_task(tuple(dims), axes)
    kernel = codegen.build(default_func(task, 2), target=TARGET, num_threads=2)
    x = np.arange(np.prod(dims), dtype=np.float32).reshape(dims)
    y = np.empty(np.transpose(x, axes).shape, np.float32)
    kernel(x, y)
    np.testing.assert_array_equal(y, np.transpose(x, axes))


@pytest.mark.parametrize("shape", [(4, 64, 64), (3, 97, 33)])
def test_softmax_with_row_loop_matches_numpy(shape):
    kernel = codegen.build(default_func(softmax_task(*shape), 2), target=TARGET, num_threads=2)
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32) * 3
    y = np.empty_like(x)
    kernel(x, y)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-6)


def test_unrefined_rule_offers_no_rows_and_keeps_the_config_depth():
    """thread_plan.unrefined() (the A/B benchmarks' 'before') builds what the first rule
    built: no row loop for a transpose, the config's parallel depth for a conv."""
    from kiln.autotune.space.thread_plan import unrefined
    with unrefined():
        assert parallel_loops(default_func(transpose_task((192, 131), (1, 0)), 2)) == []
        conv = Task.from_op("conv2d_nchwc", (1, 160, 32, 32, 40, 1, 1, 1, 0, 16, 8))
        assert [int(e.value) for e in parallel_loops(default_func(conv, 2))] == [5]
    assert [int(e.value) for e in parallel_loops(default_func(conv, 2))] == [20]
