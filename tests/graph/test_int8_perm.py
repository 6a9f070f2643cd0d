"""Saturation-safe int8 GEMMs (graph/passes/int8/perm.py): on AVX2 without VNNI, a
matmul_int8x4 whose constant weight has a pair-safe matching in every (column panel, group of
4 words) becomes matmul_int8x4_perm (vpshufb + vpmaddubsw); the compiled models equal, bit for
bit, the reference of the graph without the pass and numpy's integer product: uint8 and int8
activations, zero points other than 0, per-channel scales, 3x3 windows with padding and
stride, 1x1 convs over activations read in place, a MatMulInteger, prime row counts, column
counts that are not a multiple of 8. Weights with no safe matching, VNNI targets and no
target keep what the later passes make."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.passes.int8.perm import perm_weight, weight_bytes
from kiln.graph.reference import run_reference
from kiln.te.ops.int8.core import pack_weight_int8x4

from .graph_helpers import make_model
from .test_int8_pointwise import _pointwise_model
from .test_int8_widen import AVX2, _random_a, _reference

R = np.random.default_rng(83)
SKIP = ("saturation-safe int8 pairs",)


def _gaussian(shape, sigma=25.0) -> np.ndarray:
    w = np.clip(np.rint(R.standard_normal(shape) * sigma), -127, 127).astype(np.int8)
    w.flat[0], w.flat[-1] = -127, 127
    return w


def _with_weight(model, name: str, w: np.ndarray):
    for k, init in enumerate(model.graph.initializer):
        if init.name == name:
            model.graph.initializer[k].CopyFrom(onnx.numpy_helper.from_array(w, name))
    return model


def _ops(graph) -> set[str]:
    return set(graph.op_counts())


@pytest.mark.parametrize("xdtype,c,f,h,w,strides,kernel,pads", [
    ("uint8", 16, 24, 5, 4, (1, 1), (3, 3), (1, 1, 1, 1)),    # 24 columns: 8-wide panels
    ("int8", 16, 40, 5, 5, (2, 2), (3, 3), (1, 0, 0, 1)),     # int8 x, stride, uneven pads
    ("uint8", 32, 13, 3, 7, (1, 1), (1, 1), (0, 0, 0, 0)),    # 1x1 in place, 13 columns
])
def test_conv_is_exact(xdtype, c, f, h, w, strides, kernel, pads):
    model = _pointwise_model(xdtype, c, f, h, w, True, strides, kernel, pads)
    model = _with_weight(model, "wq", _gaussian((f, c) + kernel))
    graph = load_onnx(model)
    plain = optimize(graph, target=AVX2, skip=SKIP)
    perm = optimize(graph, target=AVX2)
    # windowed convs of 16+ channels read padded words (int8_implicit.py): the same weight
    assert {"matmul_int8x4_perm", "conv_int8x4_perm"} & _ops(perm), _ops(perm)
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 3,
             "r": R.standard_normal((1, f, oh, ow)).astype(np.float32)}
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(perm, feeds)["y"], want)
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, want)


def _matmul_integer(adtype, m, k, n, azp, b):
    inits = {"b": b, "azp": np.array(azp, adtype), "bzp": np.zeros((), np.int8)}
    node = helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])
    return make_model([node], {"a": ((m, k), adtype)}, [("y", "int32")], inits, 13)


@pytest.mark.parametrize("adtype,m,k,n,azp", [("uint8", 7, 16, 37, 200),
                                              ("int8", 1, 48, 16, -7)])
def test_matmul_integer_is_exact(adtype, m, k, n, azp):
    b = _gaussian((k, n))
    b[0, 1] = -128
    model = _matmul_integer(adtype, m, k, n, azp, b)
    assert "matmul_int8x4_perm" in _ops(optimize(load_onnx(model), target=AVX2))
    a = _random_a(adtype, (m, k))
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_array_equal(got, _reference(a, b, azp, 0))


def test_unsafe_weights_vnni_and_no_target_keep_the_other_forms():
    b = np.full((32, 16), 100, np.int8)            # every pair 200 > 128: no safe matching
    b[3, 5] = -100
    model = _matmul_integer("uint8", 4, 32, 16, 3, b)
    ops = _ops(optimize(load_onnx(model), target=AVX2))
    assert "matmul_int8x4_perm" not in ops and "matmul_int8x4" in ops
    model = _matmul_integer("uint8", 4, 32, 16, 3, _gaussian((32, 16)))
    for target in (None, "llvm -mcpu=znver4"):
        assert "matmul_int8x4_perm" not in _ops(optimize(load_onnx(model), target=target))
    model = _matmul_integer("uint8", 4, 20, 16, 3, _gaussian((20, 16)))   # 5 words: no group
    assert "matmul_int8x4_perm" not in _ops(optimize(load_onnx(model), target=AVX2))


def test_weight_bytes_and_panel_choice():
    w = _gaussian((32, 48))
    np.testing.assert_array_equal(weight_bytes(pack_weight_int8x4(w, 0)), w)
    assert perm_weight(pack_weight_int8x4(w, 0))[0] == 16
    assert perm_weight(pack_weight_int8x4(_gaussian((32, 24)), 0))[0] == 8   # not 16 + 8
