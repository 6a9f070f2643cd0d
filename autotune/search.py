"""Search strategies that propose the next batch of configs to measure.

`ModelSearch` runs simulated annealing over `space.neighbors`, scored by the cost model on
loop-IR features, and returns the best unseen candidates plus a few random ones (epsilon).
`RandomSearch` and `GridSearch` have the same interface, so the model's value is measured
with one harness.
"""
from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..schedule.lower import lower
from ..te.errors import KilnError
from .cost_model import CostModelPool, XGBCostModel, normalize_throughput
from .database import config_key
from .features import N_FEATURES, extract_features
from .space.rules import SearchSpace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of the model-guided search (arguments, never environment variables)."""

    population: int = 48       # configs kept per annealing step
    n_iters: int = 4           # annealing steps per proposed batch
    epsilon: float = 0.15      # share of each batch drawn at random (exploration)
    batch_size: int = 8
    seed: int = 0
    temperature: float = 0.3   # initial annealing temperature on normalised scores
    # fresh random configs scored by the model each batch beside the annealing pool: the
    # ranker's pick among random candidates is good (the best of its top 8 of ~90 unseen
    # random blocked-conv configs reached 0.95 of the best after 32 measurements, random
    # picks 0.30), while annealing around the elites alone stays in their neighbourhood
    samples: int = 128


class Featurizer:
    """Config -> feature vector through the real lowering; cached; None when illegal."""

    def __init__(self, space: SearchSpace):
        self.space = space
        self.cache: dict[str, np.ndarray | None] = {}
        self.seconds = 0.0          # spent applying, lowering and extracting (cache misses)

    def __call__(self, config: dict) -> np.ndarray | None:
        key = config_key(config)
        if key not in self.cache:
            start = time.perf_counter()
            try:
                sch, args = self.space.apply(config)
                func = lower(sch, args, name=self.space.task.name)
                self.cache[key] = extract_features(func)
            except KilnError as exc:
                log.debug("config cannot be lowered (%s): %s", type(exc).__name__, exc)
                self.cache[key] = None
            self.seconds += time.perf_counter() - start
        return self.cache[key]

    def matrix(self, configs: list[dict]) -> tuple[np.ndarray, np.ndarray]:
        """Features of `configs` and a mask of those that lowered."""
        rows, ok = [], []
        for config in configs:
            features = self(config)
            ok.append(features is not None)
            rows.append(features if features is not None else np.zeros(N_FEATURES, np.float32))
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), N_FEATURES), np.array(ok)


class RandomSearch:
    """Uniformly random unseen configs (the baseline)."""

    name = "random"

    def __init__(self, space: SearchSpace, config: SearchConfig | None = None):
        self.space = space
        self.config = config or SearchConfig()
        self.rng = random.Random(self.config.seed)

    def update(self, configs: list[dict], costs: list[float]) -> None:
        """Random search learns nothing from measurements."""

    def counters(self) -> dict[str, float]:
        """Cumulative seconds of feature extraction, model scoring and refitting."""
        return {}

    def propose(self, seen: set[str], n: int) -> list[dict]:
        return _random_unseen(self.space, self.rng, seen, n)


class GridSearch(RandomSearch):
    """Configs in the space's fixed enumeration order, skipping measured ones."""

    name = "grid"

    def __init__(self, space: SearchSpace, config: SearchConfig | None = None):
        super().__init__(space, config)
        self._grid = space.grid()

    def propose(self, seen: set[str], n: int) -> list[dict]:
        out: list[dict] = []
        for config in self._grid:
            if len(out) == n:
                break
            if config_key(config) not in seen:
                out.append(config)
        return out


def _random_unseen(space: SearchSpace, rng: random.Random, seen: set[str], n: int,
                   tries: int = 50) -> list[dict]:
    out, keys = [], set(seen)
    for _ in range(n * tries):
        if len(out) == n:
            break
        config = space.sample(rng)
        key = config_key(config)
        if key not in keys:
            keys.add(key)
            out.append(config)
    return out


