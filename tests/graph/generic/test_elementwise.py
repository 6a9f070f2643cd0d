"""Generic elementwise kernels (codegen/generic/elementwise.py, graph/generic/
ops_elementwise.py) against onnxruntime and the numpy reference, on awkward shapes."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import kiln
from kiln.codegen.target import Target
from kiln.graph.generic.compile import compile_generic
from kiln.graph.generic.lowering import Unsupported
from kiln.graph.generic.ops_elementwise import PIECE, broadcast_layout, strided_dims
from kiln.graph.ir import Graph, Node, Value
from kiln.graph.reference import run_reference
from tests.graph.graph_helpers import make_model, one_node_model
from tests.graph.generic.helpers import assert_generic_matches_ort, run_generic

# shapes: one element, odd sizes, and one over the serial limit (parallel pieces and a tail)
SHAPES = [(1,), (3, 37), (2, PIECE + 27)]


def _domain(kind: str, shape, rng) -> np.ndarray:
    if kind == "pos":
        return rng.uniform(0.05, 4.0, shape).astype(np.float32)
    if kind == "unit":
        return rng.uniform(-0.95, 0.95, shape).astype(np.float32)
    if kind == "ge1":
        return rng.uniform(1.0, 4.0, shape).astype(np.float32)
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    if kind == "round":     # halves, to check round-half-even
        x.flat[::5] = np.float32(2.5)
        x.flat[1::5] = np.float32(-0.5)
    return x


# ONNX op, attrs, input domain, tolerance (the float32 polynomial math: a few ulp)
UNARY = [
    ("Relu", {}, "any", 0), ("Neg", {}, "any", 0), ("Abs", {}, "any", 0),
    ("Exp", {}, "any", 2e-6), ("Log", {}, "pos", 2e-6), ("Sqrt", {}, "pos", 1e-7),
    ("Reciprocal", {}, "pos", 1e-7), ("Erf", {}, "any", 2e-6), ("Tanh", {}, "any", 2e-6),
    ("Sigmoid", {}, "any", 2e-6), ("HardSwish", {}, "any", 1e-6),
    ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}, "any", 1e-6),
    ("LeakyRelu", {"alpha": 0.07}, "any", 1e-7), ("Elu", {"alpha": 0.8}, "any", 2e-6),
    ("Selu", {}, "any", 2e-6), ("Celu", {"alpha": 1.3}, "any", 2e-6),
    ("ThresholdedRelu", {"alpha": 0.6}, "any", 0),
    ("Shrink", {"lambd": 0.7, "bias": 0.2}, "any", 1e-7),
    ("Softplus", {}, "any", 2e-6), ("Softsign", {}, "any", 1e-6), ("Mish", {}, "any", 4e-6),
    ("Sign", {}, "any", 0), ("Floor", {}, "any", 0), ("Ceil", {}, "any", 0),
    ("Round", {}, "round", 0), ("Sin", {}, "any", 1e-6), ("Cos", {}, "any", 1e-6),
    ("Tan", {}, "unit", 1e-6), ("Asin", {}, "unit", 1e-6), ("Acos", {}, "unit", 1e-6),
    ("Atan", {}, "any", 1e-6), ("Sinh", {}, "unit", 1e-6), ("Cosh", {}, "unit", 1e-6),
    ("Asinh", {}, "any", 1e-6), ("Acosh", {}, "ge1", 1e-6), ("Atanh", {}, "unit", 1e-6),
]


@pytest.mark.parametrize("op,attrs,kind,tol", UNARY, ids=[u[0] for u in UNARY])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_unary_float_matches_onnxruntime(op, attrs, kind, tol, shape, rng):
    x = _domain(kind, shape, rng)
    model = one_node_model(op, {"x": x}, **attrs)
    assert_generic_matches_ort(model, {"x": x}, rtol=max(tol, 1e-7), atol=tol)


SAME_AS_SPECIALISED = [("Erf", {}, {}), ("Sigmoid", {}, {}), ("Tanh", {}, {}),
                       ("HardSwish", {}, {}), ("Gelu", {"approximate": "tanh"}, {}),
                       ("Mish", {}, {}), ("Div", {}, {"b": np.float32(1.7)}),
                       ("Pow", {}, {"b": np.float32(3.0)})]


@pytest.mark.parametrize("op,attrs,inits", SAME_AS_SPECIALISED,
                         ids=[s[0] for s in SAME_AS_SPECIALISED])
def test_same_bits_as_the_specialised_kernels(op, attrs, inits, rng):
    """The scalar math is the TE ops': a model's numbers do not change when its specialised
    kernels are swapped in for the generic ones."""
    x = _domain("any", (3, 37), rng)
    model = one_node_model(op, {"x": x}, inits=inits, opset=20, **attrs)
    specialised = kiln.compile(model, threads=1, tiered=False, db=None).run([x])[0]
    np.testing.assert_array_equal(run_generic(model, {"x": x})[0], specialised)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_onnxruntime(approximate, rng):
    x = _domain("any", (5, 33), rng)
    model = one_node_model("Gelu", {"x": x}, opset=20, approximate=approximate)
    assert_generic_matches_ort(model, {"x": x}, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("bounds", [(-1.5, 2.0), (None, 0.5), (-0.25, None)])
def test_clip_with_constant_bounds(bounds, rng):
    x = _domain("any", (4, 17), rng)
    inits = {k: np.float32(v) for k, v in zip(("lo", "hi"), bounds) if v is not None}
    order = ["x", "lo" if bounds[0] is not None else "", "hi" if bounds[1] is not None else ""]
    model = one_node_model("Clip", {"x": x}, inits=inits, order=order)
    assert_generic_matches_ort(model, {"x": x})


def test_clip_with_run_time_bounds(rng):
    x = _domain("any", (3, 19), rng)
    feeds = {"x": x, "lo": np.array(-0.5, np.float32), "hi": np.array(1.25, np.float32)}
    assert_generic_matches_ort(one_node_model("Clip", feeds), feeds)


def _graph(op, inputs, out_shape, out_dtype, attrs=None) -> Graph:
    ins = tuple(Value(f"x{k}", a.shape, a.dtype.name) for k, a in enumerate(inputs))
    out = Value("y", out_shape, out_dtype)
    return Graph(ins, (Node(op, ins, (out,), dict(attrs or {}), op),), (out,), {}, op)


REFERENCE_UNARY = [("swish", {"alpha": 1.7}, "float32")] + [
    (op, {}, dtype) for op in ("neg", "abs", "relu", "sign")
    for dtype in ("float32", "int64", "int32")]


@pytest.mark.parametrize("op,attrs,dtype", REFERENCE_UNARY,
                         ids=[f"{o}-{d}" for o, _, d in REFERENCE_UNARY])
def test_unary_against_the_reference(op, attrs, dtype, rng):
    x = (rng.standard_normal((7, 19)) * 50).astype(dtype)
    x.flat[:3] = 0
    graph = _graph(op, [x], x.shape, dtype, attrs)
    want = run_reference(graph, [x])["y"]
    got = compile_generic(graph, Target.native(), 2).run([x])[0]
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_is_nan_is_inf_and_not(rng):
    x = _domain("any", (5, 21), rng)
    x.flat[::4] = np.nan
    x.flat[1::6] = np.inf
    x.flat[2::7] = -np.inf
    assert_generic_matches_ort(one_node_model("IsNaN", {"x": x}), {"x": x})
    for pos, neg in ((1, 1), (1, 0), (0, 1), (0, 0)):
        model = one_node_model("IsInf", {"x": x}, detect_positive=pos, detect_negative=neg)
        assert_generic_matches_ort(model, {"x": x})
    b = rng.random((3, 35)) < 0.5
    assert_generic_matches_ort(one_node_model("Not", {"x": b}), {"x": b})


# -- broadcasting --------------------------------------------------------------------------

PAIRS = [((3, 37), (3, 37)), ((2, 3, 17), (17,)), ((2, 3, 17), (3, 1)), ((1,), (5, 7)),
         ((4, 1, 6), (1, 5, 1)), ((5, 7), ()), ((2, 1, 3, 1, 5), (1, 4, 1, 6, 1)),
         ((3, 1, 19), (3, 2, 1)), ((), (1, 1))]
# over the serial limit: several parallel groups, blocks of the inner dim, runs of i4
PARALLEL_PAIRS = [((67, 2 * PIECE + 5), (2 * PIECE + 5,)), ((1200, 31), (1200, 1)),
                  ((3, 1, 5, 1, 7, 1), (1, 4, 1, 6, 1, 17))]


def _values(dtype, shape, rng, nonzero=False) -> np.ndarray:
    if dtype == "bool":
        return np.asarray(rng.random(shape) < 0.5)
    if dtype == "float32":
        x = np.asarray(rng.standard_normal(shape) * 3, np.float32)
        return np.where(np.abs(x) < 0.1, np.float32(0.5), x) if nonzero else x
    x = np.asarray(rng.integers(-40, 40, shape), dtype)
    return np.where(x == 0, 7, x).astype(dtype) if nonzero else x


BINARY = [("Add", "float32"), ("Sub", "float32"), ("Mul", "float32"), ("Div", "float32"),
          ("Max", "float32"), ("Min", "float32"), ("Add", "int64"), ("Sub", "int64"),
          ("Mul", "int64"), ("Div", "int64"), ("Max", "int64"), ("Min", "int64"),
          ("Equal", "float32"), ("Less", "int64"), ("Less", "float32"), ("Greater", "int64"),
          ("Greater", "float32"), ("LessOrEqual", "int64"), ("GreaterOrEqual", "int64"),
          ("GreaterOrEqual", "float32"), ("Equal", "int64"), ("Equal", "bool"), ("And", "bool"),
          ("Or", "bool"), ("Xor", "bool")]


@pytest.mark.parametrize("op,dtype", BINARY, ids=[f"{o}-{d}" for o, d in BINARY])
@pytest.mark.parametrize("shapes", PAIRS, ids=str)
def test_binary_matches_onnxruntime(op, dtype, shapes, rng):
    a = _values(dtype, shapes[0], rng)
    b = _values(dtype, shapes[1], rng, nonzero=op == "Div")
    if op in ("Equal", "LessOrEqual", "GreaterOrEqual") and dtype != "bool":
        b = b.copy()
        b.flat[::3] = a.flat[0]         # some equal pairs
    feeds = {"a": a, "b": b}
    assert_generic_matches_ort(one_node_model(op, feeds), feeds)


@pytest.mark.parametrize("shapes", PARALLEL_PAIRS, ids=str)
@pytest.mark.parametrize("op", ["Add", "Mul"])
def test_binary_parallel_shapes(op, shapes, rng):
    feeds = {"a": _values("float32", shapes[0], rng), "b": _values("float32", shapes[1], rng)}
    assert_generic_matches_ort(one_node_model(op, feeds), feeds)


@pytest.mark.parametrize("slope", [(1, 5, 1, 1), (5, 1, 1), (1,)], ids=str)
def test_prelu_matches_onnxruntime(slope, rng):
    x = _domain("any", (2, 5, 3, 7), rng)
    model = one_node_model("PRelu", {"x": x}, inits={"s": _domain("any", slope, rng)})
    assert_generic_matches_ort(model, {"x": x})


def test_where_on_a_parallel_shape(rng):
    feeds = {"c": rng.random((1, 1, 64, 64)) < 0.5, "a": _values("float32", (2, 12, 64, 64), rng),
             "b": np.array(-1e4, np.float32)}
    assert_generic_matches_ort(one_node_model("Where", feeds), feeds)


def test_pow(rng):
    a = _domain("pos", (4, 33), rng)
    for b in (np.float32(2.0), np.float32(3.0), np.float32(0.37),
              rng.uniform(-2, 2, (33,)).astype(np.float32)):
        model = one_node_model("Pow", {"a": a}, inits={"b": b})
        assert_generic_matches_ort(model, {"a": a}, rtol=2e-6)
    model = one_node_model("Pow", {"a": a}, inits={"b": np.array([2, 1, 3], np.int64)[:1]})
    assert_generic_matches_ort(model, {"a": a}, rtol=2e-6)
    feeds = {"a": a, "b": rng.uniform(-2, 2, (4, 1)).astype(np.float32)}
    assert_generic_matches_ort(one_node_model("Pow", feeds), feeds, rtol=2e-6)


def test_integer_division_truncates_and_a_zero_divisor_does_not_trap():
    a = np.array([7, -7, 7, -7, 5, -9, np.iinfo(np.int64).min, 3], np.int64)
    b = np.array([2, 2, -2, -2, 0, 0, -1, 3], np.int64)
    got = run_generic(one_node_model("Div", {"a": a, "b": b}), {"a": a, "b": b})[0]
    # as the specialised kernels (codegen/emit_expr._floor_divmod): x / 0 == 0, wrapping -x
    np.testing.assert_array_equal(got, [3, -3, -3, 3, 0, 0, np.iinfo(np.int64).min, 1])


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
@pytest.mark.parametrize("shapes", [((3, 37), (3, 37), (3, 37)), ((1, 1, 4, 4), (2, 3, 4, 4),
                                                                 ()),
                                    ((5, 1), (1, 6), (5, 6)), ((17,), (), (2, 17))], ids=str)
def test_where_matches_onnxruntime(dtype, shapes, rng):
    c = rng.random(shapes[0]) < 0.5
    feeds = {"c": c, "a": _values(dtype, shapes[1], rng), "b": _values(dtype, shapes[2], rng)}
    model = one_node_model("Where", feeds)
    if dtype != "bool":
        assert_generic_matches_ort(model, feeds)
    else:                           # onnxruntime has no bool Where
        np.testing.assert_array_equal(run_generic(model, feeds)[0], np.where(*feeds.values()))


CASTS = ["float32", "int64", "int32", "bool", "float16"]


@pytest.mark.parametrize("src", CASTS)
@pytest.mark.parametrize("dst", CASTS)
def test_cast_matches_onnxruntime(src, dst, rng):
    x = (rng.standard_normal((3, 41)) * 100)
    x.flat[:4] = [0.0, -0.0, 2.5, -2.75]
    x = (x > 0) if src == "bool" else x.astype(src)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(dst))
    assert_generic_matches_ort(one_node_model("Cast", {"x": x}, to=to), {"x": x}, rtol=0,
                               atol=0)


def test_cast_of_nan_and_infinity_to_bool(rng):
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30], np.float32)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(bool))
    assert_generic_matches_ort(one_node_model("Cast", {"x": x}, to=to), {"x": x})


@pytest.mark.parametrize("dst", ["int64", "int32"])
def test_cast_of_out_of_range_floats_to_int_is_numpys(dst):
    """graph/reference.py's cast is numpy's astype: on x86 an out-of-range or NaN float gives
    the integer minimum (cvttss2si), as fptosi does here and in the specialised kernels."""
    x = np.array([1e10, -1e10, np.nan, np.inf, -np.inf, 3.7, -3.7, -0.5] * 3, np.float32)
    graph = _graph("cast", [x], x.shape, dst, {"to": dst})
    with np.errstate(invalid="ignore"):
        want = run_reference(graph, [x])["y"]
    np.testing.assert_array_equal(compile_generic(graph, Target.native(), 1).run([x])[0], want)


# -- planning ------------------------------------------------------------------------------

def test_layout_merges_what_every_input_walks_contiguously():
    assert broadcast_layout((2, 3, 4, 5), [(2, 3, 4, 5), (5,)]) == ([24, 5], [[5, 1], [0, 1]])
    assert broadcast_layout((2, 3, 4, 5), [(2, 3, 4, 5), (2, 3, 4, 5)]) == ([120], [[1], [1]])
    assert broadcast_layout((2, 3, 4, 5), [(2, 3, 4, 5), (1, 3, 1, 1)]) == (
        [2, 3, 20], [[60, 20, 1], [0, 1, 0]])
    assert broadcast_layout((1, 1), [(1, 1), ()]) == ([1], [[1], [1]])


def test_too_many_dims_after_merging_is_unsupported():
    a, b = (2, 1) * 4, (1, 2) * 4
    with pytest.raises(ValueError, match="8 dims"):
        strided_dims(tuple(max(x, y) for x, y in zip(a, b)), [a, b])
    feeds = {"a": np.zeros(a, np.float32), "b": np.zeros(b, np.float32)}
    with pytest.raises(Unsupported, match="8 dims after merging"):
        run_generic(one_node_model("Add", feeds), feeds)


def test_empty_output_makes_no_call():
    feeds = {"a": np.zeros((0, 3), np.float32), "b": np.zeros((3,), np.float32)}
    gm = compile_generic(one_node_model("Add", feeds), Target.native(), 1)
    assert not [c for c in gm.calls if c.kernel.startswith("elementwise")]
    assert gm.run(feeds)[0].shape == (0, 3)
    x = np.zeros((0, 5), np.float32)
    gm = compile_generic(one_node_model("Sigmoid", {"x": x}), Target.native(), 1)
    assert not gm.calls and gm.run([x])[0].shape == (0, 5)


def test_one_array_as_both_operands(rng):
    x = _values("float32", (4, 19), rng)
    model = make_model([helper.make_node("Mul", ["x", "x"], ["y"])],
                       {"x": ((4, 19), "float32")}, ["y"])
    assert_generic_matches_ort(model, {"x": x})


def test_unsupported_dtype_is_named(rng):
    x = rng.standard_normal((3, 4))
    with pytest.raises(Unsupported, match="float64"):
        run_generic(one_node_model("Exp", {"x": x}), {"x": x})
    feeds = {"a": np.ones((2, 3), np.int32), "b": np.ones((3,), np.int32)}
    with pytest.raises(Unsupported, match="int32 and int32"):
        run_generic(one_node_model("Add", feeds), feeds)


def test_small_tensors_run_in_one_parallel_iteration():
    dims = strided_dims((64, 100), [(64, 100), (100,)])
    assert dims[12] == 1        # one group: no thread woken
    big = strided_dims((64, 1000), [(64, 1000), (1000,)])
    assert big[12] > 1 and big[12] * big[11] >= big[10]


@st.composite
def _broadcast_shapes(draw, count: int):
    """`count` shapes that broadcast together (dims of 1 and missing leading dims)."""
    rank = draw(st.integers(0, 6))
    out = draw(st.lists(st.sampled_from([1, 2, 3, 5, 17]), min_size=rank, max_size=rank))

    def side():
        keep = draw(st.integers(0, rank))
        return tuple(1 if draw(st.booleans()) else d for d in out[rank - keep:])
    return tuple(side() for _ in range(count))


def _run_or_refused(model, feeds):
    """The generic run's output, or None when the planner refused the layout (only a
    layout past the kernel's dims may be refused)."""
    try:
        return run_generic(model, feeds)[0]
    except Unsupported as exc:
        assert "dims after merging" in str(exc)
        return None


