"""If, Loop and Scan inlined at conversion (graph/onnx/control.py) and ops converted
through their ONNX function body (graph/onnx/function_ops.py): Kiln-compiled code against
onnxruntime, and the refusals of a condition or trip count known only at run time."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import kiln
from kiln.graph.runtime.dynamic import DynamicModel
from kiln.te.errors import UnsupportedOperatorError

from .graph_helpers import ort_run

R = np.random.default_rng(7)
F = TensorProto.FLOAT


def _info(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "control", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value), name))


def check(m, feeds, **compile_args):
    want = ort_run(m, feeds)
    compiled = kiln.compile(m, db=None, jobs=1, **compile_args)
    got = compiled.run(feeds)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    return compiled


def _branches(x_scale):
    """then: x * 2 + outer y (an outer-scope read); else: x - 1 (1: a subgraph
    initializer); both of x's shape."""
    then = helper.make_graph([_const("two", np.float32(2)),
                              helper.make_node("Mul", ["x", "two"], ["t1"]),
                              helper.make_node("Add", ["t1", "y"], ["t_out"])],
                             "then", [], [_info("t_out", [2, 3])])
    other = helper.make_graph([helper.make_node("Sub", ["x", "one"], ["e_out"])],
                              "else", [], [_info("e_out", [2, 3])], initializer=[
                                  numpy_helper.from_array(np.float32(x_scale), "one")])
    return then, other


@pytest.mark.parametrize("cond", [True, False])
def test_if_with_a_constant_condition_inlines_the_taken_branch(cond):
    then, other = _branches(1.0)
    m = _model([_const("c", np.array(cond)),
                helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)],
               [_info("x", [2, 3]), _info("y", [2, 3])], [_info("z", [2, 3])])
    check(m, {"x": R.standard_normal((2, 3), np.float32),
              "y": R.standard_normal((2, 3), np.float32)})


def test_if_with_a_run_time_condition_selects_between_both_branches():
    then, other = _branches(1.0)
    m = _model([helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other)],
               [_info("c", [], TensorProto.BOOL), _info("x", [2, 3]), _info("y", [2, 3])],
               [_info("z", [2, 3])])
    x, y = R.standard_normal((2, 3), np.float32), R.standard_normal((2, 3), np.float32)
    compiled = check(m, {"c": np.array(True), "x": x, "y": y})
    np.testing.assert_allclose(compiled.run({"c": np.array(False), "x": x, "y": y})[0],
                               x - 1, rtol=1e-6)


def _loop_body():
    """carried s += x[i] (a row of the outer x), scan output s * i; stops after 3 rows."""
    nodes = [helper.make_node("Gather", ["x", "i"], ["row"], axis=0),
             helper.make_node("Add", ["s_in", "row"], ["s_out"]),
             helper.make_node("Cast", ["i"], ["fi"], to=F),
             helper.make_node("Mul", ["s_out", "fi"], ["scan"]),
             _const("three", np.int64(2)),
             helper.make_node("Less", ["i", "three"], ["go"])]
    return helper.make_graph(nodes, "body", [_info("i", [], TensorProto.INT64),
                                             _info("c_in", [], TensorProto.BOOL),
                                             _info("s_in", [5])],
                             [_info("go", [], TensorProto.BOOL), _info("s_out", [5]),
                              _info("scan", [5])])


def test_loop_with_constant_trip_count_unrolls_with_carried_and_scan_outputs():
    m = _model([_const("n", np.int64(6)), _const("c", np.array(True)),
                helper.make_node("Loop", ["n", "c", "s0"], ["s", "rows"], body=_loop_body())],
               [_info("x", [7, 5]), _info("s0", [5])], [_info("s", [5]), _info("rows", [3, 5])])
    check(m, {"x": R.standard_normal((7, 5), np.float32),
              "s0": R.standard_normal(5, np.float32)})


def test_loop_trip_count_from_a_graph_input_specialises_on_its_value():
    m = _model([_const("c", np.array(True)),
                helper.make_node("Loop", ["n", "c", "s0"], ["s", "rows"], body=_loop_body())],
               [_info("n", [], TensorProto.INT64), _info("x", [7, 5]), _info("s0", [5])],
               [_info("s", [5]), _info("rows", ["k", 5])])
    feeds = {"n": np.array(2, np.int64), "x": R.standard_normal((7, 5), np.float32),
             "s0": R.standard_normal(5, np.float32)}
    assert isinstance(check(m, feeds), DynamicModel)


def test_loop_with_a_run_time_trip_count_and_no_scan_output_is_refused_by_name():
    body = _loop_body()
    del body.output[2]
    m = _model([_const("c", np.array(True)),
                helper.make_node("Loop", ["n", "c", "s0"], ["s"], body=body, name="my_loop")],
               [_info("n", [], TensorProto.INT64), _info("x", [7, 5]), _info("s0", [5])],
               [_info("s", [5])])
    with pytest.raises(UnsupportedOperatorError, match=r"my_loop.*trip count.*run time"):
        kiln.compile(m, db=None, jobs=1, constants={"n": np.int64(2)})


def test_scan_reverse_directions_and_axes():
    body = helper.make_graph([helper.make_node("Add", ["acc", "col"], ["acc_out"]),
                              helper.make_node("Mul", ["acc_out", "col"], ["out"])],
                             "scan_body", [_info("acc", [3]), _info("col", [3])],
                             [_info("acc_out", [3]), _info("out", [3])])
    m = _model([helper.make_node("Scan", ["a0", "x"], ["a", "ys"], body=body,
                                 num_scan_inputs=1, scan_input_axes=[-1],
                                 scan_input_directions=[1], scan_output_axes=[1],
                                 scan_output_directions=[1])],
               [_info("a0", [3]), _info("x", [3, 5])], [_info("a", [3]), _info("ys", [3, 5])],
               opset=16)
    check(m, {"a0": R.standard_normal(3, np.float32),
              "x": R.standard_normal((3, 5), np.float32)})


def test_an_unsupported_op_inside_a_branch_is_named():
    bad = helper.make_graph([helper.make_node("ImageDecoder", ["x"], ["t"], name="nz")], "then",
                            [], [_info("t", None, TensorProto.INT64)])
    m = _model([_const("c", np.array(True)),
                helper.make_node("If", ["c"], ["z"], then_branch=bad, else_branch=bad)],
               [_info("x", [2])], [_info("z", None, TensorProto.INT64)])
    with pytest.raises(UnsupportedOperatorError, match=r"ImageDecoder \(nodes? 'nz'"):
        kiln.compile(m, db=None, jobs=1)


def test_center_crop_pad_through_its_function_body():
    m = _model([helper.make_node("CenterCropPad", ["x", "shape"], ["y"], axes=[0, -1])],
               [_info("x", [5, 2, 4])], [_info("y", [3, 2, 7])],
               [numpy_helper.from_array(np.array([3, 7], np.int64), "shape")], opset=18)
    check(m, {"x": R.standard_normal((5, 2, 4), np.float32)})
