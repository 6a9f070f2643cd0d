"""Zero-shot schedules: the cached cost model, its numpy evaluation, and compiles that use it."""
import random

import numpy as np
import onnxruntime as ort
import pytest

import kiln
from kiln.autotune import zero_shot as Z
from kiln.autotune.database import Choice, Database, Record
from kiln.autotune.dispatch import Selection, apply_selection, canonical_target
from kiln.autotune.features import FEATURE_VERSION, N_FEATURES
from kiln.autotune.search import Featurizer
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.graph import models
from kiln.graph.compile.model import model_tasks


def _synthetic_db(path, tasks, seed=0) -> Database:
    """For `tasks` on this CPU: records with feature vectors, and a confirmation in which
    every compared mutation beat the default (a made-up log, so the model has something to
    learn that moves picks away from the default)."""
    db = Database(path)
    target = canonical_target("native")
    rng = random.Random(seed)
    for task in tasks:
        space = SearchSpace(task, threads=1)
        featurize = Featurizer(space)
        db.commit_task(task.workload_key, task.description, task.shapes, task.flops)
        configs = [space.default_config()] + [space.sample(rng) for _ in range(12)]
        for k, config in enumerate(configs):
            vector = featurize(config)
            if vector is None:
                continue
            cost = 2e-3 if k == 0 else 1e-3 * (1 + 0.5 * rng.random())
            db.commit_record(Record(task.workload_key, target, config, (cost,), "OK",
                                    threads=1), vector, FEATURE_VERSION)
        _commit_confirmation(db, task, [0.6 + 0.3 * rng.random() for _ in range(10)])
    return db


def _commit_confirmation(db, task, ratios, features=None):
    """A confirmation of `task`'s default against len(ratios) mutations of it, each with
    the given paired ratio (its time over the default's), as confirm_task stores it."""
    space = SearchSpace(task, threads=1)
    default = space.default_config()
    configs = [default] + space.mutations(default, len(ratios), task.workload_key)
    X, ok = Featurizer(space).matrix(configs)
    rows = [{"config": c, "source": "default" if i == 0 else "mutation", "status": "OK",
             "seconds": 1e-3 * r, "ratio": r, "feature_version": FEATURE_VERSION,
             "features": (features[i] if features is not None else X[i].tolist())
             if ok[i] else None}
            for i, (c, r) in enumerate(zip(configs, [1.0, *ratios]))]
    winner = min(rows, key=lambda r: r["ratio"])
    db.commit_choice(Choice(task.workload_key, canonical_target("native"), 1, winner["config"],
                            winner is rows[0], winner["seconds"], 1e-3, 1e-3, tuple(rows)))


def _other_tasks():
    target = canonical_target("native")
    return [Task.from_op("matmul", shape, target=target)
            for shape in ((32, 48, 64), (64, 32, 40), (17, 64, 96), (48, 48, 48))]


