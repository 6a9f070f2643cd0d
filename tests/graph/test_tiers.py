"""Tiered compilation (graph/compile/tiers.py): a model runs at once on fast-tier kernels,
the optimised ones replace them between runs, the caches only ever hold the optimised tier."""
from __future__ import annotations

import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import kiln
from kiln.codegen import cache
from kiln.codegen.target import Target
from kiln.graph import models
from kiln.graph.compile import model as model_mod
from kiln.graph.compile import tiers
from kiln.graph.compile.model import model_tasks
from kiln.graph.runtime.executor import CompiledModel
from kiln.autotune.space.rules import SearchSpace
from kiln.schedule import lower
from kiln.schedule.ir import For, ForKind
from kiln.schedule.visitor import StmtVisitor
from kiln.te.errors import KilnError


@pytest.fixture(autouse=True)
def fast_first_tier(monkeypatch):
    """These tests are of the fast tier (per-model kernels): the generic first tier, which
    a tiered compile takes where it covers the model, is off (tests/graph/generic tests it)."""
    monkeypatch.setenv("KILN_GENERIC_TIER", "0")


@pytest.fixture
def gate(monkeypatch):
    """Holds the optimised (tier-2) build until `gate.set()`; `gate.fail` makes it raise."""
    event = threading.Event()
    event.fail = False
    real = model_mod._build_kernels

    def gated(*args, **kwargs):
        if not threading.current_thread().name.startswith("kiln-tier2"):
            return real(*args, **kwargs)       # a compile of the test's own
        assert event.wait(60), "the test never opened the gate"
        if event.fail:
            raise KilnError("tier-2 build failed on purpose (test)")
        return real(*args, **kwargs)
    monkeypatch.setattr(model_mod, "_build_kernels", gated)
    yield event
    event.set()     # never leave a background build waiting


def _cnn(tmp_path):
    # odd sizes: 13x13 images, 12 channels (not a multiple of the vector width), 7 classes
    path = tmp_path / "cnn.onnx"
    onnx.save(models.default_cnn(image_size=13, width=12, num_classes=7), path)
    return str(path)


def _mlp(tmp_path):
    path = tmp_path / "mlp.onnx"
    onnx.save(models.mlp(batch=3, sizes=(37, 29, 11)), path)
    return str(path)


def _ort(path, x):
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _close(got, want):
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4)


def test_same_outputs_before_and_after_the_swap(cache_root, tmp_path, gate, rng):
    path = _cnn(tmp_path)
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert isinstance(m, tiers.TieredModel) and isinstance(m, CompiledModel)
    assert m.tier == tiers.FAST and set(m.kernel_tiers().values()) == {tiers.FAST}
    assert "tier 'fast'" in m.summary() and "building in the background" in m.summary()
    assert {s.source for s in m.plan.steps} == {tiers.FAST_SOURCE}
    x = rng.standard_normal((1, 3, 13, 13)).astype(np.float32)
    want = _ort(path, x)
    before = m.run(x)
    _close(before, want)
    gate.set()
    optimized = m.optimized(timeout=120)
    assert m.tier == tiers.OPTIMIZED and set(m.kernel_tiers().values()) == {tiers.OPTIMIZED}
    assert not isinstance(optimized, tiers.TieredModel)
    assert tiers.FAST_SOURCE not in {s.source for s in m.plan.steps}
    after = m.run(x)
    _close(after, want)
    _close(after, before)
    assert "tier 'optimized'" in m.summary()
    assert m.benchmark(x, repeat=2) > 0 and m.profile(x, repeat=2)[0]["kernel"]


def test_a_swap_during_concurrent_runs_is_safe(cache_root, tmp_path, gate):
    path = _mlp(tmp_path)
    # jobs=2: the optimised build forks its compile workers while the threads run kernels
    m = kiln.compile(path, db=None, jobs=2, tiered=True)
    inputs = [np.random.default_rng(k).standard_normal((3, 37)).astype(np.float32)
              for k in range(4)]
    wants = [_ort(path, x) for x in inputs]
    errors, tiers_seen, stop = [], [[] for _ in inputs], threading.Event()

    def runner(k):
        try:
            while not stop.is_set():
                tier = m.tier
                _close(m.run(inputs[k]), wants[k])
                tiers_seen[k].append(tier)
        except BaseException as exc:    # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=runner, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    while min(len(s) for s in tiers_seen) < 3 and not errors:
        threading.Event().wait(0.01)
    gate.set()                  # the swap happens while the four threads keep running
    m.optimized(timeout=120)
    counts = [len(s) for s in tiers_seen]
    while min(len(s) for s in tiers_seen) < max(counts) + 3 and not errors:
        threading.Event().wait(0.01)
    stop.set()
    for t in threads:
        t.join(60)
    assert not errors, errors[0]
    assert all(tiers.FAST in s and tiers.OPTIMIZED in s for s in tiers_seen)


def test_the_caches_never_serve_the_fast_tier(cache_root, tmp_path, gate):
    path = _mlp(tmp_path)
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert cache.entry_count().get("kernels", 0) == 0     # tier 1 stored nothing
    # a compile while tier 2 is pending is a miss, and compiles the optimised model itself
    other = kiln.compile(path, db=None, jobs=1, tiered=False)
    assert not isinstance(other, tiers.TieredModel)
    assert not other.plan.meta["compile"].get("cached")
    assert tiers.FAST_SOURCE not in {s.source for s in other.plan.steps}
    gate.set()
    m.optimized(timeout=120)
    warm = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert not isinstance(warm, tiers.TieredModel) and warm.plan.meta["compile"].get("cached")
    assert {s.source for s in warm.plan.steps} == {s.source for s in other.plan.steps}


