"""DAG fusion: multi-consumer values fuse when all readers join the group; the group graph
stays acyclic (hypothesis over random DAGs); fused diamonds compile and match the oracles."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from kiln.graph.compile.model import compile_model
from kiln.graph.onnx.load import load_onnx
from kiln.graph.ir import Graph, Node, Value
from kiln.graph.passes import fuse_operators, optimize
from kiln.graph.passes.fusion import check_groups
from kiln.graph.reference import run_node, run_reference

from .graph_helpers import make_model, ort_run

R = np.random.default_rng(11)


def _gelu_nodes(x: str, out: str) -> list:
    return [helper.make_node("Div", [x, "sqrt2"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["e1"]),
            helper.make_node("Mul", [x, "half"], ["h"]),
            helper.make_node("Mul", ["h", "e1"], [out])]


_GELU_CONSTS = {"sqrt2": np.float32(math.sqrt(2.0)), "one": np.float32(1.0),
                "half": np.float32(0.5)}


def _gelu_model():
    return make_model(_gelu_nodes("x", "y"), {"x": ((2, 3, 17), "float32")}, ["y"],
                      dict(_GELU_CONSTS))


def _matmul_bias_gelu_model():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["a"])] + _gelu_nodes("a", "y")
    inits = {"w": R.standard_normal((12, 20)).astype(np.float32),
             "b": R.standard_normal(20).astype(np.float32), **_GELU_CONSTS}
    return make_model(nodes, {"x": ((1, 5, 12), "float32")}, ["y"], inits)


def _groups(model):
    graph = optimize(load_onnx(model))
    groups = fuse_operators(graph)
    check_groups(graph, groups)
    return graph, groups


def test_gelu_is_one_group():
    _, groups = _groups(_gelu_model())
    assert [g.ops for g in groups] == [("div", "erf", "add", "mul", "mul")]
    assert [v.name for v in groups[0].outputs] == ["y"]


def test_matmul_bias_gelu_is_one_group():
    _, groups = _groups(_matmul_bias_gelu_model())
    # (the constant weight is read as prepacked panels)
    assert [g.ops for g in groups] == [("matmul_prepacked", "add", "div", "erf", "add", "mul",
                                        "mul")]
    assert groups[0].anchor.op == "matmul_prepacked"


@pytest.mark.parametrize("build", [_gelu_model, _matmul_bias_gelu_model])
def test_fused_diamonds_match_onnxruntime(build):
    model = build()
    compiled = compile_model(model)
    assert len(compiled.plan.steps) == 1
    feeds = {"x": R.standard_normal(compiled.buffers["x"].shape).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)[0], ort_run(model, feeds)[0],
                               rtol=2e-5, atol=2e-5)


def test_value_read_outside_is_not_fused_past():
    """`a` is read by the relu (fusable) and by a softmax: the relu cannot join the matmul
    group, or the group would have two exits."""
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Softmax", ["a"], ["s"], axis=-1),
             helper.make_node("Add", ["r", "s"], ["y"])]
    model = make_model(nodes, {"x": ((3, 4), "float32")}, ["y"],
                       {"w": R.standard_normal((4, 6)).astype(np.float32)})
    _, groups = _groups(model)
    assert [g.ops for g in groups] == [("matmul",), ("softmax",), ("relu", "add")]


def test_fusing_through_a_reduction_would_be_a_cycle():
    """Decomposed layer norm: d = x - mean feeds pow (fusable) and, via a reduction, the div.
    Fusing `sub` with `div` would need the reduction inside and outside at once."""
    nodes = [helper.make_node("ReduceMean", ["x"], ["mean"], axes=[-1]),
             helper.make_node("Sub", ["x", "mean"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["sq"]),
             helper.make_node("ReduceMean", ["sq"], ["var"], axes=[-1]),
             helper.make_node("Sqrt", ["var"], ["std"]),
             helper.make_node("Div", ["d", "std"], ["y"])]
    model = make_model(nodes, {"x": ((2, 8), "float32")}, ["y"])
    _, groups = _groups(model)
    assert [g.ops for g in groups] == [("reduce_mean",), ("sub",), ("mul",), ("reduce_mean",),
                                       ("sqrt", "div")]
    compiled = compile_model(model)
    feeds = {"x": R.standard_normal((2, 8)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)[0], ort_run(model, feeds)[0],
                               rtol=2e-5, atol=2e-5)


def test_graph_output_in_the_middle_ends_the_group():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Exp", ["r"], ["e"]),
             helper.make_node("Add", ["r", "e"], ["y"])]
    model = make_model(nodes, {"x": ((5,), "float32")}, ["y", "r"])
    _, groups = _groups(model)
    assert [g.ops for g in groups] == [("relu",), ("exp", "add")]
    compiled = compile_model(model)
    feeds = {"x": R.standard_normal(5).astype(np.float32)}
    for got, want in zip(compiled.run(feeds), ort_run(model, feeds)):
        np.testing.assert_allclose(got, want, rtol=1e-6)


# -- random DAGs -------------------------------------------------------------------------------

SHAPE = (4, 4)
_UNARY = ("relu", "exp", "neg", "abs")
_BINARY = ("add", "mul", "sub", "max")
_KINDS = _UNARY + _BINARY + ("transpose", "softmax", "matmul")


@st.composite
def random_graphs(draw) -> Graph:
    """Up to 14 nodes over (4, 4) float32 values: elementwise, injective, reduction and matmul
    nodes wired to random earlier values; some interior values are graph outputs too."""
    values = [Value("x0", SHAPE, "float32"), Value("x1", SHAPE, "float32"),
              Value("c0", SHAPE, "float32")]
    nodes = []
    for k in range(draw(st.integers(1, 14))):
        op = draw(st.sampled_from(_KINDS))
        arity = 1 if op in _UNARY + ("transpose", "softmax") else 2
        ins = [values[draw(st.integers(0, len(values) - 1))] for _ in range(arity)]
        attrs = {"perm": (1, 0)} if op == "transpose" else {"axis": 1} if op == "softmax" \
            else {}
        out = Value(f"v{k}", SHAPE, "float32")
        nodes.append(Node(op, tuple(ins), (out,), attrs, name=f"n{k}"))
        values.append(out)
    read = {v.name for n in nodes for v in n.inputs}
    produced = [n.outputs[0] for n in nodes]
    outputs = [v for v in produced if v.name not in read]
    outputs += [v for v in produced if v.name in read and draw(st.booleans())]
    constants = {"c0": np.linspace(-1, 1, 16, dtype=np.float32).reshape(SHAPE)}
    return Graph(tuple(values[:2]), tuple(nodes), tuple(outputs), constants, "random")


def _feeds(graph: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {v.name: rng.uniform(-1, 1, v.shape).astype(np.float32) for v in graph.inputs}


@settings(max_examples=200, deadline=None)
@given(random_graphs())
def test_random_dag_groups_are_acyclic_single_exit_partitions(graph):
    groups = fuse_operators(graph)
    check_groups(graph, groups)            # partition + valid execution order (=> acyclic)
    consumers = graph.consumers()
    graph_outputs = {v.name for v in graph.outputs}
    for g in groups:
        members = {n.name for n in g.nodes}
        exits = [n for n in g.nodes if any(
            o.name in graph_outputs or any(c.name not in members
                                           for c in consumers.get(o.name, []))
            for o in n.outputs)]
        assert exits == [g.nodes[-1]], g   # one exit, and it is the last member
    # running the groups in the returned order, node by node, gives the reference outputs
    env = dict(graph.constants) | _feeds(graph)
    for g in groups:
        for n in g.nodes:
            env.update(zip((o.name for o in n.outputs),
                           run_node(n, [env[v.name] for v in n.inputs])))
    want = run_reference(graph, _feeds(graph))
    for name, arr in want.items():
        np.testing.assert_array_equal(env[name], arr)


@pytest.mark.slow
@settings(max_examples=4, deadline=None)
@given(random_graphs())
def test_random_dags_compile_to_the_reference(graph):
    compiled = compile_model(graph)
    feeds = _feeds(graph)
    want = run_reference(graph, feeds)
    for name, got in zip(compiled.output_names, compiled.run(feeds)):
        np.testing.assert_allclose(got, want[name], rtol=1e-4, atol=1e-4)


def test_split_outputs_join_again_in_one_group():
    """split (two outputs) stays alone; relu(a) grows into add and pulls in exp(b), which
    only feeds the group: the branches of the split meet in one kernel."""
    nodes = [helper.make_node("Split", ["x"], ["a", "b"], axis=1, num_outputs=2),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Exp", ["b"], ["e"]),
             helper.make_node("Add", ["r", "e"], ["y"])]
    model = make_model(nodes, {"x": ((3, 10), "float32")}, ["y"], opset=18)
    _, groups = _groups(model)
    assert [g.ops for g in groups] == [("split",), ("relu", "exp", "add")]
    compiled = compile_model(model)
    feeds = {"x": R.standard_normal((3, 10)).astype(np.float32)}
    np.testing.assert_allclose(compiled.run(feeds)[0], ort_run(model, feeds)[0], rtol=1e-6)


def test_lower_group_takes_a_multi_output_group():
    """lower_group's contract beyond what fusion produces today: a group whose first output
    also feeds its second gets one TE DAG with two outputs, and the kernel writes both."""
    from kiln import codegen
    from kiln.autotune.task import Task
    from kiln.autotune.tuner import apply_best, canonical_target
    from kiln.graph.lower_te import lower_group
    from kiln.graph.passes.fusion import _make_group
    from kiln.schedule import lower

    x, r, e = (Value(n, (5, 12), "float32") for n in "xre")
    nodes = [Node("relu", (x,), (r,), name="n0"), Node("exp", (r,), (e,), name="n1")]
    graph = Graph((x,), tuple(nodes), (r, e), {}, "two_outputs")
    group = _make_group(0, nodes, graph, graph.consumers(), {"r", "e"})
    dag = lower_group(group, {})
    assert [v.name for v in dag.arg_values] == ["x", "r", "e"]
    target = canonical_target("native")
    sch, args, _ = apply_best(Task("two_outputs", dag.outputs, dag.args, target), target, None)
    kernel = codegen.build(lower(sch, args, name="two_outputs"), target)
    xa = R.standard_normal((5, 12)).astype(np.float32)
    ra, ea = np.zeros_like(xa), np.zeros_like(xa)
    kernel(xa, ra, ea)
    np.testing.assert_array_equal(ra, np.maximum(xa, 0))
    np.testing.assert_allclose(ea, np.exp(np.maximum(xa, 0)), rtol=1e-6)
