"""Einsum with contracted labels runs as batched matmuls (graph/onnx/more.py): random
equations over two and three operands against numpy.einsum, and the graph an attention
einsum becomes (no broadcast product, no reduction)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

import kiln
from kiln.graph.onnx.load import load_onnx

from .graph_helpers import make_model

R = np.random.default_rng(8)


def einsum_model(equation, arrays):
    feeds = {f"x{k}": a for k, a in enumerate(arrays)}
    node = helper.make_node("Einsum", list(feeds), ["y"], name="einsum_0", equation=equation)
    return make_model([node], feeds, ["y"]), feeds


def check(equation, arrays):
    m, feeds = einsum_model(equation, arrays)
    got = kiln.compile(m, db=None, jobs=1).run(feeds)[0]
    want = np.einsum(equation, *arrays)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("equation,shapes", [
    ("bghid,bghjd->bghij", [(1, 4, 2, 7, 5), (1, 4, 2, 7, 5)]),      # MaxViT's attention
    ("bghij,bghjd->bghid", [(1, 4, 2, 7, 7), (1, 4, 2, 7, 5)]),
    ("bhqd,bkd->bhqk", [(2, 3, 5, 4), (2, 6, 4)]),                   # shared keys
    ("ij,jk,kl->il", [(3, 4), (4, 5), (5, 2)]),                      # a chain
    ("abc,cd->", [(2, 3, 4), (4, 5)]),                               # contract, sum all
    ("ai,bi->ab", [(1, 3), (5, 3)]),
    ("bij,bjk->bki", [(3, 2, 5), (1, 5, 4)]),                        # broadcast batch
])
def test_contractions_match_numpy(equation, shapes):
    check(equation, [R.standard_normal(s).astype(np.float32) for s in shapes])


def test_attention_einsum_is_one_matmul():
    m, _ = einsum_model("bghid,bghjd->bghij",
                        [np.ones((1, 4, 2, 7, 5), np.float32)] * 2)
    ops = [n.op for n in load_onnx(m).nodes]
    assert ops.count("matmul") == 1 and "mul" not in ops and "reduce_sum" not in ops, ops


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.data())
def test_random_equations_match_numpy(data):
    draw = data.draw
    labels = "abcdef"
    size = {c: draw(st.integers(1, 4)) for c in labels}
    terms = []
    for _ in range(draw(st.integers(2, 3))):
        term = draw(st.lists(st.sampled_from(labels), min_size=1, max_size=4, unique=True))
        terms.append("".join(term))
    used = sorted(set("".join(terms)))
    out = "".join(draw(st.permutations(used))[:draw(st.integers(0, len(used)))])
    arrays = []
    for t in terms:
        shape = [size[c] if draw(st.integers(0, 4)) else 1 for c in t]   # some broadcast 1s
        arrays.append(R.standard_normal(shape).astype(np.float32))
    check(",".join(terms) + "->" + out, arrays)
