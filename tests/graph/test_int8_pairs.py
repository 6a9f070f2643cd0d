"""int8 GEMMs over int16 activation pairs (graph/passes/int8/pairs.py): an im2col or a pack
writes the activation words' pairs and the GEMM becomes matmul_int16x2 with int8 weight
pairs, on AVX2 without VNNI and for at least MIN_COLUMNS output columns. The compiled models
equal, bit for bit, the reference of the graph without the pass (and numpy's integer
product): u8 and s8 activations, zero points, channel counts not a multiple of 4, prime
column counts past a panel, windows with padding."""
from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import FrozenDict, Node, Value
from kiln.graph.passes import optimize
from kiln.graph.passes.int8.pairs import MIN_COLUMNS
from kiln.graph.reference import IMPLS, run_reference

from .test_int8_pointwise import _pointwise_model
from .test_int8_widen import AVX2, _matmul_integer, _random_a, _reference
# (autouse: these tests pin the int16-pair forms, see there)
from .test_int8_widen import _without_saturation_safe_pairs  # noqa: F401

R = np.random.default_rng(29)
SKIP = ("int16 activation pairs",)


def _ops(graph) -> set[str]:
    return set(graph.op_counts())


@pytest.mark.parametrize("adtype,m,k,n,azp", [
    ("uint8", 7, 37, 131, 200),           # K prime (a padded word), N prime past 8 panels
    ("int8", 1, 5, 128, -7),              # a GEMV, int8 activations (the flip), N = MIN
    ("uint8", 13, 1, 144, 0),             # K = 1, 8-wide panels (144 = 9 x 16)
])
def test_matmul_integer_over_pairs_is_exact(adtype, m, k, n, azp):
    model, b = _matmul_integer(adtype, m, k, n, azp, 0)
    graph = load_onnx(model)
    ops = _ops(optimize(graph, target=AVX2))
    assert {"matmul_int16x2", "widen_int8x4_pairs"} <= ops and "matmul_int8x4" not in ops
    a = _random_a(adtype, (m, k))
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_array_equal(got, _reference(a, b, azp, 0))


@pytest.mark.parametrize("xdtype,c,f,h,w,strides,kernel,pads", [
    ("uint8", 13, 131, 5, 4, (1, 1), (3, 3), (1, 1, 1, 1)),   # 13 channels: a padded word
    ("int8", 8, 128, 5, 5, (2, 2), (3, 2), (1, 0, 0, 1)),     # int8 x, stride, uneven pads
])
def test_conv_over_pairs_is_exact(xdtype, c, f, h, w, strides, kernel, pads):
    model = _pointwise_model(xdtype, c, f, h, w, True, strides, kernel, pads)
    graph = load_onnx(model)
    plain = optimize(graph, target=AVX2, skip=SKIP)
    paired = optimize(graph, target=AVX2)
    assert "matmul_int16x2" in _ops(paired) and "matmul_int8x4" not in _ops(paired)
    assert any(n.op == "im2col_nhwc_int8x4" and n.attr("pairs") for n in paired.nodes)
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 2,
             "r": R.standard_normal((1, f, oh, ow)).astype(np.float32)}
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(paired, feeds)["y"], want)
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, want)


def test_narrow_gemms_vnni_and_no_target_keep_the_words():
    model, _ = _matmul_integer("uint8", 4, 20, MIN_COLUMNS - 1, 0, 0)
    assert "matmul_int16x2" not in _ops(optimize(load_onnx(model), target=AVX2))
    model, _ = _matmul_integer("uint8", 4, 20, 160, 0, 0)
    for target in (None, "llvm -mcpu=znver4"):
        assert "matmul_int16x2" not in _ops(optimize(load_onnx(model), target=target))


def test_pair_op_references():
    """widen_int8x4_pairs and matmul_int16x2's references against numpy by hand."""
    words = R.integers(-2 ** 31, 2 ** 31, size=(3, 6), dtype=np.int64).astype(np.int32)
    x = Value("x", (3, 6), "int32")
    y = Value("y", (3, 12), "int32")
    for block in (1, 2, 3, 6):
        got = IMPLS["widen_int8x4_pairs"](Node("widen_int8x4_pairs", (x,), (y,),
                                               FrozenDict({"block": block})), words)
        b = words.view(np.uint8).reshape(3, 6, 4).astype(np.int32)
        for k in range(6):
            g, j = divmod(k, block)
            even = b[:, k, 0] | (b[:, k, 2] << 16)
            odd = b[:, k, 1] | (b[:, k, 3] << 16)
            np.testing.assert_array_equal(got[:, (2 * g) * block + j], even)
            np.testing.assert_array_equal(got[:, (2 * g + 1) * block + j], odd)
    a16 = R.integers(0, 256, size=(5, 14)).astype(np.int16)       # 7 pairs
    w8 = R.integers(-128, 128, size=(14, 9)).astype(np.int8)
    a = np.ascontiguousarray(a16).view(np.int32)                   # [5, 7]
    w = np.ascontiguousarray(w8.reshape(7, 2, 9).transpose(0, 2, 1)).view(np.int16)[..., 0]
    node = Node("matmul_int16x2", (Value("a", (5, 7), "int32"), Value("w", (7, 9), "int16")),
                (Value("o", (5, 9), "int32"),), FrozenDict())
    np.testing.assert_array_equal(IMPLS["matmul_int16x2"](node, a, w),
                                  a16.astype(np.int32) @ w8.astype(np.int32))
