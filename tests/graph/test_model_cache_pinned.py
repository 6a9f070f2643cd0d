"""The model cache for compiles given input values (graph/model_cache.pinned_key): a
DynamicModel's specialisation (compiled with every feed as a value) is a hit in a later
process whatever the values of inputs that decide no shape, and a miss for a new value of
one that does. Oracle: onnxruntime."""
from __future__ import annotations

import numpy as np
from onnx import helper

import kiln
from kiln.graph.runtime import dynamic

from .graph_helpers import make_model, ort_run

RNG = np.random.default_rng(11)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _cached(model: dynamic.DynamicModel) -> list[bool]:
    return [bool(s.plan.meta["compile"].get("cached")) for s in model.specializations]


def _run(model, onnx_model, feeds):
    (got,) = model.run(feeds)
    (want,) = ort_run(onnx_model, feeds)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    return got


def test_a_symbolic_batch_specialisation_is_a_hit_for_any_input_values(cache_root):
    w = _rand(3, 7) * 0.5
    onnx_model = make_model([helper.make_node("MatMul", ["x", "w"], ["m"]),
                             helper.make_node("Relu", ["m"], ["y"])],
                            {"x": (("N", 3), "float32")}, ["y"], {"w": w})
    cold = kiln.compile(onnx_model, db=None, jobs=1)
    _run(cold, onnx_model, {"x": _rand(5, 3)})
    assert _cached(cold) == [False]
    warm = kiln.compile(onnx_model, db=None, jobs=1)
    _run(warm, onnx_model, {"x": _rand(5, 3)})         # new values, same shape: a hit
    _run(warm, onnx_model, {"x": _rand(2, 3)})         # a new shape: compiled
    assert _cached(warm) == [True, False]


def test_a_new_value_of_a_shape_deciding_input_is_a_miss(cache_root):
    onnx_model = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Clip", ["r", "lo", "hi"], ["y"])],
        {"x": ((4, 6), "float32"), "shape": ((2,), "int64"), "lo": ((), "float32"),
         "hi": ((), "float32")}, ["y"])

    def feeds(shape, lo):
        return {"x": _rand(4, 6), "shape": np.array(shape, np.int64),
                "lo": np.array(lo, np.float32), "hi": np.array(0.7, np.float32)}

    first = kiln.compile(onnx_model, db=None, jobs=1)
    _run(first, onnx_model, feeds((3, 8), -0.5))
    assert _cached(first) == [False]
    second = kiln.compile(onnx_model, db=None, jobs=1)
    # the Clip bound is a run-time argument: another value is the same compiled model
    assert _run(second, onnx_model, feeds((3, 8), 0.1)).shape == (3, 8)
    # another value of the pinned 'shape' is another model
    assert _run(second, onnx_model, feeds((8, 3), -0.5)).shape == (8, 3)
    assert _cached(second) == [True, False]
    for spec, shape in zip(second.specializations, ((3, 8), (8, 3))):
        assert spec.plan.meta["pinned"]["shape"]["value"] == list(shape)
    third = kiln.compile(onnx_model, db=None, jobs=1)
    assert _run(third, onnx_model, feeds((8, 3), 0.0)).shape == (8, 3)
    assert _cached(third) == [True]
