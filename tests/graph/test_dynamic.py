"""Dynamic shapes and graph inputs that decide shapes (graph/runtime/dynamic.py, frontend values):
a model with a symbolic batch compiled once and run at several batches, Reshape/Slice/Pad
shape inputs specialised by value, Clip bounds and Pad values as runtime kernel arguments,
`constants=` pinning, and the errors. Oracle: onnxruntime."""
from __future__ import annotations

import logging
import pickle

import numpy as np
import pytest
from onnx import helper

import kiln
from kiln.graph.runtime import dynamic
from kiln.graph.runtime.executor import CompiledModel
from kiln.graph.onnx.load import InputValueNeeded, load_onnx
from kiln.te.errors import KernelArgumentError, KilnError, ModelFormatError

from .graph_helpers import make_model, ort_run

RNG = np.random.default_rng(7)


def _rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _close(got, want):
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.fixture
def compile_calls(monkeypatch):
    """Counts the compiles DynamicModel makes (the real compile_model is called)."""
    calls = []
    real = dynamic.compile_model

    def spy(model, **kw):
        compiled = real(model, **kw)      # a compile stopped by InputValueNeeded is not one
        calls.append(dict(kw["input_shapes"]))
        return compiled
    monkeypatch.setattr(dynamic, "compile_model", spy)
    return calls


def _batch_model():
    """Conv (3x3, pad 1) + Relu + global pool + Flatten + Gemm over a symbolic batch 'N'."""
    w, fc = _rand(8, 3, 3, 3) * 0.3, _rand(8, 5)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["g"]),
             helper.make_node("Flatten", ["g"], ["f"]),
             helper.make_node("MatMul", ["f", "fc"], ["y"])]
    return make_model(nodes, {"x": (("N", 3, 7, 5), "float32")}, ["y"], {"w": w, "fc": fc})


def test_symbolic_batch_runs_at_1_3_1_and_reuses_the_batch_1_specialisation(compile_calls):
    model = _batch_model()
    compiled = kiln.compile(model, db=None, jobs=1)
    assert isinstance(compiled, dynamic.DynamicModel) and not compile_calls  # compiled on run
    first = None
    for batch in (1, 3, 1):
        x = _rand(batch, 3, 7, 5)
        _close(compiled.run({"x": x})[0], ort_run(model, {"x": x})[0])
        first = first or compiled.specializations[0]
    assert [c["x"] for c in compile_calls] == [(1, 3, 7, 5), (3, 3, 7, 5)]
    assert compiled.compiles == 2 and compiled.specializations[0] is first
    x = _rand(3, 3, 7, 5)      # positional inputs reach the same cache
    _close(compiled.run([x])[0], ort_run(model, {"x": x})[0])
    assert len(compile_calls) == 2


def test_input_shapes_still_pins_one_shape_ahead_of_time(compile_calls):
    compiled = kiln.compile(_batch_model(), db=None, jobs=1, input_shapes={"x": (3, 3, 7, 5)})
    assert isinstance(compiled, CompiledModel)
    assert compiled.plan.meta.get("pinned") is None
    with pytest.raises(KernelArgumentError, match=r"input 'x'.*expected float32\[3, 3, 7, 5\]"):
        compiled.run({"x": _rand(1, 3, 7, 5)})


def test_wrong_rank_or_fixed_dim_names_the_input():
    compiled = kiln.compile(_batch_model(), db=None, jobs=1)
    with pytest.raises(KernelArgumentError, match=r"input 'x' of model 'test': expected rank "
                                                  r"4 \(float32\[N, 3, 7, 5\]\), got "
                                                  r"float32\[3, 7, 5\]"):
        compiled.run({"x": _rand(3, 7, 5)})
    with pytest.raises(KernelArgumentError, match=r"input 'x'.*dim 2 must be 7 "
                                                  r"\(float32\[N, 3, 7, 5\]\)"):
        compiled.run({"x": _rand(2, 3, 6, 5)})
    with pytest.raises(KernelArgumentError, match=r"input 'x'.*astype\(np.float32\)"):
        compiled.run({"x": np.zeros((2, 3, 7, 5))})
    with pytest.raises(KernelArgumentError, match=r"no input named 'y'"):
        compiled.run({"y": _rand(2, 3, 7, 5)})
    assert compiled.compiles == 0


