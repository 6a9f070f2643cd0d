"""NonZero, Unique and NonMaxSuppression (te/ops/datadep.py, graph/runtime/staged.py): Kiln-compiled
padded kernels trimmed to their counts, against onnx's reference evaluator; empty results,
size-1 inputs, ties and identical boxes; random inputs (hypothesis) at a few compiled shapes;
and a detection-like graph (NMS -> Gather of the kept boxes -> float ops) against
onnxruntime, with the part after NMS compiled per count."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.ops.datadep import nms_reference, unique_reference
from kiln.graph.runtime.staged import StagedModel

from .graph_helpers import ort_run

_TYPES = {np.dtype(np.float32): TensorProto.FLOAT, np.dtype(np.int64): TensorProto.INT64,
          np.dtype(np.int32): TensorProto.INT32, np.dtype(bool): TensorProto.BOOL}


def _model(nodes, feeds: dict, outputs: list[str], inits=None, opset: int = 13):
    ins = [helper.make_tensor_value_info(n, _TYPES[a.dtype], a.shape) for n, a in feeds.items()]
    outs = [helper.make_empty_tensor_value_info(o) for o in outputs]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()]
    graph = helper.make_graph(nodes, "datadep", ins, outs, initializer=inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


_COMPILED: dict = {}


def _compiled(key, build):
    """One compiled model per (op, shape, attributes): random values reuse it."""
    if key not in _COMPILED:
        m = build()
        _COMPILED[key] = (m, kiln.compile(m, db=None, jobs=1))
    return _COMPILED[key]


def _check_against_reference(m, compiled, feeds):
    got = compiled.run(feeds)
    want = ReferenceEvaluator(m).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        np.testing.assert_array_equal(g, w)
    return got


# -- NonZero ---------------------------------------------------------------------------------

def _nonzero(shape, dtype):
    x = np.zeros(shape, dtype)
    return _compiled(("nonzero", shape, np.dtype(dtype).str), lambda: _model(
        [helper.make_node("NonZero", ["x"], ["y"])], {"x": x}, ["y"]))


@pytest.mark.parametrize("x", [
    np.array([[1, 0, 2], [0, 0, 3]], np.float32),
    np.zeros((2, 3), np.float32),                   # count 0: a [2, 0] output
    np.array([7], np.int32), np.array([0], np.int32),  # size 1
    np.array([[[True, False]], [[False, True]]]),
    np.array([np.nan, 0.0, -0.0, 1e-30], np.float32),  # NaN is non-zero, -0.0 is zero
    (np.random.default_rng(1).uniform(0, 1, 37) > 0.6).astype(np.float32),   # prime: a
    np.ones((6, 7), np.int64),                                               # partial block
])
def test_nonzero_cases(x):
    m, c = _nonzero(x.shape, x.dtype)
    got = _check_against_reference(m, c, {"x": x})
    assert isinstance(c, StagedModel) and got[0].dtype == np.int64


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([(7,), (3, 5), (2, 1, 3)]), st.data())
def test_nonzero_random(shape, data):
    mask = data.draw(st.lists(st.booleans(), min_size=int(np.prod(shape)),
                              max_size=int(np.prod(shape))))
    x = (np.array(mask).reshape(shape) * np.arange(1, np.prod(shape) + 1).reshape(shape))
    m, c = _nonzero(shape, np.float32)
    _check_against_reference(m, c, {"x": x.astype(np.float32)})


# -- Unique ----------------------------------------------------------------------------------

def _unique(shape, dtype, axis=None, sorted_=1):
    x = np.zeros(shape, dtype)
    attrs = {"sorted": sorted_} if axis is None else {"sorted": sorted_, "axis": axis}
    return _compiled(("unique", shape, np.dtype(dtype).str, axis, sorted_), lambda: _model(
        [helper.make_node("Unique", ["x"], ["y", "indices", "inverse", "counts"], **attrs)],
        {"x": x}, ["y", "indices", "inverse", "counts"], opset=11))


@pytest.mark.parametrize("x,axis,sorted_", [
    (np.array([2, 1, 1, 3, 4, 3], np.float32), None, 1),
    (np.array([2, 1, 1, 3, 4, 3], np.float32), None, 0),
    (np.array([5], np.int64), None, 1),                          # size 1
    (np.array([4, 4, 4, 4], np.int32), None, 0),                 # one value
    (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), 0, 1),
    (np.array([[1, 0, 0], [1, 0, 0], [2, 3, 4]], np.float32), -1, 0),
    (np.array([[[1, 1], [0, 1]], [[1, 1], [0, 1]]], np.int64), 2, 1),
])
def test_unique_cases(x, axis, sorted_):
    _check_unique(x, axis, sorted_)


def _check_unique(x, axis, sorted_):
    """Against onnx's reference evaluator, except where it takes the unsorted Y along axis 0
    whatever the axis (onnx 1.23): there against numpy's unique reordered as the spec says
    (and onnxruntime, for float32)."""
    m, c = _unique(x.shape, x.dtype, axis, sorted_)
    if sorted_ or (axis is None and x.ndim == 1) or axis == 0:
        return _check_against_reference(m, c, {"x": x})
    got = c.run({"x": x})
    want = unique_reference(x, axis, bool(sorted_))
    if x.dtype == np.float32:
        for w, o in zip(want, ort_run(m, {"x": x})):
            np.testing.assert_array_equal(w, o)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)


def test_unique_nan_is_one_value_sorted_last():
    x = np.array([np.nan, 1.0, np.nan, -2.0], np.float32)
    m, c = _unique(x.shape, x.dtype)
    y, idx, inv, cnt = c.run({"x": x})
    wy, widx, winv, wcnt = unique_reference(x, None, True)
    np.testing.assert_array_equal(y, wy)
    for g, w in ((idx, widx), (inv, winv), (cnt, wcnt)):
        np.testing.assert_array_equal(g, w)


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([((9,), None, 1), ((9,), None, 0), ((4, 3), 0, 1), ((3, 4), 1, 0)]),
       st.data())
def test_unique_random(case, data):
    shape, axis, sorted_ = case
    vals = data.draw(st.lists(st.integers(-2, 2), min_size=int(np.prod(shape)),
                              max_size=int(np.prod(shape))))
    _check_unique(np.array(vals, np.float32).reshape(shape), axis, sorted_)


# -- NonMaxSuppression -----------------------------------------------------------------------

def _nms(nb, nc, n, limit, center=0, score_threshold=True):
    feeds = {"boxes": np.zeros((nb, n, 4), np.float32),
             "scores": np.zeros((nb, nc, n), np.float32),
             "iou": np.zeros((1,), np.float32)}
    ins = ["boxes", "scores", "limit", "iou"]
    if score_threshold:
        feeds["score_thr"] = np.zeros((1,), np.float32)
        ins.append("score_thr")
    return _compiled(("nms", nb, nc, n, limit, center, score_threshold), lambda: _model(
        [helper.make_node("NonMaxSuppression", ins, ["selected"], center_point_box=center)],
        feeds, ["selected"], inits={"limit": np.array([limit], np.int64)}, opset=11))


def _nms_feeds(boxes, scores, iou, score_thr=None):
    feeds = {"boxes": boxes.astype(np.float32), "scores": scores.astype(np.float32),
             "iou": np.array([iou], np.float32)}
    if score_thr is not None:
        feeds["score_thr"] = np.array([score_thr], np.float32)
    return feeds


BOXES = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, -0.1, 1, 0.9], [0, 10, 1, 11],
                   [0, 10.1, 1, 11.1], [0, 100, 1, 101]]], np.float32)


@pytest.mark.parametrize("scores,iou,thr,limit", [
    ([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], 0.5, 0.0, 3),
    ([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], 0.5, 0.99, 3),      # nothing above: count 0
    ([0.5, 0.5, 0.5, 0.5, 0.5, 0.5], 0.5, 0.0, 6),         # ties: the lower index first
    ([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], 0.0, 0.0, 6),       # any overlap suppresses
    ([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], 1.0, 0.0, 6),       # nothing is suppressed
    ([0.9, 0.75, 0.6, 0.95, 0.5, 0.3], 0.5, 0.0, 0),       # limit 0: count 0
])
def test_nms_cases(scores, iou, thr, limit):
    m, c = _nms(1, 1, 6, limit)
    feeds = _nms_feeds(BOXES, np.array([[scores]]), iou, thr)
    got = _check_against_reference(m, c, feeds)
    assert got[0].shape[1] == 3


def test_nms_identical_boxes_and_center_format_without_score_threshold():
    boxes = np.tile(np.array([[0.5, 0.5, 1.0, 1.0]], np.float32), (5, 1))[None]
    m, c = _nms(1, 2, 5, 4, center=1, score_threshold=False)
    feeds = _nms_feeds(boxes, np.array([[[0.1, 0.3, 0.3, 0.2, 0.0], [0, 0, 0, 0, 0]]]), 0.5)
    got = _check_against_reference(m, c, feeds)
    np.testing.assert_array_equal(got[0], [[0, 0, 1], [0, 1, 0]])


def test_nms_single_box():
    m, c = _nms(1, 1, 1, 3)
    _check_against_reference(m, c, _nms_feeds(np.array([[[0, 0, 1, 1]]]), np.array([[[0.7]]]),
                                              0.5, 0.0))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.sampled_from([(1, 1, 7, 4, 0), (2, 3, 5, 2, 1), (1, 2, 6, 6, 0)]), st.data())
def test_nms_random(case, data):
    nb, nc, n, limit, center = case
    grid = st.integers(0, 4).map(lambda v: v / 2)   # coarse values: ties and equal boxes
    boxes = np.array(data.draw(st.lists(grid, min_size=nb * n * 4, max_size=nb * n * 4)),
                     np.float32).reshape(nb, n, 4)
    scores = np.array(data.draw(st.lists(st.integers(0, 4).map(lambda v: v / 4),
                                         min_size=nb * nc * n, max_size=nb * nc * n)),
                      np.float32).reshape(nb, nc, n)
    iou = data.draw(st.sampled_from([0.0, 0.25, 0.5, 1.0]))
    thr = data.draw(st.sampled_from([0.0, 0.3, 1.0]))
    m, c = _nms(nb, nc, n, limit, center)
    feeds = _nms_feeds(boxes, scores, iou, thr)
    _check_against_reference(m, c, feeds)
    want = nms_reference(boxes, scores, limit, np.float32(iou), np.float32(thr), bool(center))
    np.testing.assert_array_equal(c.run(feeds)[0], want)


# -- a detection-like graph ------------------------------------------------------------------

def _detection_model(n: int):
    """boxes, scores -> NMS -> the kept boxes (Gather on column 2) -> scaled and clipped, and
    their scores: the part after NMS is compiled per count."""
    nodes = [
        helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou", "thr"],
                         ["sel"]),
        helper.make_node("Gather", ["sel", "two"], ["box_idx"], axis=1),
        helper.make_node("Squeeze", ["boxes", "zero"], ["boxes2d"]),
        helper.make_node("Gather", ["boxes2d", "box_idx"], ["kept"], axis=0),
        helper.make_node("Mul", ["kept", "scale"], ["scaled"]),
        helper.make_node("Clip", ["scaled", "lo", "hi"], ["clipped"]),
        helper.make_node("Squeeze", ["scores", "zero01"], ["scores1d"]),
        helper.make_node("Gather", ["scores1d", "box_idx"], ["kept_scores"], axis=0),
        helper.make_node("Sigmoid", ["kept_scores"], ["prob"]),
    ]
    feeds = {"boxes": np.zeros((1, n, 4), np.float32), "scores": np.zeros((1, 1, n), np.float32)}
    inits = {"limit": np.array([5], np.int64), "iou": np.array([0.4], np.float32),
             "thr": np.array([0.2], np.float32), "two": np.array(2, np.int64),
             "zero": np.array([0], np.int64), "zero01": np.array([0, 1], np.int64),
             "scale": np.array([640, 480, 640, 480], np.float32),
             "lo": np.array(0, np.float32), "hi": np.array(600, np.float32)}
    return _model(nodes, feeds, ["clipped", "prob", "sel"], inits)


def test_detection_graph_against_onnxruntime():
    n = 12
    m = _detection_model(n)
    compiled = kiln.compile(m, db=None, jobs=1)
    rng = np.random.default_rng(3)
    counts = set()
    for scale in (1.0, 0.0, 1.0, 0.5):   # 0.0: no score above the threshold, count 0
        xy = rng.uniform(0, 0.8, (1, n, 2)).astype(np.float32)
        boxes = np.concatenate([xy, xy + rng.uniform(0.05, 0.3, (1, n, 2))], axis=2)
        feeds = {"boxes": boxes.astype(np.float32),
                 "scores": (rng.uniform(0, 1, (1, 1, n)) * scale).astype(np.float32)}
        got = compiled.run(feeds)
        want = ort_run(m, feeds)
        counts.add(got[2].shape[0])
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.dtype == w.dtype
            np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    assert 0 in counts and len(counts) >= 2


def test_data_dependent_op_in_an_if_on_a_constant_is_staged():
    """(If branches are staged at their condition: tests/graph/test_datadep_if.py.)"""
    then = helper.make_graph([helper.make_node("NonZero", ["x"], ["y"])], "then", [],
                             [helper.make_empty_tensor_value_info("y")])
    m = _model([helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(
                    np.array(True))),
                helper.make_node("If", ["c"], ["out"], then_branch=then, else_branch=then)],
               {"x": np.ones((2,), np.float32)}, ["out"])
    compiled = kiln.compile(m, db=None, jobs=1)
    _check_against_reference(m, compiled, {"x": np.array([0, 3], np.float32)})


def test_chained_stages_constants_and_late_graph_inputs():
    """NonZero -> Reshape by a Constant node (copied into the suffix) -> + a graph input read
    only after the cut -> Unique (the suffix is staged again) -> Neg."""
    nodes = [helper.make_node("Constant", [], ["shp"],
                              value=numpy_helper.from_array(np.array([-1], np.int64))),
             helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Reshape", ["nz", "shp"], ["flat"]),
             helper.make_node("Cast", ["flat"], ["flatf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["flatf", "y"], ["s"]),
             helper.make_node("Unique", ["s"], ["u", "ui", "uv", "uc"]),
             helper.make_node("Neg", ["u"], ["out"])]
    m = _model(nodes, {"x": np.zeros((3, 4), np.float32), "y": np.zeros((1,), np.float32)},
               ["out", "uc"])
    compiled = kiln.compile(m, db=None, jobs=1)
    for trial in range(3):
        x = (np.random.default_rng(trial).uniform(0, 1, (3, 4)) > 0.5).astype(np.float32)
        if trial == 2:
            x[:] = 0     # count 0 at the first cut, so empty inputs to the second
        _check_against_reference(m, compiled, {"x": x, "y": np.array([trial], np.float32)})


def test_staged_model_errors_name_the_problem():
    m, c = _nonzero((3, 5), np.float32)
    with pytest.raises(kiln.te.errors.KilnError, match="NonZero.*export"):
        c.export("/nonexistent/x.so")
    with pytest.raises(kiln.te.errors.KernelArgumentError, match="no input named 'y'"):
        c.run({"y": np.zeros((3, 5), np.float32)})
    with pytest.raises(kiln.te.errors.KernelArgumentError, match="input 'x'"):
        c.run({"x": np.zeros((3, 4), np.float32)})     # the prefix checks the shape
    assert "NonZero" in c.summary() and c.benchmark({"x": np.ones((3, 5), np.float32)},
                                                    repeat=2) > 0
