"""The operators of graph/onnx/more.py: Kiln-compiled code and the numpy reference executor
against onnxruntime, on one-node models with awkward shapes (1, primes) and negative axes."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.reference import run_reference
from kiln.te.errors import ModelFormatError

from .graph_helpers import one_node_model, ort_run

R = np.random.default_rng(11)


def f32(*shape, lo=-2.0, hi=2.0):
    return R.uniform(lo, hi, size=shape).astype(np.float32)


def ints(*shape, lo=-9, hi=10, dtype="int64"):
    return R.integers(lo, hi, size=shape).astype(dtype)


def model(op, feeds, inits=None, **kw):
    return one_node_model(op, feeds, inits, **kw), feeds


def check(m, feeds, rtol=1e-5, atol=1e-6):
    """Kiln's compiled model and the numpy reference both agree with onnxruntime."""
    want = ort_run(m, feeds)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)
    ref = list(run_reference(load_onnx(m), feeds).values())
    for g, r, w in zip(got, ref, want):
        for ours in (g, r):
            assert ours.shape == w.shape and ours.dtype == w.dtype, (ours.dtype, w.dtype)
            np.testing.assert_allclose(ours.astype(np.float64), w.astype(np.float64),
                                       rtol=rtol, atol=atol)


X = f32(3, 7)
UNIT = f32(3, 7, lo=-0.9, hi=0.9)
CASES = {
    **{op.lower(): model(op, {"x": X}) for op in (
        "Sin", "Cos", "Atan", "Sinh", "Cosh", "Asinh", "Floor", "Ceil", "Sign", "Softplus",
        "Softsign", "Elu", "Selu", "Celu", "ThresholdedRelu", "Shrink")},
    "tan": model("Tan", {"x": UNIT}),
    "asin": model("Asin", {"x": UNIT}),
    "acos": model("Acos", {"x": UNIT}),
    "atanh": model("Atanh", {"x": UNIT}),
    "acosh": model("Acosh", {"x": f32(5, lo=1.0, hi=4.0)}),
    "round-half-even": model("Round", {"x": np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6],
                                                     np.float32)}),
    "mish": model("Mish", {"x": X}, opset=18),
    "elu-alpha": model("Elu", {"x": X}, alpha=0.3),
    "sign-int": model("Sign", {"x": ints(11)}),
    "isnan": model("IsNaN", {"x": np.array([1.0, np.nan, -np.inf, 0.0], np.float32)}),
    "isinf-neg": model("IsInf", {"x": np.array([1.0, np.nan, -np.inf, np.inf], np.float32)},
                       detect_positive=0),
    "prelu": model("PRelu", {"x": f32(2, 3, 5), "s": f32(3, 1)}),
    "less_equal": model("LessOrEqual", {"a": ints(3, 7, dtype="int32"),
                                        "b": ints(7, dtype="int32")}),
    "greater_equal": model("GreaterOrEqual", {"a": X, "b": f32(1, 7)}),
    "xor": model("Xor", {"a": X > 0, "b": f32(3, 1) > 0}),
    "max-variadic": model("Max", {"a": X, "b": f32(7), "c": f32(3, 1)}),
    "min-one": model("Min", {"a": X}),
    "sum": model("Sum", {"a": X, "b": f32(1, 7), "c": f32(3, 7)}),
    "mean": model("Mean", {"a": X, "b": f32(3, 1)}),
    "mod-int": model("Mod", {"a": ints(13), "b": np.array([3, -3, 5, -5, 7, 2, -2, 4, -4, 1, 6,
                                                             -6, 9])}),
    "mod-int-fmod": model("Mod", {"a": ints(13, dtype="int32"),
                                  "b": np.array([3, -3, 5, -5, 7, 2, -2, 4, -4, 1, 6, -6, 9],
                                                np.int32)}, fmod=1),
    "mod-float-fmod": model("Mod", {"a": f32(11, lo=-9, hi=9), "b": f32(11, lo=0.5, hi=3)},
                            fmod=1),
    "bitshift-left": model("BitShift", {"a": ints(7, lo=0, hi=200, dtype="uint32"),
                                        "b": ints(7, lo=0, hi=9, dtype="uint32")},
                           direction="LEFT"),
    "bitshift-right-u16": model("BitShift", {"a": ints(7, lo=0, hi=60000, dtype="uint16"),
                                             "b": ints(7, lo=0, hi=9, dtype="uint16")},
                                direction="RIGHT"),
    "bitwise-and": model("BitwiseAnd", {"a": ints(5, dtype="int16"), "b": ints(5, dtype="int16")}),
    "bitwise-not": model("BitwiseNot", {"a": ints(5, lo=0, hi=250, dtype="uint8")}),
    "castlike": model("CastLike", {"x": X, "like": ints(1, dtype="int32")}),
    "size": model("Size", {"x": X}),
    "reduce-l1": model("ReduceL1", {"x": f32(2, 3, 5)}, {"axes": np.array([-1], np.int64)},
                       keepdims=0),
    "reduce-sumsquare": model("ReduceSumSquare", {"x": f32(2, 3, 5)},
                              {"axes": np.array([0, 2], np.int64)}),
    "reduce-logsumexp": model("ReduceLogSumExp", {"x": f32(2, 3, 5, lo=-40, hi=40)},
                              {"axes": np.array([1], np.int64)}, keepdims=0),
    "reduce-logsum": model("ReduceLogSum", {"x": f32(3, 5, lo=0.1, hi=2)}),
    "reduce-prod": model("ReduceProd", {"x": f32(3, 5)}, {"axes": np.array([-2], np.int64)}),
    "argmax-last": model("ArgMax", {"x": np.array([[1, 3, 3, 2], [5, 5, 1, 0]], np.float32)},
                         axis=-1, select_last_index=1),
    "argmin-keep": model("ArgMin", {"x": f32(3, 1, 7)}, axis=2, keepdims=1),
    "argmax-axis0": model("ArgMax", {"x": ints(5, 3, dtype="int32")}, keepdims=0),
    "cumsum": model("CumSum", {"x": f32(3, 7)}, {"axis": np.array(-1, np.int64)}),
    "cumsum-rev-excl": model("CumSum", {"x": ints(5, 2, dtype="int32")},
                             {"axis": np.array(0, np.int32)}, exclusive=1, reverse=1),
    "gather_elements": model("GatherElements", {"x": f32(3, 7), "i": ints(3, 5, lo=-7, hi=7)},
                             axis=1),
    "gather_elements-axis0": model("GatherElements", {"x": f32(5, 2),
                                                      "i": ints(3, 2, lo=-5, hi=5)}),
    "scatter_elements": model("ScatterElements", {"x": f32(3, 7), "u": f32(3, 2)},
                              {"i": np.array([[0, 6], [-1, 2], [3, 3]], np.int64)}, axis=-1,
                              order=list("xiu"), reduction="add"),
    "scatter_elements-none": model("ScatterElements", {"x": f32(5, 3), "u": f32(2, 3)},
                                   {"i": np.array([[4, 0, 1], [2, 1, -1]], np.int64)},
                                   order=list("xiu")),
    "scatter_nd": model("ScatterND", {"x": f32(5, 3), "u": f32(2, 3)},
                        {"i": np.array([[4], [1]], np.int64)}, order=list("xiu")),
    "scatter_nd-mul": model("ScatterND", {"x": f32(4, 3), "u": f32(3)},
                            {"i": np.array([[0, 1], [3, 2], [0, 1]], np.int64)},
                            reduction="mul", order=list("xiu")),
    "trilu-upper": model("Trilu", {"x": f32(2, 5, 3)}, {"k": np.array(1, np.int64)}),
    "trilu-lower-runtime-k": model("Trilu", {"x": f32(5, 3), "k": np.array(-1, np.int64)},
                                   upper=0),
    "tile": model("Tile", {"x": f32(2, 3)}, {"r": np.array([3, 1], np.int64)}),
    "depth_to_space-crd": model("DepthToSpace", {"x": f32(1, 8, 2, 3)}, blocksize=2,
                                mode="CRD"),
    "depth_to_space": model("DepthToSpace", {"x": f32(2, 9, 1, 2)}, blocksize=3),
    "space_to_depth": model("SpaceToDepth", {"x": f32(1, 3, 4, 6)}, blocksize=2),
    "onehot": model("OneHot", {"i": ints(2, 3, lo=-5, hi=5), "v": np.array([0.5, 2.0],
                                                                           np.float32)},
                    {"d": np.array(5, np.int64)}, axis=-2, order=list("idv")),
    "hardmax": model("Hardmax", {"x": np.array([[1, 3, 3, 2], [5, 5, 1, 0]], np.float32)}),
    "lp_norm-l1": model("LpNormalization", {"x": f32(3, 5)}, axis=0, p=1),
    "lp_norm": model("LpNormalization", {"x": f32(3, 5)}),
    "mvn": model("MeanVarianceNormalization", {"x": f32(2, 3, 5, 1)}, opset=9),
    "instance_norm": model("InstanceNormalization", {"x": f32(2, 3, 5), "s": f32(3),
                                                     "b": f32(3)}),
    "layer_norm-stats": model("LayerNormalization", {"x": f32(2, 3, 5), "s": f32(3, 5),
                                                     "b": f32(3, 5)}, n_out=3, axis=-2),
    "eyelike": model("EyeLike", {"x": f32(3, 5)}, k=1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_matches_onnxruntime(case):
    m, feeds = CASES[case]
    check(m, feeds, rtol=1e-4, atol=1e-5)


def test_rms_normalization_against_numpy():
    """onnxruntime may lack opset 23, so RMSNormalization is checked against numpy."""
    x, s = f32(2, 3, 5), f32(5)
    m, feeds = model("RMSNormalization", {"x": x, "s": s}, opset=23, epsilon=1e-3)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    want = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + 1e-3) * s
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_trilu_runtime_k_is_an_argument():
    """k from a graph input is read at run time: one compiled model, two values of k."""
    m, feeds = CASES["trilu-lower-runtime-k"]
    compiled = kiln.compile(m, db=None, jobs=1)
    for k in (-1, 2):
        got = compiled.run({"x": feeds["x"], "k": np.array(k, np.int64)})[0]
        np.testing.assert_array_equal(got, np.tril(feeds["x"], k))


