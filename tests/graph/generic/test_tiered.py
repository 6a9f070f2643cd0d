"""A tiered compile that starts on generic kernels (graph/generic) and swaps in the
optimised model (graph/compile/tiers.TieredModel)."""
from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import helper

import kiln
from kiln.graph.compile import model as model_mod
from kiln.graph.compile import tiers
from kiln.graph.generic.model import GenericModel
from kiln.graph.runtime.executor import CompiledModel
from tests.graph.graph_helpers import make_model, ort_run


@pytest.fixture
def gate(monkeypatch):
    """Holds the optimised build (compile_model called from the tier-2 thread) until
    `gate.set()`."""
    event = threading.Event()
    real = model_mod.compile_model

    def gated(*args, **kwargs):
        if threading.current_thread().name.startswith("kiln-tier2"):
            assert event.wait(60), "the test never opened the gate"
        return real(*args, **kwargs)
    monkeypatch.setattr(model_mod, "compile_model", gated)
    yield event
    event.set()


def _model(tmp_path, shape=(3, 37)):
    n = int(np.prod(shape))
    m = make_model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Reshape", ["r", "s"], ["y"])],
                   {"x": (shape, "float32")}, ["y"], inits={"s": np.array([n], np.int64)})
    path = tmp_path / "relu.onnx"
    onnx.save(m, path)
    return str(path), m


def test_starts_generic_and_gives_the_same_outputs_after_the_swap(cache_root, tmp_path,
                                                                    gate, rng):
    path, proto = _model(tmp_path)
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert isinstance(m, tiers.TieredModel) and isinstance(m._current, GenericModel)
    assert m.tier == tiers.GENERIC and "tier 'generic'" in m.summary()
    x = rng.standard_normal((3, 37)).astype(np.float32)
    want = ort_run(proto, {"x": x})
    before = m.run({"x": x})
    np.testing.assert_array_equal(before[0], want[0])
    gate.set()
    optimized = m.optimized(timeout=120)
    assert isinstance(optimized, CompiledModel) and m.tier == tiers.OPTIMIZED
    np.testing.assert_array_equal(m.run({"x": x})[0], before[0])


def test_a_swap_during_concurrent_runs_is_safe(cache_root, tmp_path, gate, rng):
    path, _ = _model(tmp_path, (64, 33))
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    x = rng.standard_normal((64, 33)).astype(np.float32)
    want = np.maximum(x, 0).reshape(-1)
    errors, stop = [], threading.Event()

    def runner():
        try:
            while not stop.is_set():
                np.testing.assert_array_equal(m.run({"x": x})[0], want)
        except BaseException as exc:     # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=runner) for _ in range(3)]
    for t in threads:
        t.start()
    gate.set()
    m.optimized(timeout=120)
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert m.tier == tiers.OPTIMIZED


def test_the_model_cache_never_serves_the_generic_tier(cache_root, tmp_path, gate):
    path, _ = _model(tmp_path)
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert m.tier == tiers.GENERIC
    gate.set()
    m.optimized(timeout=120)
    again = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert isinstance(again, CompiledModel) and not isinstance(again, tiers.TieredModel)


def test_off_or_uncovered_takes_the_fast_tier(cache_root, tmp_path, monkeypatch, gate):
    path, _ = _model(tmp_path)
    monkeypatch.setenv("KILN_GENERIC_TIER", "0")
    assert kiln.compile(path, db=None, jobs=1, tiered=True).tier == tiers.FAST
    monkeypatch.delenv("KILN_GENERIC_TIER")
    det = make_model([helper.make_node("Det", ["x"], ["y"])], {"x": ((3, 3), "float32")},
                     ["y"])
    det_path = tmp_path / "det.onnx"
    onnx.save(det, det_path)
    assert kiln.compile(str(det_path), db=None, jobs=1, tiered=True).tier == tiers.FAST
    monkeypatch.setenv("KILN_GENERIC_TIER", "maybe")
    with pytest.raises(kiln.KilnError, match="KILN_GENERIC_TIER"):
        kiln.compile(det_path, db=None, jobs=1, tiered=True)


def test_the_optimised_build_chooses_threads_under_the_run_lock(cache_root, tmp_path,
                                                                 monkeypatch, rng):
    """The optimised model of a tiered compile gets its measured thread choice (as an
    untiered compile's does), timed while no first-tier run can start."""
    from kiln.graph.runtime import thread_choice
    seen = []
    real = thread_choice.choose

    def spy(model, threads, *args, **kwargs):
        seen.append((threads, m.run_lock.locked()))
        return real(model, threads, *args, **kwargs)
    monkeypatch.setattr(thread_choice, "choose", spy)
    path, _ = _model(tmp_path, (64, 33))
    m = kiln.compile(path, db=None, jobs=1, threads=2, tiered=True)
    assert m.tier == tiers.GENERIC
    m.run({"x": rng.standard_normal((64, 33)).astype(np.float32)})
    m.optimized(timeout=120)
    assert seen == [(2, True)]


def test_missing_library_units_take_the_fast_tier_and_warm_up_in_the_background(
        cache_root, tmp_path, monkeypatch, gate):
    from kiln.codegen.generic import library as lib_mod
    from kiln.graph.generic import compile as generic_compile
    started = []
    monkeypatch.setattr(generic_compile, "start_background_warmup",
                        lambda target: started.append(str(target)) or True)
    monkeypatch.setenv("KILN_GENERIC_DIR", str(tmp_path / "empty-library"))
    monkeypatch.setenv("KILN_GENERIC_BUILD", "background")
    path, _ = _model(tmp_path)
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert m.tier == tiers.FAST and len(started) == 1
    monkeypatch.setenv("KILN_GENERIC_BUILD", "later")
    with pytest.raises(kiln.KilnError, match="KILN_GENERIC_BUILD='later'"):
        kiln.compile(str(tmp_path / "relu.onnx"), db=None, jobs=1, tiered=True)
    lib_mod.unit_object("elementwise.unary.relu", kiln.Target.native())    # now built
    monkeypatch.setenv("KILN_GENERIC_BUILD", "background")
    m2 = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert m2.tier == tiers.GENERIC


def test_the_background_warm_up_starts_once(tmp_path, monkeypatch):
    from kiln.codegen.generic import library as lib_mod
    launched = []

    class FakePopen:
        def __init__(self, cmd, **kwargs):
            launched.append(cmd)
    import subprocess
    monkeypatch.setattr(subprocess, "Popen", FakePopen)
    monkeypatch.setenv("KILN_GENERIC_DIR", str(tmp_path / "lib"))
    target = kiln.Target.native()
    assert lib_mod.start_background_warmup(target)
    assert not lib_mod.start_background_warmup(target)      # one is running (its lock)
    assert len(launched) == 1 and launched[0][1:4] == ["-m", "kiln", "warmup"]
    assert "--lock" in launched[0]
