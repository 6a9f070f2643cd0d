"""Whole models on the generic tier against onnxruntime: the bundled models and the
architecture zoo (tests/models_zoo.py) at small sizes on generic kernels alone (no kernel
compiled for them), and random graphs (tests/graph/onnx_strategies.py) of every op mix, as a
tiered compile plans them (a group the generic kernels do not cover on a kernel compiled for
it)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from kiln.codegen.target import Target
from kiln.graph import models
from kiln.graph.generic.compile import compile_generic
from tests import models_zoo
from tests.graph.graph_helpers import ort_run
from tests.graph.generic.helpers import fast_groups
from tests.graph.onnx_strategies import onnx_graphs
from tests.graph.test_random_onnx_graphs import MIXES

MODELS = {
    "default_cnn": lambda: models.default_cnn(image_size=13, width=12, num_classes=7),
    "mlp": lambda: models.mlp(batch=3, sizes=(37, 29, 11)),
    "resnet18_like": lambda: models.resnet18_like(image_size=33),
    "mobilenetv2_like": lambda: models.mobilenetv2_like(image_size=33),
    "bert_like_encoder": lambda: models.bert_like_encoder(seq=17, hidden=32, layers=1),
    "regnetx_like": lambda: models_zoo.regnetx_like(image_size=32),
    "rexnet_like": lambda: models_zoo.rexnet_like(image_size=32),
    "mobilenetv3_like": lambda: models_zoo.mobilenetv3_like(image_size=32),
    "vit_tiny_like": lambda: models_zoo.vit_tiny_like(image_size=32, patch=16),
    "densenet_like": lambda: models_zoo.densenet_like(image_size=32),
    "swin_like": lambda: models_zoo.swin_like(),
    "convnext_like": lambda: models_zoo.convnext_like(image_size=64),
    "xcit_like": lambda: models_zoo.xcit_like(image_size=32),
}


def _feeds(model, rng) -> dict:
    feeds = {}
    for vi in model.graph.input:
        if any(vi.name == init.name for init in model.graph.initializer):
            continue
        t = vi.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        if t.elem_type == 1:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
        else:
            feeds[vi.name] = rng.integers(0, 5, shape).astype(np.int64)
    return feeds


def _check(model, feeds, rtol=1e-3, atol=1e-4, compile_groups=None):
    gm = compile_generic(model, Target.native(), 2, compile_groups)
    got, want = gm.run(feeds), ort_run(model, feeds)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {k}")
    return gm


@pytest.mark.parametrize("name", sorted(MODELS))
def test_model_on_generic_kernels_matches_onnxruntime(name, rng):
    model = MODELS[name]()
    gm = _check(model, _feeds(model, rng))
    assert not gm.uncovered and gm.calls


@pytest.mark.parametrize("mix", sorted(MIXES))
def test_random_graphs_on_generic_kernels_match_onnxruntime(mix):
    @settings(max_examples=10, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(onnx_graphs(families=MIXES[mix]))
    def check(model_and_feeds):
        model, feeds = model_and_feeds
        gm = _check(model, feeds, rtol=1e-4, atol=1e-5, compile_groups=fast_groups())
        covered.append(not gm.uncovered)
    covered = []
    check()
    assert sum(covered) >= len(covered) // 2, "most random graphs run on generic kernels"
