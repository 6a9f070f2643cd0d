"""Ifs whose branches hold a data-dependent-size op (graph/runtime/staged.py): torchvision's
batched_nms (`if boxes.numel() == 0: return empty else: nms(...)`) after a score-threshold
NonZero, as in its detection models' postprocess, against onnxruntime with empty, few and
many detections; an If on a graph input (no stage before it); the op in a Loop body refused
by name."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.graph.runtime.staged import StagedModel, has_data_dependent_ops

from .graph_helpers import ort_run


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value), name))


def _batched_nms_if(boxes: str, scores: str, labels: str, keep: str):
    """torchvision's batched_nms as it exports: an If on boxes.numel() == 0."""
    empty = helper.make_graph([_const("empty", np.zeros((0,), np.int64))], "then", [],
                              [helper.make_tensor_value_info("empty", TensorProto.INT64, [0])])
    body = [
        helper.make_node("ReduceMax", [boxes], ["bmax"], keepdims=0),
        _const("one", np.float32(1)), _const("ax1", np.array([1], np.int64)),
        _const("ax0", np.array([0], np.int64)), _const("limit", np.array([1000], np.int64)),
        _const("iou", np.array([0.5], np.float32)), _const("col", np.array([2], np.int64)),
        helper.make_node("Add", ["bmax", "one"], ["span"]),
        helper.make_node("Cast", [labels], ["labf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["labf", "span"], ["offs"]),
        helper.make_node("Unsqueeze", ["offs", "ax1"], ["offs2"]),
        helper.make_node("Add", [boxes, "offs2"], ["shifted"]),
        helper.make_node("Unsqueeze", ["shifted", "ax0"], ["b3"]),
        helper.make_node("Unsqueeze", [scores, "ax0"], ["s2"]),
        helper.make_node("Unsqueeze", ["s2", "ax0"], ["s3"]),
        helper.make_node("NonMaxSuppression", ["b3", "s3", "limit", "iou"], ["sel"]),
        helper.make_node("Gather", ["sel", "col"], ["kcol"], axis=1),
        helper.make_node("Squeeze", ["kcol", "ax1"], ["kept"]),
    ]
    other = helper.make_graph(body, "else", [], [helper.make_tensor_value_info(
        "kept", TensorProto.INT64, ["k"])])
    return helper.make_node("If", ["isempty"], [keep], then_branch=empty, else_branch=other,
                            name="batched_nms")


def _postprocess_model(n: int, top: int = 4):
    """scores > 0.3 (NonZero) -> kept boxes/scores/labels -> batched_nms (If) -> the first
    `top` survivors (Slice) -> their boxes, scores and labels."""
    nodes = [
        _const("thr", np.float32(0.3)), _const("zero", np.array([0], np.int64)),
        _const("top", np.array([top], np.int64)), _const("izero", np.int64(0)),
        helper.make_node("Greater", ["scores", "thr"], ["over"]),
        helper.make_node("NonZero", ["over"], ["nz"]),
        helper.make_node("Squeeze", ["nz", "zero"], ["idx"]),
        helper.make_node("Gather", ["boxes", "idx"], ["fb"], axis=0),
        helper.make_node("Gather", ["scores", "idx"], ["fs"], axis=0),
        helper.make_node("Gather", ["labels", "idx"], ["fl"], axis=0),
        helper.make_node("Size", ["fb"], ["numel"]),
        helper.make_node("Equal", ["numel", "izero"], ["isempty"]),
        _batched_nms_if("fb", "fs", "fl", "keep"),
        helper.make_node("Slice", ["keep", "zero", "top"], ["keep_top"]),
        helper.make_node("Gather", ["fb", "keep_top"], ["out_boxes"], axis=0),
        helper.make_node("Gather", ["fs", "keep_top"], ["out_scores"], axis=0),
        helper.make_node("Gather", ["fl", "keep_top"], ["out_labels"], axis=0),
    ]
    ins = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [n, 4]),
           helper.make_tensor_value_info("scores", TensorProto.FLOAT, [n]),
           helper.make_tensor_value_info("labels", TensorProto.INT64, [n])]
    outs = [helper.make_empty_tensor_value_info(o) for o in ("out_boxes", "out_scores",
                                                             "out_labels")]
    graph = helper.make_graph(nodes, "postprocess", ins, outs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _feeds(rng, n, scale):
    xy = rng.uniform(0, 0.8, (n, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0.05, 0.4, (n, 2))], axis=1)
    return {"boxes": boxes.astype(np.float32),
            "scores": (rng.uniform(0, 1, n) * scale).astype(np.float32),
            "labels": rng.integers(0, 3, n).astype(np.int64)}


def test_batched_nms_if_after_a_threshold_against_onnxruntime():
    n = 10
    m = _postprocess_model(n)
    assert has_data_dependent_ops(m)
    compiled = kiln.compile(m, db=None, jobs=1)
    assert isinstance(compiled, StagedModel)
    rng = np.random.default_rng(5)
    kept = set()
    for scale in (1.0, 0.0, 1.0, 0.35):    # 0.0: nothing over the threshold, the then branch
        feeds = _feeds(rng, n, scale)
        got, want = compiled.run(feeds), ort_run(m, feeds)
        kept.add(len(want[0]))
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=0, atol=0)
    assert 0 in kept and len(kept) >= 2


