"""The generic matmul kernel (codegen/generic/matmul.py) and its lowering
(graph/generic/ops_matmul.py) against onnxruntime and numpy: 1-D operands, batch
broadcasting, run-time and constant (packed) B, shapes that leave row, column and panel
tails, empty dims."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.codegen.generic.matmul import MR_NARROW_REGISTERS, MR_WIDE_REGISTERS, tile_rows
from kiln.codegen.target import Target
from kiln.graph.generic.compile import compile_generic
from kiln.graph.generic.lowering import Unsupported
from kiln.graph.generic.ops_matmul import batch_dims, pack_b, plan
from tests.graph.graph_helpers import make_model
from tests.graph.generic.helpers import assert_generic_matches_ort


def _model(sa, sb, b_const=None):
    inputs = {"a": (sa, "float32")}
    if b_const is None:
        inputs["b"] = (sb, "float32")
    return make_model([helper.make_node("MatMul", ["a", "b"], ["y"])], inputs, ["y"],
                      inits=None if b_const is None else {"b": b_const})


def _kernels(model):
    return [c.kernel for c in compile_generic(model, Target.native(), 2).calls]


SHAPES = [
    ((3, 5), (5, 7)),               # N < 16: scalar columns
    ((1, 1), (1, 1)),
    ((17, 33), (33, 17)),           # one 16-wide tile + a shifted one
    ((6, 31), (31, 48)),            # a 32-wide tile + a 16-wide one; 2 leftover rows
    ((2, 17, 33), (33, 1)),
    ((7,), (7, 20)),                # 1-D A
    ((4, 9), (9,)),                 # 1-D B
    ((5,), (5,)),                   # both 1-D: a scalar
    ((7,), (3, 7, 20)),             # 1-D A against batches of B
    ((2, 3, 9), (9,)),              # batches of A against a 1-D B
    ((4, 1, 3, 5), (2, 5, 19)),     # batch broadcasting both ways
    ((1, 12, 16, 8), (1, 12, 8, 21)),
    ((2, 3, 4, 5), (3, 5, 6)),
    ((9, 2100), (2100, 100)),       # several column panels, the last one wider
    ((70, 40), (40, 64)),           # several row chunks
]


@pytest.mark.parametrize("sa, sb", SHAPES)
def test_matmul_of_two_inputs_matches_onnxruntime(sa, sb, rng):
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    assert_generic_matches_ort(_model(sa, sb), {"a": a, "b": b}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sa, sb", [s for s in SHAPES if len(s[1]) == 2] + [
    ((1, 64, 96), (96, 130)), ((3, 31), (31, 33)), ((2, 8, 8, 88), (88, 352))])
def test_matmul_by_a_constant_matches_onnxruntime(sa, sb, rng):
    b = rng.standard_normal(sb).astype(np.float32)
    model = _model(sa, sb, b)
    if sb[1] >= 16:
        assert _kernels(model) == ["matmul.f32_packed"]
    a = rng.standard_normal(sa).astype(np.float32)
    assert_generic_matches_ort(model, {"a": a}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("sa, sb", [((3, 0, 4), (4, 5)), ((2, 3, 0), (0, 4)),
                                    ((0, 3), (3, 20)), ((2, 3), (3, 0))])
def test_empty_dims(sa, sb, rng):
    """No rows or columns: nothing is called; K = 0: zeros."""
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    assert_generic_matches_ort(_model(sa, sb), {"a": a, "b": b})
    assert_generic_matches_ort(_model(sa, sb, b), {"a": a})


def test_one_and_two_threads_agree(rng):
    sa, sb = (3, 45, 70), (70, 77)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    outs = [compile_generic(_model(sa, sb), Target.native(), t).run({"a": a, "b": b})[0]
            for t in (1, 2)]
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], a @ b, rtol=1e-4, atol=1e-4)


def test_batch_dims_merge_and_broadcast():
    # [2, 3] batches of A over one shared B merge into one dim of 6
    assert batch_dims((2, 3, 4, 5), (5, 6), (2, 3)) == [(6, 20, 0)]
    # B broadcast along the first batch dim only: two dims
    assert batch_dims((2, 3, 4, 5), (1, 3, 5, 6), (2, 3)) == [(2, 60, 0), (3, 20, 30)]
    # A shared by every batch of B: no merge into M, strides 0 for A
    assert batch_dims((4, 5), (3, 5, 6), (3,)) == [(3, 0, 30)]
    (dims,) = plan((1, 8, 8, 256), (256, 1024))
    assert dims[:5] == [64, 1024, 256, 1, 1]     # batches folded into M


@pytest.mark.parametrize("sa, sb", [((2, 3, 4, 5, 6), (2, 1, 4, 6, 7)),
                                    ((3, 1, 2, 1, 5, 6), (1, 4, 1, 3, 6, 17))])
def test_batch_dims_beyond_two_take_a_call_each(sa, sb, rng):
    model = _model(sa, sb)
    calls = _kernels(model)
    assert len(calls) > 1
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    assert_generic_matches_ort(model, {"a": a, "b": b}, rtol=1e-4, atol=1e-4)


def test_too_many_calls_are_unsupported():
    model = _model((65, 1, 3, 1, 2, 3), (1, 64, 1, 2, 3, 4))
    with pytest.raises(Unsupported, match="calls for the batch dims beyond two"):
        compile_generic(model, Target.native(), 1)


def test_pack_b_pads_panels_with_zeros(rng):
    b = rng.standard_normal((5, 40)).astype(np.float32)
    packed = pack_b(b)
    assert packed.shape == (2, 5, 32)
    np.testing.assert_array_equal(packed[0], b[:, :32])
    np.testing.assert_array_equal(packed[1, :, :8], b[:, 32:])
    assert not packed[1, :, 8:].any()


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 20), k=st.integers(1, 40), n=st.integers(1, 70),
       batch=st.sampled_from([(), (2,), (3, 1), (1, 2)]), const=st.booleans(),
       seed=st.integers(0, 2 ** 16))
def test_property_matches_numpy(m, k, n, batch, const, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(batch + (m, k)).astype(np.float32)
    b = rng.standard_normal((k, n) if const else batch[::-1] + (k, n)).astype(np.float32)
    model = _model(a.shape, b.shape, b if const else None)
    feeds = {"a": a} if const else {"a": a, "b": b}
    got = compile_generic(model, Target.native(), 2).run(feeds)[0]
    want = np.matmul(a, b)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_tile_rows_follow_the_vector_registers():
    assert tile_rows(Target.from_string("llvm -mcpu=znver4")) == MR_WIDE_REGISTERS
    assert tile_rows(Target.from_string("llvm -mcpu=znver3")) == MR_NARROW_REGISTERS


@pytest.mark.skipif(not {"avx2", "fma"} <= Target.native().feature_set(),
                    reason="runs AVX2 code")
def test_narrow_register_tile_matches_numpy(rng):
    """The AVX2 build (3-row tiles) on this machine: row tails of every length."""
    target = Target.from_string("llvm -mcpu=znver3")
    for sa, sb, const in (((29, 40), (40, 70), True), ((2, 7, 33), (2, 33, 50), False)):
        a = rng.standard_normal(sa).astype(np.float32)
        b = rng.standard_normal(sb).astype(np.float32)
        model = _model(sa, sb, b if const else None)
        feeds = {"a": a} if const else {"a": a, "b": b}
        got = compile_generic(model, target, 2).run(feeds)[0]
        np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
