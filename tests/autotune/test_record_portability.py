"""Tuning records apply to the same workload in any model (issue 14).

Knob names derive from the canonical DAG (positions), so the names a model's exporter chose
for its tensors and nodes never reach a config. A record that does not fit today's space is
skipped, never fatal; schema-1 records (named after the model they were tuned on) are
renamed when their task is at hand.
"""
from __future__ import annotations

import dataclasses
import random

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from kiln.autotune.database import SCHEMA_VERSION, Database, Record
from kiln.autotune.dispatch import apply_best, canonical_target, select_record
from kiln.autotune.migrate import legacy_knob_names
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.task import Task
from kiln.codegen.target import Target
from kiln.graph import models
from kiln.graph.compile.model import compile_model, model_tasks
from kiln.schedule import lower

ort = pytest.importorskip("onnxruntime")


def _small_net(prefix: str) -> onnx.ModelProto:
    """conv 3x3 + bias + relu -> global pool -> gemm, every name under `prefix` (a torch
    exporter writes names like /layer1/layer1.0/conv1/Conv)."""
    rng = np.random.default_rng(0)
    n = lambda s: f"{prefix}{s}"  # noqa: E731
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2,
                                n("conv.weight"))
    b = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), n("conv.bias"))
    fw = numpy_helper.from_array(rng.standard_normal((5, 16)).astype(np.float32),
                                 n("fc.weight"))
    fb = numpy_helper.from_array(rng.standard_normal(5).astype(np.float32), n("fc.bias"))
    nodes = [
        helper.make_node("Conv", [n("x"), n("conv.weight"), n("conv.bias")], [n("c")],
                         name=n("conv/Conv"), pads=[1, 1, 1, 1]),
        helper.make_node("Relu", [n("c")], [n("r")], name=n("relu/Relu")),
        helper.make_node("GlobalAveragePool", [n("r")], [n("p")], name=n("pool/GAP")),
        helper.make_node("Flatten", [n("p")], [n("f")], name=n("flatten/Flatten")),
        helper.make_node("Gemm", [n("f"), n("fc.weight"), n("fc.bias")], [n("y")],
                         name=n("fc/Gemm"), transB=1),
    ]
    graph = helper.make_graph(nodes, n("net"),
                              [helper.make_tensor_value_info(n("x"), TensorProto.FLOAT,
                                                             [1, 8, 12, 12])],
                              [helper.make_tensor_value_info(n("y"), TensorProto.FLOAT,
                                                             [1, 5])],
                              [w, b, fw, fb])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _sampled(space: SearchSpace, seed: int) -> dict:
    """A sampled config that builds, and differs from the default."""
    rng, default = random.Random(seed), space.default_config()
    for _ in range(50):
        config = space.sample(rng)
        if config != default:
            try:
                space.apply(config)
            except Exception:  # noqa: BLE001 - an illegal sample: draw another
                continue
            return config
    raise AssertionError("no legal non-default sample")


