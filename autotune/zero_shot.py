"""Zero-shot schedules: a task with no record of its own gets the config a cost model ranks best.

What the model learns from: the confirmations (autotune/confirm.py). Each one timed a task's
default and other configs (its leading records, mutations of the default) side by side, in
interleaved rounds over rotated argument copies, and kept every config's loop-IR features and
its paired time over the default's. The model is a regression on those: features and their
difference from the task's default -> log(the default's time / the config's). The hot,
one-off measurements of the tuning records are not used: in the 2026-11-26 05:45 UTC runs, the
log's own numbers agreed with a kernel's in-model time on 6 of 21 tasks, the confirmation's on 17
(benchmarks/RESULTS.md), and a model trained on the records picked slower than the defaults
(0.95x, leave one model out).

The model is trained once per database contents, vector ISA and feature layout on every
confirmation of that ISA's targets, and cached as an XGBoost JSON file under KILN_CACHE_DIR
(default ~/.cache/kiln)/zero_shot, keyed by the confirmations' content (count, timestamps,
size: never a path), the ISA, the feature version and the training settings. The models of
the shipped log come with Kiln (tuning_logs/zero_shot/, made by `kiln logs --db
tuning_logs/kiln.db --train-zero-shot`): a user log layered over it that adds no
confirmation has the same key, so a first compile trains nothing. A compile never imports
xgboost (its import alone takes seconds): it reads the JSON into numpy arrays (`Forest`, a
few ms) and walks the trees itself. Training (a cache miss: a log with confirmations of its
own) imports xgboost and takes a second or two, once per database version.

Ranking a task (`rank_candidates`): the space's default, the best schedules of the most
similar tasks in the database (`donors_for`: same tensor count, ranks and dtypes, nearest
shapes; a donor's config is moved onto this task's knobs by `project`, each value to its
nearest choice, and kept only when it has every tile and reduce knob: the same loop nests) and
mutations of the default (one or two knobs moved), each applied, lowered and featurized (the
cost: ~10-20 ms a config); an illegal candidate drops out. The best-predicted one is the
task's schedule if its predicted speedup over the default is at least PICK_MARGIN; otherwise
the default stays. The compile checks the choice builds and falls back to the default if
not (graph/compile/model.py).

Ranking costs ~13 ms a config (0.1-0.3 s a task), so a compile ranks within a budget
(`rank_plan`: RANK_BUDGET configs, the tasks with the most FLOPs first; the others keep their
defaults), and each pick is kept in the persistent cache (`cached_pick`, KILN_CACHE_DIR/zero_shot_picks), keyed by the
model file (which names the database contents it was trained on), the task, target, thread
count, donors, candidate settings and Kiln's sources: a warm compile reads the pick and ranks
nothing."""
from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from ..codegen.cache_store import cache_dir as kiln_cache_dir
from ..codegen.cache_store import make_key, open_store
from ..te.errors import KilnError
from .cost_model import XGBCostModel
from .database import Database, _vector_isa, config_key
from .default_db import shipped_db_path
from .features import FEATURE_VERSION
from .search import Featurizer
from .space.rules import SearchSpace, freeze, json_value
from .task import Task

log = logging.getLogger(__name__)

ZERO_SHOT_SOURCE = "zero-shot"
N_NEIGHBORS = 8         # mutations of the default ranked per task
N_DONORS = 4            # best configs of the most similar tasks with records, ranked per task
RANK_BUDGET = 64        # configs a compile ranks (~13 ms each): well under a second cold
PICK_MARGIN = 0.03      # a pick must be predicted 3% faster than the default
MIN_LABELS = 24         # compared configs other than defaults needed to train a model
MAX_LOG_SPEEDUP = 1.5   # labels clipped to e^-1.5..e^1.5 (a broken config teaches no more)
TRAIN = {"n_rounds": 80, "max_depth": 4, "learning_rate": 0.1, "min_child_weight": 3,
         "objective": "reg:squarederror", "labels": "confirmations"}


