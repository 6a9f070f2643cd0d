"""ONNX models with the low-bit element types (graph/ops/lowbit.py, graph/onnx/lowbit.py) compiled
by Kiln against onnx's reference evaluator: Cast/CastLike to and from every format,
QuantizeLinear/DequantizeLinear into int16/uint16, int4/uint4/int2/uint2, float8 and float4,
blocked quantization (with a remainder block), data movement on low-bit values, a packed int4
initializer, and the clean refusal of an op that cannot read a low-bit value."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.te.errors import KernelArgumentError, ModelFormatError

R = np.random.default_rng(5)
FLOAT8 = [T.FLOAT8E4M3FN, T.FLOAT8E4M3FNUZ, T.FLOAT8E5M2, T.FLOAT8E5M2FNUZ]
SUBBYTE = [T.INT4, T.UINT4, T.INT2, T.UINT2]
LOWBIT_NAMES = {"float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
                "float8_e8m0fnu", "float4_e2m1fn", "int4", "uint4", "int2", "uint2"}
RANGES = {T.INT16: (-32768, 32767), T.UINT16: (0, 65535), T.INT4: (-8, 7), T.UINT4: (0, 15),
          T.INT2: (-2, 1), T.UINT2: (0, 3)}


def _np(elem: int) -> np.dtype:
    return np.dtype(helper.tensor_dtype_to_np_dtype(elem))


def _model(nodes, inputs, outputs, inits=(), opset=25):
    """inputs/outputs: [(name, elem type, shape)]; inits: [(name, array)]."""
    g = helper.make_graph(
        nodes, "lowbit",
        [helper.make_tensor_value_info(n, e, s) for n, e, s in inputs],
        [helper.make_tensor_value_info(n, e, s) for n, e, s in outputs],
        initializer=[numpy_helper.from_array(np.asarray(a), n) for n, a in inits])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 11
    return m


def _check(model, feeds: dict, compiled=None):
    want = ReferenceEvaluator(model).run(None, feeds)
    compiled = compiled or kiln.compile(model, db=None, jobs=1)
    got = compiled.run(feeds)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, w.dtype, g.shape, w.shape)
        if w.dtype.name in LOWBIT_NAMES:
            gf, wf = g.astype(np.float32), w.astype(np.float32)
            np.testing.assert_array_equal(np.isnan(gf), np.isnan(wf))
            np.testing.assert_array_equal(gf[~np.isnan(wf)], wf[~np.isnan(wf)])
        else:
            np.testing.assert_array_equal(g, w)
    return compiled


def _floats(shape, scale=30.0):
    x = (R.standard_normal(shape) * scale).astype(np.float32)
    flat = x.reshape(-1)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e6, -1e6, 0.5, 1.5, 2.5],
                       np.float32)
    flat[:min(flat.size, special.size)] = special[:flat.size]
    return x


@pytest.mark.parametrize("to", FLOAT8 + [T.FLOAT4E2M1, T.FLOAT8E8M0] + SUBBYTE,
                         ids=lambda e: T.DataType.Name(e))
def test_cast_round_trip(to):
    """float16 -> fmt (an output) -> float32 (an output), shape (3, 7, 5)."""
    shape = [3, 7, 5]
    x = _floats(shape, 4.0 if to in SUBBYTE else 30.0)
    if to in SUBBYTE:
        x = np.nan_to_num(x, nan=1.0, posinf=3.0, neginf=-3.0)
    with np.errstate(over="ignore"):
        x = x.astype(np.float16)
    sat = {"saturate": 0} if to in FLOAT8 else {}
    model = _model([helper.make_node("Cast", ["x"], ["q"], to=to, **sat),
                    helper.make_node("Cast", ["q"], ["y"], to=T.FLOAT)],
                   [("x", T.FLOAT16, shape)], [("q", to, shape), ("y", T.FLOAT, shape)])
    _check(model, {"x": x})


@pytest.mark.parametrize("src", [T.FLOAT8E4M3FN, T.FLOAT8E5M2FNUZ, T.INT4, T.UINT2])
def test_low_bit_input_through_data_movement(src):
    """A low-bit graph input, transposed and reshaped, then CastLike to float16 and Cast to
    a second low-bit format."""
    shape = [2, 5, 3]
    codes = R.integers(0, 256, shape).astype(np.uint8)
    x = (codes.view(_np(src)) if _np(src).itemsize == 1 and src in FLOAT8 else
         R.integers(-2 if src == T.INT4 else 0, 2, shape).astype(_np(src)))
    nodes = [helper.make_node("Transpose", ["x"], ["t"], perm=[2, 0, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["c"]),
             helper.make_node("CastLike", ["c", "like"], ["y"]),
             helper.make_node("Cast", ["c"], ["z"], to=T.FLOAT8E4M3FNUZ)]
    model = _model(nodes, [("x", src, shape)],
                   [("y", T.FLOAT16, [3, 10]), ("z", T.FLOAT8E4M3FNUZ, [3, 10])],
                   [("like", np.zeros(1, np.float16)), ("shape", np.array([3, 10]))])
    _check(model, {"x": x})


@pytest.mark.parametrize("qtype", [T.INT16, T.UINT16, T.INT4, T.UINT4, T.INT2, T.UINT2,
                                   T.FLOAT8E4M3FN, T.FLOAT8E5M2, T.FLOAT4E2M1],
                         ids=lambda e: T.DataType.Name(e))
@pytest.mark.parametrize("per_axis", [False, True])
def test_quantize_dequantize(qtype, per_axis):
    shape = [2, 3, 7]
    x = (R.standard_normal(shape) * 5).astype(np.float32)
    x.reshape(-1)[:4] = [0.5, 1.5, -2.5, 0.0]        # ties at scale 1
    scale = np.array([1.0, 0.25, 0.1], np.float32) if per_axis else np.float32(1.0)
    zp_dtype = _np(qtype)
    if qtype in FLOAT8 or qtype == T.FLOAT4E2M1:
        zp = np.zeros(scale.shape, zp_dtype)
    else:
        lo, hi = RANGES[qtype]
        zp = R.integers(lo, hi + 1, scale.shape).astype(zp_dtype)
    model = _model([helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=1),
                    helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=1)],
                   [("x", T.FLOAT, shape)], [("q", qtype, shape), ("y", T.FLOAT, shape)],
                   [("s", scale), ("zp", zp)])
    _check(model, {"x": x})


@pytest.mark.parametrize("qtype", [T.INT4, T.UINT8, T.INT16])
def test_blocked_quantize_dequantize_with_remainder(qtype):
    """block_size 4 along an axis of 13 (a remainder block of 1), runtime input."""
    shape, axis, block = [3, 13], 1, 4
    x = (R.standard_normal(shape) * 3).astype(np.float32)
    scale = R.uniform(0.05, 0.5, (3, 4)).astype(np.float32)
    zdt = _np(qtype)
    lo, hi = (-3, 3) if qtype == T.INT4 else (100, 150) if qtype == T.UINT8 else (-900, 900)
    zp = R.integers(lo, hi, (3, 4)).astype(zdt)
    model = _model(
        [helper.make_node("QuantizeLinear", ["x", "s", "zp"], ["q"], axis=axis,
                          block_size=block),
         helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], axis=axis,
                          block_size=block)],
        [("x", T.FLOAT, shape)], [("q", qtype, shape), ("y", T.FLOAT, shape)],
        [("s", scale), ("zp", zp)])
    _check(model, {"x": x})


def test_int4_weight_only_matmul():
    """The weight-only int4 LLM form: packed int4 weight initializer [K=11, N=6] (an odd
    element count), blocked DequantizeLinear along K (block 4, remainder 3), MatMul."""
    k, n, block = 11, 6, 4
    w = R.integers(-8, 8, (k, n)).astype(ml_dtypes.int4)
    scale = R.uniform(0.01, 0.1, (3, n)).astype(np.float16)
    model = _model(
        [helper.make_node("DequantizeLinear", ["w", "s"], ["wf"], axis=0, block_size=block),
         helper.make_node("Cast", ["wf"], ["w32"], to=T.FLOAT),
         helper.make_node("MatMul", ["a", "w32"], ["y"])],
        [("a", T.FLOAT, [5, k])], [("y", T.FLOAT, [5, n])], [("w", w), ("s", scale)])
    packed = next(t for t in model.graph.initializer if t.name == "w")
    assert len(packed.raw_data) == (k * n + 1) // 2      # stored packed, two per byte
    a = R.standard_normal((5, k)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"a": a})[0]
    got = kiln.compile(model, db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_dequantize_float8_to_float16():
    x = np.arange(256, dtype=np.uint8).reshape(16, 16).view(ml_dtypes.float8_e4m3fn)
    model = _model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"])],
                   [("x", T.FLOAT8E4M3FN, [16, 16])], [("y", T.FLOAT16, [16, 16])],
                   [("s", np.float16(0.5))])
    _check(model, {"x": x})


def test_an_op_without_low_bit_support_is_refused_by_name():
    model = _model([helper.make_node("BitCast", ["x"], ["y"], to=T.INT8, name="bc")],
                   [("x", T.FLOAT8E4M3FN, [3])], [("y", T.INT8, [3])], opset=26)
    with pytest.raises(ModelFormatError, match=r"node 'bc' \(BitCast\) reads 'x' of element "
                                               r"type FLOAT8E4M3FN, which Kiln does not "
                                               r"support in BitCast"):
        kiln.compile(model, db=None, jobs=1)


def test_pad_isnan_isinf_on_float8():
    """Pad with a float8 constant value (exact on the stored codes), IsNaN and IsInf of E5M2
    (decoded), over every code."""
    x = np.arange(256, dtype=np.uint8).reshape(16, 16).view(ml_dtypes.float8_e5m2)
    nodes = [helper.make_node("Pad", ["x", "pads", "v"], ["p"]),
             helper.make_node("IsNaN", ["x"], ["n"]), helper.make_node("IsInf", ["x"], ["i"])]
    model = _model(nodes, [("x", T.FLOAT8E5M2, [16, 16])],
                   [("p", T.FLOAT8E5M2, [17, 19]), ("n", T.BOOL, [16, 16]),
                    ("i", T.BOOL, [16, 16])],
                   [("pads", np.array([1, 0, 0, 3])),
                    ("v", np.array(-1.5, ml_dtypes.float8_e5m2))])
    _check(model, {"x": x})


def test_wrong_input_dtype_is_a_clean_error():
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT)],
                   [("x", T.FLOAT8E5M2, [4])], [("y", T.FLOAT, [4])])
    compiled = kiln.compile(model, db=None, jobs=1)
    with pytest.raises(KernelArgumentError, match="float8_e5m2"):
        compiled.run({"x": np.zeros(4, np.uint8)})


def test_blocked_scale_of_the_wrong_shape_is_refused():
    model = _model([helper.make_node("DequantizeLinear", ["x", "s"], ["y"], axis=1,
                                     block_size=4, name="dq")],
                   [("x", T.INT8, [2, 9])], [("y", T.FLOAT, [2, 9])],
                   [("s", np.ones((2, 2), np.float32))])
    with pytest.raises((ModelFormatError, onnx.checker.ValidationError,
                        onnx.shape_inference.InferenceError), match="block"):
        kiln.compile(model, db=None, jobs=1)


def test_symbolic_dims_with_a_low_bit_input():
    """A float8 input with a symbolic dim: kiln.compile gives a DynamicModel, which takes the
    ml_dtypes array and compiles per shape."""
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=T.FLOAT)],
                   [("x", T.FLOAT8E4M3FN, ["n", 3])], [("y", T.FLOAT, ["n", 3])])
    dynamic = kiln.compile(model, db=None, jobs=1)
    for n in (1, 5):
        x = R.integers(0, 256, (n, 3)).astype(np.uint8).view(ml_dtypes.float8_e4m3fn)
        _check(model, {"x": x}, compiled=dynamic)


def test_benchmark_and_export_keep_the_boundary(tmp_path):
    """benchmark() makes ml_dtypes example inputs; an exported model converts at its boundary
    too (the formats travel in the plan)."""
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=T.INT4)],
                   [("x", T.FLOAT8E4M3FN, [2, 3])], [("y", T.INT4, [2, 3])])
    compiled = kiln.compile(model, db=None, jobs=1)
    assert compiled.benchmark(repeat=1) > 0
    path = tmp_path / "m.so"
    compiled.export(str(path))
    loaded = kiln.load_compiled(str(path))
    x = np.array([[1.5, -2.0, 7.5], [0.0, -8.0, 100.0]], np.float32).astype(
        ml_dtypes.float8_e4m3fn)
    _check(model, {"x": x}, compiled=loaded)


def test_low_bit_constants_inside_an_if_branch():
    """A float8 Constant and an int4 initializer inside If branches (renamed when inlined)
    keep their formats: Cast and DequantizeLinear read them as such."""
    c8 = numpy_helper.from_array(np.array([1.5, -448, 0.0625], ml_dtypes.float8_e4m3fn), "c")
    w4 = numpy_helper.from_array(np.array([-8, 7, 3], ml_dtypes.int4), "w")
    then = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=c8),
         helper.make_node("Cast", ["k"], ["o"], to=T.FLOAT)], "then", [],
        [helper.make_tensor_value_info("o", T.FLOAT, [3])])
    other = helper.make_graph(
        [helper.make_node("DequantizeLinear", ["w", "s"], ["o2"])], "else", [],
        [helper.make_tensor_value_info("o2", T.FLOAT, [3])], initializer=[w4])
    for flag in (True, False):
        model = _model([helper.make_node("If", ["cond"], ["y"], then_branch=then,
                                         else_branch=other),
                        helper.make_node("Add", ["y", "x"], ["z"])],
                       [("x", T.FLOAT, [3])], [("z", T.FLOAT, [3])],
                       [("cond", np.array(flag)), ("s", np.array(0.5, np.float32))])
        _check(model, {"x": np.ones(3, np.float32)})