@settings(max_examples=40, deadline=None)
@given(_broadcast_shapes(2), st.sampled_from(["Sub", "Div", "Max"]))
def test_broadcasting_property(shapes, op):
    rng = np.random.default_rng(len(shapes[0]) * 7 + len(shapes[1]))
    a = _values("float32", shapes[0], rng)
    b = _values("float32", shapes[1], rng, nonzero=True)
    feeds = {"a": a, "b": b}
    got = _run_or_refused(one_node_model(op, feeds), feeds)
    if got is None:
        return
    want = {"Sub": np.subtract, "Div": np.divide, "Max": np.maximum}[op](a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert math.isfinite(float(np.sum(got)))


@settings(max_examples=25, deadline=None)
@given(_broadcast_shapes(3))
def test_where_broadcasting_property(shapes):
    rng = np.random.default_rng(sum(len(s) for s in shapes))
    feeds = {"c": _values("bool", shapes[0], rng), "a": _values("int64", shapes[1], rng),
             "b": _values("int64", shapes[2], rng)}
    got = _run_or_refused(one_node_model("Where", feeds), feeds)
    if got is not None:
        want = np.where(*feeds.values())
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_a_chain_of_elementwise_ops_matches_onnxruntime(rng):
    """Several kernels in one model, their outputs feeding each other (a GELU block, a
    mask built from comparisons and where, casts): the planner's arrays are reused."""
    nodes = [helper.make_node("Add", ["x", "bias"], ["h"]),
             helper.make_node("Div", ["h", "sqrt2"], ["h2"]),
             helper.make_node("Erf", ["h2"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["e1"]),
             helper.make_node("Mul", ["h", "e1"], ["g"]),
             helper.make_node("Greater", ["g", "zero"], ["pos"]),
             helper.make_node("Not", ["pos"], ["neg"]),
             helper.make_node("Cast", ["neg"], ["negf"], to=TensorProto.FLOAT),
             helper.make_node("Where", ["pos", "g", "negf"], ["w"]),
             helper.make_node("Sigmoid", ["w"], ["y"])]
    model = make_model(nodes, {"x": ((3, 5, 33), "float32")}, ["y"], inits={
        "bias": rng.standard_normal(33).astype(np.float32), "sqrt2": np.float32(2 ** 0.5),
        "one": np.float32(1), "zero": np.float32(0)})
    x = rng.standard_normal((3, 5, 33)).astype(np.float32)
    assert_generic_matches_ort(model, {"x": x}, rtol=2e-5, atol=2e-6)
