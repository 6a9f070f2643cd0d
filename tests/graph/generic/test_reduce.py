"""The generic reduce family (codegen/generic/reduce.py) and its lowerings
(graph/generic/ops_reduce.py): reductions, softmax, log_softmax, layer_norm, cumsum and
index_range against onnxruntime, numpy and the index checks' reference."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.codegen.target import Target
from kiln.graph.generic.compile import compile_generic
from kiln.graph.generic.lowering import Unsupported
from kiln.graph.generic.model import GenericModel
from kiln.graph.generic.ops_reduce import split_axes
from kiln.graph.ir import Graph, Node, Value
from kiln.graph.passes.index_checks import CHECK_OP
from kiln.te.errors import IndexOutOfRangeError
from tests.graph.graph_helpers import make_model
from tests.graph.generic.helpers import assert_generic_matches_ort


def _unary(op, shape, dtype="float32", inits=None, extra=(), **attrs):
    return make_model([helper.make_node(op, ["x", *extra], ["y"], **attrs)],
                      {"x": (shape, dtype)}, [("y", dtype)], inits=inits)


def _kernels(model):
    return [c.kernel for c in compile_generic(model, Target.native(), 2).calls]


REDUCE_CASES = [((3, 37), [1]), ((2, 5, 17, 3), [1, 2]), ((1, 1, 200), [2]),
                ((4, 33, 19), [0]), ((2, 7), [0, 1]), ((1, 24, 5, 5), [2, 3]),
                ((2, 3, 1, 4), [1, 3])]     # not adjacent but for a size-1 axis


@pytest.mark.parametrize("op, kernel", [
    ("ReduceMean", "sum"), ("ReduceMax", "max"), ("ReduceMin", "min"),
    ("ReduceProd", "prod"), ("ReduceL2", "l2")])
@pytest.mark.parametrize("shape, axes", REDUCE_CASES)
def test_reductions_match_onnxruntime(op, kernel, shape, axes, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    if op == "ReduceProd":
        x = (1 + 0.05 * x).astype(np.float32)
    for keep in (0, 1):
        model = _unary(op, shape, axes=axes, keepdims=keep)
        assert _kernels(model) == [f"reduce.{kernel}"]
        assert_generic_matches_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape, axes", REDUCE_CASES)
def test_reduce_sum_with_axes_input(shape, axes, rng):
    model = _unary("ReduceSum", shape, inits={"axes": np.array(axes, np.int64)},
                   extra=["axes"], keepdims=0)
    x = rng.standard_normal(shape).astype(np.float32)
    assert_generic_matches_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                                "ReduceL2"])
def test_reduction_over_an_empty_axis(op):
    """Each op's start value (the mean of nothing is 0, as onnxruntime has it)."""
    model = _unary(op, (3, 0), axes=[1], keepdims=0)
    assert_generic_matches_ort(model, {"x": np.zeros((3, 0), np.float32)})


def test_split_axes():
    assert split_axes((2, 3, 4, 5), (1, 2)) == (2, 12, 5)
    assert split_axes((2, 3, 1, 5), (1, 3)) == (2, 15, 1)
    assert split_axes((2, 3, 4), (-1,)) == (6, 4, 1)
    assert split_axes((2, 3, 4), (0, 2)) is None


def test_non_adjacent_axes_are_unsupported():
    with pytest.raises(Unsupported, match=r"axes \(0, 2\) of \[2, 3, 4\] are not adjacent"):
        compile_generic(_unary("ReduceMax", (2, 3, 4), axes=[0, 2]), Target.native(), 1)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((3, 37), 1), ((2, 5, 17, 3), 2), ((1, 1, 200), -1),
                                         ((4, 33, 19), 0), ((2, 7), 1), ((1, 1), 0),
                                         ((1, 3, 65, 65), 3)])
