"""f.lower (graph and loop IR as text), f.compile (a CompiledModel that exports like any
other) and kiln.tune(f, example_args) (records that the next compile applies)."""
from __future__ import annotations

import numpy as np
import pytest
from kiln.graph.runtime.executor import CompiledModel

import kiln
import kiln.numpy as knp


def _gelu_dense(x, w):
    h = x @ w
    return 0.5 * h * (1 + knp.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))


def _gelu_ref(x, w):
    h = x @ w
    return 0.5 * h * (1 + np.tanh(0.7978845608 * (h + 0.044715 * h ** 3)))


def test_lower_prints_the_graph_and_each_kernels_loop_ir(rng):
    f = kiln.jit(lambda x: knp.exp(x) * 2 + x.sum(axis=0))
    text = str(f.lower(rng.standard_normal((3, 5)).astype(np.float32)))
    assert "# traced graph" in text and "graph <lambda>" not in text
    assert "%exp: float32[3, 5] = exp(%x)" in text
    assert "reduce_sum(%x, axes=(0,), keepdims=0)" in text
    assert text.count("## g") == 2 and "for " in text and "exp(x[" in text


def test_compile_gives_a_compiled_model_that_exports(rng, tmp_path):
    f = kiln.jit(_gelu_dense)
    x = rng.standard_normal((4, 6)).astype(np.float32)
    w = rng.standard_normal((6, 5)).astype(np.float32)
    model = f.compile(x, w)
    assert isinstance(model, CompiledModel) and model.input_names == ["x", "w"]
    np.testing.assert_allclose(model.run([x, w])[0], _gelu_ref(x, w), rtol=1e-4, atol=1e-5)
    path = model.export(tmp_path / "gelu.so")
    loaded = kiln.load_compiled(path)
    np.testing.assert_allclose(loaded.run({"x": x, "w": w})[0], f(x, w), rtol=1e-6)
    assert f.stats.traces == 1


@pytest.mark.slow
def test_tune_a_jitted_function_and_apply_its_records(rng, tmp_path):
    db = tmp_path / "tune.db"
    f = kiln.jit(_gelu_dense, db=db)
    x = rng.standard_normal((16, 32)).astype(np.float32)
    w = rng.standard_normal((32, 24)).astype(np.float32)
    assert {s.source for s in f.compile(x, w).plan.steps} == {"default"}
    # no confirmation: it may keep the default (timing noise), and the record must apply
    reports = kiln.tune(f, (x, w), trials=2, db=db, model_check=False, confirm=None)
    assert reports and sum(r.trials for r in reports) >= 2
    assert f.stats.traces == 1 and not f._cache       # tuning cleared the compiled signature
    model = f.compile(x, w)
    assert {s.source for s in model.plan.steps} == {"database"}
    np.testing.assert_allclose(f(x, w), _gelu_ref(x, w), rtol=1e-4, atol=1e-4)
