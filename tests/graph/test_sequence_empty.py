"""SequenceEmpty (graph/onnx/sequence.py), the one registered converter no other test built a
node of (tests/graph/test_converter_registry.py): an empty sequence grown by inserts, then
concatenated and counted, against onnx's ReferenceEvaluator."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kiln

F = TensorProto.FLOAT


@pytest.mark.parametrize("rows", [(1, 1), (3, 2), (7,)])
def test_sequence_empty_then_inserts(rows):
    names = [f"x{k}" for k in range(len(rows))]
    nodes = [helper.make_node("SequenceEmpty", [], ["s0"], dtype=F)]
    for k, name in enumerate(names):
        nodes.append(helper.make_node("SequenceInsert", [f"s{k}", name], [f"s{k + 1}"]))
    last = f"s{len(names)}"
    nodes += [helper.make_node("ConcatFromSequence", [last], ["cat"], axis=0),
              helper.make_node("SequenceLength", [last], ["n"])]
    graph = helper.make_graph(
        nodes, "seq_empty", [helper.make_tensor_value_info(n, F, [r, 5])
                             for n, r in zip(names, rows)],
        [helper.make_tensor_value_info("cat", F, [sum(rows), 5]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    rng = np.random.default_rng(3)
    feeds = {n: rng.standard_normal((r, 5)).astype(np.float32) for n, r in zip(names, rows)}
    got = kiln.compile(model, db=None, jobs=1).run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)
