"""A ResNet-18 exported by torch's ONNX exporter (names like /layer1/layer1.0/conv1/Conv,
weights random and sparse) takes the committed records Kiln's own ResNet-18 takes (issue 14).

tests/fixtures/export_resnet18_torch.py made the file (torch is not a test dependency)."""
from __future__ import annotations

import dataclasses
import gzip
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from kiln.autotune.database import Database
from kiln.autotune.default_db import shipped_db_path
from kiln.autotune.dispatch import apply_best, select_record
from kiln.graph import models
from kiln.graph.compile.model import compile_model, model_tasks
from kiln.codegen.build import DEFAULT_FASTMATH
from kiln.codegen.emit_module import emit_module, fastmath_flags
from kiln.codegen.jit import object_code, optimize
from kiln.codegen.target import Target
from kiln.schedule import lower

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "resnet18_torch.onnx.gz"
ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def torch_resnet18(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("torch") / "resnet18.onnx"
    with gzip.open(FIXTURE, "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Database:
    return Database(tmp_path_factory.mktemp("user") / "tuning.db", base=shipped_db_path())


def _pinned_target(db: Database) -> str:
    """The committed log's AVX-512 CPU with the most records."""
    (target,) = db._db.conn.execute(
        f"SELECT target FROM {db._records} WHERE target LIKE '%avx512f%' GROUP BY target "
        "ORDER BY COUNT(*) DESC LIMIT 1").fetchone()
    return target


def _object_code(func, target: str) -> bytes:
    """Machine code of `func` for `target`, a CPU this host may not run (no JIT, no load)."""
    tgt = Target.from_string(target)
    module = emit_module(func, tgt, fastmath_flags(DEFAULT_FASTMATH), parallel=None)
    return object_code(str(optimize(module, tgt)), tgt)


def test_the_fixture_has_torch_names(torch_resnet18):
    names = [n.name for n in onnx.load(torch_resnet18).graph.node]
    assert "/layer1/layer1.0/conv1/Conv" in names


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_torch_resnet18_takes_every_schedule_kiln_resnet18_takes(torch_resnet18, shipped,
                                                                 threads):
    target = _pinned_target(shipped)
    own = {mt.task.workload_key: mt.task for mt in model_tasks(
        models.resnet18_like(image_size=224), target)}
    theirs = {mt.task.workload_key: mt.task for mt in model_tasks(str(torch_resnet18), target)}
    assert set(theirs) == set(own)
    from_db = 0
    tgt = Target.from_string(target)
    for key, task in own.items():
        mine = select_record(task, tgt, shipped, threads=threads)
        other = select_record(theirs[key], tgt, shipped, threads=threads)
        assert not mine.skipped and not other.skipped
        assert (other.record and other.record.record_id) == (mine.record and
                                                            mine.record.record_id), task.name
        from_db += mine.record is not None
    assert from_db == len(own)          # the committed log tuned every ResNet-18 task there
    if threads == 2:
        # the schedules build to machine code for that CPU (which this host may not run)
        for task in theirs.values():
            task = dataclasses.replace(task, target=target, _key=[])
            sch, args, source = apply_best(task, target, shipped, threads=threads)
            assert source == "database"
            assert _object_code(lower(sch, args, name=task.name), target)


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_torch_resnet18_compiles_and_runs_here(torch_resnet18, shipped, threads):
    compiled = compile_model(str(torch_resnet18), db=shipped, threads=threads)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    sess = ort.InferenceSession(str(torch_resnet18), providers=["CPUExecutionProvider"])
    expected = sess.run(None, {"input": x})[0]
    np.testing.assert_allclose(compiled.run({"input": x})[0], expected, rtol=1e-3, atol=1e-3)