def test_a_shape_the_graph_cannot_allow_names_the_input():
    """x[N, 6] reshaped to the constant (4, 3): only N = 2 fits."""
    model = make_model([helper.make_node("Reshape", ["x", "s"], ["y"], name="rs")],
                       {"x": (("N", 6), "float32")}, ["y"], {"s": np.array([4, 3], np.int64)})
    compiled = kiln.compile(model, db=None, jobs=1)
    x = _rand(2, 6)
    _close(compiled.run([x])[0], x.reshape(4, 3))
    with pytest.raises(KernelArgumentError, match=r"model 'test' cannot run with the input "
                                                  r"shapes \{'x': \[3, 6\]\}.*node 'rs'"):
        compiled.run([_rand(3, 6)])


def _shape_input_model():
    """Reshape's shape, Slice's starts and Clip's bounds all arrive as graph inputs."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]),
             helper.make_node("Slice", ["r", "starts", "ends", "axes"], ["s"]),
             helper.make_node("Clip", ["s", "lo", "hi"], ["y"])]
    return make_model(nodes, {"x": ((5, 6), "float32"), "shape": ((2,), "int64"),
                              "starts": ((1,), "int64"), "lo": ((), "float32"),
                              "hi": ((), "float32")}, ["y"],
                      {"ends": np.array([100], np.int64), "axes": np.array([1], np.int64)})


def _feeds(x, shape, start, lo, hi):
    return {"x": x, "shape": np.array(shape, np.int64), "starts": np.array([start], np.int64),
            "lo": np.array(lo, np.float32), "hi": np.array(hi, np.float32)}


def test_shape_inputs_are_specialised_by_value_and_clip_bounds_stay_runtime(
        compile_calls, caplog):
    model = _shape_input_model()
    compiled = kiln.compile(model, db=None, jobs=1)
    assert isinstance(compiled, dynamic.DynamicModel)
    x = _rand(5, 6)
    with caplog.at_level(logging.WARNING, logger="kiln.graph.runtime.dynamic"):
        for shape, start, lo, hi in [((3, 10), 1, -0.5, 0.5), ((3, 10), 1, -0.1, 0.9),
                                     ((10, 3), -2, -1.0, 0.3), ((3, 10), 1, 0.2, 1.0)]:
            feeds = _feeds(x, shape, start, lo, hi)
            _close(compiled.run(feeds)[0], ort_run(model, feeds)[0])
    # two values of (shape, starts) -> two compiles; new Clip bounds never recompile
    assert len(compile_calls) == 2 and compiled.compiles == 2
    warned = [r.getMessage() for r in caplog.records]
    assert sum("input 'shape' decides a shape" in m for m in warned) == 1
    assert sum("input 'starts' decides a shape" in m for m in warned) == 1
    assert not any("'lo'" in m or "'hi'" in m for m in warned)
    for spec in compiled.specializations:
        assert set(spec.plan.meta["pinned"]) == {"shape", "starts"}


def test_constants_pin_a_value_ahead_of_time(tmp_path, compile_calls):
    model = _shape_input_model()
    pins = {"shape": np.array([3, 10]), "starts": np.array([2])}
    compiled = kiln.compile(model, db=None, jobs=1, constants=pins)
    assert isinstance(compiled, CompiledModel) and len(compile_calls) == 1
    x = _rand(5, 6)
    feeds = _feeds(x, (3, 10), 2, -0.4, 0.6)
    want = ort_run(model, feeds)[0]
    _close(compiled.run(feeds)[0], want)
    _close(compiled.run({"x": x, "lo": feeds["lo"], "hi": feeds["hi"]})[0], want)  # left out
    _close(compiled.run([x, feeds["lo"], feeds["hi"]])[0], want)
    with pytest.raises(KernelArgumentError, match=r"input 'starts' of model 'test' decides a "
                                                  r"shape.*value int64\[1\] \[2\]; got "
                                                  r"int64\[1\] \[1\]"):
        compiled.run(_feeds(x, (3, 10), 1, -0.4, 0.6))
    assert ("decide shapes: shape = int64[2] [3, 10], starts = int64[1] [2]"
            in compiled.summary())
    compiled.export(tmp_path / "m.so")
    loaded = kiln.load_compiled(tmp_path / "m.so")
    _close(loaded.run(feeds)[0], want)
    with pytest.raises(KernelArgumentError, match=r"input 'shape'.*\[3, 10\]; got .*\[10, 3\]"):
        loaded.run(_feeds(x, (10, 3), 2, -0.4, 0.6))
    assert loaded.benchmark(repeat=2) > 0       # example inputs use the pinned values
    assert len(compile_calls) == 1              # all ahead of time


def test_constants_on_some_inputs_leave_the_rest_to_run_time(compile_calls):
    model = _shape_input_model()
    compiled = kiln.compile(model, db=None, jobs=1, constants={"shape": np.array([10, 3])})
    assert isinstance(compiled, dynamic.DynamicModel)
    x = _rand(5, 6)
    for start in (0, 2):
        feeds = _feeds(x, (10, 3), start, -1.0, 1.0)
        _close(compiled.run(feeds)[0], ort_run(model, feeds)[0])
    assert len(compile_calls) == 2
    with pytest.raises(KernelArgumentError, match=r"input 'shape'.*compiled for its value"):
        compiled.run(_feeds(x, (3, 10), 0, -1.0, 1.0))


def test_constants_naming_no_input_is_an_error():
    with pytest.raises(ModelFormatError, match=r"constants names \['axes'\], which are not "
                                               r"inputs.*\['x', 'shape', 'starts', 'lo', 'hi'\]"):
        kiln.compile(_shape_input_model(), db=None, constants={"axes": np.array([0])})


def test_pad_value_from_a_graph_input_is_a_runtime_argument(compile_calls):
    """Pad with pads from a graph input (specialised) and its value from another (runtime)
    after a conv, in the channel-blocked layout; a symbolic batch too."""
    w = _rand(16, 16, 3, 3) * 0.2
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Pad", ["c", "pads", "v"], ["y"])]
    model = make_model(nodes, {"x": (("N", 16, 7, 5), "float32"), "pads": ((8,), "int64"),
                               "v": ((), "float32")}, ["y"], {"w": w})
    compiled = kiln.compile(model, db=None, jobs=1)
    pads = np.array([0, 0, 1, 2, 0, 0, 0, 1], np.int64)
    for batch, value in ((3, 5.0), (3, -2.5)):
        feeds = {"x": _rand(batch, 16, 7, 5), "pads": pads, "v": np.array(value, np.float32)}
        _close(compiled.run(feeds)[0], ort_run(model, feeds)[0])
    assert len(compile_calls) == 1


def test_clip_with_one_runtime_bound_and_integer_data():
    nodes = [helper.make_node("Clip", ["x", "", "hi"], ["y"])]
    model = make_model(nodes, {"x": ((7,), "int32"), "hi": ((), "int32")}, [("y", "int32")])
    compiled = kiln.compile(model, db=None, jobs=1)
    assert isinstance(compiled, CompiledModel)     # nothing decides a shape
    x = np.arange(-3, 4, dtype=np.int32)
    for hi in (2, -1):
        feeds = {"x": x, "hi": np.array(hi, np.int32)}
        np.testing.assert_array_equal(compiled.run(feeds)[0], ort_run(model, feeds)[0])


def test_what_needs_one_shape_says_which_input_and_shape():
    compiled = kiln.compile(_batch_model(), db=None, jobs=1)
    need = r"input 'x' has the shape float32\[N, 3, 7, 5\].*input_shapes=\{'x': \(N, 3, 7, 5\)\}"
    with pytest.raises(KilnError, match=r"\(input 'x' has the shape float32\[N, 3, 7, 5\]\), "
                                        r"so export\(\) needs one fixed shape"):
        compiled.export("unused.so")
    with pytest.raises(KilnError, match=need):
        compiled.benchmark()
    with pytest.raises(AttributeError, match=r"'plan' needs one fixed shape"):
        compiled.plan   # noqa: B018
    assert not hasattr(compiled, "kernels")
    x = _rand(2, 3, 7, 5)
    assert compiled.benchmark([x], repeat=2) > 0
    spec = compiled.specialize([x])
    assert spec is compiled.specializations[0] and "x: [2, 3, 7, 5]" in compiled.summary()


def test_export_of_a_specialisation_round_trips(tmp_path):
    model = _batch_model()
    compiled = kiln.compile(model, db=None, jobs=1)
    x = _rand(3, 3, 7, 5)
    compiled.specialize([x]).export(tmp_path / "b3.so")
    _close(kiln.load_compiled(tmp_path / "b3.so").run([x])[0], ort_run(model, {"x": x})[0])


def test_frontend_pins_only_inputs_that_decide_shapes():
    model = _shape_input_model()
    values = _feeds(_rand(5, 6), (3, 10), 1, 0.0, 1.0)
    graph = load_onnx(model, values=values)
    assert sorted(graph.pinned) == ["shape", "starts"]
    assert [v.name for v in graph.inputs] == ["x", "shape", "starts", "lo", "hi"]
    with pytest.raises(InputValueNeeded, match=r"node 'Reshape_0' \(Reshape\) needs its "
                                               r"'shape' input \('shape'\).*constants="
                                               r"\{'shape': \.\.\.\}") as info:
        load_onnx(model)
    err = pickle.loads(pickle.dumps(info.value))
    assert err.input_name == "shape" and str(err) == str(info.value)
    with pytest.raises(ModelFormatError, match=r"value given for input 'shape' is "
                                               r"int64\[3\]; the model declares int64\[2\]"):
        load_onnx(model, values={**values, "shape": np.array([3, 10, 1])})


def _op_model(op, value_name, value_shape, data_shape, extra=None, opset=18):
    node = helper.make_node(op, ["x", value_name], ["y"], **(extra or {}))
    return make_model([node], {"x": (data_shape, "float32"),
                               value_name: (value_shape, "int64")}, ["y"], opset=opset)


# (op, its shape-deciding input, that input's shape, data shape, two values, attributes)
_SHAPE_INPUT_OPS = [
    ("Expand", "shape", (3,), (3, 1, 5), ([3, 2, 5], [3, 1, 1]), {}),
    ("Unsqueeze", "axes", (2,), (3, 5), ([0, -1], [1, 3]), {}),
    ("Squeeze", "axes", (1,), (1, 3, 1, 5), ([0], [-2]), {}),
    ("ReduceSum", "axes", (1,), (3, 7, 5), ([1], [-1]), {"keepdims": 0}),
]


@pytest.mark.parametrize("op,name,vshape,xshape,values,attrs", _SHAPE_INPUT_OPS,
                         ids=[c[0] for c in _SHAPE_INPUT_OPS])
def test_shape_deciding_inputs_of_more_ops(op, name, vshape, xshape, values, attrs,
                                           compile_calls):
    """As onnx's node tests feed them: kiln.compile(model, db=None).run(inputs)."""
    model = _op_model(op, name, vshape, xshape, attrs)
    compiled = kiln.compile(model, db=None, jobs=1)
    x = _rand(*xshape)
    for value in values + values[:1]:
        feeds = {"x": x, name: np.array(value, np.int64)}
        _close(compiled.run(feeds)[0], ort_run(model, feeds)[0])
    assert len(compile_calls) == 2      # the first value's specialisation is reused


