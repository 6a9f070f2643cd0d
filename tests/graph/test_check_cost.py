"""What the in-model checks cost, measured before tuning (graph/compile/check_cost.py)."""
from __future__ import annotations

import time

import numpy as np
import pytest

from kiln.graph.compile import model_check
from kiln.graph.compile.check_cost import CheckCost, measure_check_cost


def test_the_timing_follows_paired_ratios_rounds_and_samples():
    # a 1 ms run: each sample is 10 runs (SAMPLE_SECONDS), each round 2 sides x 3 samples
    cost = CheckCost(compile_seconds=0.5, run_seconds=1e-3)
    rounds_part = 2 * 9 * model_check.SAMPLES * model_check.SAMPLE_SECONDS
    assert cost.timing_seconds(9) == pytest.approx(rounds_part + 6e-3)
    assert cost.check_seconds(9) == pytest.approx(0.5 + rounds_part + 6e-3)
    # a 25 ms run is one run per sample; a loaded machine stretches the wall time
    slow = CheckCost(compile_seconds=2.0, run_seconds=25e-3, stretch=2.0)
    assert slow.timing_seconds(1) == pytest.approx(2.0 * (6 * 25e-3 + 6 * 25e-3))
    assert slow.verdict_seconds() == pytest.approx(
        4.0 + slow.timing_seconds(model_check.VERDICT_ROUNDS))


class _Busy:
    """A model whose run works for `seconds` of this thread's CPU time."""

    def __init__(self, seconds: float):
        self.seconds, self.runs = seconds, 0

    def run(self, inputs):
        end = time.thread_time() + self.seconds
        while time.thread_time() < end:
            pass
        self.runs += 1
        return [np.zeros(1)]

    def _example_inputs(self):
        return []


def test_measure_check_cost_times_a_compile_and_the_models_runs():
    model = _Busy(2e-3)

    def compile_now():
        time.sleep(0.05)
        return model

    cost = measure_check_cost(compile_now, threads=1, probe_seconds=0.02)
    assert cost.compile_seconds >= 0.05
    assert 2e-3 <= cost.run_seconds < 4e-3
    assert 1.0 <= cost.stretch <= 4.0 and model.runs >= 4
