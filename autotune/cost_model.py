"""The XGBoost cost model: ranks candidate schedules from their loop-IR features.

It knows only arrays: features X, targets y (throughput normalised per task, higher is
better) and a group id per row (the task), so ranking pairs are formed inside a task.
xgboost, scipy and scikit-learn are imported when first used: the measurement worker and the
CLI import this package but never train (xgboost alone costs seconds of start-up).
"""
from __future__ import annotations

import logging
import time

import numpy as np

from ..te.errors import TuningDatabaseError

log = logging.getLogger(__name__)


def normalize_throughput(costs: np.ndarray) -> np.ndarray:
    """Turn seconds per run into throughput scaled to [0, 1] (1 = the fastest, failed = 0)."""
    costs = np.asarray(costs, dtype=np.float64)
    ok = np.isfinite(costs) & (costs > 0)
    out = np.zeros_like(costs)
    if ok.any():
        out[ok] = costs[ok].min() / costs[ok]
    return out


class XGBCostModel:
    """Pairwise-rank gradient-boosted trees, refitted online as measurements arrive (or, with
    a regression `objective`, trees that predict y itself: the zero-shot model)."""

    def __init__(self, n_rounds: int = 60, max_depth: int = 6, learning_rate: float = 0.2,
                 seed: int = 0, nthread: int = 1, objective: str = "rank:pairwise",
                 min_child_weight: float = 1):
        self.n_rounds = n_rounds
        self.params = {"objective": objective, "max_depth": max_depth,
                       "eta": learning_rate, "min_child_weight": min_child_weight,
                       "subsample": 0.9,
                       "colsample_bytree": 0.9, "seed": seed, "nthread": nthread,
                       "verbosity": 0}
        self.booster = None         # an xgboost.Booster once fitted
        self.n_trained = 0

    @property
    def is_trained(self) -> bool:
        return self.booster is not None

    def fit(self, X: np.ndarray, y: np.ndarray, groups: np.ndarray | None = None,
            group_weights: dict | None = None) -> None:
        """Train from scratch on all rows; `groups` holds a task id per row (default: one),
        `group_weights` an optional weight per group id (missing groups weigh 1)."""
        X = np.asarray(X, dtype=np.float32)
        y = np.asarray(y, dtype=np.float32)
        if X.ndim != 2 or len(X) != len(y):
            raise ValueError(f"fit() needs X of shape (n, f) and y of shape (n,), got "
                             f"{X.shape} and {y.shape}")
        groups = np.zeros(len(y), dtype=np.int64) if groups is None else np.asarray(groups)
        if len(y) < 2 or np.ptp(y) == 0:
            log.debug("cost model: %d rows without spread in y; keeping the old model", len(y))
            return
        import xgboost as xgb
        order = np.argsort(groups, kind="stable")
        X, y, groups = X[order], y[order], groups[order]
        ids, sizes = np.unique(groups, return_counts=True)
        dmatrix = xgb.DMatrix(X, label=y)
        if self.params["objective"].startswith("rank:"):
            dmatrix.set_group(sizes)
        if group_weights:
            dmatrix.set_weight(np.array([group_weights.get(g, 1.0) for g in ids.tolist()],
                                        dtype=np.float32))
        self.booster = xgb.train(self.params, dmatrix, num_boost_round=self.n_rounds)
        self.n_trained = len(y)

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores (higher = predicted faster); zeros before the first fit.

        In-place prediction on the array: the same scores as through a DMatrix, but the
        search scores a few dozen rows at a time, where building a DMatrix and its predictor
        cache cost ~12 ms a call against ~0.3 ms.
        """
        X = np.asarray(X, dtype=np.float32)
        if self.booster is None:
            return np.zeros(len(X), dtype=np.float32)
        return np.asarray(self.booster.inplace_predict(X), dtype=np.float32).reshape(len(X))

    def save(self, path: str) -> None:
        if self.booster is None:
            raise TuningDatabaseError(f"cannot save an untrained cost model to '{path}'; "
                                      "fit() it on measured records first")
        self.booster.save_model(path)


class CostModelPool:
    """One cost model trained on the rows of several tasks (transfer learning).

    Each task is a group: its own measured rows (replaced as the task measures more) or prior
    rows loaded from the database for tasks tuned earlier. Groups keep ranking pairs inside a
    task, and throughput is normalised per task, so tasks of different speed mix safely.
    Prior groups weigh `prior_weight`; a live group is never overwritten by a prior one.
    """

    def __init__(self, model: XGBCostModel | None = None, prior_weight: float = 1.0):
        self.model = model or XGBCostModel()
        self.prior_weight = prior_weight
        self.rows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.prior: set[str] = set()
        self.fit_seconds = 0.0
        self.width: int | None = None    # the leading columns the model was fitted on

    @property
    def is_trained(self) -> bool:
        return self.model.is_trained

    @property
    def n_rows(self) -> int:
        return sum(len(y) for _, y in self.rows.values())

    def set_rows(self, group: str, X: np.ndarray, y: np.ndarray, prior: bool = False) -> None:
        """Replace the rows of `group` (costs already normalised within the group)."""
        if prior and group in self.rows and group not in self.prior:
            return
        X = np.asarray(X, dtype=np.float32).reshape(len(y), -1)
        self.rows[group] = (X, np.asarray(y, dtype=np.float32))
        if prior:
            self.prior.add(group)
        else:
            self.prior.discard(group)

    def fit(self) -> None:
        """Refit the model on every group's rows (groups without spread add no pairs)."""
        useful = {g: r for g, r in self.rows.items() if len(r[1]) >= 2 and np.ptp(r[1]) > 0}
        if not useful:
            return
        start = time.perf_counter()
        names = sorted(useful)
        X = np.concatenate([useful[g][0] for g in names])
        y = np.concatenate([useful[g][1] for g in names])
        groups = np.concatenate([np.full(len(useful[g][1]), i) for i, g in enumerate(names)])
        weights = {i: self.prior_weight for i, g in enumerate(names) if g in self.prior}
        # trailing columns no row uses (a feature block appended to the layout, such as the
        # dot products of float tasks) are left out: column subsampling then draws from the
        # same columns as before the block existed, so those tasks' fits do not change
        used = np.flatnonzero(X.any(axis=0))
        width = int(used[-1]) + 1 if len(used) else X.shape[1]
        self.model.fit(X[:, :width], y, groups, weights)     # (y has spread: it fits)
        self.width = width
        self.fit_seconds += time.perf_counter() - start

    def predict(self, X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, dtype=np.float32)
        return self.model.predict(X if self.width is None else X[:, :self.width])


def kendall_tau(predicted: np.ndarray, actual: np.ndarray) -> float:
    """Rank agreement of predictions and true throughputs (1 = same order)."""
    from scipy.stats import kendalltau
    tau = kendalltau(predicted, actual).statistic
    return 0.0 if np.isnan(tau) else float(tau)


def top_k_recall(predicted: np.ndarray, actual: np.ndarray, k: int) -> float:
    """Fraction of the truly best k found among the predicted best k."""
    k = min(k, len(actual))
    top_true = set(np.argsort(-np.asarray(actual))[:k].tolist())
    top_pred = set(np.argsort(-np.asarray(predicted))[:k].tolist())
    return len(top_true & top_pred) / k if k else 0.0


def ndcg(predicted: np.ndarray, actual: np.ndarray, k: int | None = None) -> float:
    """Normalised discounted cumulative gain of the predicted order (1 = the ideal order)."""
    from sklearn.metrics import ndcg_score
    return float(ndcg_score(np.asarray(actual)[None, :], np.asarray(predicted)[None, :], k=k))
