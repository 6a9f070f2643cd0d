"""matmul_int8x4's byte-word weights as column panels on VNNI targets
(graph/passes/int8/panels.py, te/ops/int8/core.py panel_weight_words) and the VNNI dot4
GEMM's one-register-tile cache tiles (autotune/space/int8.py): chosen from the target and
the column count, and exact against numpy's integer product (K odd / 1 / prime, M 1 or
prime, a tail panel in the TE op), lowered for VNNI (native here) and AVX2."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

import kiln
from kiln import codegen
from kiln.autotune.space.rules import SearchSpace
from kiln.autotune.space.int8 import one_row_tile_per_cache_tile
from kiln.autotune.task import Task
from kiln.codegen.dot4 import dot4_strategies, target_features
from kiln.codegen.target import Target
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import Node, Value
from kiln.graph.passes import optimize
from kiln.graph.passes.int8.panels import panel_width, panels_int8, view_int8_rows
from kiln.graph.ops.int8.core import _matmul_int8x4_reference
from kiln.schedule.lower import lower
from kiln.te.errors import TEError
from kiln.te.ops.int8.core import matmul_int8x4, pack_weight_int8x4, panel_weight_words
from kiln.te.tensor import placeholder

from .graph_helpers import make_model

R = np.random.default_rng(23)
VNNI, AVX2 = "llvm -mcpu=znver4", "llvm -mcpu=znver3"
HOST_VNNI = dot4_strategies(target_features(Target.from_string("native")))[:1] == [
    (16, "vnni")]


def _matmul_integer(m: int, k: int, n: int):
    b = R.integers(-128, 128, size=(k, n)).astype(np.int8)
    b[0, 0], b[-1, -1] = -128, 127
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    return make_model([node], {"a": ((m, k), "uint8")}, [("y", "int32")], {"b": b}, 13), b


def test_the_target_and_the_columns_decide():
    assert panels_int8(VNNI) and not panels_int8(AVX2) and not panels_int8(None)
    assert panel_width(256) == 32 and panel_width(144) == 16 and panel_width(70) is None
    weights = {}
    for n in (64, 48, 70, 16):
        graph = load_onnx(_matmul_integer(5, 40, n)[0])
        weights[n] = {t: next(node for node in optimize(graph, target=t).nodes
                              if node.op == "matmul_int8x4") for t in (VNNI, AVX2, None)}
    assert weights[64][VNNI].inputs[1].shape == (2, 10, 1, 32)
    assert weights[64][VNNI].attr("n") == 64
    assert weights[48][VNNI].inputs[1].shape == (3, 10, 1, 16)
    assert weights[70][VNNI].inputs[1].shape == (10, 70)        # no panel divides 70
    assert weights[16][VNNI].inputs[1].shape == (10, 16)        # one panel: no change
    assert weights[64][None].inputs[1].shape == (10, 64)
    assert len(weights[64][AVX2].inputs[1].shape) == 4           # int16 pairs instead


@pytest.mark.parametrize("adtype,k,viewed", [("uint8", 40, True), ("uint8", 30, False),
                                             ("int8", 40, False)])
def test_uint8_rows_are_read_in_place_on_vnni(adtype, k, viewed):
    """A MatMulInteger's uint8 input with K a multiple of 4 is its words already: on VNNI the
    pack becomes a view (int8 activations are offset by 128, K % 4 pads: they keep it)."""
    b = R.integers(-128, 128, size=(k, 64)).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    model = make_model([node], {"a": ((9, k), adtype)}, [("y", "int32")], {"b": b}, 13)
    ops = {t: [n.op for n in optimize(load_onnx(model), target=t).nodes] for t in (VNNI, AVX2)}
    assert ("bitcast_int8x4" in ops[VNNI]) == viewed
    assert "bitcast_int8x4" not in ops[AVX2]
    graph = load_onnx(model)
    assert view_int8_rows(graph, None) is graph
    lo, hi = (0, 256) if adtype == "uint8" else (-128, 128)
    a = R.integers(lo, hi, size=(9, k)).astype(adtype)
    got = kiln.compile(model, target="native", db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))


def test_panel_weight_words_round_trip_and_errors():
    words = R.integers(-2 ** 31, 2 ** 31, size=(3, 37)).astype(np.int32)
    panels = panel_weight_words(words, 16)
    assert panels.shape == (3, 3, 1, 16)
    np.testing.assert_array_equal(panels[:, :, 0].transpose(1, 0, 2).reshape(3, -1)[:, :37],
                                  words)
    assert not panels[-1, :, :, 5:].any()                      # the tail panel's padding
    node = Node("matmul_int8x4", (Value("a", (2, 3), "int32"),
                                  Value("w", (3, 3, 1, 16), "int32")),
                (Value("y", (2, 37), "int32"),), {"seven_bit": 0, "n": 37}, "mm")
    a = R.integers(0, 256, size=(2, 12)).astype(np.uint8).view(np.int32)
    plain = Node("matmul_int8x4", node.inputs[:1] + (Value("w", (3, 37), "int32"),),
                 node.outputs, {"seven_bit": 0}, "mm")
    np.testing.assert_array_equal(_matmul_int8x4_reference(node, a, panels),
                                  _matmul_int8x4_reference(plain, a, words))
    with pytest.raises(TEError, match="panel_weight_words"):
        panel_weight_words(words.astype(np.int64), 16)
    with pytest.raises(TEError, match=r"ceil\(n / 16\)"):
        matmul_int8x4(placeholder((2, 3), "int32", "a"),
                      placeholder((3, 3, 1, 16), "int32", "w"), n=60)


@pytest.mark.parametrize("target", ["native", AVX2])
@pytest.mark.parametrize("m,k4,n,block", [(13, 7, 64, 32), (1, 3, 48, 16), (5, 2, 37, 16),
                                          (29, 17, 32, 32)])
def test_word_panels_default_schedule_is_exact(target, m, k4, n, block):
    rng = np.random.default_rng(m * n)
    w8 = rng.integers(-128, 128, (4 * k4, n)).astype(np.int8)
    w8[0, 0] = -128
    panels = panel_weight_words(pack_weight_int8x4(w8, 0), block)
    a = placeholder((m, k4), "int32", "a")
    b = placeholder(panels.shape, "int32", "b")
    c = matmul_int8x4(a, b, n=n)
    task = Task("mm", (c,), (a, b, c), target)
    space = SearchSpace(task, threads=1)
    sch, args = space.apply(space.default_config())
    f = codegen.build(lower(sch, args, name="mm"), target=target, cache_kernel=False)
    a8 = rng.integers(0, 256, (m, 4 * k4)).astype(np.uint8)
    a8[0] = 255
    out = np.empty((m, n), np.int32)
    f(a8.view(np.int32), panels, out)
    np.testing.assert_array_equal(out, a8.astype(np.int32) @ w8.astype(np.int32))


@pytest.mark.parametrize("m,k,n", [(49, 30, 64), (1, 7, 32), (112, 16, 96)])
def test_matmul_integer_with_word_panels_is_exact(m, k, n, monkeypatch):
    monkeypatch.setenv("KILN_CACHE_DIR", "off")
    model, b = _matmul_integer(m, k, n)
    a = R.integers(0, 256, size=(m, k)).astype(np.uint8)
    a[0] = 255
    got = kiln.compile(model, target="native", db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    if HOST_VNNI:        # native took the panels
        graph = optimize(load_onnx(model), target="native")
        assert any(node.op == "matmul_int8x4" and len(node.inputs[1].shape) == 4
                   for node in graph.nodes)


def test_vnni_dot4_gemm_cache_tile_is_one_register_tile_of_rows():
    a = placeholder((3136, 16), "int32", "a")
    b = placeholder((8, 16, 1, 32), "int32", "b")
    c = matmul_int8x4(a, b, n=256)
    assert one_row_tile_per_cache_tile(Target.from_string(VNNI), c.op)
    assert not one_row_tile_per_cache_tile(Target.from_string(AVX2), c.op)
    config = SearchSpace(Task("mm", (c,), (a, b, c), VNNI), threads=1).default_config()
    mid, inner = config["s0/tile/0"]
    assert mid == 1 and inner >= 4
    assert config["s0/tile/1"][1] == 32                          # one panel a register tile
    avx2 = SearchSpace(Task("mm", (c,), (a, b, c), AVX2), threads=1).default_config()
    assert avx2["s0/tile/0"][0] > 1                              # AVX2 keeps its tiles


@settings(max_examples=4, deadline=None)
@given(m=st.integers(1, 40), k=st.integers(1, 70), panels=st.integers(1, 4),
       width=st.sampled_from([16, 32]), seed=st.integers(0, 2 ** 16))
def test_matmul_integer_random_shapes_through_the_panels(m, k, panels, width, seed):
    """Random MatMulInteger shapes whose columns take panels on VNNI (the native host's
    lowering: vpdpbusd here, else the target's), exact."""
    n = panels * width + (16 if panels == 1 else 0)
    rng = np.random.default_rng(seed)
    b = rng.integers(-128, 128, size=(k, n)).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    model = make_model([node], {"a": ((m, k), "uint8")}, [("y", "int32")], {"b": b}, 13)
    a = rng.integers(0, 256, size=(m, k)).astype(np.uint8)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KILN_CACHE_DIR", "off")
        got = kiln.compile(model, target="native", db=None, jobs=1).run({"a": a})[0]
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
