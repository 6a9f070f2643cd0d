"""Per-kernel thread decisions (autotune/space/thread_plan.py): a kernel too small to pay for a
fork runs on one thread when built for two, a large one keeps its parallel loop, a loop of one
iteration never forks, 1-thread schedules are untouched, and every kernel - serial or
parallel - gives numpy's answer on awkward shapes."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kiln import codegen, te
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.thread_plan import (FORK_COST_US, decide_parallel, fork_pays,
                                             kernel_estimate_us)
from kiln.autotune.task import Task
from kiln.codegen.runtime import backend, fork_count
from kiln.codegen.target import Target
from kiln.schedule import create_schedule
from kiln.schedule.ir import For, ForKind
from kiln.schedule.lower import lower
from kiln.schedule.visitor import StmtVisitor
from kiln.te import ops

from .test_space_rows import layer_norm_task, softmax_task

TARGET = Target.native()
kiln_pool = pytest.mark.skipif(backend() != "kiln", reason="fork counter is Kiln's pool's")


class _Parallel(StmtVisitor):
    def __init__(self):
        self.extents = []

    def visit_For(self, node: For):
        if node.kind is ForKind.PARALLEL:
            self.extents.append(node.extent)
        self.generic_visit(node)


def parallel_loops(func) -> list:
    found = _Parallel()
    found(func.body)
    return found.extents


def default_func(task: Task, threads: int):
    space = SearchSpace(task.retargeted(TARGET), threads, TARGET)
    sch, args = space.apply(space.default_config())
    return lower(sch, args, name=task.name)


def forks_of(kernel, *arrays) -> int:
    kernel(*arrays)                 # the pool's first use (its workers start) not counted
    before = fork_count()
    kernel(*arrays)
    return fork_count() - before


def softmax_ref(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def test_fork_pays_rule():
    assert not fork_pays(1e6, 1, 2)                   # one iteration: nothing to split
    assert not fork_pays(1e6, 64, 1)                  # one thread
    assert not fork_pays(1.5 * FORK_COST_US, 64, 2)   # saves 0.75 fork
    assert fork_pays(2.5 * FORK_COST_US, 64, 2)
    # 3 iterations on 2 threads: the busier thread does 2/3, a third of the time is saved
    assert not fork_pays(2.5 * FORK_COST_US, 3, 2)
    assert fork_pays(3.5 * FORK_COST_US, 3, 2)


@given(est=st.floats(0, 1e6), iterations=st.integers(1, 10_000), threads=st.integers(1, 64),
       more=st.floats(0, 1e6))
def test_fork_pays_is_monotone_and_never_for_one(est, iterations, threads, more):
    """More work never turns a paying fork into a losing one; one iteration or one thread
    never forks; a loop that pays saves more than a fork."""
    pays = fork_pays(est, iterations, threads)
    if pays:
        assert fork_pays(est + more, iterations, threads)
        assert iterations > 1 and threads > 1 and est > FORK_COST_US
    if iterations == 1 or threads == 1:
        assert not pays


def test_estimate_grows_with_work():
    small = create_schedule([softmax_task(4, 16).outputs[0]])
    large = create_schedule([softmax_task(512, 1024).outputs[0]])
    assert 0 < kernel_estimate_us(small, TARGET) < 1
    assert kernel_estimate_us(large, TARGET) > 100


def test_one_thread_schedules_are_untouched():
    task = Task.from_op("matmul", (8, 16, 16))
    space = SearchSpace(task.retargeted(TARGET), 1, TARGET)
    sch, args = space.apply(space.default_config())
    before = str(lower(sch, args, name="m"))
    assert decide_parallel(sch, TARGET, 1) == []
    assert str(lower(sch, args, name="m")) == before
    assert parallel_loops(default_func(task, 1))        # 1 thread: the loop stays marked


@kiln_pool
def test_tiny_kernel_built_for_two_threads_has_no_parallel_region():
    task = Task.from_op("matmul", (8, 16, 16))
    func = default_func(task, 2)
    assert parallel_loops(func) == []
    kernel = codegen.build(func, target=TARGET, num_threads=2)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((8, 16), np.float32), rng.standard_normal((16, 16), np.float32)
    c = np.empty((8, 16), np.float32)
    assert forks_of(kernel, a, b, c) == 0
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@kiln_pool
def test_large_kernel_keeps_its_fork_and_answer():
    task = Task.from_op("matmul", (97, 128, 131))
    func = default_func(task, 2)
    assert len(parallel_loops(func)) == 1
    kernel = codegen.build(func, target=TARGET, num_threads=2)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((97, 128), np.float32), rng.standard_normal((128, 131), np.float32)
    c = np.empty((97, 131), np.float32)
    assert forks_of(kernel, a, b, c) == 1
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@kiln_pool
def test_one_iteration_parallel_loop_does_not_fork():
    x = te.placeholder((1, 37), name="x")
    y = te.compute((1, 37), lambda i, j: x[i, j] * 2.0 + 1.0, name="y")
    four = te.placeholder((4, 37), name="u")
    z = te.compute((4, 37), lambda i, j: four[i, j] + 1.0, name="z")
    rng = np.random.default_rng(2)
    for src, out, rows in ((x, y, 1), (four, z, 4)):
        sch = create_schedule([out])
        sch[out].parallel(out.op.axis[0])           # a user's schedule: kept as written
        kernel = codegen.build(lower(sch, [src, out], name=f"rows{rows}"), target=TARGET,
                               num_threads=2)
        a, b = rng.standard_normal((rows, 37), np.float32), np.empty((rows, 37), np.float32)
        assert forks_of(kernel, a, b) == (0 if rows == 1 else 1)
        np.testing.assert_allclose(b, a * 2.0 + 1.0 if rows == 1 else a + 1.0, rtol=1e-6)


@pytest.mark.parametrize("shape", [(1, 13), (3, 7, 17), (61, 1031), (2, 131, 257)])
def test_softmax_rows_serial_or_parallel_match_numpy(shape):
    """Small softmaxes run serially at 2 threads, large ones get a parallel row loop (they
    had none below 64K points before); both give numpy's answer."""
    func = default_func(softmax_task(*shape), 2)
    rows = int(np.prod(shape[:-1]))
    points = rows * shape[-1]
    assert (len(parallel_loops(func)) == 1) == (points > 30_000)
    kernel = codegen.build(func, target=TARGET, num_threads=2)
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32) * 4
    y = np.empty_like(x)
    kernel(x, y)
    np.testing.assert_allclose(y, softmax_ref(x), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(5, 3), (67, 769)])
def test_layer_norm_rows_at_two_threads_match_numpy(shape):
    func = default_func(layer_norm_task(*shape), 2)
    assert len(parallel_loops(func)) == (1 if shape[0] > 64 else 0)
    kernel = codegen.build(func, target=TARGET, num_threads=2)
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    g, b = rng.standard_normal(shape[-1:]).astype(np.float32), rng.standard_normal(
        shape[-1:]).astype(np.float32)
    y = np.empty_like(x)
    kernel(x, g, b, y)
    mean = x.mean(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