def test_mod_by_zero_float_follows_fmod():
    m, feeds = model("Mod", {"a": np.array([1.5, -2.0], np.float32),
                             "b": np.array([0.0, np.inf], np.float32)}, fmod=1)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, np.fmod(feeds["a"], feeds["b"]))


def test_cumsum_axis_must_be_static():
    m, _ = model("CumSum", {"x": f32(3, 4), "axis": np.array(0, np.int64)})
    with pytest.raises(ModelFormatError, match="CumSum.*'axis'.*compile time"):
        load_onnx(m)


def test_lp_norm_p3_is_unsupported():
    m, _ = model("LpNormalization", {"x": f32(3, 4)}, p=3)
    with pytest.raises(kiln.te.errors.UnsupportedOperatorError, match="p=3"):
        load_onnx(m)


@pytest.mark.parametrize("opset,per", [(21, 6)])
def test_group_normalization_against_numpy(opset, per):
    """opset 21 scales per channel (onnx's shape inference gives no output type for it, so
    numpy is the oracle); the per-group scale of opset 18 is deprecated in onnx's checker."""
    x, s, b = f32(2, 6, 5), f32(per), f32(per)
    m, feeds = model("GroupNormalization", {"x": x, "s": s, "b": b}, opset=opset, num_groups=3)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    g = x.reshape(2, 3, 10)
    y = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    y = y.reshape(2, 6, 5)
    s, b = (np.repeat(s, 2), np.repeat(b, 2)) if per == 3 else (s, b)
    np.testing.assert_allclose(got, y * s[:, None] + b[:, None], rtol=1e-4, atol=1e-5)


