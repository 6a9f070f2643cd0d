"""Negative axes, as a class: every ONNX operator Kiln converts that takes an axis (attribute
or input) runs compiled with each negative axis and matches onnxruntime; a meta-test fails
when a converter for an axis-taking operator is added without an entry here.

Each case is one model holding the operator once per negative axis (one output each), so an
operator costs one compile. Input dims are pairwise distinct, so confusing two axes changes
the output's shape. (Flatten with a negative axis used to count from rank + 1.)
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import kiln
from kiln.graph.onnx.core import CONVERTERS

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(11)
SHAPE = (2, 3, 4, 5)


def _x(shape=SHAPE, dtype=np.float32):
    return R.uniform(-2, 2, size=shape).astype(dtype)


def _axes(rank: int) -> list[int]:
    """Every negative axis of a rank-`rank` input: -rank .. -1."""
    return list(range(-rank, 0))


class Case:
    """`build(axis, k)` -> (nodes, initializers) computing output `y{k}` from input `x`."""

    def __init__(self, op, build, shape=SHAPE, opset=17, axes=None, x=None,
                 out_dtype="float32"):
        self.op, self.build, self.shape, self.opset = op, build, shape, opset
        self.axes = axes if axes is not None else _axes(len(shape))
        self.x = x if x is not None else _x(shape)
        self.out_dtype = out_dtype

    def model(self):
        nodes, inits = [], {}
        for k, axis in enumerate(self.axes):
            more_nodes, more_inits = self.build(axis, k)
            nodes += more_nodes
            inits.update(more_inits)
        feeds = {"x": self.x}
        outs = [(f"y{k}", self.out_dtype) for k in range(len(self.axes))]
        return make_model(nodes, feeds, outs, inits, self.opset), feeds


def _attr(op, **more):
    """The op on x with axis=<axis> as an attribute."""
    return lambda axis, k: ([helper.make_node(op, ["x"], [f"y{k}"], axis=axis, **more)], {})


def _axes_input(op, opset_inputs=lambda axis, k: [], **more):
    """The op on x with axes=[axis] as an int64 input."""
    def build(axis, k):
        name = f"axes{k}"
        node = helper.make_node(op, ["x", name] + opset_inputs(axis, k), [f"y{k}"], **more)
        return [node], {name: np.array([axis], np.int64)}
    return build


def _axes_attr(op, **more):
    return lambda axis, k: ([helper.make_node(op, ["x"], [f"y{k}"], axes=[axis], **more)], {})


def _tensor_scatter(axis, k):   # two updates along the axis, written at 1 and 0
    shape = tuple(2 if i == axis % 4 else d for i, d in enumerate(SHAPE))
    node = helper.make_node("TensorScatter", ["x", f"u{k}", f"w{k}"], [f"y{k}"], axis=axis)
    return [node], {f"u{k}": _x(shape), f"w{k}": np.array([1, 0], np.int64)}


def _split_to_sequence(axis, k):    # pieces of 1 along the axis; the second one
    return [helper.make_node("SplitToSequence", ["x", "one"], [f"s{k}"], axis=axis),
            helper.make_node("SequenceAt", [f"s{k}", "one"], [f"y{k}"])], \
        {"one": np.array(1, np.int64)}


def _concat_from_sequence(new_axis):     # x twice, along the axis or stacked on a new one
    def build(axis, k):
        seq = helper.make_node("SequenceConstruct", ["x", "x"], [f"s{k}"])
        return [seq, helper.make_node("ConcatFromSequence", [f"s{k}"], [f"y{k}"], axis=axis,
                                      new_axis=new_axis)], {}
    return build


def _concat(axis, k):
    return [helper.make_node("Concat", ["x", f"c{k}"], [f"y{k}"], axis=axis)], \
        {f"c{k}": _x(tuple(d + 1 if i == axis % 4 else d for i, d in enumerate(SHAPE)))}


def _split(axis, k):  # two uneven parts, the first read by an op so both are real values
    d = SHAPE[axis]
    split = helper.make_node("Split", ["x", f"s{k}"], [f"p{k}", f"q{k}"], axis=axis)
    cat = helper.make_node("Concat", [f"q{k}", f"p{k}"], [f"y{k}"], axis=axis)
    return [split, cat], {f"s{k}": np.array([1, d - 1], np.int64)}


def _slice(axis, k):
    return [helper.make_node("Slice", ["x", f"b{k}", f"e{k}", f"a{k}", f"st{k}"],
                             [f"y{k}"])], {
        f"b{k}": np.array([-1], np.int64), f"e{k}": np.array([-100], np.int64),
        f"a{k}": np.array([axis], np.int64), f"st{k}": np.array([-2], np.int64)}


def _gather(axis, k):
    d = SHAPE[axis]
    return [helper.make_node("Gather", ["x", f"i{k}"], [f"y{k}"], axis=axis)], \
        {f"i{k}": np.array([[d - 1, 0], [-1, -d]], np.int64)}


def _layer_norm(axis, k):
    norm = SHAPE[axis:]
    return [helper.make_node("LayerNormalization", ["x", f"g{k}", f"b{k}"], [f"y{k}"],
                             axis=axis)], {f"g{k}": _x(norm), f"b{k}": _x(norm)}


def _pad(axis, k):
    return [helper.make_node("Pad", ["x", f"p{k}", "", f"a{k}"], [f"y{k}"])], {
        f"p{k}": np.array([1, 2], np.int64), f"a{k}": np.array([axis], np.int64)}


def _unsqueeze(axis, k):
    return [helper.make_node("Unsqueeze", ["x", f"a{k}"], [f"y{k}"])], \
        {f"a{k}": np.array([axis], np.int64)}


def _cumsum(axis, k):
    return [helper.make_node("CumSum", ["x", f"a{k}"], [f"y{k}"])], \
        {f"a{k}": np.array(axis, np.int64)}


def _cumprod(axis, k):
    return [helper.make_node("CumProd", ["x", f"a{k}"], [f"y{k}"], exclusive=1)], \
        {f"a{k}": np.array(axis, np.int64)}


def _compress(axis, k):
    keep = np.arange(SHAPE[axis]) % 2 == 0
    return [helper.make_node("Compress", ["x", f"c{k}"], [f"y{k}"], axis=axis)], \
        {f"c{k}": keep}


def _center_crop_pad(axis, k):
    size = SHAPE[axis] + (1 if axis % 2 else -1)     # pad some axes, crop the others
    return [helper.make_node("CenterCropPad", ["x", f"s{k}"], [f"y{k}"], axes=[axis])], \
        {f"s{k}": np.array([size], np.int64)}


def _gather_elements(axis, k):
    d = SHAPE[axis]
    idx = R.integers(-d, d, size=SHAPE).astype(np.int64)
    return [helper.make_node("GatherElements", ["x", f"i{k}"], [f"y{k}"], axis=axis)], \
        {f"i{k}": idx}


def _resize(axis, k):
    return [helper.make_node("Resize", ["x", "", f"s{k}"], [f"y{k}"], axes=[axis],
                             mode="nearest")], {f"s{k}": np.array([2.0], np.float32)}


def _top_k(axis, k):
    return [helper.make_node("TopK", ["x", f"k{k}"], [f"y{k}", f"i{k}"], axis=axis)], \
        {f"k{k}": np.array([2], np.int64)}


def _per_axis_quantize(op, axis, k):
    d = SHAPE[axis]
    scale = np.linspace(0.02, 0.05, d).astype(np.float32)
    zero = np.arange(d).astype(np.uint8)
    return [helper.make_node(op, ["x", f"s{k}", f"z{k}"], [f"y{k}"], axis=axis)], \
        {f"s{k}": scale, f"z{k}": zero}


def _one_hot(axis, k):
    return [helper.make_node("OneHot", ["x", f"d{k}", f"v{k}"], [f"y{k}"], axis=axis)], {
        f"d{k}": np.array(5, np.int64), f"v{k}": np.array([0.0, 1.0], np.float32)}


def _rms_norm(axis, k):
    return [helper.make_node("RMSNormalization", ["x", f"g{k}"], [f"y{k}"], axis=axis)], \
        {f"g{k}": _x(SHAPE[axis:])}


def _scatter(op, index):
    """Updates at one index along the axis (unique positions: no reduction order)."""
    def build(axis, k):
        shape = tuple(1 if i == axis % 4 else d for i, d in enumerate(SHAPE))
        return [helper.make_node(op, ["x", f"i{k}", f"u{k}"], [f"y{k}"], axis=axis)], {
            f"i{k}": np.full(shape, index(SHAPE[axis]), np.int64), f"u{k}": _x(shape)}
    return build


_REDUCES = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceL1",
            "ReduceProd", "ReduceSumSquare", "ReduceLogSum", "ReduceLogSumExp")
_POSITIVE = _x() ** 2 + 0.5      # ReduceLogSum's input

# Every axis-taking operator Kiln converts, or may convert soon (skipped until it does).
CASES = [
    Case("Flatten", _attr("Flatten")),
    Case("Concat", _concat),
    Case("Split", _split),
    Case("Softmax", _attr("Softmax")),
    Case("LogSoftmax", _attr("LogSoftmax")),
    Case("Softmax", _attr("Softmax"), opset=11),         # opset < 13: coerced to 2-D
    Case("LogSoftmax", _attr("LogSoftmax"), opset=11),
    Case("Hardmax", _attr("Hardmax")),
    Case("Gather", _gather),
    Case("Squeeze", _axes_input("Squeeze"), shape=(2, 1, 3, 1), axes=[-1, -3]),
    Case("Squeeze", _axes_attr("Squeeze"), shape=(2, 1, 3, 1), axes=[-1, -3], opset=11),
    Case("Unsqueeze", _unsqueeze, axes=list(range(-5, 0))),
    Case("Unsqueeze", _axes_attr("Unsqueeze"), axes=list(range(-5, 0)), opset=11),
    Case("Slice", _slice),
    Case("LayerNormalization", _layer_norm),
    Case("Pad", _pad, opset=18),
    Case("ArgMax", _attr("ArgMax", keepdims=0), out_dtype="int64"),
    Case("ArgMin", _attr("ArgMin"), out_dtype="int64"),
    Case("CumSum", _cumsum),
    Case("CumProd", _cumprod, opset=26),
    Case("Compress", _compress),
    Case("CenterCropPad", _center_crop_pad, opset=18),
    Case("GatherElements", _gather_elements),
    Case("LpNormalization", _attr("LpNormalization")),
    Case("MeanVarianceNormalization", _axes_attr("MeanVarianceNormalization")),
    Case("Resize", _resize, opset=18),
    Case("TopK", _top_k),
    Case("OneHot", _one_hot, shape=(2, 3, 4), axes=list(range(-4, 0)),
         x=R.integers(0, 5, size=(2, 3, 4)).astype(np.int64)),
    Case("RMSNormalization", _rms_norm, opset=23),
    Case("ScatterElements", _scatter("ScatterElements", lambda d: -1), opset=13),
    Case("Scatter", _scatter("Scatter", lambda d: d - 1), opset=10),
    Case("QuantizeLinear", lambda a, k: _per_axis_quantize("QuantizeLinear", a, k),
         out_dtype="uint8"),
    Case("DequantizeLinear", lambda a, k: _per_axis_quantize("DequantizeLinear", a, k),
         x=R.integers(0, 255, size=SHAPE).astype(np.uint8)),
    Case("DFT", lambda axis, k: ([helper.make_node("DFT", ["x", "", f"a{k}"], [f"y{k}"])],
                                 {f"a{k}": np.array(axis, np.int64)}),
         shape=(2, 3, 4, 2), opset=20, axes=[-4, -3, -2]),
    Case("TensorScatter", _tensor_scatter, opset=24, axes=[-3, -2, -1]),
    Case("SplitToSequence", _split_to_sequence),
    Case("ConcatFromSequence", _concat_from_sequence(0)),
    Case("ConcatFromSequence", _concat_from_sequence(1), axes=list(range(-5, 0))),
    *[Case(op, _axes_attr(op, keepdims=1), opset=11,
           x=_POSITIVE if op == "ReduceLogSum" else None) for op in _REDUCES],
    *[Case(op, _axes_input(op, keepdims=0), opset=18,
           x=_POSITIVE if op == "ReduceLogSum" else None) for op in _REDUCES],
]


def _id(case: Case) -> str:
    return f"{case.op}-opset{case.opset}"


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_negative_axes_match_onnxruntime(case):
    if case.op not in CONVERTERS:
        pytest.skip(f"Kiln does not convert {case.op} yet")
    model, feeds = case.model()
    want = ort_run(model, feeds)
    got = kiln.compile(model, db=None, jobs=1).run(feeds)
    for k, (g, w) in enumerate(zip(got, want)):
        axis = case.axes[k]
        assert g.shape == w.shape, f"{case.op} axis={axis}: shape {g.shape}, expected {w.shape}"
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5,
                                   err_msg=f"{case.op} axis={axis}")


def _takes_axis(op: str) -> bool:
    """True if some version of the ONNX operator has an axis/axes attribute or input."""
    try:
        schemas = [s for s in onnx.defs.get_all_schemas_with_history()
                   if s.name == op and s.domain == ""]
    except Exception:  # noqa: BLE001 - onnx versions differ in this API's failures
        return False
    return any({"axis", "axes"} & set(s.attributes) or
               any(i.name == "axes" or i.name == "axis" for i in s.inputs) for s in schemas)


def test_every_axis_operator_is_covered():
    """A converter for an operator taking an axis must come with a case above."""
    covered = {c.op for c in CASES}
    # the binary ops' `axis` is opset-1 legacy broadcasting, which the converters refuse
    # and Tile's `axis` input is opset 1's (later Tile takes repeats for every axis)
    exempt = {"Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Or",
              "Xor", "Tile"}
    missing = sorted(op for op in CONVERTERS if op not in covered | exempt and _takes_axis(op))
    assert not missing, (f"converters of axis-taking operators without a negative-axis case "
                         f"in {__file__}: {missing}")
