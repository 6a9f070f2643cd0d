"""Every supported ONNX operator: numpy reference executor vs onnxruntime on tiny models."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import helper
from onnx import numpy_helper

from .graph_helpers import assert_matches_ort, make_model

R = np.random.default_rng(7)


def f32(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape).astype(np.float32)


def i64(*vals):
    return np.array(vals, dtype=np.int64)


def single(op, feeds, inits=None, opset=17, outputs=("y",), **attrs):
    """A one-node model `op(feeds..., inits...)` and its feeds."""
    names = [n for n in list(feeds) + list(inits or {})]
    ins = [n if not n.startswith("_none") else "" for n in names]
    inits = {k: v for k, v in (inits or {}).items() if not k.startswith("_none")}
    out_names = [o[0] if isinstance(o, tuple) else o for o in outputs]
    node = helper.make_node(op, ins, out_names, name=f"{op.lower()}_0", **attrs)
    outs = [o if isinstance(o, tuple) else (o, _out_dtype(op, feeds)) for o in outputs]
    return make_model([node], feeds, outs, inits, opset), feeds


def _out_dtype(op, feeds):
    if op in ("Equal", "Less", "Greater", "And", "Or", "Not"):
        return "bool"
    return list(feeds.values())[1 if op == "Where" else 0].dtype.name


X = f32(2, 3, 4)
POS = f32(2, 3, 4, lo=0.1, hi=3.0)

UNARY = ["Relu", "Neg", "Exp", "Abs", "Erf", "Tanh", "Sigmoid", "HardSwish", "Identity"]
CASES = {f"unary-{op}": single(op, {"x": X}) for op in UNARY}
CASES.update({
    "log": single("Log", {"x": POS}),
    "sqrt": single("Sqrt", {"x": POS}),
    "reciprocal": single("Reciprocal", {"x": POS}),
    "leaky_relu": single("LeakyRelu", {"x": X}, alpha=0.3),
    "leaky_relu-default": single("LeakyRelu", {"x": X}),
    "hard_sigmoid": single("HardSigmoid", {"x": X}, alpha=0.3, beta=0.4),
    "gelu": single("Gelu", {"x": X}, opset=20),
    "gelu-tanh": single("Gelu", {"x": X}, opset=20, approximate="tanh"),
    "clip-inputs": single("Clip", {"x": X}, {"lo": np.float32(-0.5), "hi": np.float32(0.7)}),
    "clip-min-only": single("Clip", {"x": X}, {"lo": np.float32(0.0)}),
    "clip-max-only": single("Clip", {"x": X}, {"_none": 0, "hi": np.float32(0.2)}),
    "clip-opset6": single("Clip", {"x": X}, opset=6, min=-0.1, max=0.3),
    "not": single("Not", {"x": X > 0}),
    "cast-int": single("Cast", {"x": X}, outputs=(("y", "int64"),), to=7),
    "cast-bool": single("Cast", {"x": X}, outputs=(("y", "bool"),), to=9),
})
for op in ["Add", "Sub", "Mul", "Div"]:
    CASES[f"{op}-bcast"] = single(op, {"a": X, "b": f32(3, 1)})
    CASES[f"{op}-const"] = single(op, {"a": X}, {"b": f32(4)})
CASES.update({
    "div-int": single("Div", {"a": i64(7, -7, 9), "b": i64(2, 2, -4)}),
    "pow": single("Pow", {"a": POS, "b": f32(4)}),
    "pow-int-exp": single("Pow", {"a": POS}, {"b": np.array(2, dtype=np.int64)}),
    "equal": single("Equal", {"a": i64(1, 2, 3), "b": i64(1, 0, 3)}),
    "less": single("Less", {"a": X, "b": f32(4)}),
    "greater": single("Greater", {"a": X, "b": f32(3, 1)}),
    "and": single("And", {"a": X > 0, "b": f32(4) > 0}),
    "or": single("Or", {"a": X > 0, "b": f32(4) > 0}),
    "where": single("Where", {"c": X > 0, "a": X, "b": f32(4)}),
})
for opset in (11, 13):
    for axis in (-1, 1, 0):
        CASES[f"softmax-{opset}-{axis}"] = single("Softmax", {"x": X}, opset=opset, axis=axis)
        CASES[f"logsoftmax-{opset}-{axis}"] = single("LogSoftmax", {"x": X}, opset=opset,
                                                     axis=axis)
CASES["softmax-default-11"] = single("Softmax", {"x": X}, opset=11)
CASES["softmax-default-13"] = single("Softmax", {"x": X}, opset=13)

IMG = f32(2, 4, 7, 9)
W = f32(6, 4, 3, 3)
CASES.update({
    "conv-plain": single("Conv", {"x": IMG}, {"w": W}),
    "conv-bias-pads": single("Conv", {"x": IMG}, {"w": W, "b": f32(6)}, pads=[1, 1, 1, 1]),
    "conv-asym-pads": single("Conv", {"x": IMG}, {"w": W}, pads=[0, 1, 2, 1]),
    "conv-stride-dil": single("Conv", {"x": IMG}, {"w": W}, strides=[2, 1], dilations=[1, 2],
                              pads=[1, 2, 1, 2]),
    "conv-same-upper": single("Conv", {"x": IMG}, {"w": f32(6, 4, 2, 2)}, auto_pad="SAME_UPPER",
                              strides=[2, 2]),
    "conv-same-lower": single("Conv", {"x": IMG}, {"w": f32(6, 4, 2, 2)}, auto_pad="SAME_LOWER"),
    "conv-valid": single("Conv", {"x": IMG}, {"w": W}, auto_pad="VALID"),
    "conv-group": single("Conv", {"x": IMG}, {"w": f32(6, 2, 3, 3)}, group=2, pads=[1, 1, 1, 1]),
    "conv-depthwise": single("Conv", {"x": IMG}, {"w": f32(4, 1, 3, 3), "b": f32(4)}, group=4,
                             strides=[2, 2], pads=[1, 1, 1, 1]),
    "conv-weight-input": single("Conv", {"x": IMG, "w": W}),
    "gemm": single("Gemm", {"a": f32(3, 5)}, {"b": f32(5, 4), "c": f32(4)}),
    "gemm-trans-alpha-beta": single("Gemm", {"a": f32(5, 3)}, {"b": f32(4, 5), "c": f32(3, 4)},
                                    transA=1, transB=1, alpha=0.5, beta=2.0),
    "gemm-no-c": single("Gemm", {"a": f32(3, 5), "b": f32(5, 4)}, alpha=1.5),
    "matmul-2d": single("MatMul", {"a": f32(3, 5), "b": f32(5, 4)}),
    "matmul-batched-bcast": single("MatMul", {"a": f32(2, 1, 3, 5), "b": f32(4, 5, 2)}),
    "matmul-vec-left": single("MatMul", {"a": f32(5), "b": f32(2, 5, 4)}),
    "matmul-vec-right": single("MatMul", {"a": f32(2, 3, 5), "b": f32(5)}),
    "batchnorm": single("BatchNormalization", {"x": IMG},
                        {"s": f32(4), "b": f32(4), "m": f32(4), "v": f32(4, lo=0.5, hi=2)},
                        epsilon=1e-3),
    "layernorm": single("LayerNormalization", {"x": X}, {"s": f32(4), "b": f32(4)}),
    "layernorm-axis1-nobias": single("LayerNormalization", {"x": X}, {"s": f32(3, 4)}, axis=1,
                                     epsilon=1e-3),
    "maxpool": single("MaxPool", {"x": IMG}, kernel_shape=[2, 2], strides=[2, 2]),
    "maxpool-pads-ceil": single("MaxPool", {"x": IMG}, kernel_shape=[3, 3], strides=[2, 2],
                                pads=[1, 1, 1, 1], ceil_mode=1),
    "maxpool-dilated": single("MaxPool", {"x": IMG}, kernel_shape=[2, 2], dilations=[2, 2]),
    "maxpool-same": single("MaxPool", {"x": IMG}, kernel_shape=[3, 3], strides=[2, 2],
                           auto_pad="SAME_UPPER"),
    "avgpool": single("AveragePool", {"x": IMG}, kernel_shape=[2, 2], strides=[2, 2]),
    "avgpool-pads-exclude": single("AveragePool", {"x": IMG}, kernel_shape=[3, 3],
                                   pads=[1, 1, 1, 1], strides=[2, 2]),
    "avgpool-pads-include": single("AveragePool", {"x": IMG}, kernel_shape=[3, 3],
                                   pads=[1, 0, 1, 2], strides=[2, 2], count_include_pad=1),
    "avgpool-ceil": single("AveragePool", {"x": IMG}, kernel_shape=[3, 3], strides=[2, 2],
                           ceil_mode=1),
    "avgpool-ceil-include": single("AveragePool", {"x": IMG}, kernel_shape=[3, 3],
                                   strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=1,
                                   count_include_pad=1),
    "globalavg": single("GlobalAveragePool", {"x": IMG}),
    "globalmax": single("GlobalMaxPool", {"x": IMG}),
    "flatten": single("Flatten", {"x": IMG}),
    "flatten-axis2": single("Flatten", {"x": IMG}, axis=2),
    "flatten-axis0": single("Flatten", {"x": IMG}, axis=0),
    "reshape": single("Reshape", {"x": X}, {"s": i64(0, -1)}),
    "reshape-allowzero": single("Reshape", {"x": X}, {"s": i64(4, 6)}, allowzero=1),
    "transpose": single("Transpose", {"x": X}, perm=[2, 0, 1]),
    "transpose-default": single("Transpose", {"x": X}),
    "squeeze-13": single("Squeeze", {"x": f32(1, 3, 1, 2)}, {"a": i64(0, -2)}, opset=13),
    "squeeze-all-13": single("Squeeze", {"x": f32(1, 3, 1, 2)}, opset=13),
    "squeeze-11": single("Squeeze", {"x": f32(1, 3, 1, 2)}, opset=11, axes=[2]),
    "unsqueeze-13": single("Unsqueeze", {"x": X}, {"a": i64(0, -1)}, opset=13),
    "unsqueeze-11": single("Unsqueeze", {"x": X}, opset=11, axes=[1, 4]),
    "concat": single("Concat", {"a": X, "b": f32(2, 1, 4)}, axis=1),
    "concat-neg": single("Concat", {"a": X, "b": X, "c": X}, axis=-1),
    "split-equal-13": single("Split", {"x": f32(2, 6)}, opset=13, axis=1, outputs=("a", "b")),
    "split-sizes-13": single("Split", {"x": f32(2, 6)}, {"s": i64(1, 5)}, opset=13, axis=1,
                             outputs=("a", "b")),
    "split-sizes-11": single("Split", {"x": f32(6, 2)}, opset=11, split=[2, 4],
                             outputs=("a", "b")),
    "split-num-outputs-18": single("Split", {"x": f32(7, 2)}, opset=18, num_outputs=3,
                                   outputs=("a", "b", "c")),
    "slice": single("Slice", {"x": X}, {"s": i64(1, 0), "e": i64(3, -1), "a": i64(1, 2)}),
    "slice-steps": single("Slice", {"x": f32(5, 8)},
                          {"s": i64(0, 7), "e": i64(9, 0), "a": i64(0, 1), "t": i64(2, -2)}),
    "slice-neg-full": single("Slice", {"x": f32(5, 8)},
                             {"s": i64(-1), "e": i64(-100), "a": i64(1), "t": i64(-1)}),
    "slice-opset9": single("Slice", {"x": X}, opset=9, starts=[1], ends=[1000], axes=[2]),
    "gather": single("Gather", {"x": f32(5, 3)}, {"i": i64(0, 4, -1)}),
    "gather-axis1-2d": single("Gather", {"x": X}, {"i": np.array([[0, 2], [1, 1]])}, axis=1),
    "gather-scalar": single("Gather", {"x": X}, {"i": np.array(1, dtype=np.int64)}, axis=2),
    "gathernd": single("GatherND", {"x": X}, {"i": np.array([[0, 1], [1, 2]])}),
    "gathernd-batch": single("GatherND", {"x": X}, {"i": np.array([[1], [2]])}, batch_dims=1),
    "expand": single("Expand", {"x": f32(3, 1)}, {"s": i64(2, 1, 5)}),
    "pad-constant": single("Pad", {"x": X}, {"p": i64(0, 1, 2, 0, 0, 1), "v": np.float32(1.5)}),
    "pad-reflect": single("Pad", {"x": X}, {"p": i64(0, 1, 2, 0, 1, 1)}, mode="reflect"),
    "pad-edge": single("Pad", {"x": X}, {"p": i64(0, 1, 0, 0, 2, 1)}, mode="edge"),
    "pad-negative": single("Pad", {"x": X}, {"p": i64(0, -1, 1, 0, 0, -1)}),
    "pad-axes-18": single("Pad", {"x": X}, {"p": i64(1, 2, 0, 3), "_none": 0, "a": i64(1, 2)},
                          opset=18),
    "pad-opset2": single("Pad", {"x": X}, opset=2, pads=[0, 1, 0, 0, 1, 0], value=0.5),
    "dropout": single("Dropout", {"x": X}),
})
for op in ["ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSum"]:
    CASES[f"{op}-attr-13"] = (single("ReduceSum", {"x": X}, {"a": i64(1)}, opset=13,
                                     keepdims=0) if op == "ReduceSum" else
                              single(op, {"x": X}, opset=13, axes=[1, -1], keepdims=0))
    CASES[f"{op}-input-18"] = single(op, {"x": X}, {"a": i64(0, 2)}, opset=18)
    CASES[f"{op}-all-18"] = single(op, {"x": X}, opset=18, keepdims=0)
CASES["reducesum-noop-18"] = single("ReduceSum", {"x": X}, opset=18, noop_with_empty_axes=1)


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_op_matches_onnxruntime(case):
    model, feeds = CASES[case]
    assert_matches_ort(model, feeds)


def _shape_chain_model():
    """Reshape whose target comes from Shape -> Gather -> Concat (folded at load time)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "i0"], ["d0"], axis=0),
        helper.make_node("Unsqueeze", ["d0", "ax"], ["d0u"]),
        helper.make_node("Concat", ["d0u", "m1"], ["tgt"], axis=0),
        helper.make_node("Reshape", ["x", "tgt"], ["y"]),
        helper.make_node("ConstantOfShape", ["tgt2"], ["z0"],
                         value=numpy_helper.from_array(np.array([2.5], np.float32))),
        helper.make_node("Add", ["y", "z0"], ["y2"]),
        helper.make_node("Range", ["r0", "r1", "r2"], ["r"]),
        helper.make_node("Constant", [], ["k"], value_float=3.0),
        helper.make_node("Cast", ["r"], ["rf"], to=1),
        helper.make_node("Mul", ["y2", "k"], ["y3"]),
        helper.make_node("Add", ["y3", "rf"], ["out"]),
    ]
    inits = {"i0": np.array(0, np.int64), "ax": i64(0), "m1": i64(-1), "tgt2": i64(2, 12),
             "r0": np.array(1, np.int64), "r1": np.array(25, np.int64),
             "r2": np.array(2, np.int64)}
    return make_model(nodes, {"x": X}, ["out"], inits)


def test_shape_chain_folds_and_matches():
    graph = assert_matches_ort(_shape_chain_model(), {"x": X})
    reshape = next(n for n in graph.nodes if n.op == "reshape" and n.inputs[0].name == "x")
    assert reshape.attrs["shape"] == (2, 12)
    assert "shape" not in graph.op_counts() and "range" not in graph.op_counts()