def test_inputs_sharing_a_symbolic_dim_must_agree():
    model = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                       {"a": (("N", 5), "float32"), "b": (("N", 5), "float32")}, ["y"])
    compiled = kiln.compile(model, db=None, jobs=1)
    a, b = _rand(3, 5), _rand(3, 5)
    _close(compiled.run({"a": a, "b": b})[0], a + b)
    with pytest.raises(KernelArgumentError, match=r"cannot run with the input shapes "
                                                  r"\{'a': \[3, 5\], 'b': \[2, 5\]\}"):
        compiled.run({"a": a, "b": _rand(2, 5)})


def test_runtime_clip_bounds_fuse_into_a_blocked_conv():
    """Clip(conv(x), lo, hi) with lo/hi graph inputs: 0-d kernel arguments of the conv's
    epilogue in the channel-blocked layout (no layout conversion around them)."""
    w = _rand(16, 16, 3, 3) * 0.2
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Clip", ["c", "lo", "hi"], ["k"]),
             helper.make_node("Conv", ["k", "w"], ["y"])]
    model = make_model(nodes, {"x": ((2, 16, 7, 5), "float32"), "lo": ((), "float32"),
                               "hi": ((), "float32")}, ["y"], {"w": w})
    compiled = kiln.compile(model, db=None, jobs=1)
    assert ("conv2d_nchwc", "max", "min") in [s.ops for s in compiled.plan.steps]
    for lo, hi in ((-0.3, 0.4), (-1.0, 0.1)):
        feeds = {"x": _rand(2, 16, 7, 5), "lo": np.array(lo, np.float32),
                 "hi": np.array(hi, np.float32)}
        _close(compiled.run(feeds)[0], ort_run(model, feeds)[0])
