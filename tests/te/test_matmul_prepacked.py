"""te.ops.matmul_prepacked (a @ W with W as column panels) against numpy on awkward shapes,
tail panels included, under the default schedule of its search space."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln import te
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.te import ops
from kiln.te.errors import TEError
from kiln.te.ops.linalg import MATMUL_PREPACKED
from tests.util import run_config


def _task(a_shape, n, block):
    k = a_shape[-1]
    a = te.placeholder(a_shape, "float32", "A")
    p = te.placeholder((-(-n // block), k, block), "float32", "P")
    c = ops.matmul_prepacked(a, p, n, name="C")
    return Task("mmp", (c,), (a, p, c)), a, p


def _check(a_shape, n, block, config=None, seed=0):
    task, a_t, p_t = _task(a_shape, n, block)
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, a_shape).astype(np.float32)
    w = rng.uniform(-1, 1, (a_shape[-1], n)).astype(np.float32)
    space = SearchSpace(task)
    config = space.default_config() if config is None else config
    got = run_config(task, space, config, {a_t: a, p_t: ops.pack_matmul_weight(w, block)})[0]
    np.testing.assert_allclose(got, a @ w, rtol=1e-4, atol=1e-4, err_msg=str(config))
    return space


@pytest.mark.parametrize("m", [1, 3, 7, 128])
@pytest.mark.parametrize("n", [1, 13, 16, 1000])
@pytest.mark.parametrize("k", [1, 17, 256])
def test_matches_numpy(m, n, k):
    block = 40 if m == 1 and n % 40 == 0 else 16
    _check((m, k), n, block)


@pytest.mark.parametrize("a_shape, n, block", [
    ((2, 5, 24), 33, 16),        # batch dims of x are kept; a tail panel of 1 column
    ((1, 128, 64), 256, 16),     # BERT's [1, seq, hidden] form
    ((1, 96), 1000, 40),         # a GEMV: panels of 5 vectors
    ((5, 31), 100, 24),          # a panel of three vectors, tail of 4
])
def test_batch_dims_and_tail_panels(a_shape, n, block):
    _check(a_shape, n, block)


@settings(max_examples=12, deadline=None, suppress_health_check=list(HealthCheck))
@given(m=st.integers(1, 20), k=st.integers(1, 70), n=st.integers(1, 90),
       block=st.sampled_from([8, 16, 24, 40]))
def test_hypothesis_shapes(m, k, n, block):
    _check((m, k), n, block, seed=m * 1000 + k)


def test_shape_tag_and_errors():
    task, a, p = _task((7, 17), 40, 16)
    assert task.outputs[0].shape == (7, 40) and task.outputs[0].op.tag == MATMUL_PREPACKED
    with pytest.raises(TEError, match=r"matmul_prepacked\(\).*ceil\(n / block\) = 2"):
        ops.matmul_prepacked(a, p, 20)
    with pytest.raises(TEError, match=r"matmul_prepacked\(\).*reduction dims must match"):
        ops.matmul_prepacked(te.placeholder((7, 16), "float32", "B"), p, 40)
    with pytest.raises(TEError, match=r"matmul_prepacked\(\).*a\[\.\.\., M, K\]"):
        ops.matmul_prepacked(te.placeholder((17,), "float32", "v"), p, 40)
