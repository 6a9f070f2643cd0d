"""kiln.jit's caches: a call with a known signature traces and compiles nothing; a new shape,
dtype or static value traces again (a warning past max_traces); a new process re-traces but
finds every kernel in the persistent kernel cache (no LLVM compile)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import kiln.codegen.build
import numpy as np
import pytest

import kiln
import kiln.numpy as knp
from kiln.jit import JitError, JitRetraceWarning

build_mod = sys.modules["kiln.codegen.build"]


@pytest.fixture
def llvm_compiles(monkeypatch):
    """LLVM compiles (kernel-cache misses) of codegen.build."""
    calls = []
    real = build_mod.compile_object

    def counting(text, target):
        calls.append(target)
        return real(text, target)
    monkeypatch.setattr(build_mod, "compile_object", counting)
    return calls


def _scaled_tanh(x, scale):
    return knp.tanh(x) * scale + x.sum(axis=-1, keepdims=True)


def test_second_call_with_same_shapes_compiles_nothing(rng, llvm_compiles, monkeypatch):
    f = kiln.jit(_scaled_tanh)
    x = rng.standard_normal((3, 7)).astype(np.float32)
    first = f(x, 0.5)
    assert f.stats.traces == 1
    compiled = []
    monkeypatch.setattr(sys.modules["kiln.jit.function"], "compile_model",
                        lambda *a, **k: compiled.append(a) or pytest.fail("compiled again"))
    before = len(llvm_compiles)
    second = f(x + 1, 0.25)          # new values (a Python scalar too), same signature
    assert f.stats.traces == 1 and f.stats.calls == 2 and not compiled
    assert len(llvm_compiles) == before
    np.testing.assert_allclose(first, np.tanh(x) * 0.5 + x.sum(-1, keepdims=True), rtol=1e-5)
    np.testing.assert_allclose(second, np.tanh(x + 1) * 0.25 + (x + 1).sum(-1, keepdims=True),
                               rtol=1e-5)


def test_new_shapes_dtypes_and_static_values_retrace(rng):
    f = kiln.jit(lambda x, axis: x.sum(axis=axis), static_argnames="axis")
    x = rng.standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(f(x, axis=0), x.sum(0), rtol=1e-5)
    np.testing.assert_allclose(f(x, axis=-1), x.sum(-1), rtol=1e-5)
    np.testing.assert_allclose(f(x[:2], axis=0), x[:2].sum(0), rtol=1e-5)
    assert f(x.astype(np.float64), axis=0).dtype == np.float64
    assert f(x, axis=0).shape == (5,)
    assert f.stats.traces == 4


def test_retrace_warning_past_the_limit(rng):
    f = kiln.jit(lambda x: x * 2, max_traces=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(np.ones(1, np.float32)), f(np.ones(2, np.float32))
    with pytest.warns(JitRetraceWarning, match=r"3 signatures.*max_traces=2.*float32\[3\]"):
        f(np.ones(3, np.float32))


def test_python_control_flow_on_static_values(rng):
    @kiln.jit(static_argnames=["activation", "layers"])
    def mlp(x, w, activation="relu", layers=2):
        for _ in range(layers):
            x = x @ w
            x = knp.maximum(x, 0) if activation == "relu" else knp.tanh(x)
        return x
    x, w = rng.standard_normal((2, 4)), rng.standard_normal((4, 4)) * 0.5
    want = np.tanh(np.tanh(np.tanh(x @ w) @ w) @ w)
    np.testing.assert_allclose(mlp(x, w, activation="tanh", layers=3), want, rtol=1e-9)
    want = np.maximum(np.maximum(x @ w, 0) @ w, 0)
    np.testing.assert_allclose(mlp(x, w), want, rtol=1e-9)


def test_static_arguments_must_hash():
    f = kiln.jit(lambda x, axes: x.sum(axis=axes), static_argnames=["axes"])
    with pytest.raises(JitError, match=r"static argument 'axes'.*hashable.*list"):
        f(np.ones((2, 2), np.float32), axes=[0])
    with pytest.raises(JitError, match=r"static_argnames \['nope'\].*parameters.*\['x'\]"):
        kiln.jit(lambda x: x, static_argnames=["nope"])


@pytest.mark.slow
def test_a_new_process_finds_the_kernels_in_the_persistent_cache(tmp_path):
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import kiln, kiln.numpy as knp
        import kiln.codegen.build
        build = sys.modules["kiln.codegen.build"]
        calls = []
        real = build.compile_object
        build.compile_object = lambda text, target: calls.append(1) or real(text, target)

        @kiln.jit
        def f(x, y):
            e = knp.exp(x - x.max(axis=-1, keepdims=True))
            return e / e.sum(axis=-1, keepdims=True) + knp.tanh(y) * 2

        x = np.linspace(-1, 1, 35, dtype=np.float32).reshape(5, 7)
        out = f(x, x)
        e = np.exp(x - x.max(-1, keepdims=True))
        assert np.allclose(out, e / e.sum(-1, keepdims=True) + np.tanh(x) * 2, atol=1e-5)
        print(len(calls), len(f.compile(x, x).plan.steps))
    """)
    env = {**os.environ, "KILN_CACHE_DIR": str(tmp_path / "cache")}

    def run():
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                              text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return [int(v) for v in done.stdout.split()]
    cold_compiles, kernels = run()
    assert cold_compiles == kernels >= 1
    warm_compiles, _ = run()
    assert warm_compiles == 0, "the new process compiled kernels the cache holds"
