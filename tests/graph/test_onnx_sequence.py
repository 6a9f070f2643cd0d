"""ONNX sequence and optional values (graph/onnx/sequence.py), checked against onnx's
ReferenceEvaluator: sequences inside a model, sequence inputs and outputs (lists of arrays),
optionals, and the clear errors."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import kiln
from kiln.graph.runtime.dynamic import DynamicModel
from kiln.graph.onnx.load import InputValueNeeded, load_onnx
from kiln.te.errors import KilnError, ModelFormatError

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "seq", inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _seq_info(name, dims=None, elem=F):
    return helper.make_value_info(name, helper.make_sequence_type_proto(
        helper.make_tensor_type_proto(elem, dims)))


def _opt_info(name, dims=None, elem=F):
    return helper.make_value_info(name, helper.make_optional_type_proto(
        helper.make_tensor_type_proto(elem, dims)))


def _int(name, value):
    return helper.make_tensor(name, TensorProto.INT64, [], [value])


def _assert_same(got, want):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_sequence_ops_inside_a_model_compile_static():
    """Construct, insert (negative position), erase, at, length and concat of a sequence
    of awkward shapes, all inside one model with tensor inputs and outputs."""
    nodes = [
        helper.make_node("SequenceConstruct", ["a", "b"], ["s0"]),
        helper.make_node("SequenceInsert", ["s0", "c", "neg1"], ["s1"]),   # a, c, b
        helper.make_node("SequenceInsert", ["s1", "a"], ["s2"]),           # a, c, b, a
        helper.make_node("SequenceErase", ["s2", "zero"], ["s3"]),         # c, b, a
        helper.make_node("SequenceAt", ["s3", "neg1"], ["last"]),
        helper.make_node("SequenceLength", ["s3"], ["n"]),
        helper.make_node("ConcatFromSequence", ["s3"], ["cat"], axis=0),
        helper.make_node("ConcatFromSequence", ["s3"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("Mul", ["last", "b"], ["prod"]),
    ]
    model = _model(nodes, [helper.make_tensor_value_info(n, F, [3, 5]) for n in "abc"],
                   [helper.make_tensor_value_info("cat", F, [9, 5]),
                    helper.make_tensor_value_info("stacked", F, [3, 5, 3]),
                    helper.make_tensor_value_info("n", TensorProto.INT64, []),
                    helper.make_tensor_value_info("prod", F, [3, 5])],
                   initializers=[_int("neg1", -1), _int("zero", 0)])
    rng = np.random.default_rng(0)
    feeds = {n: rng.standard_normal((3, 5)).astype(np.float32) for n in "abc"}
    compiled = kiln.compile(model, db=None, jobs=1)
    assert not isinstance(compiled, DynamicModel)
    for got, want in zip(compiled.run(feeds), ReferenceEvaluator(model).run(None, feeds)):
        _assert_same(got, np.asarray(want))


@pytest.mark.parametrize("split, keepdims", [(3, 1), (None, 0), ([1, 4, 2], 1)])
def test_split_to_sequence_output_is_a_list(split, keepdims):
    inputs = ["x"] + (["split"] if split is not None else [])
    inits = [] if split is None else [helper.make_tensor(
        "split", TensorProto.INT64, [] if np.ndim(split) == 0 else [len(split)],
        np.ravel(split).tolist())]
    node = helper.make_node("SplitToSequence", inputs, ["seq"], axis=1, keepdims=keepdims)
    model = _model([node], [helper.make_tensor_value_info("x", F, [2, 7])],
                   [_seq_info("seq")], opset=11, initializers=inits)
    x = np.arange(14, dtype=np.float32).reshape(2, 7)
    got = kiln.compile(model, db=None, jobs=1).run({"x": x})
    _assert_same(got[0], ReferenceEvaluator(model).run(None, {"x": x})[0])


def test_sequence_map_over_a_sequence_input():
    """A sequence input of different shapes per element (one compile per lengths/shapes),
    a tensor given to every iteration, and two sequence outputs."""
    body = helper.make_graph(
        [helper.make_node("Add", ["e", "t"], ["sum"]),
         helper.make_node("Shape", ["e"], ["shape"])], "body",
        [helper.make_tensor_value_info("e", F, None),
         helper.make_tensor_value_info("t", F, [1])],
        [helper.make_tensor_value_info("sum", F, None),
         helper.make_tensor_value_info("shape", TensorProto.INT64, None)])
    node = helper.make_node("SequenceMap", ["xs", "t"], ["sums", "shapes"], body=body)
    model = _model([node], [_seq_info("xs", ["N"]), helper.make_tensor_value_info("t", F, [1])],
                   [_seq_info("sums", ["N"]), _seq_info("shapes", [1], TensorProto.INT64)])
    compiled = kiln.compile(model, db=None, jobs=1)
    assert isinstance(compiled, DynamicModel)
    t = np.array([0.5], dtype=np.float32)
    for xs in ([np.arange(3, dtype=np.float32), np.ones(1, np.float32)],
               [np.full(7, 2.0, np.float32)]):
        want = ReferenceEvaluator(model).run(None, {"xs": xs, "t": t})
        got = compiled.run({"xs": xs, "t": t})
        for g, w in zip(got, want):
            _assert_same(g, w)
    assert compiled.compiles == 2
    compiled.run({"xs": [np.zeros(3, np.float32), np.zeros(1, np.float32)], "t": t})
    assert compiled.compiles == 2      # the same lengths and shapes: the cached one


def test_identity_of_a_sequence_and_an_empty_one():
    model = _model([helper.make_node("Identity", ["xs"], ["ys"])], [_seq_info("xs")],
                   [_seq_info("ys")])
    compiled = kiln.compile(model, db=None, jobs=1)
    xs = [np.arange(5, dtype=np.float32), np.ones((2, 3), np.float32)]
    _assert_same(compiled.run({"xs": xs})[0], xs)
    assert compiled.run({"xs": []})[0] == []


def test_optionals():
    """Optional(x), an optional input given or empty (None), OptionalHasElement and
    OptionalGetElement."""
    nodes = [helper.make_node("OptionalHasElement", ["o"], ["has"]),
             helper.make_node("Optional", ["x"], ["wrapped"]),
             helper.make_node("OptionalGetElement", ["wrapped"], ["got"]),
             helper.make_node("Identity", ["o"], ["o_out"])]
    model = _model(nodes, [_opt_info("o", [4]), helper.make_tensor_value_info("x", F, [1])],
                   [helper.make_tensor_value_info("has", TensorProto.BOOL, []),
                    helper.make_tensor_value_info("got", F, [1]), _opt_info("o_out", [4])],
                   opset=18)
    compiled = kiln.compile(model, db=None, jobs=1)
    x = np.array([3.0], dtype=np.float32)
    for o in (np.arange(4, dtype=np.float32), None):
        has, got, o_out = compiled.run({"o": o, "x": x})
        assert has == (o is not None) and has.dtype == np.bool_
        _assert_same(got, x)
        if o is None:
            assert o_out is None
        else:
            _assert_same(o_out, o)


def test_get_element_of_an_empty_optional_names_the_node():
    nodes = [helper.make_node("OptionalGetElement", ["o"], ["y"], name="unwrap")]
    model = _model(nodes, [_opt_info("o", [4])], [helper.make_tensor_value_info("y", F, [4])],
                   opset=18)
    with pytest.raises(ModelFormatError, match="'unwrap'.*holds no element"):
        load_onnx(model, input_shapes={"o": None})


def test_run_time_position_names_the_node():
    """A position from a graph input is read at compile time (the model is specialised on
    its value); without its value, the error names the node and the input."""
    nodes = [helper.make_node("SequenceConstruct", ["a", "b"], ["s"]),
             helper.make_node("SequenceAt", ["s", "pos"], ["y"], name="pick")]
    model = _model(nodes, [helper.make_tensor_value_info("a", F, [2]),
                           helper.make_tensor_value_info("b", F, [2]),
                           helper.make_tensor_value_info("pos", TensorProto.INT64, [])],
                   [helper.make_tensor_value_info("y", F, [2])])
    with pytest.raises(InputValueNeeded, match=r"node 'pick' \(SequenceAt\).*'pos'"):
        load_onnx(model)
    with pytest.raises(ModelFormatError, match=r"'pick'.*position 2 is out of range"):
        load_onnx(model, values={"pos": np.array(2, dtype=np.int64)})
    compiled = kiln.compile(model, db=None, jobs=1)
    a, b = np.array([1, 2], np.float32), np.array([3, 4], np.float32)
    _assert_same(compiled.run({"a": a, "b": b, "pos": np.array(-1)})[0], b)
    _assert_same(compiled.run({"a": a, "b": b, "pos": np.array(0)})[0], a)


def test_sequence_input_needs_shapes_and_lists():
    model = _model([helper.make_node("Identity", ["xs"], ["ys"])], [_seq_info("xs")],
                   [_seq_info("ys")])
    with pytest.raises(ModelFormatError, match="input_shapes=.*'xs'"):
        load_onnx(model)
    compiled = kiln.compile(model, db=None, jobs=1)
    with pytest.raises(KilnError, match="sequence: pass a list of arrays"):
        compiled.run({"xs": np.zeros(3, np.float32)})


def test_sequence_element_that_decides_a_shape():
    """A sequence element read at compile time (a Reshape's shape) is specialised on its
    value; a shorter sequence later compiles anew."""
    nodes = [helper.make_node("SequenceAt", ["shapes", "last"], ["shape"]),
             helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = _model(nodes, [_seq_info("shapes", [2], TensorProto.INT64),
                           helper.make_tensor_value_info("x", F, [3, 4])],
                   [helper.make_tensor_value_info("y", F, ["r", "c"])],
                   initializers=[_int("last", -1)])
    compiled = kiln.compile(model, db=None, jobs=1)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    for shapes, want in ((
            [np.array([4, 3]), np.array([2, 6])], (2, 6)), ([np.array([12, 1])], (12, 1))):
        y = compiled.run({"shapes": shapes, "x": x})[0]
        _assert_same(y, x.reshape(want))
    assert compiled.compiles == 2