def test_a_failed_optimised_build_keeps_the_fast_tier(cache_root, tmp_path, gate, rng):
    path = _mlp(tmp_path)
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    gate.fail = True
    gate.set()
    with pytest.raises(KilnError, match="building the optimised kernels failed"):
        m.optimized(timeout=120)
    assert m.tier == tiers.FAST and "optimised build failed" in m.summary()
    x = rng.standard_normal((3, 37)).astype(np.float32)
    _close(m.run(x), _ort(path, x))


def test_export_waits_for_the_optimised_tier(cache_root, tmp_path, gate, rng):
    path = _mlp(tmp_path)
    m = kiln.compile(path, db=None, jobs=1, tiered=True)
    threading.Timer(0.2, gate.set).start()
    out = m.export(tmp_path / "m.so")
    loaded = kiln.load_compiled(out)
    assert tiers.FAST_SOURCE not in {s.source for s in loaded.plan.steps}
    x = rng.standard_normal((3, 37)).astype(np.float32)
    _close(loaded.run(x), _ort(path, x))
    assert m.optimized(timeout=0) is not None


def test_the_setting(monkeypatch):
    assert tiers.tiered_setting(True, {}) and not tiers.tiered_setting(False, {"KILN_TIERED": "1"})
    assert tiers.tiered_setting(None, {"KILN_TIERED": "1"})
    assert not tiers.tiered_setting(None, {"KILN_TIERED": "off"})
    assert tiers.tiered_setting(None, {}) == tiers.DEFAULT_TIERED
    with pytest.raises(KilnError, match="KILN_TIERED='maybe'"):
        tiers.tiered_setting(None, {"KILN_TIERED": "maybe"})


class _Unrolled(StmtVisitor):
    def __init__(self):
        self.count = 0

    def visit_For(self, node: For):
        self.count += node.kind is ForKind.UNROLLED
        self.generic_visit(node)


def test_the_fast_config_leaves_the_window_loops_to_llvm():
    """Window taps stay loops (fewer unrolled loops than the default where a task has a
    window knob), and register tiles but in convs; every other knob is the default's."""
    target = Target.from_string("native")
    model = models.mobilenetv2_like(image_size=16, width_mult=0.25, num_classes=7, stages=2)
    # (its classifier is a matmul whose register tile is rolled)
    counts = {"default": 0, "fast": 0}
    windows = rolled = 0
    for mt in model_tasks(model, target):
        space = SearchSpace(mt.task.retargeted(target), 1, target)
        default, fast = space.default_config(), tiers.fast_config(space)
        conv = "conv" in mt.name
        for name, value in default.items():
            knob = name.split("/")[-1]
            off = knob in tiers.FAST_OFF_KNOBS or (knob in tiers.CONV_ONLY_KNOBS and not conv)
            assert fast[name] == (0 if off else value), name
            windows += bool(knob in tiers.FAST_OFF_KNOBS and value)
            rolled += bool(knob in tiers.CONV_ONLY_KNOBS and not conv and value)
        for name, config in (("default", default), ("fast", fast)):
            sch, args = space.apply(config)
            visitor = _Unrolled()
            visitor(lower(sch, args, name=mt.name).body)
            counts[name] += visitor.count
    assert windows > 0 and rolled > 0 and counts["default"] > counts["fast"] > 0


def test_a_dynamic_model_tiers_each_specialisation(cache_root, tmp_path, gate, rng):
    model = models.mlp(batch=3, sizes=(37, 29, 11))
    for value in (*model.graph.input, *model.graph.output):
        value.type.tensor_type.shape.dim[0].dim_param = "batch"
    del model.graph.value_info[:]
    path = tmp_path / "dyn.onnx"
    onnx.save(model, path)
    m = kiln.compile(str(path), db=None, jobs=1, tiered=True)
    x = rng.standard_normal((5, 37)).astype(np.float32)
    _close(m.run(x), _ort(str(path), x))
    (spec,) = m.specializations
    assert isinstance(spec, tiers.TieredModel) and spec.tier == tiers.FAST
    gate.set()
    assert m.optimized(timeout=120) is m and spec.tier == tiers.OPTIMIZED
    _close(m.run(x), _ort(str(path), x))
    assert "tier 'optimized'" in m.summary()


def test_the_c_export_takes_the_optimised_tier(cache_root, tmp_path, gate):
    from kiln.deploy import deploy_plan
    m = kiln.compile(_mlp(tmp_path), db=None, jobs=1, tiered=True)
    gate.set()
    from kiln import deploy
    compiled = deploy._compiled(m, None, None, "native", None, None, "nchwc", True)
    assert compiled is m.optimized(timeout=0)
    plan, kernels = deploy_plan(compiled)
    assert set(kernels) and all(k.cache_key for k in compiled.kernels.values())


def test_a_process_ending_on_the_fast_tier_leaves_the_optimised_model_cached(cache_root,
                                                                              tmp_path):
    import subprocess
    import sys
    import textwrap
    path = _mlp(tmp_path)
    script = textwrap.dedent(f"""
        import numpy as np, kiln
        m = kiln.compile({path!r}, db=None, jobs=1, tiered=True)
        m.run(np.ones((3, 37), np.float32))
        assert m.tier == "fast", m.tier    # exits while the optimised build runs
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    warm = kiln.compile(path, db=None, jobs=1, tiered=True)
    assert not isinstance(warm, tiers.TieredModel) and warm.plan.meta["compile"].get("cached")
