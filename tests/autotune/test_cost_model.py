"""The cost model learns: it ranks held-out candidates far better than chance."""
import random

import numpy as np
import pytest

from kiln.autotune.cost_model import (XGBCostModel, kendall_tau, ndcg, normalize_throughput,
                                      top_k_recall)
from kiln.autotune.search import Featurizer
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task


def _synthetic_seconds(config: dict, lanes: int) -> float:
    """A roofline-style cost of a matmul config: vectorised full lanes, parallel outer loops,
    unrolled register tiles and a local accumulator speed it up; tiny or huge tiles hurt.
    Realistic in direction and magnitude, deterministic so the test is stable."""
    mid_i, inner_i = config["s0/tile/0"]
    mid_j, inner_j = config["s0/tile/1"]
    speed = 1.0
    if config["s0/vectorize"] and inner_j >= lanes:
        speed *= lanes * (1.0 if inner_j % lanes == 0 else 0.6)
    elif config["s0/vectorize"] and inner_j > 1:
        speed *= inner_j / 2
    speed *= (1.0 + 0.9 * min(config["s0/parallel"], 1))
    if config["s0/unroll"]:
        speed *= 1.0 + 0.5 * min(inner_i, 4) / 4
    if config["s0/local"]:
        speed *= 1.4
    tile_bytes = 4 * (mid_i * inner_i * config["s0/reduce/0"]
                      + config["s0/reduce/0"] * mid_j * inner_j)
    speed /= 1.0 + max(0.0, np.log2(tile_bytes / 32768.0))
    return 1e-3 / speed


def _dataset(n, seed):
    task = Task.from_op("matmul", (128, 128, 128))
    space = SearchSpace(task)
    lanes = space.default_config()["s0/lanes"]
    rng = random.Random(seed)
    featurize = Featurizer(space)
    configs = [space.sample(rng) for _ in range(n)]
    X, ok = featurize.matrix(configs)
    assert ok.all()
    seconds = np.array([_synthetic_seconds(c, lanes) for c in configs])
    return X, normalize_throughput(seconds)


@pytest.fixture(scope="module")
def data():
    X, y = _dataset(240, seed=3)
    return X[:160], y[:160], X[160:], y[160:]


def test_model_ranks_held_out_candidates(data):
    X_train, y_train, X_test, y_test = data
    model = XGBCostModel(seed=0)
    model.fit(X_train, y_train)
    predicted = model.predict(X_test)
    tau = kendall_tau(predicted, y_test)
    assert tau > 0.3, f"Kendall tau {tau:.2f} on held-out candidates"
    # the top-10 predicted contain far more of the true top-10 than a random pick (~1.25)
    assert top_k_recall(predicted, y_test, 10) >= 0.4
    # the predicted order of the best 10 beats a random order's NDCG by a margin
    noise = np.random.default_rng(0).normal(size=len(y_test))
    assert ndcg(predicted, y_test, k=10) > ndcg(noise, y_test, k=10) + 0.2


def test_untrained_model_predicts_zeros_and_random_has_no_signal(data):
    _, _, X_test, y_test = data
    model = XGBCostModel()
    assert not model.is_trained
    np.testing.assert_array_equal(model.predict(X_test), np.zeros(len(X_test)))
    noise = np.random.default_rng(0).normal(size=len(y_test))
    assert abs(kendall_tau(noise, y_test)) < 0.2


def test_groups_rank_within_each_task(data):
    X_train, y_train, X_test, y_test = data
    groups = np.arange(len(y_train)) % 2           # two "tasks" with the same cost law
    model = XGBCostModel(seed=1)
    model.fit(X_train, y_train, groups)
    assert kendall_tau(model.predict(X_test), y_test) > 0.3


def test_normalize_throughput():
    y = normalize_throughput(np.array([2.0, 1.0, np.inf, 4.0]))
    np.testing.assert_allclose(y, [0.5, 1.0, 0.0, 0.25])


def test_fit_rejects_mismatched_arrays():
    with pytest.raises(ValueError, match=r"X of shape \(n, f\) and y of shape \(n,\)"):
        XGBCostModel().fit(np.zeros((3, 4)), np.zeros(5))


def test_predict_matches_dmatrix_prediction():
    """The in-place fast path scores exactly like the booster's DMatrix prediction."""
    import xgboost as xgb
    rng = np.random.default_rng(3)
    X = rng.random((64, 12)).astype(np.float32)
    y = X[:, 0] * 2 + X[:, 1] + rng.random(64).astype(np.float32) * 0.1
    model = XGBCostModel(n_rounds=10)
    model.fit(X, y)
    held_out = rng.random((9, 12)).astype(np.float32)
    fast = model.predict(held_out)
    assert fast.shape == (9,) and fast.dtype == np.float32
    np.testing.assert_array_equal(fast, model.booster.predict(xgb.DMatrix(held_out)))
    assert model.predict(held_out[:1]).shape == (1,)