LOSS_X = f32(3, 5, 2)
LOSS_T = np.array([[0, 4], [2, -1], [-1, 1]], np.int64)
LOSSES = {
    "nll-mean-weight-ignore": model("NegativeLogLikelihoodLoss", {"x": LOSS_X, "t": LOSS_T,
                                                                  "w": f32(5, lo=0.1, hi=1)},
                                    ignore_index=-1),
    "nll-none": model("NegativeLogLikelihoodLoss", {"x": f32(4, 3),
                                                    "t": np.array([2, 0, 1, 1], np.int64)},
                      reduction="none"),
    "sce-sum-logprob": model("SoftmaxCrossEntropyLoss", {"x": LOSS_X, "t": LOSS_T},
                             n_out=2, reduction="sum", ignore_index=-1),
    "sce-mean": model("SoftmaxCrossEntropyLoss", {"x": f32(7, 3),
                                                  "t": ints(7, lo=0, hi=3)}),
}


@pytest.mark.parametrize("case", sorted(LOSSES))
def test_loss_matches_onnxruntime(case):
    m, feeds = LOSSES[case]
    check(m, feeds, rtol=1e-4, atol=1e-5)


def _attention_ref(q, k, v, mask=None, causal=False, groups=1):
    """Plain numpy attention over [B, H, S, d] (K/V heads repeated `groups` times)."""
    k, v = np.repeat(k, groups, axis=1), np.repeat(v, groups, axis=1)
    s = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s + np.where(mask, 0, -np.inf) if mask.dtype == bool else s + mask
    if causal:
        s = s + np.where(np.tril(np.ones(s.shape[-2:], bool)), 0, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    return (p / p.sum(-1, keepdims=True)) @ v


def test_attention_4d_causal_with_bool_mask():
    q, k, v = f32(2, 3, 5, 4), f32(2, 3, 7, 4), f32(2, 3, 7, 3)
    mask = R.uniform(size=(5, 7)) > 0.3
    mask[:, 0] = True
    m, feeds = model("Attention", {"q": q, "k": k, "v": v, "m": mask}, opset=23, is_causal=1)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_allclose(got, _attention_ref(q, k, v, mask, causal=True), rtol=1e-4,
                               atol=1e-5)


def test_attention_3d_grouped_heads_and_present_kv():
    """3-D inputs split into 4 query heads over 2 KV heads; past K/V are concatenated and
    returned as present_key/present_value."""
    q, k, v = f32(1, 3, 4 * 2), f32(1, 3, 2 * 2), f32(1, 3, 2 * 2)
    pk, pv = f32(1, 2, 5, 2), f32(1, 2, 5, 2)
    m, feeds = model("Attention", {"q": q, "k": k, "v": v, "_": np.zeros(0, np.float32),
                                   "pk": pk, "pv": pv}, opset=23, n_out=3,
                     order=["q", "k", "v", "", "pk", "pv"], q_num_heads=4, kv_num_heads=2)
    del feeds["_"]
    m.graph.input.remove(m.graph.input[3])
    y, present_k, present_v = kiln.compile(m, db=None, jobs=1).run(feeds)
    split = lambda t, h: t.reshape(1, 3, h, 2).transpose(0, 2, 1, 3)  # noqa: E731
    kk = np.concatenate([pk, split(k, 2)], axis=2)
    vv = np.concatenate([pv, split(v, 2)], axis=2)
    want = _attention_ref(split(q, 4), kk, vv, groups=2).transpose(0, 2, 1, 3).reshape(1, 3, 8)
    np.testing.assert_allclose(present_k, kk)
    np.testing.assert_allclose(present_v, vv)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-5)


