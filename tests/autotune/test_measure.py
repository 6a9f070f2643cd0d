"""Measurement in a worker process: every outcome is classified, a broken candidate costs one
trial and never the run."""
import numpy as np
import pytest

from kiln.autotune.measure import MeasureOptions, MeasureStatus, Runner, TaskData, run_payload
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task


@pytest.fixture(scope="module")
def task():
    return Task.from_op("matmul", (16, 8, 24))


@pytest.fixture(scope="module")
def data(task):
    return TaskData.make(task)


@pytest.fixture(scope="module")
def simple_config(task):
    config = SearchSpace(task).default_config()
    return dict(config, **{"s0/local": 0, "s0/parallel": 0})


@pytest.fixture(scope="module")
def runner():
    with Runner(MeasureOptions(timeout=20.0, repeat=2, min_repeat_seconds=0.0)) as r:
        yield r


def test_task_data_reference_is_numpy_matmul(task, data):
    a, b = data.inputs[0], data.inputs[1]
    assert data.inputs[2] is None                    # the output is not an input
    np.testing.assert_allclose(data.expected[0], a @ b, rtol=1e-5, atol=1e-5)


def test_good_candidate_is_ok_with_costs(runner, task, data, simple_config):
    result = runner.run(task, data, simple_config, "native")
    assert result.status is MeasureStatus.OK, result.error_text
    assert len(result.costs) == 2 and all(c > 0 for c in result.costs)
    assert 0 < result.mean_cost < 1.0


def test_crashing_candidate_is_runtime_error_and_next_one_runs(runner, task, data,
                                                               simple_config):
    crashed = runner.run(task, data, simple_config, "native", test_fault="crash")
    assert crashed.status is MeasureStatus.RUNTIME_ERROR
    assert "died (signal SIGSEGV)" in crashed.error_text
    assert runner.run(task, data, simple_config, "native").status is MeasureStatus.OK


@pytest.mark.slow
def test_hanging_candidate_is_timeout_and_worker_replaced(task, data, simple_config):
    with Runner(MeasureOptions(timeout=3.0, repeat=1, min_repeat_seconds=0.0)) as runner:
        hung = runner.run(task, data, simple_config, "native", test_fault="hang")
        assert hung.status is MeasureStatus.TIMEOUT
        assert "did not finish within 3.0 s" in hung.error_text
        assert runner.run(task, data, simple_config, "native").status is MeasureStatus.OK


def test_raising_candidate_keeps_traceback(runner, task, data, simple_config):
    result = runner.run(task, data, simple_config, "native", test_fault="raise")
    assert result.status is MeasureStatus.RUNTIME_ERROR
    assert "injected runtime failure" in result.error_text


def test_wrong_answer_is_detected(runner, task, data, simple_config):
    wrong = TaskData(data.inputs, [data.expected[0] + 1.0])
    result = runner.run(task, wrong, simple_config, "native")
    assert result.status is MeasureStatus.WRONG_ANSWER
    assert "output 'C' differs from the reference" in result.error_text


def test_illegal_config_is_invalid_config(runner, task, data):
    result = runner.run(task, data, {"C/no_such_knob": 1}, "native")
    assert result.status is MeasureStatus.INVALID_CONFIG
    assert "unknown knob" in result.error_text


def test_run_payload_in_process_matches_worker(task, data, simple_config):
    import pickle
    payload = {"task": pickle.dumps(task), "config": simple_config, "target": "native",
               "options": MeasureOptions(repeat=1, min_repeat_seconds=0.0),
               "inputs": data.inputs, "expected": data.expected}
    assert run_payload(payload).status is MeasureStatus.OK


def test_clearly_slower_candidate_is_timed_once(runner, task, data, simple_config):
    result = runner.run(task, data, simple_config, "native", best_seconds=1e-12)
    assert result.status is MeasureStatus.OK
    assert len(result.costs) == 1          # early stop: no repeats for a hopeless candidate


def test_task_defined_only_for_positive_inputs_gets_checkable_data():
    """A layer-norm tail divides by sqrt(variance): on signed random data the reference is
    NaN at many points, which no candidate can match; the task data must be positive."""
    from kiln import te
    var = te.placeholder((4, 1), "float32", "var")
    x = te.placeholder((4, 8), "float32", "x")
    y = te.compute((4, 8), lambda i, j: x[i, j] / te.sqrt(var[i, 0] + 1e-5), name="y")
    task = Task("ln_tail", (y,), (x, var, y))
    data = TaskData.make(task)
    assert np.isfinite(data.expected[0]).all()
    assert (data.inputs[1] > 0).all()
    result = run_payload({"task": __import__("pickle").dumps(task),
                          "options": MeasureOptions(repeat=1, min_repeat_seconds=0.0),
                          "config": SearchSpace(task).default_config(), "target": "native",
                          "inputs": data.inputs, "expected": data.expected})
    assert result.status is MeasureStatus.OK, result.error_text


def test_signed_task_data_stays_signed(task, data):
    assert (data.inputs[0] < 0).any()


