"""Adagrad, Adam, Momentum and training-mode BatchNormalization (graph/onnx/training.py):
Kiln-compiled code against onnx's reference evaluator (onnxruntime lacks the preview.training
domain), the learning rate and step count run-time inputs (T = 0: the first-step branch)."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kiln

R = np.random.default_rng(13)
DOMAIN = "ai.onnx.preview.training"


def _model(op, groups, shapes, outputs, **attrs):
    names = [f"{g}{k}" for g in groups for k in range(len(shapes))]
    node = helper.make_node(op, ["R", "T"] + names, [f"{o}{k}_new" for o in outputs
                                                    for k in range(len(shapes))],
                            domain=DOMAIN, **attrs)
    ins = [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
           helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    ins += [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[k % len(shapes)])
            for k, n in enumerate(names)]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shapes[k % len(shapes)])
            for k, n in enumerate(node.output)]
    g = helper.make_graph([node], "train", ins, outs)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(DOMAIN, 1)])
    m.ir_version = 8
    feeds = {n: R.uniform(0.1, 1.0, shapes[k % len(shapes)]).astype(np.float32)
             for k, n in enumerate(names)}
    return m, feeds


CASES = {
    "adagrad": _model("Adagrad", "XGH", [[3], [2, 5]], "XH", decay_factor=0.1,
                      epsilon=1e-5, norm_coefficient=0.01),
    "adam": _model("Adam", "XGVH", [[7]], "XVH", alpha=0.9, beta=0.8, epsilon=1e-3,
                   norm_coefficient=0.01, norm_coefficient_post=0.02),
    "nesterov": _model("Momentum", "XGV", [[1], [3, 2]], "XV", alpha=0.9, beta=0.5,
                       mode="nesterov", norm_coefficient=0.01),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_update_rules_match_onnx_reference(case):
    m, feeds = CASES[case]
    compiled = kiln.compile(m, db=None, jobs=1)
    for step in (0, 3):
        all_feeds = {"R": np.array(0.25, np.float32), "T": np.array(step, np.int64), **feeds}
        want = ReferenceEvaluator(m).run(None, all_feeds)
        for got, w in zip(compiled.run(all_feeds), want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)


def test_batch_norm_training_mode_updates_running_statistics():
    x = R.standard_normal((3, 5, 2, 7)).astype(np.float32)
    stats = {k: R.uniform(0.5, 1.5, 5).astype(np.float32) for k in ("s", "b", "m", "v")}
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"],
                            ["y", "run_m", "run_v"], epsilon=1e-3, momentum=0.7,
                            training_mode=1)
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)] + [
        helper.make_tensor_value_info(k, TensorProto.FLOAT, [5]) for k in stats]
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, x.shape)] + [
        helper.make_tensor_value_info(k, TensorProto.FLOAT, [5]) for k in ("run_m", "run_v")]
    m = helper.make_model(helper.make_graph([node], "bn", ins, outs),
                          opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    feeds = {"x": x, **stats}
    want = ReferenceEvaluator(m).run(None, feeds)
    for got, w in zip(kiln.compile(m, db=None, jobs=1).run(feeds), want):
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5)