def test_forest_matches_xgboost_predictions(tmp_path):
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.standard_normal((300, 7)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan                # missing values take default_left
    y = (X[:, 0] > 0).astype(np.float32) + np.nan_to_num(X[:, 3])
    booster = xgb.train({"objective": "rank:pairwise", "max_depth": 4, "verbosity": 0},
                        xgb.DMatrix(X, label=y), num_boost_round=20)
    path = tmp_path / "m.json"
    booster.save_model(str(path))
    forest = Z.Forest(path)
    expected = booster.predict(xgb.DMatrix(X), output_margin=True)
    np.testing.assert_allclose(forest.predict(X), expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="7 features a row"):
        forest.predict(X[:, :5])


def test_model_is_cached_and_a_corrupt_file_is_rebuilt(tmp_path, monkeypatch):
    db = _synthetic_db(tmp_path / "log.db", _other_tasks()[:3])
    target = canonical_target("native")
    trained = []
    real_train = Z.train_model
    monkeypatch.setattr(Z, "train_model", lambda *a, **k: trained.append(1) or real_train(*a, **k))
    path = Z.model_for(db, target, directory=tmp_path / "cache")
    assert path is not None and path.is_file() and trained == [1]
    assert Z.model_for(db, target, directory=tmp_path / "cache") == path
    assert trained == [1]                                  # the second call did not retrain
    path.write_text("{not json")
    assert Z.model_for(db, target, directory=tmp_path / "cache") == path
    assert trained == [1, 1]                               # rebuilt, and readable again
    Z.Forest(path)
    # a new confirmation changes the key: a new model
    _commit_confirmation(db, _other_tasks()[3], [0.8, 0.9, 1.1])
    assert Z.model_for(db, target, directory=tmp_path / "cache") != path
    assert trained == [1, 1, 1]


def test_no_rows_no_model(tmp_path):
    db = Database(tmp_path / "empty.db")
    assert Z.model_for(db, canonical_target("native"), directory=tmp_path / "c") is None
    assert Z.model_for(None, canonical_target("native"), directory=tmp_path / "c") is None


def test_the_model_learns_from_confirmations_only_and_leaves_tasks_out(tmp_path):
    """Training rows are the compared configs of the newest confirmations (features and
    their difference from the default, log speedup as the label); records alone teach
    nothing, stale feature layouts and left-out tasks are skipped, and too few labels give
    no model."""
    target = canonical_target("native")
    tasks = _other_tasks()
    db = Database(tmp_path / "log.db")
    _commit_confirmation(db, tasks[0], [0.5] * 8)
    assert Z.training_rows(db, target) is None                 # 8 labels < MIN_LABELS
    _commit_confirmation(db, tasks[1], [2.0] * 10)
    _commit_confirmation(db, tasks[2], [1.0] * 10)
    X, y = Z.training_rows(db, target)
    assert X.shape == (31, 2 * N_FEATURES) and len(y) == 31
    assert sorted(set(np.round(y, 6))) == pytest.approx([-np.log(2.0), 0.0, np.log(2.0)])
    assert np.all(X[0, N_FEATURES:] == 0)                      # the default: no difference
    assert Z.training_rows(db, target, exclude_tasks={tasks[0].workload_key}) is None
    _commit_confirmation(db, tasks[3], [1.0] * 10)
    X, y = Z.training_rows(db, target, exclude_tasks={tasks[0].workload_key})
    assert len(y) == 33 and np.all(y <= 0)
    # a newer confirmation of the same task replaces the older one's labels
    _commit_confirmation(db, tasks[1], [0.25] * 10)
    X, y = Z.training_rows(db, target)
    assert len(y) == 42 and y.max() == pytest.approx(np.log(4.0))
    # labels of another feature layout are not used
    stale = Database(tmp_path / "stale.db")
    for task in tasks[:3]:
        _commit_confirmation(stale, task, [0.5] * 10)
    stale._db.conn.execute("UPDATE choices SET candidates = REPLACE(candidates, ?, ?)",
                           (f'"feature_version": "{FEATURE_VERSION}"', '"feature_version": "0"'))
    stale._db.conn.commit()
    assert Z.training_rows(stale, target) is None
    # the fitted model prefers what was measured faster
    path = Z.model_for(db, target, directory=tmp_path / "cache")
    space = SearchSpace(tasks[0], threads=1)
    pool = Z.candidates(space, 8)
    X, ok = Featurizer(space).matrix(pool)
    scores = Z.load_forest(path).predict(Z.relative_rows(X, X[0]))
    assert scores[1:][ok[1:]].max() > scores[0] + 0.1


class _FixedForest:
    """Scores the candidates in order: the default first."""

    def __init__(self, scores):
        self.scores = np.asarray(scores, dtype=np.float64)

    def predict(self, X):
        return self.scores[:len(X)]


def test_a_pick_needs_a_predicted_margin_over_the_default():
    space = SearchSpace(Task.from_op("matmul", (24, 40, 56)), threads=1)
    pool = Z.candidates(space, 4)
    assert len(pool) == 5
    small = -np.log(1 - Z.PICK_MARGIN) * 0.9
    config, picked = Z.rank_candidates(space, _FixedForest([0, small, 0, 0, 0]), pool)
    assert not picked and config == pool[0]
    config, picked = Z.rank_candidates(space, _FixedForest([0, 0, 0.2, 0.1, -1]), pool)
    assert picked and config == pool[2]


def test_candidates_are_deterministic_and_start_with_the_default():
    space = SearchSpace(Task.from_op("matmul", (24, 40, 56)), threads=1)
    first, again = Z.candidates(space), Z.candidates(SearchSpace(space.task, threads=1))
    assert first == again and first[0] == space.default_config()
    assert len(first) > Z.N_NEIGHBORS // 2


def test_zero_shot_compile_picks_a_ranked_config_and_matches_onnxruntime(tmp_path, monkeypatch):
    """A DB with records of other tasks only: the model's tasks (none has a record) are
    ranked by the model trained on those records; the summary says zero-shot, and the
    result matches onnxruntime."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    proto = models.mlp(batch=3, sizes=(37, 24, 13))
    own = {mt.task.workload_key for mt in model_tasks(proto)}
    others = [t for t in _other_tasks() if t.workload_key not in own]
    db = _synthetic_db(tmp_path / "log.db", others)
    compiled = kiln.compile(proto, db=db, threads=1, jobs=1, zero_shot=True)
    sources = [s.source for s in compiled.plan.steps]
    assert "zero-shot" in sources and "database" not in sources
    assert "zero-shot (cost model's pick)" in compiled.summary()
    x = np.random.default_rng(1).standard_normal((3, 37)).astype(np.float32)
    sess = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    (expected,) = sess.run(None, {proto.graph.input[0].name: x})
    (ours,) = compiled.run([x])
    np.testing.assert_allclose(ours, expected, rtol=1e-4, atol=1e-5)
    # switched off, or without a database: the defaults
    off = kiln.compile(proto, db=db, threads=1, jobs=1, zero_shot=False)
    assert {s.source for s in off.plan.steps} == {"default"}
    none = kiln.compile(proto, db=None, threads=1, jobs=1)
    assert {s.source for s in none.plan.steps} == {"default"}


@pytest.mark.parametrize("shape", [(1, 7, 13), (5, 31, 17), (16, 64, 40)])
def test_ranked_configs_are_legal_and_correct(tmp_path, shape):
    """Whatever the model ranks first applies, lowers, and computes the right answer on
    awkward shapes."""
    from kiln.te.reference import evaluate
    from tests.util import run_config, task_inputs
    db = _synthetic_db(tmp_path / "log.db", _other_tasks()[:3])
    path = Z.model_for(db, canonical_target("native"), directory=tmp_path / "cache")
    task = Task.from_op("dense", shape, target=canonical_target("native"))
    space = SearchSpace(task, threads=1)
    config, _ = Z.rank_candidates(space, Z.load_forest(path))
    inputs = task_inputs(task, seed=2)
    expected = evaluate(list(task.outputs), inputs)
    for got, want in zip(run_config(task, space, config, inputs), expected):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    sch, args, source = apply_selection(space, Selection(None, zero_shot=str(path)))
    assert source in ("zero-shot", "default (no tuning records)")


def test_donors_are_the_nearest_tasks_of_the_same_structure(tmp_path):
    """donor_table holds each task's fastest record; donors_for takes tasks with the same
    tensor ranks and dtypes, nearest shapes first, never the task itself or a conv."""
    target = canonical_target("native")
    tasks = _other_tasks()
    db = _synthetic_db(tmp_path / "log.db", tasks)
    table = Z.donor_table(db, target, threads=1)
    assert sorted(k for k, _, _ in table) == sorted(t.workload_key for t in tasks)
    for key, config, _ in table:
        fastest = db.best(key, target, threads=1)[0]
        assert config == fastest.config
    task = Task.from_op("matmul", (30, 50, 60), target=target)
    donors = Z.donors_for(task, table, n=2)
    by_key = {k: c for k, c, _ in table}
    assert donors == (by_key[tasks[0].workload_key], by_key[tasks[3].workload_key])
    conv = Task.from_op("conv2d", (1, 8, 9, 9, 16, 3, 3), target=target)
    assert Z.donors_for(conv, table) == ()
    assert Z.donors_for(tasks[1], table, n=10) and \
        by_key[tasks[1].workload_key] not in Z.donors_for(tasks[1], table, n=10)


@pytest.mark.parametrize("donor_shape, shape", [((64, 64, 64), (7, 13, 1)),
                                                ((1, 7, 13), (96, 48, 31)),
                                                ((48, 48, 48), (17, 64, 96))])
def test_projected_donor_configs_fit_and_compute_correctly(donor_shape, shape, rng):
    """Any config of a same-structure task, moved onto another shape, is a valid config
    of that space (every value one of its knob's choices) and computes the right answer."""
    from kiln.te.reference import evaluate
    from tests.util import run_config, task_inputs
    target = canonical_target("native")
    donor_space = SearchSpace(Task.from_op("matmul", donor_shape, target=target), threads=1)
    space = SearchSpace(Task.from_op("matmul", shape, target=target), threads=1)
    r = random.Random(7)
    for config in [donor_space.default_config()] + [donor_space.sample(r) for _ in range(3)]:
        moved = Z.project(space, config)
        assert moved is not None and space.misfit(moved) is None
        inputs = task_inputs(space.task, seed=3)
        expected = evaluate(list(space.task.outputs), inputs)
        for got, want in zip(run_config(space.task, space, moved, inputs), expected):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    # a config of another structure is not projected
    conv_space = SearchSpace(Task.from_op("conv2d", (1, 8, 9, 9, 16, 3, 3), target=target),
                             threads=1)
    assert Z.project(space, conv_space.default_config()) is None


def test_a_donor_config_is_ranked_with_the_mutations(tmp_path):
    """rank_candidates scores the projected donors too: a forest that prefers the donor's
    register tile picks it."""
    target = canonical_target("native")
    db = _synthetic_db(tmp_path / "log.db", _other_tasks())
    path = Z.model_for(db, target, directory=tmp_path / "cache")
    space = SearchSpace(Task.from_op("matmul", (40, 56, 72), target=target), threads=1)
    donors = Z.donors_for(space.task, Z.donor_table(db, target, threads=1))
    assert donors
    config, _ = Z.rank_candidates(space, Z.load_forest(path), donors=donors)
    assert space.misfit(config) is None


def test_a_pick_is_cached_and_a_bad_entry_is_ranked_again(tmp_path, monkeypatch):
    """cached_pick ranks a task once per model, task and donors; a second call reads the
    stored pick; a corrupt entry, or the cache switched off, ranks again."""
    target = canonical_target("native")
    db = _synthetic_db(tmp_path / "log.db", _other_tasks()[:3])
    path = Z.model_for(db, target, directory=tmp_path / "models")
    space = SearchSpace(Task.from_op("dense", (5, 31, 17), target=target), threads=1)
    calls = []
    rank = Z.rank_candidates
    monkeypatch.setattr(Z, "rank_candidates", lambda *a, **k: calls.append(1) or rank(*a, **k))
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    first = Z.cached_pick(space, path)
    assert Z.cached_pick(space, path) == first and len(calls) == 1
    assert first == rank(space, Z.load_forest(path))
    donors = (space.default_config(),)
    Z.cached_pick(space, path, donors)              # other donors: another entry
    assert len(calls) == 2
    entry = Z.open_store("zero_shot_picks", "json").path(Z.pick_key(space, path))
    entry.write_bytes(entry.read_bytes()[:-5])      # truncated: rejected, ranked anew
    assert Z.cached_pick(space, path) == first and len(calls) == 3
    assert Z.cached_pick(space, path) == first and len(calls) == 3
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    Z.cached_pick(space, path)
    assert len(calls) == 4


def test_a_zero_shot_compile_is_kept_in_the_model_cache_under_its_own_key(tmp_path,
                                                                         monkeypatch):
    """The second zero-shot compile of a model loads it whole (its picks included); a
    compile with zero-shot off is another entry, with the defaults."""
    from kiln.graph.compile import model_cache
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(model_cache, "RACY_SECONDS", -1.0)
    proto = models.mlp(batch=3, sizes=(37, 24, 13))
    own = {mt.task.workload_key for mt in model_tasks(proto)}
    db = _synthetic_db(tmp_path / "log.db", [t for t in _other_tasks()
                                             if t.workload_key not in own])
    db.close()
    db = Database(tmp_path / "log.db")
    cold = kiln.compile(proto, db=db, threads=1, jobs=1, zero_shot=True)
    warm = kiln.compile(proto, db=db, threads=1, jobs=1, zero_shot=True)
    off = kiln.compile(proto, db=db, threads=1, jobs=1, zero_shot=False)
    assert not cold.plan.meta["compile"].get("cached")
    assert warm.plan.meta["compile"].get("cached")
    assert not off.plan.meta["compile"].get("cached")
    assert warm.plan.steps == cold.plan.steps and "zero-shot" in [s.source for s in warm.plan.steps]
    assert {s.source for s in off.plan.steps} == {"default"}
    x = np.random.default_rng(1).standard_normal((3, 37)).astype(np.float32)
    np.testing.assert_array_equal(warm.run([x])[0], cold.run([x])[0])


def test_models_are_kept_in_the_cache_folder_and_somewhere_real_with_the_cache_off(
        tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "c"))
    assert Z.cache_dir() == tmp_path / "c" / "zero_shot"
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    assert Z.cache_dir().is_absolute() and "off" not in Z.cache_dir().parts


def test_the_key_is_the_logs_content_not_its_path(tmp_path):
    """A copy of a log (or a user log layered over it that adds no confirmation) keys the
    same model; a new confirmation keys another."""
    import shutil
    target = canonical_target("native")
    db = _synthetic_db(tmp_path / "log.db", _other_tasks()[:2])
    key = Z.model_key(db, target)
    db.close()
    shutil.copy(tmp_path / "log.db", tmp_path / "copy.db")
    assert Z.model_key(Database(tmp_path / "copy.db"), target) == key
    layered = Database(tmp_path / "user.db", base=tmp_path / "log.db")
    assert Z.model_key(layered, target) == key
    _commit_confirmation(layered, _other_tasks()[3], [0.8, 0.9])
    assert Z.model_key(layered, target) != key


def test_the_shipped_models_match_the_shipped_log(tmp_path, monkeypatch):
    """A first zero-shot compile on a fresh machine trains nothing: for every vector ISA of
    the shipped log with enough labels, tuning_logs/zero_shot/ holds the model of its
    current key. Fails when kiln.db changed without `kiln logs --db tuning_logs/kiln.db
    --train-zero-shot tuning_logs/zero_shot`."""
    from kiln.autotune.database import _vector_isa
    from kiln.autotune.default_db import shipped_db_path
    shipped = shipped_db_path()
    assert shipped is not None
    db = Database(tmp_path / "user.db", base=shipped)     # a new user's log over it
    monkeypatch.setattr(Z, "train_model", lambda *a, **k: pytest.fail(
        "the shipped log's zero-shot model is missing or stale: run `kiln logs --db "
        "tuning_logs/kiln.db --train-zero-shot tuning_logs/zero_shot`"))
    isas = {}
    for target in db.targets():
        if _vector_isa(target) is not None:
            isas.setdefault(_vector_isa(target), target)
    assert isas
    for target in isas.values():
        if Z.training_rows(db, target) is None:
            continue
        path = Z.model_for(db, target, directory=None)
        assert path is not None and path.parent == Z.shipped_dir(), target
        Z.Forest(path)
    names = {p.name for p in Z.shipped_dir().glob("model-*.json")}
    assert names == {f"model-{Z.model_key(db, t)}.json" for t in isas.values()
                     if Z.training_rows(db, t) is not None}


def test_the_ranking_budget_takes_the_heaviest_tasks_first(tmp_path, monkeypatch):
    """rank_plan: the most FLOPs first while the pools fit the budget; a cached pick is
    free; a negative budget ranks everything; the same answer every time."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    target = canonical_target("native")
    db = _synthetic_db(tmp_path / "log.db", _other_tasks()[:3])
    path = Z.model_for(db, target, directory=tmp_path / "models")
    tasks = [Task.from_op("dense", shape, target=target)
             for shape in ((5, 31, 17), (64, 64, 64), (1, 7, 13), (16, 64, 40))]
    entries = [(t.name + str(i), t, t.flops) for i, t in enumerate(tasks)]
    sizes = {name: len(Z.pool(SearchSpace(t, threads=1))) for name, t, _ in entries}
    heaviest = sorted(entries, key=lambda e: -e[2])
    budget = sizes[heaviest[0][0]] + sizes[heaviest[1][0]]

    def plan(entries, budget):
        return set(Z.rank_plan(entries, path, [], 1, budget))
    assert plan(entries, budget) == {heaviest[0][0], heaviest[1][0]}
    assert plan(list(reversed(entries)), budget) == plan(entries, budget)
    for b in range(0, sum(sizes.values()) + 1, 3):        # never over the budget
        assert sum(sizes[name] for name in plan(entries, b)) <= b
    assert plan(entries, 0) == set()
    assert plan(entries, -1) == {e[0] for e in entries}
    # a task ranked before (its pick cached) costs nothing
    light = heaviest[-1]
    Z.cached_pick(SearchSpace(light[1], threads=1), path)
    assert plan(entries, budget) == {heaviest[0][0], heaviest[1][0], light[0]}
    assert plan(entries, 0) == {light[0]}


def test_a_zero_shot_compile_ranks_within_its_budget(tmp_path, monkeypatch):
    """With a budget of no configs, a zero-shot compile ranks nothing: every task keeps its
    default, and the result still matches."""
    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(Z, "RANK_BUDGET", 0)
    proto = models.mlp(batch=3, sizes=(37, 24, 13))
    own = {mt.task.workload_key for mt in model_tasks(proto)}
    db = _synthetic_db(tmp_path / "log.db", [t for t in _other_tasks()
                                             if t.workload_key not in own])
    ranked = []
    monkeypatch.setattr(Z, "rank_candidates", lambda *a, **k: ranked.append(1))
    compiled = kiln.compile(proto, db=db, threads=1, jobs=1, zero_shot=True)
    assert {s.source for s in compiled.plan.steps} == {"default"} and not ranked
