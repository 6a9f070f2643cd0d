"""Property: a random small ONNX graph (tests/graph/onnx_strategies.py) compiled by Kiln gives
onnxruntime's outputs: shapes exactly, values to fp32 rounding. One test per op mix, so a
failure names the family; the example counts keep the file under a minute."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import kiln

from .graph_helpers import ort_run
from .onnx_strategies import onnx_graphs

MIXES = {
    "elementwise_broadcast": ("unary", "binary"),
    "reductions": ("unary", "binary", "reduce"),
    "reshapes": ("reshape", "flatten", "squeeze", "transpose", "unary"),
    "slice_split_concat": ("slice", "split", "concat", "unary", "binary"),
    "gather": ("gather", "transpose", "binary"),
    "cnn_views": ("conv", "slice", "split", "concat", "reduce", "binary", "reshape"),
    "everything": ("unary", "binary", "reduce", "reshape", "flatten", "squeeze", "transpose",
                   "slice", "split", "concat", "gather", "conv"),
}
EXAMPLES = 10


def check_against_onnxruntime(model, feeds):
    want = ort_run(model, feeds)
    got = kiln.compile(model, db=None, jobs=1).run(feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape, f"output {k}: shape {g.shape}, onnxruntime {w.shape}"
        assert g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=f"output {k}")


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_random_graphs_match_onnxruntime(mix):
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(onnx_graphs(families=MIXES[mix]))
    def check(model_and_feeds):
        check_against_onnxruntime(*model_and_feeds)
    check()
