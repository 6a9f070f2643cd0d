"""Fixtures for the TE tests: run a DAG through the numpy interpreter or the native compiler."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.te.reference import evaluate


def _as_list(outputs):
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def run_reference(outputs, feeds: dict) -> list[np.ndarray]:
    return evaluate(_as_list(outputs), feeds)


def run_native(outputs, feeds: dict) -> list[np.ndarray]:
    """Compile with the default schedule (kiln.build) and run; outputs are written in place."""
    if not hasattr(kiln, "build") or not hasattr(kiln, "create_schedule"):
        pytest.skip("kiln.build is not available yet")
    outputs = _as_list(outputs)
    inputs = list(feeds)
    kernel = kiln.build(kiln.create_schedule(outputs), inputs + outputs, target="native")
    results = [np.zeros(t.shape, dtype=t.dtype) for t in outputs]
    kernel(*[feeds[t] for t in inputs], *results)
    return results


@pytest.fixture(params=["reference", "native"])
def run(request):
    """Evaluate `outputs` from `feeds` ({placeholder: array}) with one backend."""
    return run_reference if request.param == "reference" else run_native


@pytest.fixture
def rng():
    return np.random.default_rng(0)