def test_two_models_with_other_names_share_spaces_and_records(tmp_path):
    a, b = _small_net("model_a_"), _small_net("/layer1/layer1.0/")
    tasks_a, tasks_b = model_tasks(a, layout="nchw"), model_tasks(b, layout="nchw")
    keys_a = {t.task.workload_key: t.task for t in tasks_a}
    assert sorted(keys_a) == sorted(t.task.workload_key for t in tasks_b)
    target = canonical_target("native")
    db = Database(tmp_path / "log.db")
    chosen = {}
    for mt in tasks_a:
        task = dataclasses.replace(mt.task, target=target, _key=[])
        space = SearchSpace(task)
        chosen[task.workload_key] = config = _sampled(space, seed=len(chosen))
        db.commit_record(Record(task.workload_key, target, config, (1e-6,), "OK", threads=1))
    for mt in tasks_b:
        task = dataclasses.replace(mt.task, target=target, _key=[])
        names_b = sorted(k.name for k in SearchSpace(task).knobs)
        names_a = sorted(k.name for k in SearchSpace(dataclasses.replace(
            keys_a[task.workload_key], target=target, _key=[])).knobs)
        assert names_a == names_b
        selection = select_record(task, Target.from_string(target), db, threads=1)
        assert selection.record is not None and selection.record.config == chosen[
            task.workload_key]
        assert selection.source(target) == "database" and not selection.skipped
    compiled = compile_model(b, db=db, threads=1, layout="nchw", jobs=1)
    assert {s.source for s in compiled.plan.steps} == {"database"}
    x = np.random.default_rng(1).standard_normal((1, 8, 12, 12)).astype(np.float32)
    sess = ort.InferenceSession(b.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = sess.run(None, {"/layer1/layer1.0/x": x})[0]
    np.testing.assert_allclose(compiled.run({"/layer1/layer1.0/x": x})[0], expected,
                               rtol=1e-4, atol=1e-4)


def test_knob_names_are_positions_not_names():
    one = Task.from_op("matmul", (32, 48, 40))
    space = SearchSpace(one)
    assert {k.name for k in space.knobs} >= {"s0/tile/0", "s0/tile/1", "s0/reduce/0",
                                             "s0/pack/in0", "s0/pack/in1"}
    assert not any(":" in k.name or "C/" in k.name for k in space.knobs)


def _matmul_task():
    task = Task.from_op("matmul", (24, 40, 48))
    return dataclasses.replace(task, target=canonical_target("native"), _key=[])


def test_a_record_that_does_not_fit_is_skipped_for_a_valid_one(tmp_path, caplog):
    task = _matmul_task()
    space = SearchSpace(task, threads=1)        # the count apply_best builds for, below
    db = Database(tmp_path / "log.db")
    good = _sampled(space, seed=3)
    bad = dict(good, **{"s0/pack/conv_1_nchwc16_winograd_v": 1})
    wrong_value = dict(good, **{"s0/unroll": 7})
    db.commit_record(Record(task.workload_key, task.target, bad, (1e-9,), "OK", threads=1))
    db.commit_record(Record(task.workload_key, task.target, wrong_value, (2e-9,), "OK",
                            threads=1))
    db.commit_record(Record(task.workload_key, task.target, good, (1e-3,), "OK", threads=1))
    selection = select_record(task, Target.from_string(task.target), db, threads=1)
    assert selection.record.config == good and len(selection.skipped) == 2
    assert "unknown knob" in selection.skipped[0][1]
    sch, args, source = apply_best(task, task.target, db, threads=1)
    assert source == "database"
    assert str(lower(sch, args, name="mm")) == str(lower(*space.apply(good), name="mm"))
    assert "do not fit" in caplog.text


def test_only_bad_records_fall_back_to_the_default_and_the_compile_says_so(tmp_path):
    model = models.mlp(sizes=(16, 8))
    db = Database(tmp_path / "log.db")
    target = canonical_target("native")
    for mt in model_tasks(model):
        db.commit_record(Record(mt.task.workload_key, target, {"matmul/tile/0:i": [1, 1]},
                                (1e-9,), "OK", threads=1))
    compiled = compile_model(model, db=db, threads=1, jobs=1)
    assert {s.source for s in compiled.plan.steps} == {"default"}
    assert "skipped: they do not fit" in compiled.summary()
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(compiled.run({"input": x})[0], sess.run(None, {"input": x})[0],
                               rtol=1e-5, atol=1e-6)


def test_schema1_records_are_renamed_and_applied(tmp_path):
    """A log written before knob names were canonical: its records serve again once their
    task is compiled (renamed in place), and keep their ids, costs and order."""
    task = _matmul_task()
    space = SearchSpace(task)
    config = _sampled(space, seed=5)
    old_name = {new: old for old, new in legacy_knob_names(space).items()}
    old_config = {old_name[k]: v for k, v in config.items()}
    assert "C/tile/0:i" in old_config                       # the schema-1 spelling
    db = Database(tmp_path / "log.db")
    db.commit_record(Record(task.workload_key, task.target, config, (1e-3,), "OK", threads=1))
    db._db.conn.execute("UPDATE records SET config = ?, schema_version = 1",
                        (__import__("json").dumps(old_config),))
    db._db.conn.commit()
    assert db.best(task.workload_key, task.target) == []   # invisible until renamed
    assert db.stale_count() == 1
    selection = select_record(task, Target.from_string(task.target), db, threads=1)
    assert selection.record is not None and selection.record.config == config
    assert db.stale_count() == 0 and db.best(task.workload_key, task.target)[0].schema_version \
        == SCHEMA_VERSION


def test_prune_removes_stale_and_rejected_records_only_from_the_writable_log(tmp_path):
    task = _matmul_task()
    good = _sampled(SearchSpace(task), seed=7)
    base = Database(tmp_path / "shipped.db")
    base.commit_record(Record(task.workload_key, task.target, good, (1e-3,), "OK"))
    base.commit_record(Record(task.workload_key, task.target, {"s0/bogus": 1}, (1e-4,), "OK"))
    base.close()
    db = Database(tmp_path / "user.db", base=tmp_path / "shipped.db")
    rid = db.commit_record(Record(task.workload_key, task.target, {"s0/bogus": 2}, (1e-5,),
                                  "OK"))
    assert len(db.records(task.workload_key, task.target)) == 3
    assert db.prune_stale([rid, -2]) == 1                  # base records are never removed
    assert len(db.records(task.workload_key, task.target)) == 2