def relative_rows(X: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Each row's features followed by their difference from `reference`'s (the task's
    default schedule): what a config changes relative to the default is what transfers
    between tasks; absolute features alone tie a model to the shapes it was trained on
    (leave-one-model-out, benchmarks/zero_shot_offline.py: its picks were slower than the
    defaults on 12 of 49 tasks with absolute features, 4 with the differences added)."""
    X = np.asarray(X, dtype=np.float32)
    return np.concatenate([X, X - np.asarray(reference, dtype=np.float32)], axis=1)


def cache_dir() -> Path:
    """Where trained models are kept: zero_shot/ in the persistent cache's folder
    (KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln or ~/.cache/kiln); with the cache off
    (KILN_CACHE_DIR=off), a folder of this user's in the temporary directory (a compile
    needs the model file to read it)."""
    root = kiln_cache_dir()
    if root is None:
        root = Path(tempfile.gettempdir()) / f"kiln-{os.getuid() if hasattr(os, 'getuid') else 0}"
    return root / "zero_shot"


def shipped_dir() -> Path | None:
    """tuning_logs/zero_shot/ next to the shipped log: the models trained on it (None when
    this installation ships no log)."""
    base = shipped_db_path()
    return base.parent / "zero_shot" if base is not None else None


def isa_targets(db: Database, target: str) -> list[str]:
    """Every target in `db` with the vector ISA of `target`."""
    isa = _vector_isa(target)
    if isa is None:
        return []
    return [t for t in db.targets() if _vector_isa(t) == isa]


def model_key(db: Database, target: str, exclude_tasks=()) -> str | None:
    """The cache key of the model for `target`'s vector ISA over `db`: the confirmations'
    content fingerprint (equal logs share a model wherever they live), the ISA, the feature
    layout, the tasks left out and the training settings (None: `target` has no known
    vector ISA)."""
    isa = _vector_isa(target)
    if isa is None:
        return None
    text = json.dumps([FEATURE_VERSION, sorted(isa), db.choices_fingerprint(),
                       sorted(exclude_tasks), TRAIN])
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def training_rows(db: Database, target: str, exclude_tasks=()):
    """X (features and their difference from the default's) and y (log of the default's
    time over the config's, paired per round) of every compared config in the newest
    confirmation of each task and thread count on the ISA's targets, without the tasks in
    `exclude_tasks`; None when fewer than MIN_LABELS configs other than defaults were
    compared."""
    exclude = set(exclude_tasks)
    isa = _vector_isa(target)
    Xs, ys, labels = [], [], 0
    for choice in db.latest_choices():
        if choice.task_key in exclude or _vector_isa(choice.target) != isa:
            continue
        rows = [r for r in choice.candidates
                if r.get("feature_version") == FEATURE_VERSION and r.get("features")
                and r.get("ratio")]
        if not rows or rows[0].get("source", "default") != "default" or len(rows) < 2:
            continue
        X = np.asarray([r["features"] for r in rows], dtype=np.float32)
        Xs.append(relative_rows(X, X[0]))
        ys.append(np.clip(-np.log([r["ratio"] for r in rows]), -MAX_LOG_SPEEDUP,
                          MAX_LOG_SPEEDUP))
        labels += len(rows) - 1
    if labels < MIN_LABELS:
        return None
    return np.concatenate(Xs), np.concatenate(ys)


class Forest:
    """An XGBoost tree ensemble read from its JSON model and evaluated with numpy: the same
    margins as Booster.predict up to float rounding, without importing xgboost."""

    def __init__(self, path: str | Path):
        with open(path) as f:
            model = json.load(f)
        try:
            learner = model["learner"]
            trees = learner["gradient_booster"]["model"]["trees"]
            self.n_features = int(learner["learner_model_param"]["num_feature"])
            self.trees = [(np.asarray(t["left_children"], np.int32),
                           np.asarray(t["right_children"], np.int32),
                           np.asarray(t["split_indices"], np.int32),
                           np.asarray(t["split_conditions"], np.float32),
                           np.asarray(t["default_left"], bool)) for t in trees]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: not an XGBoost tree model ({exc!r})") from exc
        if not self.trees:
            raise ValueError(f"{path}: the model has no trees")

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Scores of the rows of X (higher = predicted faster)."""
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(f"the zero-shot model takes {self.n_features} features a row, "
                             f"got an array of shape {X.shape}")
        rows = np.arange(len(X))
        out = np.zeros(len(X), dtype=np.float64)
        for left, right, split, cond, default_left in self.trees:
            node = np.zeros(len(X), dtype=np.int32)
            while True:
                inner = left[node] != -1
                if not inner.any():
                    break
                value = X[rows, split[node]]
                go_left = np.where(np.isnan(value), default_left[node], value < cond[node])
                node = np.where(inner, np.where(go_left, left[node], right[node]), node)
            out += cond[node]           # a leaf's split_condition holds its value
        return out


def train_model(db: Database, target: str, exclude_tasks=(), path: Path | None = None
                ) -> Path | None:
    """Train the ISA's model on `db`'s confirmations and save it at `path` (written whole,
    then renamed, so a concurrent reader never sees half a file); None when the database
    has too few labels."""
    data = training_rows(db, target, exclude_tasks)
    if data is None:
        return None
    X, y = data
    start = time.perf_counter()
    model = XGBCostModel(n_rounds=TRAIN["n_rounds"], max_depth=TRAIN["max_depth"],
                         learning_rate=TRAIN["learning_rate"], nthread=1,
                         objective=TRAIN["objective"],
                         min_child_weight=TRAIN["min_child_weight"])
    model.fit(X, y)
    if not model.is_trained:
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=path.parent)
    os.close(fd)
    try:
        model.save(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    log.info("zero-shot model: trained on %d compared configs in %.1f s -> %s", len(y),
             time.perf_counter() - start, path)
    return path


def model_for(db: Database | None, target: str, exclude_tasks=(),
              directory: Path | None = None) -> Path | None:
    """The model file for `target`'s vector ISA over `db`: the one shipped with Kiln when it
    has this key (see shipped_dir), else the cached one in `directory` (default cache_dir()),
    trained on a cache miss or when the cached file cannot be read (it is then rebuilt);
    None without feature rows."""
    if db is None:
        return None
    key = model_key(db, target, exclude_tasks)
    if key is None:
        return None
    name = f"model-{key}.json"
    shipped = shipped_dir() if directory is None else None
    if shipped is not None and (shipped / name).is_file():
        return shipped / name
    path = (directory or cache_dir()) / name
    empty = path.with_suffix(".none")       # this database has too few rows: no model
    if empty.is_file():
        return None
    if path.is_file():
        try:
            Forest(path)
            return path
        except (OSError, ValueError) as exc:        # a corrupt or foreign file: rebuild
            log.warning("zero-shot model %s is unreadable (%s); retraining", path, exc)
    model = train_model(db, target, exclude_tasks, path)
    if model is None:
        empty.parent.mkdir(parents=True, exist_ok=True)
        empty.touch()
    return model


def train_shipped(db: Database, folder: Path) -> list[Path]:
    """Train the model of every vector ISA with enough labels in `db` (the shipped log) into
    `folder` (tuning_logs/zero_shot/), and remove the models of other keys there: what
    `kiln logs --train-zero-shot` runs after the shipped log changes."""
    folder.mkdir(parents=True, exist_ok=True)
    made, seen = [], set()
    for target in db.targets():
        isa = _vector_isa(target)
        if isa is None or isa in seen:
            continue
        seen.add(isa)
        key = model_key(db, target)
        path = folder / f"model-{key}.json"
        if path.is_file() or train_model(db, target, path=path) is not None:
            made.append(path)
    for old in folder.glob("model-*.json"):
        if old not in made:
            old.unlink()
    return made


_forests: dict[tuple[str, float], Forest] = {}


def load_forest(path: str | Path) -> Forest:
    """The Forest in `path`, cached per process by path and modification time."""
    key = (str(path), os.path.getmtime(path))
    if key not in _forests:
        _forests[key] = Forest(path)
    return _forests[key]


def candidates(space: SearchSpace, n_neighbors: int | None = None) -> list[dict]:
    """The default first, then distinct mutations of it (default N_NEIGHBORS); the same list
    for the same task in any process (seeded by the workload key)."""
    n_neighbors = N_NEIGHBORS if n_neighbors is None else n_neighbors
    default = space.default_config()
    return [default] + space.mutations(default, n_neighbors, space.task.workload_key)


def _signature(shapes) -> tuple:
    """A task's tensors as (rank, dtype) pairs: tasks with equal signatures are candidates
    to share schedules."""
    return tuple((len(shape), dtype) for _, shape, dtype in shapes)


def _shape_distance(a, b) -> float:
    return sum(abs(math.log2(x + 1) - math.log2(y + 1))
               for (_, sa, _), (_, sb, _) in zip(a, b) for x, y in zip(sa, sb))


def donor_table(db: Database, target: str, threads: int | None = None) -> list:
    """The fastest record of every task of `target`'s vector ISA in `db` (see donors_for)."""
    return db.best_per_task(isa_targets(db, target), threads)


def donors_for(task: Task, table: list, n: int | None = None) -> tuple[dict, ...]:
    """The configs of the `n` (default N_DONORS) tasks of `table` (donor_table) most like
    `task`: the same tensor ranks and dtypes, the nearest shapes first."""
    n = N_DONORS if n is None else n
    signature = _signature(task.shapes)
    near = sorted((_shape_distance(task.shapes, shapes), key, i)
                  for i, (key, _, shapes) in enumerate(table)
                  if key != task.workload_key and _signature(shapes) == signature)
    return tuple(table[i][1] for _, _, i in near[:n])


def _choice_distance(choice, value) -> float:
    """How far apart two values of a knob are: log-distance of numbers; of (outer, inner)
    tile pairs, with the inner factor (the register tile) weighted most."""
    if isinstance(choice, (list, tuple)):
        if not isinstance(value, (list, tuple)) or len(value) != len(choice):
            raise TypeError("not comparable")
        return sum((i + 1) * _choice_distance(c, v) for i, (c, v) in enumerate(zip(choice, value)))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError("not comparable")
    return abs(math.log1p(max(choice, 0)) - math.log1p(max(value, 0)))


def _is_loop_knob(name: str) -> bool:
    return name.split("/")[1:2] in (["tile"], ["reduce"])


def project(space: SearchSpace, config: dict) -> dict | None:
    """Another task's `config` moved onto this space: every knob the donor has takes the
    choice nearest the donor's value (the default's where values do not compare, or the
    donor lacks the knob: a pack or cache knob of a size-dependent choice); None when the
    loop-nest knobs (tile, reduce) differ from this space's: a task of another structure)."""
    if ({k.name for k in space.knobs if _is_loop_knob(k.name)}
            != {name for name in config if _is_loop_knob(name)}):
        return None
    default = space.default_config()
    out = {}
    for knob in space.knobs:
        if knob.name not in config:
            out[knob.name] = default[knob.name]
            continue
        value = freeze(config[knob.name])
        exact = [c for c in knob.choices if freeze(c) == value]
        try:
            out[knob.name] = json_value(exact[0] if exact else min(
                knob.choices, key=lambda c: _choice_distance(c, value)))
        except TypeError:
            out[knob.name] = default[knob.name]
    return out


def pool(space: SearchSpace, donors: tuple[dict, ...] = (), configs: list[dict] | None = None
         ) -> list[dict]:
    """The configs a ranking scores: `configs` (default: `candidates(space)`, the default
    first), then the `donors` projected onto the space, without repeats."""
    configs = list(configs if configs is not None else candidates(space))
    seen = {config_key(c) for c in configs}
    for donor in donors:
        config = project(space, donor)
        if config is not None and config_key(config) not in seen:
            seen.add(config_key(config))
            configs.append(config)
    return configs


def rank_plan(tasks, model_path: str | Path, table: list, threads: int,
              budget: int | None = None) -> dict[str, tuple[dict, ...]]:
    """Which tasks a compile ranks, and their donors, from `tasks` ((name, Task, flops) of
    the tasks without records) and the donor table: every task whose pick is cached (free),
    then the others with the most FLOPs first while their pools fit in `budget` configs
    (default RANK_BUDGET; a negative budget: no limit). Deterministic, so a compile makes
    the same model every time; a task left out keeps its default."""
    budget = RANK_BUDGET if budget is None else budget
    store = open_store("zero_shot_picks", "json")
    chosen, left = {}, budget
    for name, task, _ in sorted(tasks, key=lambda e: (-e[2], e[0])):
        donors = donors_for(task, table)
        space = SearchSpace(task, threads)
        if store is not None and store.path(pick_key(space, model_path, donors)).is_file():
            chosen[name] = donors
        elif budget < 0 or (left > 0 and len(pool(space, donors)) <= left):
            chosen[name] = donors
            left -= len(pool(space, donors)) if budget >= 0 else 0
    return chosen


def rank_candidates(space: SearchSpace, forest: Forest, configs: list[dict] | None = None,
                    donors: tuple[dict, ...] = ()) -> tuple[dict, bool]:
    """The best-scored legal config of `pool(space, donors, configs)` and whether it is not
    the default (the first candidate; it wins ties)."""
    configs = pool(space, donors, configs)
    featurize = Featurizer(space)
    X, ok = featurize.matrix(configs)
    if not ok.any():
        raise KilnError(f"{space.task.name}: no zero-shot candidate could be lowered")
    scores = forest.predict(relative_rows(X, X[0] if ok[0] else X[int(np.argmax(ok))]))
    scores[~ok] = -np.inf
    best = int(np.argmax(scores))           # the first of equal scores: the default wins ties
    if ok[0] and scores[best] - scores[0] < -math.log(1.0 - PICK_MARGIN):
        best = 0
    log.debug("%s: zero-shot ranked %d configs in %.2f s, picked #%d (predicted %.2fx)",
              space.task.name, len(configs), featurize.seconds, best,
              math.exp(scores[best] - scores[0]) if ok[0] else math.nan)
    return configs[best], best != 0


def settings() -> list:
    """The ranking's settings, part of each pick's cache key (benchmarks change N_NEIGHBORS
    at run time)."""
    return [N_NEIGHBORS, N_DONORS, PICK_MARGIN, FEATURE_VERSION, TRAIN]


def compile_settings() -> list:
    """What a zero-shot compile's outcome depends on besides the database: the ranking's
    settings and its budget (part of the whole-model cache key)."""
    return settings() + [RANK_BUDGET]


def pick_key(space: SearchSpace, model_path: str | Path, donors: tuple[dict, ...] = ()) -> str:
    """The cache key of a task's pick: everything `rank_candidates` depends on (the model
    file's name carries the database contents, ISA and training settings it was made from;
    make_key adds Kiln's sources, which decide the candidates and their features)."""
    return make_key("zero-shot-pick", model=Path(model_path).name,
                    task=space.task.workload_key, target=space.task.target,
                    threads=space.threads, donors=[config_key(d) for d in donors],
                    settings=settings())


def cached_pick(space: SearchSpace, model_path: str | Path, donors: tuple[dict, ...] = ()
                ) -> tuple[dict, bool]:
    """rank_candidates with the model in `model_path`, its answer kept in the persistent
    cache (KILN_CACHE_DIR/zero_shot_picks; none when the cache is off): a second compile
    of the task reads it back instead of ranking again. An unreadable entry is ranked anew."""
    store = open_store("zero_shot_picks", "json")
    key = pick_key(space, model_path, donors) if store is not None else None
    if store is not None:
        entry = store.read(key)
        if entry is not None:
            mm, start = entry
            try:
                doc = json.loads(bytes(mm[start:]))
                if isinstance(doc.get("config"), dict) and isinstance(doc.get("picked"), bool):
                    return doc["config"], doc["picked"]
            except (ValueError, AttributeError):
                pass
            finally:
                mm.close()
            log.warning("zero-shot pick cache: ignoring entry %s; ranking again",
                        store.path(key))
    config, picked = rank_candidates(space, load_forest(model_path), donors=donors)
    if store is not None:
        store.write(key, [json.dumps({"config": config, "picked": picked},
                                     sort_keys=True).encode()])
    return config, picked