EINSUM = {
    "matmul-batched": ("bij,bjk->bik", [f32(2, 3, 5), f32(2, 5, 4)]),
    "ellipsis-transpose": ("...ij->...ji", [f32(2, 3, 5)]),
    "implicit-outer": ("i,j", [f32(3), f32(4)]),
    "sum-all": ("ij->", [f32(3, 7)]),
    "three-way": ("ab,bc,c->a", [f32(2, 3), f32(3, 5), f32(5)]),
    "diagonal": ("ii->i", [f32(3, 3)]),
    "trace-implicit": ("ii", [f32(5, 5)]),
    "diagonal-apart-times-vector": ("iji,j->ij", [f32(3, 2, 3), f32(2)]),
}


@pytest.mark.parametrize("case", sorted(EINSUM))
def test_einsum_matches_numpy(case):
    eq, arrays = EINSUM[case]
    feeds = {f"x{k}": a for k, a in enumerate(arrays)}
    m, _ = model("Einsum", feeds, equation=eq)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_allclose(got, np.einsum(eq, *arrays), rtol=1e-5, atol=1e-5)


def test_lp_normalization_of_zeros_is_zero():
    x = np.array([[0.0, 3.0], [0.0, 4.0]], np.float32)
    m, feeds = model("LpNormalization", {"x": x}, axis=0)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_allclose(got, [[0, 0.6], [0, 0.8]], rtol=1e-6)