def test_worker_keeps_the_task_between_payloads(task, data, simple_config):
    """A payload without the task runs the one held under its token; an unknown token is a
    Runner bug reported as such; tokens the parent no longer lists are dropped."""
    import pickle

    from kiln.autotune.measure import _HeldTask
    from kiln.te.errors import InternalError
    held: dict = {}
    fast = MeasureOptions(repeat=1, min_repeat_seconds=0.0)
    first = {"token": 0, "held": (0,), "task": pickle.dumps(task), "inputs": data.inputs,
             "expected": data.expected, "config": simple_config, "target": "native",
             "options": fast}
    assert run_payload(first, held).status is MeasureStatus.OK
    assert set(held) == {0} and isinstance(held[0], _HeldTask) and held[0].space is not None
    later = {k: v for k, v in first.items() if k not in ("task", "inputs", "expected")}
    assert run_payload(later, held).status is MeasureStatus.OK
    wrong = dict(first, token=1, held=(1,), expected=[data.expected[0] + 1.0])
    assert run_payload(wrong, held).status is MeasureStatus.WRONG_ANSWER
    assert set(held) == {1}                         # token 0 was no longer listed
    with pytest.raises(InternalError, match="token 0"):
        run_payload(later, held)


def test_runner_sends_each_task_once_per_worker(runner, task, data, simple_config):
    """Alternating tasks on one worker: each (task, data) pair keeps its own token, so the
    second task's data never answers for the first, and a changed data object is resent."""
    other = Task.from_op("matmul", (5, 7, 3))
    other_data = TaskData.make(other)
    other_config = SearchSpace(other).default_config()
    tokens = []
    for _ in range(2):
        assert runner.run(task, data, simple_config, "native").status is MeasureStatus.OK
        assert runner.run(other, other_data, other_config,
                          "native").status is MeasureStatus.OK
        tokens.append(list(runner._held)[-2:])
    assert tokens[0] == tokens[1]                   # the second round sent no task
    pairs = [runner._held[t] for t in tokens[1]]
    assert pairs[0][0] is task and pairs[0][1] is data
    assert pairs[1][0] is other and pairs[1][1] is other_data
    wrong = TaskData(data.inputs, [data.expected[0] + 1.0])
    assert runner.run(task, wrong, simple_config,
                      "native").status is MeasureStatus.WRONG_ANSWER
    assert runner.run(task, data, simple_config, "native").status is MeasureStatus.OK


def test_worker_features_equal_the_parents(runner, task, data):
    """The worker featurizes while the parent works: same vectors as the parent's
    Featurizer, None for a config that cannot be applied, and `meanwhile` ran."""
    from kiln.autotune.search import Featurizer
    import random
    space = SearchSpace(task)
    rng = random.Random(5)
    configs = [space.default_config()] + [space.sample(rng) for _ in range(4)]
    configs.append({"C/no_such_knob": 1})
    ran = []
    vectors = runner.features(task, data, configs, lambda: ran.append(True))
    assert ran == [True] and vectors is not None and len(vectors) == len(configs)
    local = Featurizer(space)
    for config, vector in zip(configs[:-1], vectors[:-1]):
        np.testing.assert_array_equal(vector, local(config))
    assert vectors[-1] is None


def test_worker_features_fall_back_when_the_worker_dies(task, data, simple_config):
    """A worker killed while featurizing answers None (the caller computes the vectors
    itself) and the next candidate runs in a fresh worker."""
    import os
    import signal
    with Runner(MeasureOptions(timeout=20.0, repeat=1, min_repeat_seconds=0.0)) as runner:
        assert runner.run(task, data, simple_config, "native").status is MeasureStatus.OK

        def kill_worker():
            os.kill(runner._process.pid, signal.SIGKILL)
            runner._process.wait()
        assert runner.features(task, data, [simple_config] * 3, kill_worker) is None
        assert runner.run(task, data, simple_config, "native").status is MeasureStatus.OK


def test_a_repeat_costs_its_undisturbed_batches(monkeypatch):
    """A stall inside a repeat (the scheduler taking the core away) costs that repeat one
    slow batch, not its mean: on a fake clock, a 100 us kernel stalled 5 ms once per repeat
    still measures 100 us; a repeat stalled in most of its batches does not hide it."""
    from kiln.autotune import measure
    clock = [0.0]
    monkeypatch.setattr(measure.time, "perf_counter", lambda: clock[0])
    calls = [0]

    def kernel(stall_every):
        calls[0] += 1
        clock[0] += 100e-6 + (5e-3 if calls[0] % stall_every == 0 else 0.0)

    options = MeasureOptions(repeat=3, min_repeat_seconds=0.01)     # 100 calls a repeat
    costs = measure._time_kernel(kernel, (97,), options)
    assert len(costs) == 3 and all(c == pytest.approx(100e-6) for c in costs)
    costs = measure._time_kernel(kernel, (2,), options)             # every other call
    assert all(c > 1e-3 for c in costs)


def test_a_one_thread_kernel_is_timed_by_cpu_time_so_time_slices_lost_do_not_count():
    """At one thread (the measurement's count, from its options) the worker times kernels
    by its thread's CPU time: a kernel
    that spends most of its call off the CPU (as when another process takes the core) costs
    only what it ran; at more threads the wall clock, which counts it all."""
    import time
    from kiln.autotune.measure import _time_kernel, kernel_clock

    def kernel():
        time.sleep(0.002)                   # off the CPU
        sum(range(2000))                    # on it, briefly

    options = MeasureOptions(repeat=3, min_repeat_seconds=0.0, threads=1)
    assert kernel_clock(1) is time.thread_time
    assert max(_time_kernel(kernel, [], options)) < 0.001
    options = MeasureOptions(repeat=3, min_repeat_seconds=0.0, threads=2)
    assert kernel_clock(2) is time.perf_counter
    assert min(_time_kernel(kernel, [], options)) >= 0.002
