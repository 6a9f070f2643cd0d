"""The wasm export in a real browser: the generated page, served on 127.0.0.1, runs
model.wasm in headless Chromium and shows the same output as native Kiln; the same page
runs the ONNX model on onnxruntime-web (wasm, 1 thread, SIMD) for comparison."""
from __future__ import annotations

import os

import numpy as np
import pytest

from kiln.deploy_wasm import export_wasm
from kiln.graph.compile.model import compile_model

from . import browser
from .c_models import model_case, ort_run


@pytest.fixture(scope="module")
def ready():
    why = browser.missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser test: {why}")
        pytest.skip(why)


def test_page_in_chromium_matches_native_kiln_and_onnxruntime_web(ready, tmp_path):
    model, _, feeds = model_case("cnn")
    compiled = compile_model(model, db=None, jobs=1, threads=1, cache_model=False)
    out = export_wasm(compiled, tmp_path / "cnn.wasm")
    inputs = [feeds[n] for n in compiled.plan.inputs]
    browser.stage(out, tmp_path, inputs, onnx_model=model)
    result = browser.run_page(tmp_path, "cnn.html", ort=True, repeat=3)
    assert "error" not in result, result.get("error")
    (want,) = compiled.run(inputs)
    got = np.array(result["kiln"]["outputs"][0], np.float32).reshape(want.shape)
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-5)
    (ort_want,) = ort_run(model, feeds)
    ort_got = np.array(result["ort"]["outputs"][0], np.float32).reshape(ort_want.shape)
    np.testing.assert_allclose(ort_got, ort_want, rtol=1e-4, atol=1e-5)
    # (a browser's performance.now() is coarse, 0.1 ms without cross-origin isolation: this
    # tiny model's median may round to 0; benchmarks/deploy.py times the real models)
    assert result["kiln"]["ms"] >= 0 and result["ort"]["ms"] >= 0