def test_softmax_matches_onnxruntime(op, shape, axis, rng):
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    model = _unary(op, shape, axis=axis)
    assert_generic_matches_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_of_masked_rows(op, rng):
    """-inf and -1e4 entries (attention masks): finite, no NaN; softmax flushes to 0."""
    x = rng.standard_normal((4, 40)).astype(np.float32)
    x[0, 5:] = -np.inf
    x[1, :30] = -1e4
    x[2, 17] = 80.0
    model = _unary(op, x.shape, axis=-1)
    assert_generic_matches_ort(model, {"x": x}, rtol=1e-4, atol=1e-5)
    if op == "Softmax":
        got = compile_generic(model, Target.native(), 2).run({"x": x})[0]
        assert (got[1, :30] == 0).all()


@pytest.mark.parametrize("shape, axis, pshape, bias", [
    ((2, 5, 17), -1, (17,), True), ((3, 768), -1, (768,), False),
    ((2, 3, 4, 5), 2, (4, 5), True), ((2, 3, 4, 5), 2, (1, 5), True),
    ((1, 1), -1, (1,), True), ((4, 33), 1, (33,), False)])
def test_layer_norm_matches_onnxruntime(shape, axis, pshape, bias, rng):
    inits = {"s": rng.standard_normal(pshape).astype(np.float32)}
    if bias:
        inits["b"] = rng.standard_normal(pshape).astype(np.float32)
    model = make_model([helper.make_node("LayerNormalization", ["x", *inits], ["y"],
                                         axis=axis, epsilon=1e-5)],
                       {"x": (shape, "float32")}, ["y"], inits=inits)
    assert _kernels(model) == ["reduce.layer_norm"]
    x = (3 * rng.standard_normal(shape) + 2).astype(np.float32)
    assert_generic_matches_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_layer_norm_with_run_time_scale(rng):
    model = make_model([helper.make_node("LayerNormalization", ["x", "s", "b"], ["y"])],
                       {"x": ((3, 20), "float32"), "s": ((20,), "float32"),
                        "b": ((20,), "float32")}, ["y"])
    feeds = {k: rng.standard_normal(s).astype(np.float32)
             for k, s in (("x", (3, 20)), ("s", (20,)), ("b", (20,)))}
    assert_generic_matches_ort(model, feeds, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("shape, axis", [((3, 37), 1), ((2, 5, 17, 3), 2), ((1, 1, 200), -1),
                                         ((4, 33, 19), 0), ((1,), 0)])
def test_cumsum_matches_onnxruntime(dtype, shape, axis, rng):
    x = (10 * rng.standard_normal(shape)).astype(dtype)
    for exclusive in (0, 1):
        for reverse in (0, 1):
            model = _unary("CumSum", shape, dtype, inits={"axis": np.array(axis, np.int64)},
                           extra=["axis"], exclusive=exclusive, reverse=reverse)
            assert_generic_matches_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


# -- index_range ---------------------------------------------------------------------------

def _checked(shape, dtype, bounds, columns):
    """A graph whose one node is an index_range check of input `i` (as add_index_checks
    writes it) and whose output is `i` itself."""
    idx = Value("i", shape, dtype)
    out = Value("i/index_range", (len(bounds), 2), "int64")
    attrs = {"node": "g", "op": "gather_nd" if columns else "gather", "input": "i",
             "data": "d", "extents": [b[1] + 1 for b in bounds],
             "axes": list(range(len(bounds))), "bounds": tuple(bounds),
             "columns": columns, "flat": ""}
    node = Node(CHECK_OP, (idx,), (out,), attrs, "g:index_range")
    return Graph((idx,), (node,), (idx, out), name="checked")


@pytest.mark.parametrize("dtype", ["int64", "int32"])
@pytest.mark.parametrize("shape, bounds, columns", [
    ((5,), [(-10, 9)], False), ((3, 4), [(-10, 9)], False),
    ((6, 2), [(-4, 3), (-7, 6)], True), ((1, 3), [(-3, 2)] * 3, True), ((37,), [(-50, 49)], False)])
def test_index_range_computes_bounds_and_checks(dtype, shape, bounds, columns, rng):
    graph = _checked(shape, dtype, bounds, columns)
    gm = GenericModel(graph, Target.native(), 2)
    assert [c.kernel for c in gm.calls] == [
        "reduce.index_range" if dtype == "int64" else "reduce.index_range_i32"]
    k = len(bounds)
    lo = np.array([b[0] for b in bounds])
    hi = np.array([b[1] for b in bounds])
    cols = shape[-1] if columns else 1
    idx = rng.integers(lo, hi + 1, size=(int(np.prod(shape)) // cols, cols) if columns
                       else shape).astype(dtype).reshape(shape)
    (out,) = gm.run({"i": idx})
    np.testing.assert_array_equal(out, idx)
    flat = idx.reshape(-1, k).astype(np.int64)
    want = np.stack([~flat.min(axis=0), flat.max(axis=0)], axis=1)
    np.testing.assert_array_equal(gm._arrays["i/index_range"], want)
    bad = idx.copy().reshape(-1, k)
    bad[-1, k - 1] = hi[k - 1] + 1
    with pytest.raises(IndexOutOfRangeError, match="indices element out of data bounds"):
        gm.run({"i": bad.reshape(shape)})
    bad[-1, k - 1] = lo[k - 1] - 1
    with pytest.raises(IndexOutOfRangeError):
        gm.run({"i": bad.reshape(shape)})


# -- property ------------------------------------------------------------------------------

_NUMPY = {"ReduceMean": np.mean, "ReduceMax": np.max, "ReduceMin": np.min,
          "ReduceL2": lambda x, axis, keepdims: np.sqrt(np.sum(x * x, axis=axis,
                                                                keepdims=keepdims))}


@settings(max_examples=30, deadline=None)
@given(shape=st.lists(st.integers(1, 21), min_size=1, max_size=4),
       data=st.data(), op=st.sampled_from(sorted(_NUMPY)), seed=st.integers(0, 2 ** 16))
def test_property_reductions_match_numpy(shape, data, op, seed):
    rank = len(shape)
    first = data.draw(st.integers(0, rank - 1))
    last = data.draw(st.integers(first, rank - 1))
    axes = list(range(first, last + 1))
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    got = compile_generic(_unary(op, tuple(shape), axes=axes, keepdims=1), Target.native(),
                          2).run({"x": x})[0]
    want = _NUMPY[op](x.astype(np.float64), axis=tuple(axes), keepdims=True)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_reduction_of_a_scalar(rng):
    """A 0-d input reduces over no axes: each element on its own (l2 = |x|)."""
    for op, want in (("ReduceL2", np.abs), ("ReduceMean", lambda v: v)):
        model = make_model([helper.make_node(op, ["x"], ["y"])], {"x": ((), "float32")}, ["y"])
        x = np.array(-2.5, np.float32)
        np.testing.assert_allclose(
            compile_generic(model, Target.native(), 1).run({"x": x})[0], want(x))


def _softmax_ref(x, axis, log):
    shifted = x - x.max(axis=axis, keepdims=True)
    total = np.exp(shifted).sum(axis=axis, keepdims=True)
    return shifted - np.log(total) if log else np.exp(shifted) / total


@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 20), min_size=1, max_size=3), data=st.data(),
       op=st.sampled_from(["Softmax", "LogSoftmax", "LayerNormalization"]),
       seed=st.integers(0, 2 ** 16))
def test_property_softmax_and_layer_norm_match_numpy(shape, data, op, seed):
    """Every axis: the rows path (last axis) and the strips path (inner > 1)."""
    axis = data.draw(st.integers(0, len(shape) - 1))
    rng = np.random.default_rng(seed)
    x = (3 * rng.standard_normal(shape)).astype(np.float32)
    if op == "LayerNormalization":
        pshape = tuple(shape[axis:])
        s = rng.standard_normal(pshape).astype(np.float32)
        model = make_model([helper.make_node(op, ["x", "s"], ["y"], axis=axis)],
                           {"x": (tuple(shape), "float32")}, ["y"], inits={"s": s})
        axes = tuple(range(axis, len(shape)))
        centred = x - x.mean(axis=axes, keepdims=True)
        want = centred / np.sqrt((centred ** 2).mean(axis=axes, keepdims=True) + 1e-5) * s
    else:
        model = _unary(op, tuple(shape), axis=axis)
        want = _softmax_ref(x.astype(np.float64), axis, op == "LogSoftmax")
    got = compile_generic(model, Target.native(), 2).run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
