"""Transformers exported from Hugging Face `transformers` by torch's ONNX exporters (the
fixtures: tests/fixtures/export_hf_transformers.py) compile with no tuning database and match
onnxruntime at two input shapes each: their batch and sequence axes are symbolic, so the
second shape is a new specialisation of the same compiled model (issue 15)."""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import kiln

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
NAMES = ("gpt2", "bert", "distilbert", "t5_encoder", "llama")
VOCAB = 128


@pytest.mark.parametrize("name", NAMES)
def test_exported_transformer_matches_onnxruntime_at_two_shapes(name):
    with gzip.open(FIXTURES / f"hf_{name}.onnx.gz", "rb") as f:
        model = onnx.load_model_from_string(f.read())
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    compiled = kiln.compile(model, db=None)
    rng = np.random.default_rng(3)
    for batch, seq in ((1, 16), (2, 7)):
        ids = rng.integers(0, VOCAB, (batch, seq)).astype(np.int64)
        mask = np.ones((batch, seq), np.int64)
        mask[-1, -2:] = 0                        # padding at the end of the last row
        (want,) = sess.run(None, {"ids": ids, "mask": mask})
        (got,) = compiled.run([ids, mask])
        assert got.shape == want.shape == (batch, seq, 32)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)
