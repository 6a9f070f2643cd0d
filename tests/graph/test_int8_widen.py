"""int8 weights as int16 pairs (graph/passes/int8/widen.py): chosen from the target (AVX2
without VNNI yes, VNNI or no target no), and the compiled kernels equal numpy's integer
product bit for bit: MatMulInteger (u8 and s8 activations, zero points, K odd / 1 / prime,
N not a multiple of 8, N past one column panel), a QDQ conv per channel through im2col, and
random shapes."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import kiln
from kiln.graph import passes
from kiln.graph.onnx.load import load_onnx
from kiln.graph.passes import optimize
from kiln.graph.passes.int8.widen import widens_int8
from kiln.graph.reference import run_reference

from .graph_helpers import make_model
from .test_int8_pointwise import _pointwise_model

R = np.random.default_rng(17)
AVX2 = "llvm -mcpu=haswell"        # runs on this CPU (and on any AVX2 machine)


@pytest.fixture(autouse=True)
def _without_saturation_safe_pairs(monkeypatch):
    """These tests pin the int16-pair forms: graph/passes/int8/perm.py (which would take the
    weights it can prove safe first; tests/graph/test_int8_perm.py) is off, and so is the
    model cache, whose key does not see the pipeline."""
    monkeypatch.setattr(passes, "PIPELINE", tuple(
        p for p in passes.PIPELINE if p[0] != "saturation-safe int8 pairs"))
    monkeypatch.setenv("KILN_CACHE_DIR", "off")


def _matmul_integer(adtype: str, m: int, k: int, n: int, azp: int, bzp):
    b = R.integers(-128, 128, size=(k, n)).astype(np.int8)
    b[0, 0], b[-1, -1] = -128, 127
    inits = {"b": b, "azp": np.array(azp, adtype), "bzp": np.asarray(bzp, np.int8)}
    node = helper.make_node("MatMulInteger", ["a", "b", "azp", "bzp"], ["y"])
    return make_model([node], {"a": ((m, k), adtype)}, [("y", "int32")], inits, 13), b


def _reference(a, b, azp, bzp):
    return ((a.astype(np.int64) - azp) @ (b.astype(np.int64) - np.asarray(bzp, np.int64))
            ).astype(np.int32)


def _random_a(adtype, shape):
    lo, hi = (0, 256) if adtype == "uint8" else (-128, 128)
    a = R.integers(lo, hi, size=shape).astype(adtype)
    a.flat[0] = hi - 1
    return a


def test_the_target_decides():
    assert widens_int8(AVX2) and widens_int8("llvm -mcpu=znver3")
    assert widens_int8("llvm -mcpu=skylake-avx512")             # AVX-512BW, no VNNI
    assert not widens_int8("llvm -mcpu=znver4") and not widens_int8(None)
    assert not widens_int8("llvm -mcpu=znver3 -mattr=+avxvnni")
    model, _ = _matmul_integer("uint8", 8, 40, 70, 3, 0)
    graph = load_onnx(model)
    weight = {t: next(n for n in optimize(graph, target=t).nodes
                      if n.op == "matmul_int8x4").inputs[1].shape
              for t in (None, "llvm -mcpu=znver4", AVX2)}
    assert weight[None] == weight["llvm -mcpu=znver4"] == (10, 70)     # byte words
    assert weight[AVX2] == (5, 10, 2, 16)                              # pairs in panels


@pytest.mark.parametrize("adtype,m,k,n,azp,bzp", [
    ("uint8", 7, 13, 5, 131, 0),          # K odd, N under one vector
    ("uint8", 3, 1, 37, 0, 0),            # K = 1, N prime past two panels (a tail panel)
    ("int8", 11, 29, 24, -9, 0),          # int8 activations (the flip offset)
    ("uint8", 1, 64, 17, 255, 3),         # a GEMV, a weight zero point
])
def test_matmul_integer_with_pairs_is_exact(adtype, m, k, n, azp, bzp):
    model, b = _matmul_integer(adtype, m, k, n, azp, bzp)
    ops = optimize(load_onnx(model), target=AVX2).nodes
    assert any(n.op == "matmul_int8x4" and len(n.inputs[1].shape) >= 3 for n in ops) \
        or bzp != 0                        # a weight zero point keeps the integer matmul
    a = _random_a(adtype, (m, k))
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_array_equal(got, _reference(a, b, azp, bzp))


@pytest.mark.parametrize("xdtype,c,f,h,w,strides,kernel,pads", [
    ("uint8", 5, 19, 6, 5, (2, 1), (3, 3), (1, 1, 1, 1)),     # im2col, prime filters
    ("int8", 9, 8, 3, 7, (1, 1), (1, 1), (0, 0, 0, 0)),       # pointwise, int8 activations
])
def test_qdq_conv_with_pairs_is_exact(xdtype, c, f, h, w, strides, kernel, pads):
    model = _pointwise_model(xdtype, c, f, h, w, True, strides, kernel, pads)
    graph = load_onnx(model)
    plain = optimize(graph)                                    # no target: byte words
    widened = optimize(graph, target=AVX2)
    # the convs run as pixel-major GEMMs (graph/passes/int8/nhwc.py) over int16 pairs
    gemms = [n for n in widened.nodes if n.op == "matmul_int8x4"]
    assert gemms and all(len(n.inputs[1].shape) >= 3 for n in gemms)
    oh = (h + pads[0] + pads[2] - kernel[0]) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - kernel[1]) // strides[1] + 1
    feeds = {"x": R.standard_normal((1, c, h, w)).astype(np.float32) * 2,
             "r": R.standard_normal((1, f, oh, ow)).astype(np.float32)}
    want = run_reference(plain, feeds)["y"]
    np.testing.assert_array_equal(run_reference(widened, feeds)["y"], want)
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run(feeds)[0]
    np.testing.assert_array_equal(got, want)


@settings(max_examples=6, deadline=None)
@given(m=st.integers(1, 12), k=st.integers(1, 40), n=st.integers(1, 40),
       adtype=st.sampled_from(["uint8", "int8"]), azp=st.integers(-128, 127))
def test_matmul_integer_random_shapes(m, k, n, adtype, azp):
    azp = azp % 256 if adtype == "uint8" else azp
    model, b = _matmul_integer(adtype, m, k, n, azp, 0)
    a = _random_a(adtype, (m, k))
    got = kiln.compile(model, target=AVX2, db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_array_equal(got, _reference(a, b, azp, 0))