WINDOWS_1D = {
    "conv1d": model("Conv", {"x": f32(2, 3, 11), "w": f32(4, 3, 3)}, strides=[2],
                    pads=[1, 2], dilations=[1]),
    "conv1d-grouped-same": model("Conv", {"x": f32(1, 4, 7), "w": f32(4, 2, 2)}, group=2,
                                 auto_pad="SAME_UPPER"),
    "conv_transpose1d": model("ConvTranspose", {"x": f32(1, 2, 5), "w": f32(2, 3, 3)},
                              strides=[2], output_padding=[1]),
    "maxpool1d": model("MaxPool", {"x": f32(1, 3, 13)}, kernel_shape=[3], strides=[2],
                       pads=[1, 1]),
    "avgpool1d-ceil": model("AveragePool", {"x": f32(2, 1, 10)}, kernel_shape=[4],
                            strides=[3], ceil_mode=1),
}


@pytest.mark.parametrize("case", sorted(WINDOWS_1D))
def test_1d_windows_match_onnxruntime(case):
    m, feeds = WINDOWS_1D[case]
    check(m, feeds, rtol=1e-4, atol=1e-5)


def test_clip_bounds_from_graph_inputs_are_runtime_arguments():
    x = f32(3, 5)
    m, _ = model("Clip", {"x": x, "lo": np.array(-0.5, np.float32),
                          "hi": np.array(0.25, np.float32)})
    compiled = kiln.compile(m, db=None, jobs=1)
    for lo, hi in ((-0.5, 0.25), (0.0, 1.5)):
        feeds = {"x": x, "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}
        np.testing.assert_array_equal(compiled.run(feeds)[0], np.clip(x, lo, hi))


def test_lp_pool_matches_onnxruntime():
    m, feeds = model("LpPool", {"x": f32(1, 2, 7, 5)}, kernel_shape=[3, 2], strides=[2, 1],
                     pads=[1, 0, 1, 1], p=3)
    check(m, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,padding,align", [
    ("linear", "zeros", 0), ("nearest", "border", 1), ("cubic", "reflection", 0),
    ("linear", "reflection", 1)])
