"""The cost model pool fits on the columns up to the last one a training row uses: a feature
block appended to the layout (v2's dot products) leaves the fits of float tasks as they were."""
from __future__ import annotations

import numpy as np

from kiln.autotune.cost_model import CostModelPool, XGBCostModel


def _pool(X, y):
    pool = CostModelPool(XGBCostModel(n_rounds=8, seed=3))
    pool.set_rows("task", X, y)
    pool.fit()
    return pool


def test_unused_trailing_columns_change_nothing_and_used_ones_are_kept():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 6)).astype(np.float32)
    y = X[:, 0] - 0.5 * X[:, 3] + rng.normal(scale=0.1, size=40)
    padded = np.concatenate([X, np.zeros((40, 4), np.float32)], axis=1)
    short, wide = _pool(X, y), _pool(padded, y)
    assert wide.width == 6
    probe = rng.normal(size=(10, 6)).astype(np.float32)
    probe_wide = np.concatenate([probe, rng.normal(size=(10, 4)).astype(np.float32)], axis=1)
    np.testing.assert_array_equal(wide.predict(probe_wide), short.predict(probe))
    padded[5, -1] = 1.0                                  # one row uses the block: all kept
    assert _pool(padded, y).width == 10