class ModelSearch(RandomSearch):
    """Simulated annealing over neighbours, scored by an online-trained XGBoost ranker.

    The ranker lives in a `CostModelPool`, which may be shared with other tasks' searches and
    hold prior rows of tasks tuned earlier (transfer learning); this task's rows form one
    group of it, keyed by the workload key.
    """

    name = "xgb"

    def __init__(self, space: SearchSpace, config: SearchConfig | None = None,
                 model: XGBCostModel | None = None, pool: CostModelPool | None = None,
                 featurizer: Featurizer | None = None):
        super().__init__(space, config)
        self.pool = pool or CostModelPool(model or XGBCostModel(seed=self.config.seed))
        self.featurize = featurizer or Featurizer(space)
        self.history: list[tuple[dict, float]] = []
        self.score_seconds = 0.0
        self.group = space.task.workload_key

    @property
    def model(self) -> XGBCostModel:
        return self.pool.model

    def update(self, configs: list[dict], costs: list[float]) -> None:
        """Add measurements (seconds; inf = failed) and refit the model on all rows (this
        task's and, through the pool, other tasks')."""
        self.history.extend(zip(configs, costs))
        X, ok = self.featurize.matrix([c for c, _ in self.history])
        y = normalize_throughput(np.array([c for _, c in self.history]))
        if ok.sum() >= 1:
            self.pool.set_rows(self.group, X[ok], y[ok])
        self.pool.fit()

    def counters(self) -> dict[str, float]:
        return {"features": self.featurize.seconds, "score": self.score_seconds,
                "fit": self.pool.fit_seconds}

    def _score(self, configs: list[dict]) -> np.ndarray:
        X, ok = self.featurize.matrix(configs)
        start = time.perf_counter()
        scores = self.pool.predict(X).astype(np.float64)
        self.score_seconds += time.perf_counter() - start
        scores[~ok] = -np.inf
        return scores

    def _elites(self, k: int) -> list[dict]:
        good = sorted((c for c in self.history if math.isfinite(c[1])), key=lambda c: c[1])
        return [config for config, _ in good[:k]]

    def propose(self, seen: set[str], n: int) -> list[dict]:
        if not self.pool.is_trained:
            return _random_unseen(self.space, self.rng, seen, n)
        population = self._elites(self.config.population // 4)
        population += [self.space.sample(self.rng)
                       for _ in range(self.config.population - len(population))]
        scores = self._score(population)
        pool = {config_key(c): (s, c) for c, s in zip(population, scores)}
        temperature = self.config.temperature
        for _ in range(self.config.n_iters):
            children = [self.space.neighbors(c, self.rng) for c in population]
            child_scores = self._score(children)
            spread = max(1e-9, float(np.ptp(scores[np.isfinite(scores)])) if
                         np.isfinite(scores).any() else 1.0)
            for i, (child, score) in enumerate(zip(children, child_scores)):
                pool.setdefault(config_key(child), (score, child))
                delta = (score - scores[i]) / spread
                if score >= scores[i] or (math.isfinite(score) and self.rng.random()
                                          < math.exp(delta / max(temperature, 1e-3))):
                    population[i], scores[i] = child, score
            temperature *= 0.6
        fresh = [self.space.sample(self.rng) for _ in range(self.config.samples)]
        for config, score in zip(fresh, self._score(fresh) if fresh else []):
            pool.setdefault(config_key(config), (score, config))
        ranked = sorted(((s, k, c) for k, (s, c) in pool.items()
                         if k not in seen and math.isfinite(s)), key=lambda t: -t[0])
        n_random = int(round(n * self.config.epsilon))
        out = [c for _, _, c in ranked[:n - n_random]]
        taken = seen | {config_key(c) for c in out}
        out += _random_unseen(self.space, self.rng, taken, n - len(out))
        return out


STRATEGIES: dict[str, Callable[..., RandomSearch]] = {
    "xgb": ModelSearch, "random": RandomSearch, "grid": GridSearch}


def make_search(name: str, space: SearchSpace, config: SearchConfig | None = None,
                pool: CostModelPool | None = None, featurizer: Featurizer | None = None):
    """The search strategy `name` (one of STRATEGIES) over `space`; `pool` is the (possibly
    shared) cost model of a model-guided search and `featurizer` how it turns configs into
    feature vectors (default: a Featurizer of its own)."""
    if name not in STRATEGIES:
        raise KilnError(f"unknown search strategy {name!r}; choose one of: "
                         f"{', '.join(STRATEGIES)}")
    if name == "xgb":
        return ModelSearch(space, config, pool=pool, featurizer=featurizer)
    return STRATEGIES[name](space, config)
