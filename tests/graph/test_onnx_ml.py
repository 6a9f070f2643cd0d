"""ai.onnx.ml Binarizer and ArrayFeatureExtractor, TfIdfVectorizer (onnx_ops_ordering.py), and
OptionalHasElement/OptionalGetElement without optional types (graph/onnx/sequence.py):
Kiln-compiled code against onnxruntime."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

import kiln

from .graph_helpers import ort_run

R = np.random.default_rng(17)


def _model(nodes, ins, outs, opset=18):
    m = helper.make_model(helper.make_graph(nodes, "ml", ins, outs), opset_imports=[
        helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 5)])
    m.ir_version = 8
    return m


def _check(m, feeds):
    for got, want in zip(kiln.compile(m, db=None, jobs=1).run(feeds), ort_run(m, feeds)):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_binarizer_and_array_feature_extractor():
    x = R.standard_normal((3, 7)).astype(np.float32)
    nodes = [helper.make_node("Binarizer", ["x"], ["b"], domain="ai.onnx.ml", threshold=0.3),
             helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["f"], domain="ai.onnx.ml")]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 7]),
                       helper.make_tensor_value_info("i", TensorProto.INT64, [4])],
               [helper.make_tensor_value_info("b", TensorProto.FLOAT, [3, 7]),
                helper.make_tensor_value_info("f", TensorProto.FLOAT, [3, 4])])
    _check(m, {"x": x, "i": np.array([6, 0, 6, 2], np.int64)})


def test_optional_ops_without_optional_types():
    nodes = [helper.make_node("OptionalHasElement", [], ["has"]),
             helper.make_node("OptionalGetElement", ["x"], ["y"])]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
               [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
    _check(m, {"x": R.standard_normal(5).astype(np.float32)})


def test_tfidf_vectorizer_idf_and_tfidf_with_skips():
    x = R.integers(0, 4, (3, 11)).astype(np.int64)
    pool = [1, 3, 0, 1, 2, 2, 3, 0]          # unigrams 1, 3; bigrams (0 1) (2 2) (3 0)
    common = dict(min_gram_length=1, max_gram_length=2, max_skip_count=2,
                  ngram_counts=[0, 2], ngram_indexes=[4, 0, 1, 3, 2], pool_int64s=pool)
    nodes = [helper.make_node("TfIdfVectorizer", ["x"], ["idf"], mode="IDF",
                              weights=[0.5, 1.5, 2.0, 3.0, 0.25], **common),
             helper.make_node("TfIdfVectorizer", ["x"], ["tfidf"], mode="TFIDF",
                              weights=[0.5, 1.5, 2.0, 3.0, 0.25], **common),
             helper.make_node("TfIdfVectorizer", ["row"], ["tf"], mode="TF", **common)]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.INT64, [3, 11]),
                       helper.make_tensor_value_info("row", TensorProto.INT64, [11])],
               [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                for n, s in (("idf", [3, 5]), ("tfidf", [3, 5]), ("tf", [5]))])
    _check(m, {"x": x, "row": x[1].copy()})


def _tree_model(aggregate):
    """Two trees over 3 features: LT / NEQ (missing values go true) / set membership."""
    f, u8 = TensorProto.FLOAT, TensorProto.UINT8
    node = helper.make_node(
        "TreeEnsemble", ["x"], ["y"], domain="ai.onnx.ml", aggregate_function=aggregate,
        n_targets=3, tree_roots=[0, 3],
        nodes_featureids=[0, 2, 1, 1], nodes_truenodeids=[1, 0, 2, 3],
        nodes_trueleafs=[0, 1, 1, 1], nodes_falsenodeids=[2, 1, 3, 4],
        nodes_falseleafs=[0, 1, 1, 1], nodes_missing_value_tracks_true=[0, 1, 0, 0],
        nodes_modes=helper.make_tensor("m", u8, [4], [1, 5, 6, 2]),
        nodes_splits=helper.make_tensor("s", f, [4], [0.1, 0.5, np.nan, -0.2]),
        membership_values=helper.make_tensor("v", f, [3], [0.0, 1.0, np.nan]),
        leaf_targetids=[0, 2, 1, 1, 2, 0],
        leaf_weights=helper.make_tensor("w", f, [6], [1.5, -2.0, 4.0, 0.5, 3.0, -1.0]))
    return _model([node], [helper.make_tensor_value_info("x", f, [7, 3])],
                  [helper.make_tensor_value_info("y", f, [7, 3])])


def test_tree_ensemble_sum_and_max():
    x = R.choice([-1.0, 0.0, 0.5, 1.0, 2.0], (7, 3)).astype(np.float32)
    x[2, 2] = np.nan
    for aggregate in (1, 3):
        _check(_tree_model(aggregate), {"x": x})
