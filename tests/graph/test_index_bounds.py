"""Indices out of their data's bounds are errors (issue 33 item 5), in compiled models, in the
numpy reference, and at compile time for constant indices; in-range and negative indices still
match onnxruntime. OneHot keeps the ONNX rule: an index outside [-depth, depth-1] gives a row
of off values, no error (onnxruntime agrees)."""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.graph.runtime.executor import load_compiled
from kiln.graph.onnx.load import load_onnx
from kiln.graph.reference import run_reference
from kiln.te.errors import IndexOutOfRangeError, KernelArgumentError

from .graph_helpers import ort_run

R = np.random.default_rng(33)


def f32(*shape):
    return R.standard_normal(shape).astype(np.float32)


def _model(op, feeds, inits=None, opset=18, domain="", order=None, **attrs):
    """One node named `op`_0 over graph inputs `feeds` (shapes and dtypes from the arrays) and
    initializers `inits` (in that order, or the names in `order`); output types from onnx's
    inference."""
    inits = inits or {}
    node = helper.make_node(op, order or list(feeds) + list(inits), ["y"], name=f"{op}_0",
                            domain=domain, **attrs)
    ins = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                         list(a.shape)) for n, a in feeds.items()]
    g = helper.make_graph([node], "t", ins, [helper.make_tensor_value_info(
        "y", TensorProto.UNDEFINED, None)], initializer=[
        numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    opsets = [helper.make_opsetid("", opset)] + (
        [helper.make_opsetid(domain, 1)] if domain else [])
    m = helper.make_model(g, opset_imports=opsets)
    m.ir_version = 9
    inferred = onnx.shape_inference.infer_shapes(m)
    m.graph.output[0].type.CopyFrom(inferred.graph.output[0].type)
    return m


# name: (model, the indices input, good index arrays, bad ones and the range each names)
CASES = {
    "gather-one-row": lambda: (
        _model("Gather", {"ids": np.zeros(5, np.int64)}, {"emb": f32(1, 3)}, axis=0,
               order=["emb", "ids"]), "ids",
        [np.array([0, -1, 0, 0, -1])],
        [(np.array([0, 1, 0, 0, 0]), "[0, 1]", "[-1, 0]"),
         (np.array([-2, 0, 0, 0, 0]), "[-2, 0]", "[-1, 0]")]),
    "gather-axis1-prime-int32": lambda: (
        _model("Gather", {"x": f32(3, 7), "ids": np.zeros((2, 3), np.int32)}, axis=1), "ids",
        [np.array([[0, 6, -7], [-1, 3, 5]], np.int32)],
        [(np.array([[0, 7, 1], [1, 1, 1]], np.int32), "[0, 7]", "[-7, 6]"),
         (np.array([[0, 1, 1], [1, -8, 10 ** 7]], np.int32), "[-8, 10000000]", "[-7, 6]")]),
    "gather-scalar-index": lambda: (
        _model("Gather", {"x": f32(3, 5), "i": np.zeros((), np.int64)}, axis=1), "i",
        [np.array(-5), np.array(4)], [(np.array(5), "[5, 5]", "[-5, 4]")]),
    "gather-elements": lambda: (
        _model("GatherElements", {"x": f32(5, 3), "idx": np.zeros((4, 3), np.int64)}, axis=0),
        "idx", [np.array([[0, 4, -5], [-1, 2, 3], [1, 1, 1], [4, 0, -2]])],
        [(np.array([[0, 5, 0], [0, 0, 0], [0, 0, 0], [0, 0, 0]]), "[0, 5]", "[-5, 4]")]),
    "gather-nd": lambda: (
        _model("GatherND", {"x": f32(3, 5, 2), "idx": np.zeros((4, 2), np.int64)}), "idx",
        [np.array([[0, 4], [-3, -5], [2, 0], [-1, 1]])],
        [(np.array([[0, 4], [1, 5], [2, 0], [1, 1]]), "column 1 of input 'idx' holds indices "
          "in [0, 5]", "[-5, 4]"),
         (np.array([[0, 4], [-4, 1], [2, 0], [1, 1]]), "column 0", "[-3, 2]")]),
    "gather-nd-batch": lambda: (
        _model("GatherND", {"x": f32(2, 7, 3), "idx": np.zeros((2, 4, 1), np.int64)},
               batch_dims=1), "idx",
        [np.array([[[0], [6], [-7], [3]], [[-1], [2], [5], [1]]])],
        [(np.array([[[0], [7], [1], [3]], [[1], [2], [5], [1]]]), "[0, 7]", "[-7, 6]")]),
    "scatter-elements": lambda: (
        _model("ScatterElements", {"x": f32(5, 3), "idx": np.zeros((2, 3), np.int64),
                                   "u": f32(2, 3)}, axis=0), "idx",
        [np.array([[0, -1, 2], [-5, 3, 1]])],
        [(np.array([[0, 1, 2], [5, 3, 1]]), "[0, 5]", "[-5, 4]"),
         (np.array([[0, 1, -6], [4, 3, 1]]), "[-6, 4]", "[-5, 4]")]),
    "scatter-elements-add": lambda: (
        _model("ScatterElements", {"x": f32(1, 3), "idx": np.zeros((3, 3), np.int64),
                                   "u": f32(3, 3)}, axis=0, reduction="add"), "idx",
        [np.array([[0, -1, 0], [0, 0, -1], [-1, 0, 0]])],
        [(np.array([[0, 0, 0], [0, 1, 0], [0, 0, 0]]), "[0, 1]", "[-1, 0]")]),
    "scatter-nd": lambda: (
        _model("ScatterND", {"x": f32(7, 3), "idx": np.zeros((2, 1), np.int64),
                             "u": f32(2, 3)}), "idx",
        [np.array([[-1], [3]])],
        [(np.array([[7], [3]]), "[3, 7]", "[-7, 6]"),
         (np.array([[1], [-8]]), "[-8, 1]", "[-7, 6]")]),
    "array-feature-extractor": lambda: (
        _model("ArrayFeatureExtractor", {"x": f32(3, 11), "idx": np.zeros(4, np.int64)},
               domain="ai.onnx.ml"), "idx",
        [np.array([0, 10, 3, 3])],
        [(np.array([0, 11, 3, 3]), "[0, 11]", "[-11, 10]")]),
    "roi-align-batch-indices": lambda: (
        _model("RoiAlign", {"x": f32(2, 3, 5, 5), "rois": np.array(
            [[0, 0, 3, 3], [1, 1, 4, 4]], np.float32), "idx": np.zeros(2, np.int64)},
            opset=16, output_height=2, output_width=2, sampling_ratio=2), "idx",
        [np.array([1, 0])],
        [(np.array([0, 2]), "[0, 2]", "[0, 1]"), (np.array([-1, 0]), "[-1, 0]", "[0, 1]")]),
    "max-unpool": lambda: (
        _model("MaxUnpool", {"x": f32(1, 2, 2, 2), "idx": np.zeros((1, 2, 2, 2), np.int64)},
               opset=11, kernel_shape=[2, 2], strides=[2, 2]), "idx",
        [np.array([0, 3, 9, 15, 16, 22, 24, 31]).reshape(1, 2, 2, 2)],
        [(np.array([0, 3, 9, 15, 16, 22, 24, 32]).reshape(1, 2, 2, 2), "[0, 32]",
          "[0, 31]")]),
}


@functools.lru_cache(maxsize=None)
def _case(name):
    model, idx_name, good, bad = CASES[name]()
    feeds = {i.name: None for i in model.graph.input}
    compiled = kiln.compile(model, db=None, jobs=1)
    return model, idx_name, good, bad, feeds, compiled


def _feeds(model, idx_name, idx):
    """The indices given, every other input random (fixed per model)."""
    rng = np.random.default_rng(5)
    out = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if inp.name == idx_name:
            out[inp.name] = idx
        elif inp.name == "rois":
            out[inp.name] = np.array([[0, 0, 3, 3], [1, 1, 4, 4]], np.float32)
        else:
            out[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_in_range_and_negative_indices_match_onnxruntime(name):
    model, idx_name, good, _, _, compiled = _case(name)
    for idx in good:
        feeds = _feeds(model, idx_name, idx)
        want = ort_run(model, feeds)[0]
        np.testing.assert_allclose(compiled.run(feeds)[0], want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(run_reference(load_onnx(model), feeds)["y"], want,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_index_is_an_error_naming_node_input_and_range(name):
    model, idx_name, _, bad, _, compiled = _case(name)
    node = model.graph.node[0].name
    for idx, found, allowed in bad:
        feeds = _feeds(model, idx_name, idx)
        with pytest.raises(Exception):
            ort_run(model, feeds)                      # onnxruntime refuses them too
        for run in (compiled.run, lambda f: run_reference(load_onnx(model), f)):
            with pytest.raises(IndexOutOfRangeError) as err:
                run(feeds)
            text = str(err.value)
            assert f"node '{node}'" in text and f"'{idx_name}'" in text, text
            assert found in text and f"must lie in {allowed}" in text, text
        # the model still runs after the error
        compiled.run(_feeds(model, idx_name, _case(name)[2][0]))


def test_error_is_a_kernel_argument_error():
    assert issubclass(IndexOutOfRangeError, KernelArgumentError)


@given(st.lists(st.integers(-9, 8), min_size=5, max_size=5))
def test_gather_property_error_iff_an_index_leaves_the_table(ids):
    """A 1-row, then 7-row table (prime): any index in [-n, n-1] gathers numpy's row,
    anything else raises."""
    model, _, _, _, _, compiled = _case("gather-one-row")
    emb = numpy_helper.to_array(model.graph.initializer[0])
    idx = np.array(ids, np.int64) % 3 - 1            # -1, 0, 1: 1 is out of a 1-row table
    if (idx > 0).any():
        with pytest.raises(IndexOutOfRangeError):
            compiled.run({"ids": idx})
    else:
        np.testing.assert_array_equal(compiled.run({"ids": idx})[0], emb[idx])
    model, _, _, _, _, compiled = _case("gather-axis1-prime-int32")
    x = _feeds(model, "ids", None)["x"]
    idx = np.array(ids + [0], np.int32).reshape(2, 3)
    if ((idx < -7) | (idx > 6)).any():
        with pytest.raises(IndexOutOfRangeError):
            compiled.run({"x": x, "ids": idx})
    else:
        np.testing.assert_array_equal(compiled.run({"x": x, "ids": idx})[0],
                                      np.take(x, idx, axis=1))


def test_constant_out_of_range_indices_fail_at_compile_time():
    m = _model("Gather", {"x": f32(4, 3)}, {"ids": np.array([1, 4])}, axis=0,
               order=["x", "ids"])
    with pytest.raises(IndexOutOfRangeError, match=r"node 'Gather_0'.*\[1, 4\].*\[-4, 3\]"):
        kiln.compile(m, db=None, jobs=1)


def test_constant_in_range_indices_add_no_check():
    m = _model("Gather", {"x": f32(4, 3)}, {"ids": np.array([1, -4])}, axis=0,
               order=["x", "ids"])
    compiled = kiln.compile(m, db=None, jobs=1)
    assert "index_checks" not in compiled.plan.meta
    assert all("index_range" not in s.ops for s in compiled.plan.steps)


def test_checks_survive_export_and_load(tmp_path):
    model, idx_name, good, bad, _, compiled = _case("scatter-nd")
    path = compiled.export(tmp_path / "m.so")
    loaded = load_compiled(path)
    np.testing.assert_array_equal(loaded.run(_feeds(model, idx_name, good[0]))[0],
                                  compiled.run(_feeds(model, idx_name, good[0]))[0])
    assert loaded.output_names == ["y"]
    with pytest.raises(IndexOutOfRangeError, match="ScatterND_0"):
        loaded.run(_feeds(model, idx_name, bad[0][0]))


def test_one_hot_keeps_the_onnx_rule_off_rows_for_out_of_range():
    """ONNX OneHot: an index outside [-depth, depth-1] gives a row of off values (no error);
    onnxruntime does the same."""
    m = _model("OneHot", {"idx": np.zeros(6, np.int64)},
               {"depth": np.array(5, np.int64), "values": np.array([2.0, 7.0], np.float32)},
               opset=11)
    compiled = kiln.compile(m, db=None, jobs=1)
    feeds = {"idx": np.array([0, 4, -5, 5, -6, 10 ** 7])}
    want = ort_run(m, feeds)[0]
    got = compiled.run(feeds)[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got[3:], np.full((3, 5), 2.0, np.float32))


def test_tensor_scatter_linear_write_index_must_leave_room_for_the_update():
    """TensorScatter "linear": write_indices[b] + the update's length must fit in the cache
    (onnx's reference fails on such an index; Kiln names it); "circular" wraps any index."""
    from onnx.reference import ReferenceEvaluator
    feeds = {"past": f32(2, 7, 3), "upd": f32(2, 3, 3), "w": np.array([0, 4], np.int64)}
    for mode in ("linear", "circular"):
        m = _model("TensorScatter", feeds, opset=24, mode=mode, axis=1)
        compiled = kiln.compile(m, db=None, jobs=1)
        np.testing.assert_array_equal(compiled.run(feeds)[0],
                                      ReferenceEvaluator(m).run(None, feeds)[0])
        bad = dict(feeds, w=np.array([5, 0], np.int64))
        if mode == "circular":
            np.testing.assert_array_equal(compiled.run(bad)[0],
                                          ReferenceEvaluator(m).run(None, bad)[0])
            continue
        for run in (compiled.run, lambda f: run_reference(load_onnx(m), f)):
            with pytest.raises(IndexOutOfRangeError, match=r"node 'TensorScatter_0'.*'w' holds "
                                                           r"indices in \[0, 5\].*\[0, 4\]"):
                run(bad)
