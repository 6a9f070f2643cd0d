"""Whole models from the builders: numpy reference vs onnxruntime (small sizes where slow)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from kiln.graph import models
from kiln.graph.onnx.load import load_onnx

from .graph_helpers import assert_matches_ort

SMALL = {
    "default_cnn": {},
    "resnet18_like": {"image_size": 48, "base_width": 8, "num_classes": 20},
    "mobilenetv2_like": {"image_size": 48, "width_mult": 0.35, "num_classes": 20},
    "bert_like_encoder": {"seq": 16, "hidden": 64, "heads": 4, "vocab": 50},
    "mlp": {"batch": 3, "sizes": (40, 32, 16, 10)},
}


def random_feeds(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        if inp.type.tensor_type.elem_type == onnx.TensorProto.INT64:
            feeds[inp.name] = rng.integers(0, 50, shape).astype(np.int64)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


@pytest.mark.parametrize("name", list(SMALL))
def test_model_reference_matches_onnxruntime(name):
    model = models.MODELS[name](**SMALL[name])
    assert_matches_ort(model, random_feeds(model), rtol=1e-4, atol=1e-4)


def test_builders_are_deterministic():
    a = models.default_cnn().SerializeToString()
    assert a == models.default_cnn().SerializeToString()
    assert a == onnx.load(models.default_model_path()).SerializeToString()


def test_resnet18_has_real_layer_shapes():
    graph = load_onnx(models.resnet18_like(image_size=64, base_width=64, num_classes=1000))
    convs = [n for n in graph.nodes if n.op == "conv2d"]
    assert len(convs) == 20  # stem + 16 block convs + 3 downsample 1x1
    assert convs[0].inputs[1].shape == (64, 3, 7, 7) and convs[0].attrs["strides"] == (2, 2)
    assert convs[-1].outputs[0].shape == (1, 512, 2, 2)
    assert graph.outputs[0].shape == (1, 1000)


def test_bert_uses_both_layer_norm_forms():
    counts = load_onnx(models.bert_like_encoder(seq=8, hidden=32)).op_counts()
    assert counts["layer_norm"] == 3 and counts["reduce_mean"] == 4
    assert counts["softmax"] == 2 and counts["erf"] == 2 and counts["gather"] == 1
