"""Whole models through compile_model vs onnxruntime, and tune -> compile from the database."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.autotune.database import Database
from kiln.autotune.measure import MeasureOptions
from kiln.graph import models
from kiln.graph.compile.model import compile_model, model_tasks, tune_model
from kiln.te.errors import KilnError

from .graph_helpers import ort_run

SMALL = {
    "default_cnn": lambda: models.default_cnn(image_size=16, width=8),
    "resnet18_like": lambda: models.resnet18_like(image_size=32, base_width=8,
                                                  num_classes=10),
    "mobilenetv2_like": lambda: models.mobilenetv2_like(image_size=32, width_mult=0.25,
                                                        num_classes=10, stages=3),
    "bert_like_encoder": lambda: models.bert_like_encoder(seq=8, hidden=32, heads=2, layers=2,
                                                          vocab=50),
    "mlp": lambda: models.mlp(sizes=(48, 32, 16, 10)),
}


def _feeds(model):
    rng = np.random.default_rng(5)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == 7:   # int64 token ids
            feeds[inp.name] = rng.integers(0, 50, shape).astype(np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", list(SMALL))
def test_model_matches_onnxruntime(name):
    model = SMALL[name]()
    feeds = _feeds(model)
    compiled = compile_model(model)
    got = compiled.run(feeds)
    want = ort_run(model, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)


def test_identical_blocks_are_one_task():
    tasks = model_tasks(SMALL["bert_like_encoder"]())
    by_weight = sorted(t.weight for t in tasks)
    assert by_weight[-1] >= 4          # q/k/v/out projections of both layers share a task
    assert sum(by_weight) > len(tasks)


def test_tune_needs_a_database():
    with pytest.raises(KilnError, match=r"needs a tuning database"):
        tune_model(SMALL["mlp"](), trials=1)
    with pytest.raises(KilnError, match=r"ONNX model .* or an autotune Task, got int"):
        kiln.tune(3, db="unused.db")


@pytest.mark.slow
def test_tune_model_records_are_used_by_the_next_compile(tmp_path):
    model = SMALL["mlp"]()
    db = Database(tmp_path / "kiln.db")
    # (no confirmation: it may keep every default, tests/autotune/test_confirm.py covers it)
    reports = tune_model(model, trials=3, db=db, batch_size=3, confirm=None,
                         options=MeasureOptions(timeout=60, repeat=2,
                                                min_repeat_seconds=0.001))
    assert sum(r.trials for r in reports) >= 3
    assert any(np.isfinite(r.best_seconds) for r in reports)
    compiled = kiln.compile(model, db=db)
    sources = {s.source for s in compiled.plan.steps}
    assert "database" in sources
    assert "from the database" in compiled.summary() and " database" in compiled.summary()
    feeds = _feeds(model)
    np.testing.assert_allclose(compiled.run(feeds)[0], ort_run(model, feeds)[0],
                               rtol=2e-4, atol=2e-4)


def test_compile_for_a_thread_count_sets_and_records_it(monkeypatch):
    monkeypatch.setenv("KILN_NUM_THREADS", "2")
    model = SMALL["mlp"]()
    compiled = compile_model(model, threads=1, jobs=1)
    assert compiled.plan.meta["threads"] == 1
    assert {k.num_threads for k in compiled.kernels.values()} == {1}
    assert compile_model(model, jobs=1).plan.meta["threads"] == 2      # from the environment
    with pytest.raises(KilnError, match=r"threads=0"):
        compile_model(model, threads=0)


@pytest.mark.parametrize("jobs", [1, 2])
def test_records_of_a_cpu_with_the_same_vector_isa_serve_and_are_named(tmp_path, jobs):
    """A log tuned on another CPU of the same vector ISA (znver4 vs znver5) serves a CPU
    with no records of its own, and the summary says so; compile in one or two processes."""
    from kiln.autotune.database import Record
    from kiln.autotune.space.rules import SearchSpace
    from kiln.autotune.tuner import canonical_target
    from kiln.codegen import Target
    model = SMALL["mlp"]()
    native = Target.from_string(canonical_target("native"))
    sibling = f"llvm -mcpu={'znver5' if native.cpu != 'znver5' else 'znver4'} " \
              f"-mattr={native.features}"
    db = Database(tmp_path / "kiln.db")
    for mt in model_tasks(model, "native"):
        db.commit_task(mt.task.workload_key, mt.name, [])
        config = SearchSpace(mt.task).default_config()
        db.commit_record(Record(mt.task.workload_key, sibling, config, (1e-5,), "OK", ""))
    compiled = compile_model(model, db=db, jobs=jobs)
    assert {s.source for s in compiled.plan.steps} == {"similar CPU"}
    assert "from another CPU's records (same vector ISA)" in compiled.summary()
    feeds = _feeds(model)
    np.testing.assert_allclose(compiled.run(feeds)[0], ort_run(model, feeds)[0],
                               rtol=2e-4, atol=2e-4)
    avx2 = Database(tmp_path / "avx2.db")                  # another ISA lends nothing
    other = "llvm -mcpu=znver3" if native.vector_bits >= 512 else "llvm -mcpu=znver4"
    for mt in model_tasks(model, "native"):
        avx2.commit_task(mt.task.workload_key, mt.name, [])
        config = SearchSpace(mt.task).default_config()
        avx2.commit_record(Record(mt.task.workload_key, other, config, (1e-5,), "OK", ""))
    assert {s.source for s in compile_model(model, db=avx2, jobs=1).plan.steps} == {"default"}
