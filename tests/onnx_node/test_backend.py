"""kiln.backend (onnx's Backend interface) and the node-suite runner's classification."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.backend.test.case.test_case import TestCase

from kiln import ModelFormatError, UnsupportedOperatorError
from kiln.backend import KilnBackend, _data_dependent_outputs
from kiln.te.errors import InternalError

from ..graph.graph_helpers import ort_run
from . import runner

X = np.random.default_rng(2).standard_normal((3, 1, 5)).astype(np.float32)


def _model():
    """y = relu(x) + 1 and the shape of x (folded at compile time)."""
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Add", ["r", "one"], ["y"]),
             helper.make_node("Shape", ["x"], ["s"])]
    graph = helper.make_graph(
        nodes, "backend", [helper.make_tensor_value_info("x", TensorProto.FLOAT, X.shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, X.shape),
         helper.make_tensor_value_info("s", TensorProto.INT64, [3])],
        initializer=[helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_supports_only_the_cpu():
    assert KilnBackend.supports_device("CPU")
    assert not KilnBackend.supports_device("CUDA")
    assert not KilnBackend.supports_device("FPGA")
    with pytest.raises(ModelFormatError, match="CPU only.*'CUDA'"):
        KilnBackend.prepare(_model(), "CUDA")


def test_prepare_and_run_match_onnxruntime():
    model = _model()
    rep = KilnBackend.prepare(model)
    want = ort_run(model, {"x": X})
    for inputs in ([X], {"x": X}, X):
        outputs = rep.run(inputs)
        np.testing.assert_allclose(outputs[0], want[0], rtol=1e-6)
        np.testing.assert_array_equal(outputs["s"], want[1])
        assert outputs.y is outputs[0]


def test_run_node_wraps_one_node():
    node = helper.make_node("Flatten", ["a"], ["b"], axis=-1)
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (b,) = KilnBackend.run_node(node, [a])
    np.testing.assert_array_equal(b, a.reshape(6, 4))


def test_unsupported_operator_is_a_clean_error():
    node = helper.make_node("RandomNormalLike", ["a"], ["b"])
    with pytest.raises(UnsupportedOperatorError, match="RandomNormalLike"):
        KilnBackend.run_node(node, [np.ones(3, np.float32)])


def test_values_depending_on_inputs():
    graph = _model().graph
    assert _data_dependent_outputs(graph) >= {"x", "r", "y"}
    assert "s" not in _data_dependent_outputs(graph)      # a shape, not a value


def test_an_input_folded_into_a_constant_is_refused():
    """A compiled model whose output depends on an input but is a constant buffer would
    compute nothing at run time: prepare's check refuses it."""
    plan = SimpleNamespace(name="m", outputs=("y", "s"), buffers=(
        SimpleNamespace(name="y", kind="constant"), SimpleNamespace(name="s", kind="constant")))
    with pytest.raises(InternalError, match=r"outputs \['y'\].*folded"):
        KilnBackend._check_nothing_folded(_model(), SimpleNamespace(plan=plan))


# -- the runner --------------------------------------------------------------------------------

def _case(name="test_fake"):
    return TestCase(name, name, None, None, _model(),
                    [([X], [np.maximum(X, 0) + 1, np.array(X.shape, np.int64)])],
                    "node", 1e-3, 1e-7)


def _rep(outputs):
    return lambda model: SimpleNamespace(run=lambda inputs: outputs)


def test_runner_classifies_each_status():
    case = _case()
    right = [np.maximum(X, 0) + 1, np.array(X.shape, np.int64)]
    assert runner.run_case(case, _rep(right)).status == "pass"
    off = [right[0] + 1e-2, right[1]]
    wrong = runner.run_case(case, _rep(off))
    assert (wrong.status, wrong.reason[:18]) == ("wrong", "mismatch: Mismatch")
    assert runner.run_case(case, _rep([right[0].T, right[1]])).status == "wrong"
    assert runner.run_case(case, _rep([right[0].astype(np.float64), right[1]])
                           ).status == "wrong"

    def refuse(model):
        raise UnsupportedOperatorError("this model uses 1 operator type Kiln does not support "
                                       "(opset 17): Foo (node 'n0').")
    result = runner.run_case(case, refuse, (UnsupportedOperatorError,))
    assert (result.status, result.reason) == ("unsupported", "ops: Foo")

    def crash(model):
        raise KeyError("boom")
    assert runner.run_case(case, crash, (UnsupportedOperatorError,)).reason == \
        "KeyError: 'boom'"


def test_kiln_runs_the_case_through_compiled_code():
    assert runner.run_kiln(_case()).status == "pass"


def test_compare_against_the_list():
    listed = {"test_a": runner.CaseResult("test_a", "unsupported", "ops: A"),
              "test_b": runner.CaseResult("test_b", "unsupported", "ops: B"),
              "test_gone": runner.CaseResult("test_gone", "error", "x")}
    results = [runner.CaseResult("test_a", "pass"),
               runner.CaseResult("test_b", "wrong", "mismatch"),
               runner.CaseResult("test_c", "error", "KeyError: 'k'"),
               runner.CaseResult("test_d", "pass")]
    problems = runner.compare(results, listed)
    assert len(problems) == 4
    assert "test_a: listed as unsupported but passes now" in problems[0]
    assert "test_b: listed as unsupported (ops: B), now wrong" in problems[1]
    assert "test_c: unlisted case fails" in problems[2]
    assert "test_gone: listed but not a case" in problems[3]


def test_list_round_trips(tmp_path):
    results = {"abs": [runner.CaseResult("test_abs", "pass")],
               "acos": [runner.CaseResult("test_acos", "unsupported", "ops: Acos"),
                        runner.CaseResult("test_acos_example", "error", "KeyError: 'k'")]}
    path = tmp_path / "list.txt"
    path.write_text(runner.format_expected(results))
    parsed = runner.read_expected(path)
    assert parsed.onnx_version == onnx.__version__
    assert set(parsed.by_module) == {"acos"}
    assert parsed.module("acos")["test_acos_example"] == results["acos"][1]
    path.write_text("[acos]\ntest_acos maybe: who knows\n")
    with pytest.raises(ValueError, match="list.txt:2"):
        runner.read_expected(path)
