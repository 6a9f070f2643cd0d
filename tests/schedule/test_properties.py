"""Property: any legal schedule computes the same result as numpy."""
import numpy as np
from hypothesis import HealthCheck, given, settings

from tests.strategies import scheduled
from tests.util import random_array, run_schedule


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scheduled())
def test_random_schedules_match_numpy(case):
    s, inputs, out, reference = case
    rng = np.random.default_rng(0)
    arrays = [random_array(t.shape, rng=rng) for t in inputs]
    (result,) = run_schedule(s, [*inputs, out], arrays)
    np.testing.assert_allclose(result, reference(*arrays), rtol=1e-4, atol=1e-5)
