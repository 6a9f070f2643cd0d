"""Generic data movement (codegen/generic/data.py, graph/generic/ops_data.py): transpose,
slice, broadcast_to, split, concat, gather, gather_elements, gather_nd against onnxruntime
one-node models and the numpy reference, on awkward shapes and every element size."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.codegen.target import Target
from kiln.graph.generic.compile import SKIPPED_PASSES, generic_graph
from kiln.graph.generic.lowering import LOWERINGS, Unsupported, register_all
from kiln.graph.generic.model import GenericModel
from kiln.graph.generic import ops_data
from kiln.graph.generic.ops_data import merge_dims
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.reference import run_reference
from kiln.te.errors import IndexOutOfRangeError
from tests.graph.generic.helpers import assert_generic_matches_ort
from tests.graph.graph_helpers import make_model, one_node_model, ort_run

NATIVE = Target.native()


def _unchecked(model, threads=2, tasks=False) -> GenericModel:
    """The model on generic kernels without its index checks (their `index_range` kernel is
    another family's): what the gathers themselves compute, clamped indices included.
    `tasks`: cut even small calls into many tasks (as large ones are), so tiny test shapes
    cover the tasks' split and hand-over of coordinates."""
    graph = optimize(load_onnx(model), skip=SKIPPED_PASSES)
    saved = ops_data.SERIAL_BYTES
    ops_data.SERIAL_BYTES = 0 if tasks else saved
    try:
        return GenericModel(graph, NATIVE, threads)
    finally:
        ops_data.SERIAL_BYTES = saved


def _assert_unchecked_matches_ort(model, feeds, threads=2, tasks=False):
    ours = _unchecked(model, threads, tasks).run(feeds)
    theirs = ort_run(model, feeds)
    assert len(ours) == len(theirs)
    for got, want in zip(ours, theirs):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def _data(rng, shape, dtype):
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    return rng.integers(-1000, 1000, shape).astype(dtype)


# ------------------------------------------------------------------ plan
def test_merge_dims_drops_units_and_joins_even_steps():
    # a [2, 3, 4] copy, contiguous on both sides, is one run of 24
    assert merge_dims([2, 1, 3, 4], [12, 12, 4, 1], [12, 12, 4, 1]) == [(24, 1, 1)]
    # perm (0, 2, 1, 3) of [2, 3, 5, 7]: no two neighbours step both sides evenly
    assert merge_dims([2, 5, 3, 7], [105, 7, 35, 1], [105, 21, 7, 1]) == \
        [(2, 105, 105), (5, 7, 21), (3, 35, 7), (7, 1, 1)]


# ------------------------------------------------------------------ transpose
@pytest.mark.parametrize("shape,perm", [
    ((1, 12, 17, 16), (0, 2, 1, 3)),      # attention heads: contiguous rows
    ((1, 7, 9, 33), (0, 3, 1, 2)),        # NHWC -> NCHW: tiles
    ((2, 3, 5, 7), (3, 2, 1, 0)),
    ((37, 1), (1, 0)),
    ((17, 19), (1, 0)),
    ((3,), (0,)),
    ((2, 3, 2, 3, 2, 3), (5, 3, 1, 4, 2, 0)),
    ((2, 1, 3, 1, 2, 3, 2), (6, 0, 2, 4, 1, 5, 3)),   # rank 7, unit dims drop out
])
def test_transpose_matches_onnxruntime(shape, perm, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    model = one_node_model("Transpose", {"x": x}, perm=list(perm))
    assert_generic_matches_ort(model, {"x": x})
    _assert_unchecked_matches_ort(model, {"x": x}, tasks=True)


@pytest.mark.parametrize("dtype", ["bool", "int8", "float16", "int32", "int64", "float64"])
def test_transpose_moves_every_element_size(dtype, rng):
    x = _data(rng, (3, 70, 5), dtype)
    for perm in ([2, 0, 1], [1, 0, 2]):
        assert_generic_matches_ort(one_node_model("Transpose", {"x": x}, perm=perm), {"x": x},
                                   rtol=0, atol=0)


@pytest.mark.parametrize("op,shape,attrs", [
    ("DepthToSpace", (2, 12, 5, 3), {"blocksize": 2, "mode": "DCR"}),
    ("DepthToSpace", (1, 18, 7, 1), {"blocksize": 3, "mode": "CRD"}),
    ("SpaceToDepth", (2, 3, 6, 4), {"blocksize": 2}),
])
def test_depth_space_transposes(op, shape, attrs, rng):
    """ONNX's DepthToSpace / SpaceToDepth arrive as reshape + a 6-d transpose + reshape."""
    x = rng.standard_normal(shape).astype(np.float32)
    assert_generic_matches_ort(one_node_model(op, {"x": x}, **attrs), {"x": x})


def test_transpose_of_an_empty_tensor(rng):
    x = np.zeros((3, 0, 5), np.float32)
    assert_generic_matches_ort(one_node_model("Transpose", {"x": x}, perm=[2, 1, 0]), {"x": x})


def test_a_copy_over_seven_unmergeable_dims_is_unsupported(rng):
    x = rng.standard_normal((2,) * 7).astype(np.float32)
    model = one_node_model("Transpose", {"x": x}, perm=[6, 4, 2, 0, 5, 3, 1])
    with pytest.raises(Unsupported, match="7 dims"):
        _unchecked(model)


# ------------------------------------------------------------------ slice
@pytest.mark.parametrize("shape,starts,ends,axes,steps", [
    ((5, 37), [1], [4], [0], [1]),
    ((5, 37), [3], [35], [1], [2]),
    ((5, 37), [-1], [-1000], [1], [-1]),                  # reversed
    ((4, 17, 3), [3, 16], [-100, 0], [0, 1], [-2, -3]),
    ((1, 33, 16), [0, 1, 0], [1, 33, 16], [0, 1, 2], [1, 1, 1]),
    ((6, 6), [2], [2], [0], [1]),                         # empty
    ((2, 3, 50), [0, 0, 7], [2, 3, 40], [0, 1, 2], [1, 1, 1]),
])
def test_slice_matches_onnxruntime(shape, starts, ends, axes, steps, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    inits = {"s": np.array(starts, np.int64), "e": np.array(ends, np.int64),
             "a": np.array(axes, np.int64), "p": np.array(steps, np.int64)}
    model = one_node_model("Slice", {"x": x}, inits)
    assert_generic_matches_ort(model, {"x": x})
    _assert_unchecked_matches_ort(model, {"x": x}, tasks=True)


# ------------------------------------------------------------------ broadcast_to
@pytest.mark.parametrize("shape,to,dtype", [
    ((3, 1), (3, 17), "float32"),
    ((1, 17), (5, 17), "float32"),
    ((1,), (2, 3, 33), "float32"),
    ((4, 1, 5), (2, 4, 3, 5), "bool"),
    ((1, 1, 7, 7), (1, 12, 7, 7), "bool"),
    ((2, 1), (2, 1), "int64"),
])
def test_broadcast_to_matches_onnxruntime(shape, to, dtype, rng):
    x = _data(rng, shape, dtype)
    model = one_node_model("Expand", {"x": x}, {"s": np.array(to, np.int64)})
    assert_generic_matches_ort(model, {"x": x}, rtol=0, atol=0)
    _assert_unchecked_matches_ort(model, {"x": x}, tasks=True)


# ------------------------------------------------------------------ split / concat
@pytest.mark.parametrize("shape,axis,sizes", [
    ((2, 17, 3), 1, [5, 11, 1]),
    ((6, 33), -1, [16, 17]),
    ((1, 9, 4, 4), 1, [3, 3, 3]),
    ((40000,), 0, [30001, 9999]),           # long runs cut into chunks
])
def test_split_matches_onnxruntime(shape, axis, sizes, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    model = one_node_model("Split", {"x": x}, {"s": np.array(sizes, np.int64)},
                           n_out=len(sizes), axis=axis)
    assert_generic_matches_ort(model, {"x": x})
    _assert_unchecked_matches_ort(model, {"x": x}, tasks=True)


@pytest.mark.parametrize("shapes,axis,dtype", [
    ([(2, 3, 5), (2, 4, 5), (2, 1, 5)], 1, "float32"),
    ([(3, 17), (3, 16)], 1, "float32"),
    ([(1, 7), (4, 7), (2, 7)], 0, "int64"),
    ([(2, 2, 3), (2, 2, 0), (2, 2, 1)], -1, "bool"),
    ([(1, 33, 4, 4), (1, 33, 4, 4)], 1, "float32"),
])
def test_concat_matches_onnxruntime(shapes, axis, dtype, rng):
    feeds = {f"x{k}": _data(rng, s, dtype) for k, s in enumerate(shapes)}
    model = one_node_model("Concat", feeds, axis=axis)
    assert_generic_matches_ort(model, feeds, rtol=0, atol=0)
    _assert_unchecked_matches_ort(model, feeds, tasks=True)


# ------------------------------------------------------------------ gather
@pytest.mark.parametrize("shape,axis,idx", [
    ((50, 33), 0, [[0, 49, -1], [7, -50, 3]]),          # embedding rows (post 33)
    ((5, 7, 3), 1, [6, 0, -7, 2]),
    ((5, 7, 3), 2, [[2], [-3]]),                        # single elements (post 1)
    ((4, 17), 1, 5),                                    # scalar index drops the axis
    ((3, 1), 0, np.zeros((0,), np.int64)),              # no indices
])
@pytest.mark.parametrize("itype,tasks", [("int64", False), ("int32", True)])
def test_gather_matches_onnxruntime(shape, axis, idx, itype, tasks, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    i = np.asarray(idx).astype(itype)
    _assert_unchecked_matches_ort(one_node_model("Gather", {"x": x, "i": i}, axis=axis),
                                  {"x": x, "i": i}, tasks=tasks)


@pytest.mark.parametrize("dtype", ["bool", "int16", "int64"])
def test_gather_moves_every_element_size(dtype, rng):
    x = _data(rng, (9, 5), dtype)
    i = np.array([4, -1, 0, -5, 3], np.int64)
    for axis in (0, 1):
        _assert_unchecked_matches_ort(one_node_model("Gather", {"x": x, "i": i}, axis=axis),
                                      {"x": x, "i": i})


def test_gather_by_constant_indices(rng):
    x = rng.standard_normal((6, 20)).astype(np.float32)
    model = one_node_model("Gather", {"x": x}, {"i": np.array([5, -6, 2], np.int64)}, axis=0)
    assert_generic_matches_ort(model, {"x": x})


def test_gather_clamps_out_of_range_indices(rng):
    """Memory safety only: the index check (another node) raises the error."""
    x = rng.standard_normal((4, 3)).astype(np.float32)
    for axis, idx in ((0, [4, -5, 2 ** 40, -2 ** 40]), (1, [3, -4, 2 ** 40, -2 ** 40])):
        i = np.array(idx, np.int64)
        got = _unchecked(one_node_model("Gather", {"x": x, "i": i}, axis=axis)).run(
            {"x": x, "i": i})[0]
        n = x.shape[axis]
        want = np.take(x, np.clip(np.where(i < 0, i + n, i), 0, n - 1), axis=axis)
        np.testing.assert_array_equal(got, want)


def test_gather_out_of_range_raises_with_index_checks(rng):
    register_all()
    if "index_range" not in LOWERINGS:
        pytest.skip("index_range has no generic lowering on this branch")
    x = rng.standard_normal((4, 3)).astype(np.float32)
    i = np.array([1, 4], np.int64)
    model = one_node_model("Gather", {"x": x, "i": i}, axis=0)
    with pytest.raises(IndexOutOfRangeError):
        GenericModel(generic_graph(model), NATIVE, 2).run({"x": x, "i": i})


# ------------------------------------------------------------------ gather_elements
@pytest.mark.parametrize("shape,ishape,axis", [
    ((4, 5), (4, 5), 1), ((4, 5), (3, 5), 0), ((2, 7, 3), (2, 11, 3), 1), ((17,), (33,), 0),
])
def test_gather_elements_matches_onnxruntime(shape, ishape, axis, rng):
    x = rng.standard_normal(shape).astype(np.float32)
    n = shape[axis]
    i = rng.integers(-n, n, ishape).astype(np.int64)
    model = one_node_model("GatherElements", {"x": x, "i": i}, axis=axis)
    for tasks in (False, True):
        _assert_unchecked_matches_ort(model, {"x": x, "i": i}, tasks=tasks)


# ------------------------------------------------------------------ gather_nd
@pytest.mark.parametrize("shape,ishape,batch_dims,dtype", [
    ((5, 7), (3, 2), 0, "float32"),            # picks elements
    ((5, 7, 33), (4, 1), 0, "float32"),        # picks rows
    ((2, 5, 7), (2, 3, 1), 1, "bool"),
    ((2, 3, 5, 4), (2, 3, 6, 2), 2, "float32"),
    ((3, 4), (1,), 0, "int64"),
])
def test_gather_nd_matches_onnxruntime(shape, ishape, batch_dims, dtype, rng):
    x = _data(rng, shape, dtype)
    depth = ishape[-1]
    extents = np.array(shape[batch_dims:batch_dims + depth])
    i = (rng.integers(0, 1 << 20, ishape) % extents - rng.integers(0, 2, ishape) * extents)
    i = i.astype(np.int64)
    model = one_node_model("GatherND", {"x": x, "i": i}, batch_dims=batch_dims)
    for tasks in (False, True):
        _assert_unchecked_matches_ort(model, {"x": x, "i": i}, tasks=tasks)


# ------------------------------------------------------------------ graph ops ONNX lacks
def test_slice_attrs_match_the_reference(rng):
    """The graph op's own attrs (normalised starts, an end of -1 on a reversed axis)."""
    x = rng.standard_normal((6, 5, 4)).astype(np.float32)
    model = one_node_model("Slice", {"x": x}, {
        "s": np.array([5, 1, -1], np.int64), "e": np.array([-7, 5, -5], np.int64),
        "a": np.array([0, 1, 2], np.int64), "p": np.array([-2, 3, -1], np.int64)})
    graph = optimize(load_onnx(model), skip=SKIPPED_PASSES)
    (node,) = [n for n in graph.nodes if n.op == "slice"]
    assert min(node.attrs["ends"]) == -1
    (want,) = run_reference(graph, {"x": x}).values()
    np.testing.assert_array_equal(GenericModel(graph, NATIVE, 2).run({"x": x})[0], want)


# ------------------------------------------------------------------ property test
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_transpose_and_slice_property(data):
    rank = data.draw(st.integers(1, 5))
    shape = tuple(data.draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    perm = data.draw(st.permutations(range(rank)))
    starts, ends, steps = [], [], []
    for n in shape:
        s = data.draw(st.sampled_from([1, 2, 3, -1, -2]))
        b = data.draw(st.integers(0, n - 1))
        e = data.draw(st.integers(-1 if s < 0 else b, n)) if s > 0 else \
            data.draw(st.integers(-1, b))
        starts.append(b), ends.append(e), steps.append(s)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    inits = {"s": np.array(starts, np.int64),
             "e": np.array([e if e >= 0 else -(n + 1) for e, n in zip(ends, shape)], np.int64),
             "a": np.arange(rank, dtype=np.int64), "p": np.array(steps, np.int64)}
    model = make_model([helper.make_node("Slice", ["x", "s", "e", "a", "p"], ["t"]),
                        helper.make_node("Transpose", ["t"], ["y"], perm=list(perm))],
                       {"x": (shape, "float32")}, ["y"], inits=inits)
    want = np.transpose(x[tuple(slice(b, None if e < 0 else e, s)
                                for b, e, s in zip(starts, ends, steps))], perm)
    got = _unchecked(model, tasks=data.draw(st.booleans())).run({"x": x})[0]
    np.testing.assert_array_equal(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_gather_property(data):
    """Any axis, index shape, element size and index dtype, indices in range or not (the
    kernel clamps): numpy's take of the clamped indices."""
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=rank, max_size=rank)))
    axis = data.draw(st.integers(0, rank - 1))
    ishape = tuple(data.draw(st.lists(st.integers(0, 5), min_size=0, max_size=2)))
    dtype = data.draw(st.sampled_from(["float32", "bool", "int64", "int16"]))
    itype = data.draw(st.sampled_from(["int64", "int32"]))
    n = shape[axis]
    idx = np.array(data.draw(st.lists(st.integers(-n - 3, n + 3), min_size=int(np.prod(ishape)),
                                      max_size=int(np.prod(ishape)))), itype).reshape(ishape)
    x = _data(np.random.default_rng(len(shape)), shape, dtype)
    got = _unchecked(one_node_model("Gather", {"x": x, "i": idx}, axis=axis),
                     tasks=data.draw(st.booleans())).run({"x": x, "i": idx})[0]
    want = np.take(x, np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1), axis=axis)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_concat_split_broadcast_property(data):
    """Broadcast an input, concat it with another, split the result (any axis, unit and
    prime extents, bool or float32), on 1 or 2 threads: numpy's answer."""
    rank = data.draw(st.integers(1, 4))
    shape = data.draw(st.lists(st.sampled_from([1, 2, 3, 5, 17]), min_size=rank,
                               max_size=rank))
    axis = data.draw(st.integers(0, rank - 1))
    small = [1 if data.draw(st.booleans()) else n for n in shape]
    small = small[data.draw(st.integers(0, rank - 1)):]       # fewer leading dims
    other = list(shape)
    other[axis] = data.draw(st.integers(0, 4))
    total = shape[axis] + other[axis]
    cut = data.draw(st.integers(0, total))
    dtype = data.draw(st.sampled_from(["float32", "bool"]))
    threads = data.draw(st.sampled_from([1, 2]))
    rng = np.random.default_rng(rank)
    a, b = _data(rng, tuple(small), dtype), _data(rng, tuple(other), dtype)
    model = make_model([
        helper.make_node("Expand", ["a", "s"], ["e"]),
        helper.make_node("Concat", ["e", "b"], ["c"], axis=axis),
        helper.make_node("Split", ["c", "k"], ["y0", "y1"], axis=axis)],
        {"a": (a.shape, dtype), "b": (b.shape, dtype)}, [("y0", dtype), ("y1", dtype)],
        inits={"s": np.array(shape, np.int64), "k": np.array([cut, total - cut], np.int64)})
    c = np.concatenate([np.broadcast_to(a, shape), b], axis=axis)
    want = np.split(c, [cut], axis=axis)
    got = _unchecked(model, threads, tasks=data.draw(st.booleans())).run({"a": a, "b": b})
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_gather_nd_property(data):
    """gather_nd with batch dims, index depths and trailing rows of any size; in-range
    indices counted from either end."""
    rank = data.draw(st.integers(1, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    b = data.draw(st.integers(0, rank - 1))
    depth = data.draw(st.integers(1, rank - b))
    mid = tuple(data.draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)))
    if not (b or mid or b + depth < rank):
        mid = (2,)             # a 0-d output: the ONNX test helper cannot type it
    ishape = shape[:b] + mid + (depth,)
    rng = np.random.default_rng(rank + 10 * depth)
    extents = np.array(shape[b:b + depth])
    idx = (rng.integers(0, 1 << 20, ishape) % extents
           - rng.integers(0, 2, ishape) * extents).astype(np.int64)
    x = _data(rng, shape, data.draw(st.sampled_from(["float32", "bool", "int64"])))
    model = one_node_model("GatherND", {"x": x, "i": idx}, batch_dims=b)
    _assert_unchecked_matches_ort(model, {"x": x, "i": idx}, threads=data.draw(
        st.sampled_from([1, 2])), tasks=data.draw(st.booleans()))


def test_a_copy_that_would_leave_its_arrays_is_refused():
    """plan_copy checks the walk itself: a wrong stride is a planning error, never a read
    past the input."""
    from kiln.graph.generic.lowering import Context
    from kiln.graph.generic.ops_data import plan_copy
    from kiln.graph.ir import Graph, Node, Value
    x, y = np.zeros((4, 5), np.float32), np.zeros((4, 5), np.float32)
    ctx = Context(Graph([], [], []))
    ctx.node = Node("transpose", [Value("x", (4, 5), "float32")], [Value("y", (4, 5), "float32")])
    with pytest.raises(Unsupported, match="would reach elements 1..20 of an array of 20"):
        plan_copy(ctx, x, y, (4, 5), (5, 1), (5, 1), ioff=1)
    plan_copy(ctx, x, y, (4, 5), (5, 1), (5, 1))
    assert [c.kernel for c in ctx.calls] == ["data.copy.rows.4"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_gather_elements_property(data):
    """Any axis (the last one takes the blocked path), index extents along it, element
    sizes and index dtypes; indices in range or not (clamped)."""
    rank = data.draw(st.integers(1, 3))
    shape = tuple(data.draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    axis = data.draw(st.integers(0, rank - 1))
    ishape = list(shape)
    ishape[axis] = data.draw(st.sampled_from([1, 2, 5, 70]))
    n = shape[axis]
    rng = np.random.default_rng(rank + 7 * axis)
    idx = rng.integers(-n - 2, n + 2, ishape).astype(data.draw(st.sampled_from(["int64",
                                                                                 "int32"])))
    x = _data(rng, shape, data.draw(st.sampled_from(["float32", "bool", "int64", "int16"])))
    got = _unchecked(one_node_model("GatherElements", {"x": x, "i": idx}, axis=axis),
                     tasks=data.draw(st.booleans())).run({"x": x, "i": idx})[0]
    want = np.take_along_axis(x, np.clip(np.where(idx < 0, idx + n, idx), 0, n - 1), axis)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)
