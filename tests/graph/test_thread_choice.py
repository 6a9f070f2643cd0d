"""The measured per-kernel thread choice (graph/runtime/thread_choice.py): a kernel whose
forks do not pay runs on one thread, one whose forks pay keeps N; outputs are the same either
way and the same as the 1-thread model's; the choice is stored in the plan and survives the
model cache and an export."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from kiln.codegen.runtime import backend, fork_count
from kiln.graph.compile.model import compile_model
from kiln.graph.runtime import thread_choice
from kiln.graph.runtime.thread_choice import KernelTiming
from onnx import TensorProto, helper

import kiln

from .graph_helpers import ort_run

pytestmark = pytest.mark.skipif(backend() != "kiln", reason="forks are counted by Kiln's pool")


def _model() -> onnx.ModelProto:
    """x[1, 48, 32, 33] -> 1x1 conv to 80 channels (a parallel loop over rows) -> relu ->
    NHWC transpose -> softmax over 80 channels; and a 7-wide add (too small to fork)."""
    rng = np.random.default_rng(0)
    w = rng.standard_normal((80, 48, 1, 1)).astype(np.float32) * 0.2
    b = rng.standard_normal(80).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Softmax", ["t"], ["y"], axis=-1),
        helper.make_node("Add", ["s", "s"], ["s2"]),
    ]
    graph = helper.make_graph(
        nodes, "thread_choice_model",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 48, 32, 33]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 33, 80]),
         helper.make_tensor_value_info("s2", TensorProto.FLOAT, [7])],
        [helper.make_tensor("w", TensorProto.FLOAT, w.shape, w.ravel()),
         helper.make_tensor("b", TensorProto.FLOAT, b.shape, b)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _inputs(seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((1, 48, 32, 33)).astype(np.float32),
            "s": rng.standard_normal(7).astype(np.float32)}


@pytest.fixture(scope="module")
def models():
    model = _model()
    return model, {n: compile_model(model, db=None, threads=n, jobs=1, cache_model=False)
                   for n in (1, 2)}


def _forks_per_run(m, x) -> int:
    m.run(x)
    before = fork_count()
    m.run(x)
    return fork_count() - before


def _fake(pays: set[str]):
    """A measure_fn that says N threads take half the time for `pays`, twice for the rest."""
    def measure_fn(model, threads, forks, inputs, prewake=()):
        return [KernelTiming(k, 1, n, 10.0 if k in pays else 40.0, 20.0,
                             0.5 if k in pays else 2.0) for k, n in forks.items()]
    return measure_fn


def _validate(winner: str):
    """A validate_fn under which `winner` runs fastest."""
    def validate_fn(model, threads, configs, inputs):
        return {name: 1.0 if name == winner else 2.0 for name in configs}
    return validate_fn


def test_pays_needs_the_margin_unless_the_kernel_is_long():
    assert KernelTiming("k", 1, 1, 90.0, 100.0, 0.9).pays(0.05)
    assert not KernelTiming("k", 1, 1, 96.0, 100.0, 0.96).pays(0.05)
    assert not KernelTiming("k", 1, 1, 120.0, 100.0, 1.2).pays(0.0)
    long = thread_choice.SERIAL_MAX_US * 3
    assert KernelTiming("k", 2, 2, long * 1.5, long, 1.5).pays()      # 1.5x per call: keeps N
    assert not KernelTiming("k", 4, 4, long * 1.5, long, 1.5).pays()  # 0.75x per call


def test_prewake_goes_lead_us_of_serial_work_ahead_of_a_fork():
    # steps:        0    1    2    3    4    5    6
    times = [5.0, 30.0, 8.0, 8.0, 8.0, 3.0, 50.0]
    forking = [False, False, False, False, True, True, False]
    # step 4's fork: steps 3 and 2 give 16 us, step 1 reaches 20 -> wake before step 1;
    # step 5 follows a fork (its worker still spins)
    assert thread_choice.prewake_steps(times, forking, 20.0) == [1]
    assert thread_choice.prewake_steps(times, forking, 16.0) == [2]
    assert thread_choice.prewake_steps(times, forking, 100.0) == [0]     # from the start
    assert thread_choice.prewake_steps([1.0, 2.0], [True, False], 20.0) == []  # no lead
    assert thread_choice.prewake_steps([1.0, 2.0], [False, True], 20.0) == [0]
    assert thread_choice.prewake_steps(times, [False] * 7, 20.0) == []
    # two forks far apart: a wake before each
    assert thread_choice.prewake_steps([10.0, 10.0, 40.0, 10.0], [False, True, False, True],
                                       20.0) == [0, 2]


def test_a_fork_is_charged_the_serial_steps_after_it():
    from types import SimpleNamespace as S
    steps = [S(kernel=k) for k in "aXbcdeYfXg"]
    assert thread_choice.windows(steps, {"X", "Y"}) == [("X", 1, 5), ("Y", 6, 8), ("X", 8, 10)]
    assert thread_choice.lower_quartile([5.0, 1.0, 4.0, 2.0, 3.0]) == 2.0


def test_only_kernels_that_fork_are_candidates(models):
    _, by_threads = models
    m = by_threads[2]
    x = _inputs()
    forks = thread_choice.forking_kernels(m, 2, x)
    assert forks and all(n > 0 for n in forks.values())
    assert set(forks) <= set(m.kernels)
    add = [s.kernel for s in m.plan.steps if s.ops == ("add",)]
    assert add and add[0] not in forks          # 7 elements: its loop never forks
    m.set_num_threads(2, choice=False)
    assert sum(forks.values()) == _forks_per_run(m, x)


def test_injected_timings_decide_and_outputs_do_not_change(models):
    model, by_threads = models
    m = by_threads[2]
    x = _inputs()
    m.set_num_threads(2, choice=False)
    before = [a.copy() for a in m.run(x)]
    forks = thread_choice.forking_kernels(m, 2, x)
    keep = [s.kernel for s in m.plan.steps if s.kernel in forks][-1]   # serial steps before it
    _, timings = thread_choice.choose(m, 2, x, measure_fn=_fake({keep}),
                                      validate_fn=_validate("per-kernel"))
    assert m.plan.meta["thread_choice"]["picked"] == "per-kernel"
    assert {t.kernel for t in timings} == set(forks)
    assert set(m.serial_kernels) == set(forks) - {keep}
    assert m.kernels[keep].num_threads == 2
    assert all(m.kernels[k].num_threads == 1 for k in m.serial_kernels)
    assert _forks_per_run(m, x) == forks[keep]
    wake = m.plan.meta["thread_choice"]["prewake"]
    assert wake and m._sequence.calls == len(m.plan.steps) + len(wake)
    after = m.run(x)
    one = by_threads[1].run(x)
    for a, b, c in zip(before, after, one):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(b, c, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(after[0], ort_run(model, x)[0], rtol=2e-4, atol=2e-5)
    # every kernel slower at N: no forks at all; choice=False restores them
    thread_choice.choose(m, 2, x, measure_fn=_fake(set()), validate_fn=_validate("per-kernel"))
    assert set(m.serial_kernels) == set(forks) and _forks_per_run(m, x) == 0
    m.set_num_threads(2, choice=False)
    assert _forks_per_run(m, x) == sum(forks.values())
    m.set_num_threads(2)
    assert _forks_per_run(m, x) == 0


@pytest.mark.parametrize("winner", ["all-n", "small-1"])
def test_whole_runs_overrule_the_per_kernel_choice(models, winner):
    _, by_threads = models
    m = by_threads[2]
    x = _inputs()
    forks = thread_choice.forking_kernels(m, 2, x)
    thread_choice.choose(m, 2, x, measure_fn=_fake({min(forks)}),
                         validate_fn=_validate(winner))
    doc = m.plan.meta["thread_choice"]
    assert doc["picked"] == winner
    assert set(m.serial_kernels) == (set() if winner == "all-n" else set(forks))
    assert _forks_per_run(m, x) == (sum(forks.values()) if winner == "all-n" else 0)
    assert doc["prewake"] == [] and m._sequence.calls == len(m.plan.steps)
    np.testing.assert_allclose(m.run(x)[0], by_threads[1].run(x)[0], rtol=1e-5, atol=1e-6)


def test_a_near_tie_keeps_every_kernel_at_n(models):
    _, by_threads = models
    m = by_threads[2]
    x = _inputs()
    forks = thread_choice.forking_kernels(m, 2, x)
    near = {"per-kernel": 0.97, "all-n": 1.0, "small-1": 0.98}       # 3%: within MARGIN
    thread_choice.choose(m, 2, x, measure_fn=_fake(set()),
                         validate_fn=lambda model, threads, configs, inputs: near)
    assert m.plan.meta["thread_choice"]["picked"] == "all-n" and not m.serial_kernels
    assert _forks_per_run(m, x) == sum(forks.values())


def test_one_thread_has_nothing_to_choose(models):
    _, by_threads = models
    m = by_threads[1]
    assert "thread_choice" not in m.plan.meta
    assert thread_choice.choose(m, 1)[1] == []
    assert "none" in thread_choice.describe(m)


def test_compile_measures_stores_and_reloads(tmp_path, monkeypatch):
    """A 2-thread compile measures (real timings: which way they go depends on the machine,
    so only the invariants are checked), the model cache's warm load and an export keep the
    choice without measuring, and every model gives the 1-thread model's outputs."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "kcache"))
    path = tmp_path / "m.onnx"
    onnx.save(_model(), path)
    x = _inputs(2)
    one = kiln.compile(str(path), db=None, jobs=1, threads=1)
    cold = kiln.compile(str(path), db=None, jobs=1, threads=2)
    warm = kiln.compile(str(path), db=None, jobs=1, threads=2)
    assert warm.plan.meta["compile"].get("cached") and not cold.plan.meta["compile"].get(
        "cached")
    doc = cold.plan.meta["thread_choice"]
    assert doc["threads"] == 2 and doc["kernels"]
    assert doc["picked"] in ("per-kernel", "all-n", "small-1")
    if doc["runs_us"]:      # some kernel did not pay at 2 threads: the three runs were timed
        assert set(doc["runs_us"]) == {"per-kernel", "all-n", "small-1"}
    else:                   # every forking kernel paid at 2 on its own: no whole-run check
        assert doc["picked"] == "all-n" and not doc["serial"]
    assert set(doc["serial"]) <= set(doc["kernels"]) <= set(cold.kernels)
    assert all(k["forks"] > 0 and k["at_1_us"] > 0 for k in doc["kernels"].values())
    assert doc["seconds"] < 5.0
    assert warm.plan.meta["thread_choice"] == doc
    assert f"{len(doc['serial'])} of {len(doc['kernels'])} forking kernels" in warm.summary()
    cold.export(tmp_path / "e.so")
    loaded = kiln.load_compiled(tmp_path / "e.so")
    want = one.run(x)
    for m in (cold, warm, loaded):
        assert {k: m.kernels[k].num_threads for k in doc["serial"]} == dict.fromkeys(
            doc["serial"], 1)
        for a, b in zip(want, m.run(x)):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    for a, b in zip(cold.run(x), warm.run(x)):
        np.testing.assert_array_equal(a, b)