def test_grid_sample_matches_onnxruntime(mode, padding, align):
    """Grid points inside, on and beyond the borders (|g| up to 1.6) of a 5x7 image."""
    m, feeds = model("GridSample", {"x": f32(2, 3, 5, 7), "g": f32(2, 4, 3, 2, lo=-1.6,
                                                                   hi=1.6)},
                     opset=20, mode=mode, padding_mode=padding, align_corners=align)
    check(m, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_rotary_embedding_against_numpy(interleaved):
    """3-D input, 2 heads of 6 features, the first 4 rotated, caches read at position_ids."""
    x, cos, sin = f32(2, 3, 12), f32(7, 2), f32(7, 2)
    pos = np.array([[0, 5, 6], [1, 1, 3]], np.int64)
    m, feeds = model("RotaryEmbedding", {"x": x, "c": cos, "s": sin, "p": pos}, opset=23,
                     num_heads=2, rotary_embedding_dim=4, interleaved=interleaved)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    xs = x.reshape(2, 3, 2, 6)
    c, s = cos[pos][:, :, None, :], sin[pos][:, :, None, :]
    r = xs[..., :4]
    x1, x2 = (r[..., 0::2], r[..., 1::2]) if interleaved else (r[..., :2], r[..., 2:])
    re, im = c * x1 - s * x2, s * x1 + c * x2
    rot = np.stack([re, im], -1).reshape(2, 3, 2, 4) if interleaved else np.concatenate(
        [re, im], -1)
    want = np.concatenate([rot, xs[..., 4:]], -1).reshape(2, 3, 12)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_lrn_matches_onnxruntime():
    m, feeds = model("LRN", {"x": f32(2, 7, 3, 5)}, size=5, alpha=0.3, beta=0.6, bias=1.5)
    check(m, feeds, rtol=1e-4, atol=1e-5)


def test_reverse_sequence_matches_onnxruntime():
    m, feeds = model("ReverseSequence", {"x": f32(5, 3, 2), "lens": np.array([5, 1, 3],
                                                                              np.int64)},
                     batch_axis=1, time_axis=0)
    check(m, feeds)


RESIZE = {
    "nearest-up-asymmetric-floor": ({"scales": np.array([1, 1, 2.0, 1.5], np.float32)},
                                    dict(mode="nearest", nearest_mode="floor",
                                         coordinate_transformation_mode="asymmetric")),
    "nearest-down-half-pixel": ({"scales": np.array([1, 1, 0.6, 0.5], np.float32)},
                                dict(mode="nearest")),
    "linear-up-sizes": ({"sizes": np.array([1, 3, 11, 4], np.int64)}, dict(mode="linear")),
    # with scales, align_corners divides by in * scale - 1 (onnx's reference and node tests)
    # where onnxruntime divides by the rounded size; with sizes they agree
    "linear-align-corners": ({"sizes": np.array([1, 3, 8, 4], np.int64)},
                             dict(mode="linear", coordinate_transformation_mode="align_corners")),
    "cubic-exclude-outside": ({"scales": np.array([1, 1, 2.0, 2.0], np.float32)},
                              dict(mode="cubic", exclude_outside=1, cubic_coeff_a=-0.5)),
    "cubic-pytorch-half-pixel": ({"sizes": np.array([1, 3, 3, 14], np.int64)},
                                 dict(mode="cubic",
                                      coordinate_transformation_mode="pytorch_half_pixel")),
}


@pytest.mark.parametrize("case", sorted(RESIZE))
def test_resize_matches_onnxruntime(case):
    """Constant scales or sizes (an input that decides the output shape)."""
    given, attrs = RESIZE[case]
    inits = {"roi": np.zeros(0, np.float32), **({"scales": given["scales"]} if "scales" in given
                                                 else {"sc": np.zeros(0, np.float32),
                                                       "sizes": given["sizes"]})}
    order = ["x", "roi", "scales"] if "scales" in given else ["x", "roi", "", "sizes"]
    m, feeds = model("Resize", {"x": f32(1, 3, 5, 7)}, inits, opset=19, order=order, **attrs)
    check(m, feeds, rtol=1e-4, atol=1e-5)


def test_resize_antialias_nearest_is_unsupported():
    """(linear and cubic antialias: tests/graph/test_onnx_breadth.py)"""
    m, _ = model("Resize", {"x": f32(1, 1, 4, 4)}, {"roi": np.zeros(0, np.float32),
                                                     "s": np.array([1, 1, .5, .5], np.float32)},
                 opset=19, mode="nearest", antialias=1)
    with pytest.raises(kiln.te.errors.UnsupportedOperatorError, match="antialias"):
        load_onnx(m)