def test_if_on_a_graph_input_is_staged_without_a_prefix():
    then = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"])], "then", [],
                             [helper.make_empty_tensor_value_info("y")])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["z"]),
                               helper.make_node("NonZero", ["z"], ["y2"])], "else", [],
                              [helper.make_empty_tensor_value_info("y2")])
    nodes = [helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=other),
             helper.make_node("Cast", ["out"], ["outf"], to=TensorProto.FLOAT)]
    ins = [helper.make_tensor_value_info("c", TensorProto.BOOL, []),
           helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    m = helper.make_model(helper.make_graph(nodes, "g", ins, [
        helper.make_empty_tensor_value_info("outf")]),
        opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(m, db=None, jobs=1)
    x = np.array([[1, 0, 2], [0, 0, -1]], np.float32)
    for c in (True, False, True):
        feeds = {"c": np.array(c), "x": x * (1 if c else -1)}
        got, want = compiled.run(feeds)[0], ort_run(m, feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


def test_data_dependent_op_in_a_loop_body_is_refused_by_name():
    body = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"]),
                              helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
                             [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                              helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
                             [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
                              helper.make_empty_tensor_value_info("y")])
    nodes = [_const("trip", np.int64(2)), _const("t", np.bool_(True)),
             helper.make_node("Loop", ["trip", "t"], ["ys"], body=body)]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [2])], [helper.make_empty_tensor_value_info("ys")]),
        opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(kiln.te.errors.UnsupportedOperatorError, match="NonZero.*Loop/Scan"):
        kiln.compile(m, db=None, jobs=1)


def test_topk_of_min_k_and_count_after_a_threshold_including_empty():
    """torchvision's per-level candidates: scores over a threshold (NonZero), then TopK with
    k = min(2, their number), which is 0 when none passes (empty outputs from shapes)."""
    nodes = [_const("thr", np.float32(0.5)), _const("zero", np.array([0], np.int64)),
             _const("two", np.array([2], np.int64)),
             helper.make_node("Greater", ["scores", "thr"], ["over"]),
             helper.make_node("NonZero", ["over"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "zero"], ["idx"]),
             helper.make_node("Gather", ["scores", "idx"], ["fs"], axis=0),
             helper.make_node("Shape", ["fs"], ["n"]),
             helper.make_node("Min", ["n", "two"], ["k"]),
             helper.make_node("TopK", ["fs", "k"], ["top", "top_idx"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "scores", TensorProto.FLOAT, [6])], [helper.make_empty_tensor_value_info(o)
                                             for o in ("top", "top_idx")]),
        opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(m, db=None, jobs=1)
    for scores in ([0.1, 0.9, 0.7, 0.2, 0.8, 0.0], [0.1, 0.0, 0.2, 0.3, 0.4, 0.1],
                   [0.1, 0.6, 0.2, 0.3, 0.4, 0.1]):
        feeds = {"scores": np.array(scores, np.float32)}
        for g, w in zip(compiled.run(feeds), ort_run(m, feeds)):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_array_equal(g, w)


def test_flatten_of_zero_rows_keeps_its_columns():
    """Flatten of [0, 2, 2] is [0, 4] (torchvision flattens the boxes of an empty
    selection; 0 columns made the Split into x1, y1, x2, y2 that follows it invalid)."""
    nodes = [_const("thr", np.float32(0.5)), _const("zero", np.array([0], np.int64)),
             helper.make_node("Greater", ["scores", "thr"], ["over"]),
             helper.make_node("NonZero", ["over"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "zero"], ["idx"]),
             helper.make_node("Gather", ["boxes", "idx"], ["fb"], axis=0),
             helper.make_node("Flatten", ["fb"], ["flat"], axis=1),
             helper.make_node("Shape", ["flat"], ["shape"])]
    m = helper.make_model(helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3]),
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [3, 2, 2])],
        [helper.make_empty_tensor_value_info(o) for o in ("flat", "shape")]),
        opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(m, db=None, jobs=1)
    boxes = np.arange(12, dtype=np.float32).reshape(3, 2, 2)
    for scores in ([0.0, 0.1, 0.2], [0.9, 0.1, 0.7]):
        feeds = {"scores": np.array(scores, np.float32), "boxes": boxes}
        for g, w in zip(compiled.run(feeds), ort_run(m, feeds)):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)


def test_concat_of_empty_inputs_adds_their_lengths():
    """Concat of four [0, 1, 1] along axis 2 is [0, 1, 4] (torchvision stacks x1, y1, x2, y2
    of an empty selection so)."""
    nodes = [_const("thr", np.float32(0.5)), _const("zero", np.array([0], np.int64)),
             _const("ax", np.array([1, 2], np.int64)),
             helper.make_node("Greater", ["scores", "thr"], ["over"]),
             helper.make_node("NonZero", ["over"], ["nz"]),
             helper.make_node("Squeeze", ["nz", "zero"], ["idx"]),
             helper.make_node("Gather", ["scores", "idx"], ["fs"], axis=0),
             helper.make_node("Unsqueeze", ["fs", "ax"], ["u"]),
             helper.make_node("Neg", ["u"], ["v"]),
             helper.make_node("Concat", ["u", "v", "u", "v"], ["cat"], axis=2)]
    m = helper.make_model(helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [3])],
        [helper.make_empty_tensor_value_info("cat")]),
        opset_imports=[helper.make_opsetid("", 17)])
    compiled = kiln.compile(m, db=None, jobs=1)
    for scores in ([0.0, 0.1, 0.2], [0.9, 0.1, 0.7]):
        feeds = {"scores": np.array(scores, np.float32)}
        got, want = compiled.run(feeds)[0], ort_run(m, feeds)[0]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
