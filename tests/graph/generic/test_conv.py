"""Generic conv2d and 2-D pooling (codegen/generic/conv.py, graph/generic/ops_conv.py)
against onnxruntime and Kiln's numpy reference, on awkward shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.codegen.target import Target
from kiln.graph.generic.compile import compile_generic, generic_graph
from kiln.graph.generic.lowering import Unsupported
from kiln.graph.generic.ops_conv import interior, pack_weight
from kiln.graph.reference import run_reference
from tests.graph.graph_helpers import make_model, one_node_model
from tests.graph.generic.helpers import assert_generic_matches_ort, run_generic


def _conv_model(x, w, k, s=(1, 1), p=(0, 0, 0, 0), g=1, d=(1, 1)):
    return one_node_model("Conv", {"x": x}, {"w": w}, kernel_shape=list(k), strides=list(s),
                          pads=list(p), group=g, dilations=list(d))


def _reference(model, x):
    """Kiln's numpy reference of the generic tier's graph of `model` on input x."""
    graph = generic_graph(model)
    return run_reference(graph, {"x": x})[graph.outputs[0].name]


def _check_conv(rng, n, c, h, wd, o, k, s=(1, 1), p=(0, 0, 0, 0), g=1, d=(1, 1)):
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = rng.standard_normal((o, c // g) + tuple(k)).astype(np.float32)
    assert_generic_matches_ort(_conv_model(x, w, k, s, p, g, d), {"x": x}, rtol=1e-4,
                               atol=1e-4)


# (N, C, H, W, O, kernel, strides, pads, groups, dilations): dense, 1x1, strided, patch
# embeddings, asymmetric pads, sizes 1 and primes, channel counts off the block of 16
DENSE = [
    (1, 3, 9, 9, 5, (3, 3), (1, 1), (1, 1, 1, 1), 1, (1, 1)),
    (2, 17, 13, 29, 33, (3, 3), (2, 2), (1, 1, 1, 1), 1, (1, 1)),
    (1, 16, 20, 20, 16, (1, 1), (1, 1), (0, 0, 0, 0), 1, (1, 1)),
    (1, 19, 7, 23, 37, (1, 1), (2, 2), (0, 0, 0, 0), 1, (1, 1)),
    (1, 3, 32, 32, 8, (4, 4), (4, 4), (0, 0, 0, 0), 1, (1, 1)),
    (1, 3, 32, 48, 24, (16, 16), (16, 16), (0, 0, 0, 0), 1, (1, 1)),
    (1, 3, 19, 19, 7, (7, 7), (2, 2), (3, 3, 3, 3), 1, (1, 1)),
    (1, 5, 1, 1, 3, (1, 1), (1, 1), (0, 0, 0, 0), 1, (1, 1)),
    (1, 4, 1, 17, 6, (1, 3), (1, 2), (0, 1, 0, 1), 1, (1, 1)),
    (1, 6, 11, 11, 8, (3, 3), (1, 1), (2, 2, 2, 2), 1, (2, 2)),
    (1, 4, 5, 6, 3, (5, 5), (1, 1), (2, 0, 1, 3), 1, (1, 1)),
    (1, 2, 3, 3, 2, (3, 3), (1, 1), (2, 2, 2, 2), 1, (1, 1)),   # taps mostly in padding
    (1, 7, 40, 3, 9, (9, 9), (1, 1), (4, 4, 4, 4), 1, (1, 1)),
]
GROUPED = [
    (1, 8, 7, 7, 8, (3, 3), (1, 1), (1, 1, 1, 1), 8, (1, 1)),        # depthwise
    (1, 12, 11, 37, 12, (5, 5), (2, 2), (2, 2, 2, 2), 12, (1, 1)),    # depthwise s2
    (2, 17, 19, 35, 17, (7, 7), (1, 1), (3, 3, 3, 3), 17, (1, 1)),   # depthwise 7x7
    (1, 5, 13, 13, 5, (9, 9), (1, 1), (4, 4, 4, 4), 5, (1, 1)),
    (1, 3, 9, 10, 6, (3, 3), (1, 1), (1, 1, 1, 1), 3, (1, 1)),        # channel multiplier 2
    (1, 4, 10, 33, 4, (1, 9), (1, 1), (0, 4, 0, 4), 4, (1, 1)),
    (1, 4, 33, 10, 4, (9, 1), (1, 1), (4, 0, 4, 0), 4, (1, 1)),
    (1, 3, 9, 9, 3, (3, 3), (2, 2), (2, 2, 2, 2), 3, (2, 2)),         # dilated depthwise
    (2, 8, 9, 9, 16, (3, 3), (1, 1), (1, 1, 1, 1), 4, (1, 1)),        # grouped
    (1, 40, 6, 7, 40, (3, 3), (2, 2), (1, 1, 1, 1), 5, (1, 1)),
    (1, 64, 5, 5, 48, (1, 1), (1, 1), (0, 0, 0, 0), 2, (1, 1)),       # 24 per group: 2 blocks
    # conv.dense's tiles of 2 blocks (AVX-512): 2 per group, 5 (2 tiles + 1 alone), 3 of 2
    (1, 6, 5, 9, 64, (3, 3), (1, 1), (1, 1, 1, 1), 2, (1, 1)),
    (1, 4, 6, 15, 80, (3, 3), (1, 1), (1, 0, 0, 1), 1, (1, 1)),
    (2, 9, 3, 31, 99, (1, 1), (1, 1), (0, 0, 0, 0), 3, (1, 1)),
    # stride 2 (span reads, codegen/emit_expr._strided_load): rows of 2+ vectors and a
    # partial one, asymmetric pads, dilation, a channel multiplier, a last lane reading
    # the input's last element
    (1, 5, 9, 67, 5, (3, 3), (2, 2), (1, 1, 1, 1), 5, (1, 1)),
    (1, 3, 7, 35, 6, (3, 3), (2, 2), (0, 1, 1, 0), 3, (1, 1)),
    (1, 4, 8, 71, 4, (5, 5), (2, 2), (2, 2, 2, 2), 4, (2, 2)),
    (1, 2, 5, 97, 2, (3, 3), (2, 2), (0, 0, 0, 0), 2, (1, 1)),
    (1, 3, 4, 5, 3, (3, 3), (2, 2), (1, 1, 1, 1), 3, (1, 1)),
]


@pytest.mark.parametrize("case", DENSE + GROUPED, ids=str)
def test_conv_matches_onnxruntime(case, rng):
    _check_conv(rng, *case)


def test_conv_then_relu(rng):
    """A conv feeding another generic kernel (the planner hands its output on)."""
    x = rng.standard_normal((1, 4, 6, 6)).astype(np.float32)
    w = rng.standard_normal((20, 4, 3, 3)).astype(np.float32)
    model = make_model([helper.make_node("Conv", ["x", "w"], ["c"], kernel_shape=[3, 3],
                                         pads=[1, 1, 1, 1]),
                        helper.make_node("Relu", ["c"], ["y"])],
                       {"x": x}, ["y"], inits={"w": w})
    assert_generic_matches_ort(model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_conv_runs_repeat(rng):
    x = rng.standard_normal((1, 5, 9, 9)).astype(np.float32)
    w = rng.standard_normal((7, 5, 3, 3)).astype(np.float32)
    gm = compile_generic(_conv_model(x, w, (3, 3), p=(1, 1, 1, 1)), Target.native(), 2)
    for _ in range(2):
        x = rng.standard_normal((1, 5, 9, 9)).astype(np.float32)
        want = _reference(_conv_model(x, w, (3, 3), p=(1, 1, 1, 1)), x)
        np.testing.assert_allclose(gm.run([x])[0], want, rtol=1e-4, atol=1e-4)


def test_runtime_weight_is_unsupported(rng):
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    model = one_node_model("Conv", {"x": x, "w": w}, kernel_shape=[3, 3])
    with pytest.raises(Unsupported, match="weight is not a constant"):
        compile_generic(model, Target.native(), 1)


def test_pack_weight_blocks_and_zero_fills():
    w = np.arange(2 * 18 * 3 * 1 * 2, dtype=np.float32).reshape(36, 3, 1, 2)
    packed = pack_weight(w, groups=2)                     # 18 per group: 2 blocks of 16
    assert packed.shape == (2, 2, 3, 1, 2, 16)
    np.testing.assert_array_equal(packed[1, 1, 2, 0, 1, :2], w[18 + 16:18 + 18, 2, 0, 1])
    assert not packed[:, 1, ..., 2:].any()


def test_dense_tile_follows_the_target_registers():
    """AVX-512's 32 registers take two blocks of output channels per tile, AVX2's 16 one;
    the AVX2 build (compiled, not run) keeps its accumulators out of the stack."""
    from kiln.codegen import Target, build
    from kiln.codegen.generic.conv import TILE_NARROW, TILE_WIDE, _dense, tile_shape
    assert tile_shape(Target.from_string("llvm -mcpu=znver3")) == TILE_NARROW == (1, 6)
    assert tile_shape(Target.from_string("llvm -mcpu=znver4")) == TILE_WIDE == (2, 7)
    assert tile_shape(None) == TILE_NARROW
    avx2 = Target.from_string("llvm -mcpu=znver3")
    asm = build(_dense(avx2), target=avx2, cache_kernel=False).asm()
    assert "vfmadd231ps" in asm and "%ymm" in asm and "Spill" not in asm


@pytest.mark.parametrize("size,out,k,s,d,p,want", [
    (10, 10, 3, 1, 1, 1, (1, 9)), (10, 5, 3, 2, 1, 1, (1, 5)), (3, 3, 3, 1, 1, 1, (1, 2)),
    (2, 4, 3, 1, 1, 2, (0, 0)), (16, 1, 16, 16, 1, 0, (0, 1)), (9, 5, 3, 2, 2, 2, (1, 4))])
def test_interior(size, out, k, s, d, p, want):
    assert interior(size, out, k, s, d, p) == want
    lo, hi = want
    for o in range(out):   # exactly the outputs whose taps all lie in the row
        inside = all(0 <= o * s - p + j * d < size for j in range(k))
        assert inside == (lo <= o < hi), o


# ------------------------------------------------------------------ pooling
POOLS = [
    # (shape, kernel, strides, pads, ceil_mode, dilations)
    ((2, 3, 13, 41), (3, 3), (2, 2), (1, 1, 1, 1), 0, (1, 1)),
    ((2, 3, 13, 41), (3, 3), (2, 2), (1, 1, 1, 1), 1, (1, 1)),
    ((1, 4, 32, 32), (2, 2), (2, 2), (0, 0, 0, 0), 0, (1, 1)),
    ((1, 5, 17, 17), (3, 3), (1, 1), (1, 1, 1, 1), 0, (1, 1)),
    ((1, 2, 1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 0, (1, 1)),
    ((1, 3, 7, 38), (3, 2), (2, 3), (1, 0, 1, 1), 1, (1, 1)),
    ((1, 2, 11, 35), (3, 3), (1, 2), (2, 2, 2, 2), 0, (2, 2)),
    ((1, 3, 9, 65), (3, 3), (2, 2), (1, 1, 1, 1), 0, (1, 1)),      # stride 2, odd widths
    ((1, 2, 6, 31), (2, 2), (2, 2), (0, 0, 0, 0), 1, (1, 1)),
    ((1, 2, 5, 97), (3, 3), (2, 2), (0, 0, 0, 0), 0, (1, 1)),
    ((1, 2, 7, 70), (3, 3), (2, 2), (1, 0, 0, 1), 0, (2, 2)),
]


@pytest.mark.parametrize("case", POOLS, ids=str)
def test_max_pool_matches_onnxruntime(case, rng):
    shape, k, s, p, ceil, d = case
    x = rng.standard_normal(shape).astype(np.float32)
    model = one_node_model("MaxPool", {"x": x}, kernel_shape=list(k), strides=list(s),
                           pads=list(p), ceil_mode=ceil, dilations=list(d))
    assert_generic_matches_ort(model, {"x": x})


@pytest.mark.parametrize("count_include_pad", [0, 1])
@pytest.mark.parametrize("case", POOLS, ids=str)
def test_avg_pool_matches_onnxruntime(case, count_include_pad, rng):
    shape, k, s, p, ceil, d = case
    x = rng.standard_normal(shape).astype(np.float32)
    model = one_node_model("AveragePool", {"x": x}, kernel_shape=list(k), strides=list(s),
                           pads=list(p), ceil_mode=ceil, dilations=list(d),
                           count_include_pad=count_include_pad, opset=19)
    got = run_generic(model, {"x": x})[0]
    np.testing.assert_allclose(got, _reference(model, x), rtol=1e-5, atol=1e-6)
    assert_generic_matches_ort(model, {"x": x})


# ------------------------------------------------------------------ property
@settings(max_examples=25, deadline=None)
@given(st.data())
def test_conv_property(data):
    """Any small conv (dense, grouped, depthwise; padding, stride, dilation) equals Kiln's
    numpy reference."""
    g = data.draw(st.sampled_from([1, 1, 2, 3, "dw"]), label="groups")
    cg = data.draw(st.integers(1, 5), label="Cg")
    if g == "dw":
        g, cg, og = data.draw(st.integers(1, 20), label="C"), 1, 1
    else:
        og = data.draw(st.integers(1, 20), label="Og")
    kh, kw = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 5))
    sh, sw = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    dh, dw = data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2))
    pads = [data.draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw)]
    h = data.draw(st.integers(max(1, (kh - 1) * dh + 1 - pads[0] - pads[2]), 12))
    wd = data.draw(st.integers(max(1, (kw - 1) * dw + 1 - pads[1] - pads[3]), 40))
    rng = np.random.default_rng(data.draw(st.integers(0, 1000)))
    x = rng.standard_normal((1, g * cg, h, wd)).astype(np.float32)
    w = rng.standard_normal((g * og, cg, kh, kw)).astype(np.float32)
    model = _conv_model(x, w, (kh, kw), (sh, sw), pads, g, (dh, dw))
    np.testing.assert_allclose(run_generic(model, {"x": x})[0], _reference(model, x),
                               rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ resize
RESIZES = [
    # (mode, coordinate mode, nearest mode, scales)
    ("nearest", "asymmetric", "floor", (1, 1, 2, 2)),          # HRNet's upsampling
    ("nearest", "asymmetric", "floor", (1, 1, 8, 8)),
    ("nearest", "half_pixel", "round_prefer_floor", (1, 1, 0.5, 1.5)),
    ("nearest", "half_pixel", "round_prefer_ceil", (1, 1, 3, 1.7)),
    ("nearest", "tf_half_pixel_for_nn", "ceil", (1, 1, 2, 3)),
    ("linear", "half_pixel", "floor", (1, 1, 2, 2)),
    ("linear", "half_pixel", "floor", (1, 1, 0.5, 1.5)),
    ("linear", "pytorch_half_pixel", "floor", (1, 1, 3, 1.7)),
    ("linear", "asymmetric", "floor", (1, 1, 2.5, 1)),
    ("linear", "half_pixel_symmetric", "floor", (1, 1, 1.5, 0.6)),
    ("linear", "align_corners", "floor", (1, 1, 2, 2)),
]


def _resize_model(x, mode, coord, nearest, scales, opset=18):
    return one_node_model("Resize", {"x": x}, {"roi": np.array([], np.float32),
                                               "s": np.array(scales, np.float32)},
                          mode=mode, coordinate_transformation_mode=coord,
                          nearest_mode=nearest, opset=opset)


@pytest.mark.parametrize("case", RESIZES, ids=str)
def test_resize_matches_onnxruntime(case, rng):
    x = rng.standard_normal((2, 3, 5, 7)).astype(np.float32)
    model = _resize_model(x, *case, opset=11 if case[1] == "tf_half_pixel_for_nn" else 18)
    assert_generic_matches_ort(model, {"x": x})


def test_resize_align_corners_on_a_fractional_size_follows_the_reference(rng):
    """Kiln's resize takes align_corners' ratio from in * scale (onnx's reference does);
    onnxruntime takes it from the rounded size, so only the reference is compared."""
    x = rng.standard_normal((1, 2, 5, 7)).astype(np.float32)
    model = _resize_model(x, "linear", "align_corners", "floor", (1, 1, 0.5, 1.5))
    np.testing.assert_allclose(run_generic(model, {"x": x})[0], _reference(model, x),
                               rtol=1e-5, atol=1e-5)


def test_resize_cubic_is_unsupported(rng):
    x = rng.standard_normal((1, 1, 4, 4)).astype(np.float32)
    with pytest.raises(Unsupported, match="cubic"):
        compile_generic(_resize_model(x, "cubic", "half_pixel", "floor", (1, 1, 2, 2)),
                        Target.native(), 1)


# ------------------------------------------------------------------ pad
def _pad_model(x, pads, mode, value=None):
    inits = {"p": np.array(pads, np.int64)}
    if value is not None:
        inits["v"] = np.array(value, x.dtype)
    return one_node_model("Pad", {"x": x}, inits, mode=mode)


PADS = [
    ((2, 3, 5, 7), (0, 0, 1, 2, 0, 0, 3, 1)),
    ((2, 3, 5, 7), (0, 1, 0, 2, 1, 0, 2, 0)),
    ((2, 3, 5, 7), (0, 0, -1, 2, 0, 0, 1, -2)),        # crops
    ((37,), (3, 17)),
    ((1, 1, 1), (0, 0, 0, 0, 0, 0)),
    ((2, 2, 3, 2, 3, 2, 4), (0, 0, 0, 1, 0, 0, 2, 0, 0, 0, 1, 0, 0, 1)),   # 7-D, merges to 4
    ((1, 8, 8, 64), (0, 0, 0, 0, 0, 6, 6, 0)),         # EfficientViT's window pad
]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("case", PADS, ids=str)
def test_pad_matches_onnxruntime(case, mode, rng):
    shape, pads = case
    x = rng.standard_normal(shape).astype(np.float32)
    assert_generic_matches_ort(_pad_model(x, pads, mode, 1.5 if mode == "constant" else None),
                               {"x": x})


@pytest.mark.parametrize("dtype", ["int64", "bool", "float16", "int32"])
def test_pad_other_element_sizes(dtype, rng):
    x = (rng.standard_normal((3, 17)) * 10).astype(dtype)
    value = True if dtype == "bool" else 7
    assert_generic_matches_ort(_pad_model(x, (1, 2, 3, 16), "constant", value), {"x": x})
    assert_generic_matches_ort(_pad_model(x, (2, 3, 1, 4), "edge"), {"x": x})


def test_pad_runtime_value(rng):
    x = rng.standard_normal((2, 5)).astype(np.float32)
    model = one_node_model("Pad", {"x": x, "v": np.array(-2.0, np.float32)},
                           {"p": np.array([1, 0, 0, 3], np.int64)}, order=["x", "p", "v"],
                           mode="constant")
    assert_generic_matches_ort(model, {"x": x, "v": np.array(-2.0, np.float32)})


def test_pad_too_deep_is_unsupported(rng):
    x = rng.standard_normal((2,) * 7).astype(np.float32)
    with pytest.raises(Unsupported, match="6"):
        compile_generic(_pad_model(x, (1,) * 14, "constant", 0.0), Target.native(), 1)


def test_reflect_pad_as_wide_as_the_axis_is_unsupported(rng):
    x = rng.standard_normal((2, 3)).astype(np.float32)
    with pytest.raises(Unsupported, match="reflect"):
        compile_generic(_pad_model(x, (0, 3, 0, 0), "reflect"), Target.native(), 1)


@settings(max_examples=25, deadline=None)
@given(st.data())
def test_pad_property(data):
    """Any small pad (1-4 dims, crops, every mode) equals onnxruntime."""
    rank = data.draw(st.integers(1, 4))
    shape = [data.draw(st.integers(1, 6)) for _ in range(rank)]
    mode = data.draw(st.sampled_from(["constant", "reflect", "edge"]))
    low = 0 if mode != "constant" else -1
    pads = [data.draw(st.integers(max(low, -shape[k % rank] // 2 if low else 0),
                                  shape[k % rank] - 1 if mode == "reflect" else 4))
            for k in range(2 * rank)]
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    assert_generic_matches_ort(_pad_model(x, pads, mode, 0.5 if mode == "constant" else None),
                               {"x": x})
